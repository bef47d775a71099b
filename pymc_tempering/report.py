"""The warnings every method raises after its run, in one place.

A sampler ends by handing its result here: :func:`warn_problems` (each problem that
:func:`~pymc_tempering.diagnose` finds), :func:`judge_posterior` (the posterior's verdict,
:func:`~pymc_tempering.posterior_check`, stored in the result and warned), and, for drivers
whose draws are unweighted Markov chains, :func:`warn_convergence` (PyMC's own R-hat and ESS
checks) and :func:`warn_missed_modes` (optima of a mode search that the draws never came near,
the caller's mode search).
This module reads results, so it sits above
:mod:`~pymc_tempering.analysis` and :mod:`~pymc_tempering.checks` and below the methods.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from pymc.stats.convergence import WarningType, run_convergence_checks
from xarray import DataTree

from pymc_tempering.checks import MISSED_MASS_LIMIT, diagnose, posterior_check
from pymc_tempering.contract import warn
from pymc_tempering.timing import phase

__all__ = [
    "warn_problems",
    "judge_posterior",
    "warn_weighted",
    "warn_convergence",
    "warn_missed_modes",
    "MissedModes",
]


def warn_problems(result) -> None:
    """Run :func:`~pymc_tempering.diagnose` on a result and warn once per problem found."""
    for problem in diagnose(result).problems:
        warn(problem)


def judge_posterior(result, method: str) -> None:
    """Store :func:`~pymc_tempering.posterior_check`'s verdict in ``result.attrs``
    (``posterior_reliable``, and ``posterior_problems``: the problems joined by ``"; "`` for
    display, which nothing reads back; the verdict itself is ``posterior_check``'s) and warn
    once per problem, as ``pm.sample`` warns of a low ESS. It concerns the posterior summaries only, not
    the log marginal likelihood, whose own standard error and checks
    (:func:`~pymc_tempering.diagnose`) stand apart."""
    check = posterior_check(result)
    result.attrs["posterior_reliable"] = bool(check.reliable)
    result.attrs["posterior_problems"] = "; ".join(check.problems)
    for problem in check.problems:
        warn(f"{method}: {problem}.")


@phase("checks")
def warn_weighted(result) -> DataTree:
    """The verdicts of a run with weighted draws, given once: a warning per problem
    :func:`~pymc_tempering.diagnose` finds, and the posterior's verdict
    (:func:`judge_posterior`, stored in ``result.attrs``). Returns ``result``."""
    warn_problems(result)
    judge_posterior(result, result.attrs["method"])
    return result


def warn_convergence(result: DataTree, model, method: str) -> None:
    """Warn as ``pm.sample`` does when the chains have not converged.

    PyMC's own checks (:func:`pymc.stats.convergence.run_convergence_checks`: rank-normalised
    R-hat above 1.01, bulk or tail ESS below 100 per chain, from arviz-stats), raised as
    warnings naming the method and the worst value (largest R-hat, smallest ESS). Chains that
    each stay in the mode they started in, as TACT-HMC's do on barriers beyond what its
    temperature flattens, show here; chains that all miss the same mode do not
    (:func:`warn_missed_modes`).
    """
    for problem in run_convergence_checks(result, model):
        if problem.kind != WarningType.CONVERGENCE or problem.extra is None:
            continue
        values = [np.asarray(v.values, dtype=float) for v in problem.extra.data_vars.values()]
        # PyMC's two convergence warnings carry their values in ``extra``: the R-hats at level
        # "info", the effective sample sizes at level "error".
        if problem.level == "info":
            what = f"R-hat above 1.01 (largest {max(np.nanmax(v) for v in values):.3g})"
        else:
            chains = result["posterior"].sizes["chain"]
            what = (f"effective sample size below 100 per chain (smallest "
                    f"{min(np.nanmin(v) for v in values):.0f} for {chains} chains)")
        warn(f"{method}: {what}: the chains disagree or mix slowly, so the draws may not "
             "represent the posterior (for example, chains in different modes). Run longer "
             "(tune, draws), look at the chains (arviz_plots.plot_trace_dist), or temper more.")


class MissedModes(NamedTuple):
    """What a mode search of a driver method's model found that the draws never came near
    (computed by :func:`~pymc_tempering.driver.driver_result`, warned of by
    :func:`warn_missed_modes`).

    Attributes
    ----------
    missed : int
        The optima that the draws never came near.
    optima : int
        The optima the search found.
    mass : float
        The Laplace share of the missed optima (``attrs["missed_mode_mass"]``).
    full_data : bool
        Whether the search ran on the full data of a ``pm.Minibatch`` model.
    """

    missed: int
    optima: int
    mass: float
    full_data: bool = False


def warn_missed_modes(missed: MissedModes, method: str) -> None:
    """Warn when the draws never came near optima holding ``MISSED_MASS_LIMIT`` or more of the
    Laplace mass of a mode search's optima (``missed``, found by
    :func:`~pymc_tempering.driver.driver_result`). Chains that all miss the same mode agree
    with each other, so R-hat does not see it."""
    if missed.mass < MISSED_MASS_LIMIT:
        return
    remedy = (
        "use pmt.sample_ct, whose base covers the modes found"
        if not missed.full_data
        else "use pmt.sample_replica_exchange, whose ladder reaches T = N"
        if method != "replica_exchange"
        else "raise tune"
    )
    warn(
        f"{method}: the draws never came near {missed.missed} of the {missed.optima} local "
        "maxima that a mode search found (L-BFGS from prior draws), which hold about "
        f"{missed.mass:.0%} of their Laplace mass: the chains probably missed a mode, and agree "
        "with each other, so R-hat does not show it. Raise max_temperature, start chains "
        f"there (initial_points), or {remedy}."
    )
