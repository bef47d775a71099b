"""The warnings every method raises after its run, in one place.

A sampler ends by handing its result here: :func:`warn_problems` (each problem that
:func:`~pymc_tempering.diagnose` finds), :func:`judge_posterior` (the posterior's verdict,
:func:`~pymc_tempering.posterior_check`, stored in the result and warned), and, for drivers
whose draws are unweighted Markov chains, :func:`warn_convergence` (PyMC's own R-hat and ESS
checks) and :func:`warn_missed_modes` (optima of a mode search that the draws never came near).
This module reads results, so it sits above
:mod:`~pymc_tempering.analysis` and :mod:`~pymc_tempering.diagnostics` and below the methods.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType, run_convergence_checks
from xarray import DataTree

from pymc_tempering.analysis import posterior_check
from pymc_tempering.bases import find_modes
from pymc_tempering.contract import split_seed, warn
from pymc_tempering.diagnostics import MISSED_MASS_LIMIT, diagnose, missed_optima
from pymc_tempering.target import Target, full_data_energies

__all__ = [
    "warn_problems",
    "judge_posterior",
    "warn_weighted",
    "warn_convergence",
    "warn_missed_modes",
]


def warn_problems(result) -> None:
    """Run :func:`~pymc_tempering.diagnose` on a result and warn once per problem found."""
    for problem in diagnose(result).problems:
        warn(problem)


def judge_posterior(result, method: str) -> None:
    """Store :func:`~pymc_tempering.posterior_check`'s verdict in ``result.attrs``
    (``posterior_reliable``, and ``posterior_problems`` joined by ``"; "``) and warn once per
    problem, as ``pm.sample`` warns of a low ESS. It concerns the posterior summaries only, not
    the log marginal likelihood, whose own standard error and checks
    (:func:`~pymc_tempering.diagnose`) stand apart."""
    check = posterior_check(result)
    result.attrs["posterior_reliable"] = bool(check.reliable)
    result.attrs["posterior_problems"] = "; ".join(check.problems)
    for problem in check.problems:
        warn(f"{method}: {problem}.")


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
        if problem.message.startswith("The rhat"):
            what = f"R-hat above 1.01 (largest {max(np.nanmax(v) for v in values):.3g})"
        else:
            chains = result["posterior"].sizes["chain"]
            what = (f"effective sample size below 100 per chain (smallest "
                    f"{min(np.nanmin(v) for v in values):.0f} for {chains} chains)")
        warn(f"{method}: {what}: the chains disagree or mix slowly, so the draws may not "
             "represent the posterior (for example, chains in different modes). Run longer "
             "(tune, draws), look at the chains (arviz_plots.plot_trace_dist), or temper more.")


MODE_CHECK_MAX_DIM = 100  # parameters above which warn_missed_modes skips its mode search
MODE_CHECK_MAX_DATA = 500_000  # pm.Minibatch data above which it skips it too


class _FullData:
    """A minibatched model's :class:`Target` as the mode search sees it: the log density and
    gradient are the exact full-data ones (:func:`~pymc_tempering.target.full_data_energies`),
    everything else is the target's."""

    def __init__(self, target: Target, energy):
        self._target, self._energy = target, energy

    def __getattr__(self, name):
        return getattr(self._target, name)

    def logp_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        energy, gradient = self._energy(np.asarray(x, dtype=float)[None])
        return -float(energy[0]), -gradient[0]


def warn_missed_modes(result: DataTree, target: Target, x: np.ndarray, method: str, seed) -> None:
    """Warn when the draws never came near optima of the library's mode search.

    :func:`~pymc_tempering.find_modes` (L-BFGS from 32 prior draws) on the model's exact log
    density (for a ``pm.Minibatch`` model, the full data's, one pass over them per evaluation:
    :func:`~pymc_tempering.target.full_data_energies`), when the prior is proper; the draws
    ``x (chain, draw, ndim)`` are matched to their nearest optimum in units of the optima's
    Laplace standard deviations (:func:`~pymc_tempering.diagnostics.missed_optima`). Chains
    that all miss the same mode agree with each other, so R-hat does not see it: on a mixture
    of three normals with weights 0.2, 0.3 and 0.5, TACT-HMC at its defaults never visited the
    0.5 mode (450 nats of barrier; R-hat 1.04), and on issue 16's sign-flip posterior (20,000
    data in minibatches of 200) its four chains at seed 2 all stayed in one of the two modes.
    The Laplace share of the missed optima is ``attrs["missed_mode_mass"]``. Models with more
    than ``MODE_CHECK_MAX_DIM`` parameters are not searched (each optimum's Hessian costs
    ``2 ndim`` gradients; the search takes 1.5 to 2.7 s on the 92-parameter radon models), nor
    minibatched models with more than ``MODE_CHECK_MAX_DATA`` data, or whose full-data density
    cannot be formed (several ``pm.Minibatch`` calls).
    """
    if target.improper_variables or target.ndim > MODE_CHECK_MAX_DIM:
        return
    search = target
    if target.minibatched_observed:
        full = full_data_energies(target, gradient=True, max_length=MODE_CHECK_MAX_DATA)
        if full is None:
            return
        search = _FullData(target, full[0])
    try:
        modes = find_modes(search, random_seed=split_seed(seed, 2)[1])
    except (ValueError, FloatingPointError):  # a prior that cannot be drawn from
        return
    if modes is None or len(modes) < 2:
        return
    scale = np.sqrt(np.mean([np.diag(c) for c in modes.cov], axis=0))
    missed, mass = missed_optima(modes.points, modes.log_mass, x.reshape(-1, target.ndim), scale)
    result.attrs["missed_mode_mass"] = mass
    if mass >= MISSED_MASS_LIMIT:
        remedy = (
            "use pmt.sample_ct, whose base covers the modes found"
            if search is target
            else "use pmt.sample_replica_exchange, whose ladder reaches T = N"
            if method != "replica_exchange"
            else "raise tune"
        )
        warn(
            f"{method}: the draws never came near {int(missed.sum())} of the {len(modes)} local "
            "maxima that a mode search found (L-BFGS from prior draws), which hold about "
            f"{mass:.0%} of their Laplace mass: the chains probably missed a mode, and agree "
            "with each other, so R-hat does not show it. Raise max_temperature, start chains "
            f"there (initial_points), or {remedy}."
        )
