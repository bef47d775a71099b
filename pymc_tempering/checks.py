"""The one registry of the checks that :func:`~pymc_tempering.diagnose` runs on a result.

Each check has one record (:class:`Check`): its name (the row of ``Diagnosis.checks``), what it
bears on (the log marginal likelihood, the posterior summaries, or both) and what mends it
(:class:`Mend`: what a further run changes to pass it). Every list of check names in the
library is derived from :data:`CHECKS`: :data:`POSTERIOR_CHECKS` (the failed checks that make
``posterior_check`` doubt the draws) and :data:`NOT_REFIT` (the failed checks that the rounds of
``sample_ct`` do not answer with a refit of the base).

This module imports nothing from the library: every layer may read it.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

__all__ = [
    "Mend",
    "Check",
    "CHECKS",
    "POSTERIOR_CHECKS",
    "NOT_REFIT",
    "check",
    "BETA_NEAR_0",
    "BETA_NEAR_1",
    "MIN_END_TO_END_PASSAGES",
    "BASE_MOMENTS",
    "ESS_WEIGHTS",
    "PARETO_KHAT",
    "CHAIN_AGREEMENT",
    "STANDARD_ERROR",
    "MISSED_MODE_MASS",
    "UNSEEN_OPTIMA",
    "FUNNEL_MASS",
    "MASS_BEYOND_DRAWS",
    "MASS_NEAR_OPTIMA",
    "DIVERGENCES",
    "FLAT_DIRECTIONS",
]


class Mend(Enum):
    """What a further run changes to pass a failed check."""

    #: a base (and ``log_zeta``) refitted to the run's weighted draws
    REFIT = "a refit of the base"
    #: more draws per chain
    LONGER_CHAINS = "longer chains"
    #: the base widened to the optima that the draws missed
    WIDENED_BASE = "a widened base"
    #: smaller steps (NUTS' ``target_accept`` raised)
    HIGHER_TARGET_ACCEPT = "a higher target_accept"
    #: no further run of the same model: the model or the base the user passes must change
    NOTHING = "nothing"


class Check(NamedTuple):
    """One check of :func:`~pymc_tempering.diagnose`.

    Attributes
    ----------
    name : str
        Its row in ``Diagnosis.checks``.
    evidence : bool
        Whether its failure makes the log marginal likelihood unreliable.
    posterior : bool
        Whether its failure makes the posterior summaries unreliable (mass the draws did not
        reach).
    mended_by : Mend
        What a further run changes to pass it.
    """

    name: str
    evidence: bool
    posterior: bool
    mended_by: Mend


# The temperature path: both ends visited, and passages between them.
BETA_NEAR_0 = Check("beta_near_0", True, False, Mend.REFIT)
BETA_NEAR_1 = Check("beta_near_1", True, False, Mend.REFIT)
MIN_END_TO_END_PASSAGES = Check("min_end_to_end_passages", True, False, Mend.REFIT)
# The weights and the estimate.
BASE_MOMENTS = Check("base_moments_max_abs_z", True, False, Mend.REFIT)
ESS_WEIGHTS = Check("ess_weights", True, False, Mend.REFIT)
CHAIN_AGREEMENT = Check("chains_log_z_chi2_p", True, False, Mend.REFIT)
# A refit to weights with a heavy tail has the same tail.
PARETO_KHAT = Check("pareto_khat", True, False, Mend.NOTHING)
STANDARD_ERROR = Check("standard_error", True, False, Mend.LONGER_CHAINS)
# Mass the draws did not reach (the order here is the order posterior_check names them in). A
# refit to draws that lack the mass cannot add it; a higher target_accept does not enter a
# funnel's neck that NUTS avoids, and an incomplete mode search is the base's own.
MISSED_MODE_MASS = Check("missed_mode_mass", True, True, Mend.WIDENED_BASE)
UNSEEN_OPTIMA = Check("unseen_optima", True, True, Mend.NOTHING)
FUNNEL_MASS = Check("funnel_mass", True, True, Mend.NOTHING)
MASS_BEYOND_DRAWS = Check("mass_beyond_draws", True, True, Mend.NOTHING)
# Mass about an optimum that the draws under-represent: the posterior's share of it is off; the
# evidence only through mass_beyond_draws, which counts it.
MASS_NEAR_OPTIMA = Check("mass_near_optima", False, True, Mend.LONGER_CHAINS)
DIVERGENCES = Check("divergences", True, True, Mend.HIGHER_TARGET_ACCEPT)
# The model: an improper prior whose joint density's integral is infinite. No run mends it; the
# rounds refit the base for it as for any check not named otherwise.
FLAT_DIRECTIONS = Check("flat_directions", True, False, Mend.REFIT)

#: Every check, one record each.
CHECKS: tuple[Check, ...] = (
    BETA_NEAR_0,
    BETA_NEAR_1,
    MIN_END_TO_END_PASSAGES,
    BASE_MOMENTS,
    ESS_WEIGHTS,
    CHAIN_AGREEMENT,
    PARETO_KHAT,
    STANDARD_ERROR,
    MISSED_MODE_MASS,
    UNSEEN_OPTIMA,
    FUNNEL_MASS,
    MASS_BEYOND_DRAWS,
    MASS_NEAR_OPTIMA,
    DIVERGENCES,
    FLAT_DIRECTIONS,
)

#: The checks whose failure makes the posterior summaries unreliable, in registry order.
POSTERIOR_CHECKS: tuple[str, ...] = tuple(c.name for c in CHECKS if c.posterior)
#: The checks whose failure a refit of the base does not mend.
NOT_REFIT: frozenset[str] = frozenset(c.name for c in CHECKS if c.mended_by is not Mend.REFIT)

_BY_NAME = {c.name: c for c in CHECKS}


def check(name: str) -> Check:
    """The record of the check named ``name`` (a row of ``Diagnosis.checks``).

    Raises
    ------
    KeyError
        When no check has that name.
    """
    return _BY_NAME[name]
