"""pymc_tempering: tempering methods for PyMC models, with weighted draws and marginal likelihoods.

Public API only; each method is a package of :mod:`pymc_tempering.methods`.
"""

from pymc_tempering.analysis import (
    LogMarginalLikelihood,
    PosteriorCheck,
    bayes_factor,
    compare_evidence,
    log_marginal_likelihood,
    log_normalizing_constant,
    posterior_check,
)
from pymc_tempering.summaries import resample, weighted_expectation, weighted_summary
from pymc_tempering.checks import Diagnosis, diagnose
from pymc_tempering.bases import (
    Base,
    MixtureBase,
    Modes,
    PriorDensity,
    base_from_result,
    estimate_log_zeta,
    find_modes,
    fit_base,
)
from pymc_tempering.plots import plot_inverse_temperature, plot_joint, plot_log_marginal_likelihood
from pymc_tempering.contract import DivergenceError, NonFiniteGradientError, TemperingWarning
from pymc_tempering.target import Target
from pymc_tempering.methods.ct import continuously_tempered_model, sample_ct
from pymc_tempering.methods.gibbs_ct import (
    GibbsInverseTemperature,
    gibbs_tempered_model,
    sample_gibbs_ct,
)
from pymc_tempering.methods.pseudo_extended import pseudo_extended_model, sample_pe
from pymc_tempering.methods.ais import sample_ais
from pymc_tempering.methods.simulated_tempering import sample_simulated_tempering
from pymc_tempering.methods.ergodic import ErgodicApproximation, fit_ergodic
from pymc_tempering.methods.tact import TemperingSettings, sample_tact
from pymc_tempering.methods.replica_exchange import sample_replica_exchange
from pymc_tempering.sweep import Sweep, sample_many

__version__ = "0.1.0"

__all__ = [
    "Base",
    "MixtureBase",
    "Modes",
    "PriorDensity",
    "Diagnosis",
    "DivergenceError",
    "NonFiniteGradientError",
    "TemperingWarning",
    "diagnose",
    "plot_inverse_temperature",
    "plot_joint",
    "plot_log_marginal_likelihood",
    "base_from_result",
    "LogMarginalLikelihood",
    "PosteriorCheck",
    "posterior_check",
    "bayes_factor",
    "compare_evidence",
    "Target",
    "continuously_tempered_model",
    "estimate_log_zeta",
    "fit_base",
    "find_modes",
    "log_marginal_likelihood",
    "log_normalizing_constant",
    "resample",
    "sample_ct",
    "weighted_summary",
    "weighted_expectation",
    "pseudo_extended_model",
    "sample_pe",
    "GibbsInverseTemperature",
    "gibbs_tempered_model",
    "sample_gibbs_ct",
    "sample_ais",
    "sample_simulated_tempering",
    "sample_tact",
    "TemperingSettings",
    "sample_replica_exchange",
    "ErgodicApproximation",
    "fit_ergodic",
    "Sweep",
    "sample_many",
]
