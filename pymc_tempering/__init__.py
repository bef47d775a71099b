"""pymc_tempering: tempering methods for PyMC models, with weighted draws and marginal likelihoods.

Public API only; each method lives in its own module.
"""

from pymc_tempering.analysis import (
    LogMarginalLikelihood,
    log_marginal_likelihood,
    resample,
    weighted_summary,
)
from pymc_tempering.base import Base, estimate_log_zeta, fit_base
from pymc_tempering.target import Target
from pymc_tempering.transforms.continuous_tempering import (
    continuously_tempered_model,
    sample_ct,
)

__version__ = "0.1.0"

__all__ = [
    "Base",
    "LogMarginalLikelihood",
    "Target",
    "continuously_tempered_model",
    "estimate_log_zeta",
    "fit_base",
    "log_marginal_likelihood",
    "resample",
    "sample_ct",
    "weighted_summary",
]
