"""Pseudo-extended MCMC: ``sample_pe`` and the model it samples."""

from pymc_tempering.methods.pseudo_extended.model import DEFAULT_BETA_MIN, pseudo_extended_model
from pymc_tempering.methods.pseudo_extended.sampler import pe_log_weights, sample_pe

__all__ = ["DEFAULT_BETA_MIN", "pe_log_weights", "pseudo_extended_model", "sample_pe"]
