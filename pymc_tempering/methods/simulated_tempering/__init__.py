"""Simulated tempering on a discrete ladder with HMC: the baseline ``sample_simulated_tempering``."""

from pymc_tempering.methods.simulated_tempering.sampler import sample_simulated_tempering

__all__ = ["sample_simulated_tempering"]
