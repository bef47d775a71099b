"""Thermostat-assisted continuously tempered HMC for minibatched models: ``sample_tact``."""

from pymc_tempering.methods.tact.sampler import VARIANTS, sample_tact

__all__ = ["VARIANTS", "sample_tact"]
