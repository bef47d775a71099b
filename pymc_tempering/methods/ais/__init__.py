"""Annealed importance sampling with HMC transitions: the evidence baseline ``sample_ais``."""

from pymc_tempering.methods.ais.sampler import sample_ais

__all__ = ["sample_ais"]
