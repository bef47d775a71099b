"""Gibbs continuous tempering: ``sample_gibbs_ct``, its model and its step method for beta."""

from pymc_tempering.methods.gibbs_ct.sampler import gibbs_tempered_model, sample_gibbs_ct
from pymc_tempering.methods.gibbs_ct.step import (
    GibbsInverseTemperature,
    truncated_exponential_inverse_cdf,
)

__all__ = [
    "GibbsInverseTemperature",
    "gibbs_tempered_model",
    "sample_gibbs_ct",
    "truncated_exponential_inverse_cdf",
]
