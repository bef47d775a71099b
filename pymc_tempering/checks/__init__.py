"""The judge of every run: the checks, one record each, and what loops over them.

- :mod:`~pymc_tempering.checks.record`: what a check is (:class:`Check`: when it applies, its
  judge, what it bears on, what mends it), its outcome (:class:`Finding`), and the mends
  (:class:`Mend`);
- :mod:`~pymc_tempering.checks.run`: a result as the checks read it (:class:`Run`: each group
  through its one typed reader, read once);
- :mod:`~pymc_tempering.checks.calibration`: whether a run's independent parts agree
  (:func:`calibrated`: batches of chains, and the two estimators of log Z);
- :mod:`~pymc_tempering.checks.registry`: every check's judge and record (:data:`CHECKS`),
  and the lists of names derived from them;
- :mod:`~pymc_tempering.checks.diagnosis`: :func:`diagnose`, which runs the records that apply;
- :mod:`~pymc_tempering.checks.posterior`: :func:`posterior_check`, the posterior's verdict,
  which reads the records that bear on the posterior.

The extension policy of continuous tempering (:mod:`pymc_tempering.extended.rounds`) applies
each failed record's mend.
"""

from pymc_tempering.checks.calibration import CALIBRATION_CHAINS, calibrated
from pymc_tempering.checks.diagnosis import Diagnosis, diagnose
from pymc_tempering.checks.posterior import (
    MAX_MODE_SE,
    MIN_ESS_PER_CHAIN,
    PosteriorCheck,
    posterior_check,
)
from pymc_tempering.checks.record import Check, Finding, Mend
from pymc_tempering.checks.registry import (
    CHECKS,
    MISSED_MASS_LIMIT,
    UNSEEN_OPTIMA_LIMIT,
    NOT_REFIT,
    POSTERIOR_CHECKS,
    check,
    missed_modes,
    missed_optima,
    precision_goal,
    search_incomplete,
)
from pymc_tempering.checks.run import Run

__all__ = [
    "CALIBRATION_CHAINS",
    "CHECKS",
    "Check",
    "Diagnosis",
    "Finding",
    "MAX_MODE_SE",
    "MIN_ESS_PER_CHAIN",
    "MISSED_MASS_LIMIT",
    "Mend",
    "NOT_REFIT",
    "POSTERIOR_CHECKS",
    "PosteriorCheck",
    "Run",
    "UNSEEN_OPTIMA_LIMIT",
    "calibrated",
    "check",
    "diagnose",
    "missed_modes",
    "missed_optima",
    "posterior_check",
    "precision_goal",
    "search_incomplete",
]
