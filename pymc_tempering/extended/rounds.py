"""Bootstrap rounds and self-extension: how continuous tempering spends its runs.

Joint and Gibbs continuous tempering (Graham & Storkey 2017) refine their base before the final
run (the bootstrap of section 6: each round's weighted moments become the next base) and repeat
the final run while :func:`~pymc_tempering.diagnose` finds a problem that another run can mend,
within a budget of runs and of time. Every run is one
:func:`~pymc_tempering.extended.runner.run_extended`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from pymc_tempering.bases import (
    Base,
    base_from_result,
    estimate_log_zeta,
    modes_from_result,
    widen_base,
)
from pymc_tempering.checks import MISSED_MASS_LIMIT, Mend, diagnose, missed_modes
from pymc_tempering.contract import check_bootstrap, check_extension_args, split_seed, warn
from pymc_tempering.estimators import kish_ess
from pymc_tempering.extended.runner import ExtendedSampling, run_extended
from pymc_tempering.extended.tempered import Tempering
from pymc_tempering.report import warn_weighted
from pymc_tempering.results import INVERSE_TEMPERATURE, add_rounds, read_base
from pymc_tempering.target import Target
from pymc_tempering.timing import phase

__all__ = ["BootstrapPolicy", "run_with_bootstrap"]


@dataclass(frozen=True)
class BootstrapPolicy:
    """How :func:`run_with_bootstrap` refines the base before the final run and extends it after.

    Checked when made (:func:`check_bootstrap`, :func:`check_extension_args`).

    Attributes
    ----------
    bootstrap : int
        Rounds of the bootstrap of section 6 before the final run.
    bootstrap_draws : int
        Tuning steps and draws per chain of each round.
    target_accept : float
        NUTS's target acceptance rate of the first run; an extension after divergences raises it.
    max_extensions : int
        How many times the final run may be repeated while it has a problem.
    target_se : float or None
        The standard error of log Z above which the final run is repeated (``None``: any).
    max_time : float or None
        A wall-clock budget in seconds for the whole call (``None``: none).
    """

    bootstrap: int
    bootstrap_draws: int
    target_accept: float = 0.9
    max_extensions: int = 2
    target_se: float | None = None
    max_time: float | None = None

    def __post_init__(self):
        check_bootstrap(self.bootstrap)
        check_extension_args(self.target_accept, self.max_extensions, self.target_se, self.max_time)


def _both_ends(result) -> bool:
    """Whether more than 1% of the draws have beta within 0.1 of 0, and of 1."""
    beta = result["posterior"][INVERSE_TEMPERATURE].values
    return bool(np.mean(beta < 0.1) > 0.01 and np.mean(beta > 0.9) > 0.01)


def _record(result, kind, log_zeta, target_accept, refit) -> dict:
    stats_ = result["sample_stats"]
    return {
        "kind": kind,
        "draws": int(stats_.sizes["draw"]),
        "target_accept": float(target_accept),
        "log_zeta": float(log_zeta),
        "log_marginal_likelihood": result.attrs["log_marginal_likelihood"],
        "log_marginal_likelihood_se": result.attrs["log_marginal_likelihood_se"],
        "ess_weights": kish_ess(stats_["log_weight"].values),
        "base_refit": bool(refit),
        "visited_both_ends": _both_ends(result),
        "divergences": int(stats_["diverging"].sum()) if "diverging" in stats_ else 0,
    }


def _with_found_optima(base, result):
    """The base with the optima that its run found and its mode search did not
    (:func:`~pymc_tempering.bases.discover_optima`, in the result's ``base`` group)."""
    if base.modes is None:
        return base
    modes = modes_from_result(result, known=base.modes)
    if modes is None or len(modes) == len(base.modes):  # the run found none
        return base
    return replace(base, modes=modes)


def _missed(result, base):
    """Which optima of the base's mode search a bootstrap round missed, or None when none was
    (the ``missed_mode_mass`` check's remedy, read before the round's base is refitted)."""
    if base.modes is None or read_base(result).optima is None:
        return None
    missed, mass = missed_modes(result)
    return missed if mass >= MISSED_MASS_LIMIT else None


def _refit(target, result, base, zeta_seed):
    """A bootstrap round's update: the base refitted to the result's weighted moments when
    they are worth ``2 * ndim + 10`` draws, and the next ``log_zeta``: the result's estimate
    when it saw both ends of beta (eq. 20 compares them), else an importance-sampling estimate
    from the (refitted) base."""
    refit = kish_ess(result["sample_stats"]["log_weight"].values) >= 2 * target.ndim + 10
    if refit:
        base = base_from_result(result, target.model, previous=base)
    if _both_ends(result):
        log_zeta = result.attrs["log_marginal_likelihood"]
    else:
        log_zeta = estimate_log_zeta(target, base, random_seed=zeta_seed)
    return base, log_zeta, refit


def _widen(target, result, base, log_zeta, missed, zeta_seed):
    """The base widened to the missed optima, and the largest of ``log_zeta``, the run's own
    estimate (when it saw both ends of beta) and the widened base's importance-sampling
    estimate: all lower bounds, the run's lacking the missed optima's mass. Measured on the
    22-unit Boltzmann relaxations: ``log_zeta`` kept at the first base's estimate stayed 2 to 4
    nats below log Z through the extensions, beta piled up at 1 (64% of the draws above 0.95)
    and the runs made 0.2 passages between the ends per 1000 gradients, against 1.1 to 1.5
    with ``log_zeta`` at log Z."""
    base = widen_base(base, missed)
    log_zeta = max(log_zeta, estimate_log_zeta(target, base, random_seed=zeta_seed))
    if _both_ends(result):
        log_zeta = max(log_zeta, float(result.attrs["log_marginal_likelihood"]))
    return base, log_zeta


MISSED_MODE_GROWTH = 2.0  # growth of the draws in an extension after a missed mode


class _Extension(NamedTuple):
    """What the next run of :func:`run_with_bootstrap` changes, and why."""

    base: Base
    log_zeta: float
    draws: int
    target_accept: float
    reasons: list
    refit: bool


@phase("checks")
def _extension(target, result, base, log_zeta, draws, target_accept, zeta_seed):
    """The next run that the failed checks of ``result`` ask for, or None.

    Each failed check that bears on the evidence is mended as its record of the registry says
    (:class:`~pymc_tempering.checks.Mend`): ``HIGHER_TARGET_ACCEPT`` takes ``target_accept``
    halfway to 1; ``WIDENED_BASE`` widens the base to the optima its finding names, with
    ``MISSED_MODE_GROWTH`` times longer chains; ``REFIT`` refits the base and ``log_zeta`` to
    the run (unless it is widened); ``LONGER_CHAINS`` refits too and grows the chains by the
    factor its finding gives; ``NOTHING`` changes nothing. A check of the posterior alone is
    not mended by a further run of the evidence.
    """
    failed = [(c, f) for c, f in diagnose(result).failed() if c.evidence]
    mends = {c.mended_by for c, _ in failed}
    reasons, refit, next_accept, grow = [], False, target_accept, 1.0
    if Mend.HIGHER_TARGET_ACCEPT in mends:
        next_accept = 1 - (1 - target_accept) / 2
        reasons.append("divergences")
    missed = next((f.remedy for c, f in failed if c.mended_by is Mend.WIDENED_BASE), None)
    refits = [c.name for c, _ in failed if c.mended_by is Mend.REFIT]
    longer = [(c, f) for c, f in failed if c.mended_by is Mend.LONGER_CHAINS]
    if missed is not None and base.modes is not None:
        base, log_zeta = _widen(target, result, base, log_zeta, missed, zeta_seed)
        reasons.append("a missed mode")
        # the chains reach a mode only through excursions towards beta = 0, so the widened
        # base's run gets more of them
        grow = MISSED_MODE_GROWTH
    elif refits or longer:
        base, log_zeta, refit = _refit(target, result, base, zeta_seed)
        why = [f"failed checks ({', '.join(sorted(refits))})"] if refits else []
        # "a standard error of 0.35 (<= 0.3)"
        why += [f"a {c.name.replace('_', ' ')} of {f.value:.3g} ({f.limit})" for c, f in longer]
        reasons.append(" and ".join(why) + ": refit")
    for _, finding in longer:
        grow = max(grow, finding.remedy or 1.0)
    next_draws = draws
    if grow > 1:
        next_draws = int(np.ceil(draws * grow))
        reasons.append(f"{next_draws} draws per chain")
    if not reasons:
        return None
    return _Extension(base, log_zeta, next_draws, next_accept, reasons, refit)


def run_with_bootstrap(
    sampling: ExtendedSampling,
    target: Target,
    base: Base,
    log_zeta: float,
    seed,
    draws: int,
    tune: int,
    policy: BootstrapPolicy,
    start: float | None = None,
):
    """Bootstrap rounds (section 6), the final run, its extensions, and :func:`diagnose`'s warnings.

    Shared by the continuous tempering samplers (joint and Gibbs): each run is
    :func:`~pymc_tempering.extended.runner.run_extended` with ``sampling``, whose state is a
    :class:`~pymc_tempering.extended.tempered.Tempering` (the base and ``log_zeta``);
    ``policy`` sets the rounds and the extensions.

    Each bootstrap round (``policy.bootstrap_draws`` tuning steps and draws) refits the base to
    the round's weighted moments (when its weights are worth at least ``2 * ndim + 10`` draws)
    and sets ``log_zeta`` to the round's estimate, or, when the round did not visit both ends
    of beta (more than 1% of draws within 0.1 of 0 and of 1), to an importance-sampling
    estimate from the refitted base; when the round missed optima of the base's mode search
    (:func:`~pymc_tempering.diagnostics.missed_modes`), the base is then widened to them
    (:func:`~pymc_tempering.bases.widen_base`).

    Then, up to ``policy.max_extensions`` times, while :func:`diagnose` finds a problem in the
    final run, the run is repeated with what the problem asks for: ``target_accept`` halfway to
    1 after divergences; the base widened to the missed optima after a missed mode, with
    ``MISSED_MODE_GROWTH`` times longer chains (a chain reaches a mode only through an
    excursion towards beta = 0, and longer chains make more of them); otherwise (the base's
    moments not reproduced, chains that disagree, an end of beta not reached) the base and
    ``log_zeta`` refitted to the run, as in a bootstrap round; a run whose standard error of
    log Z is above ``policy.target_se`` is refitted in the same way and its chains made longer,
    by the factor ``1.2 (se / target_se)^2`` that the standard error asks for, at most
    ``DRAWS_GROWTH``. Every run before the last is recorded in the result's ``bootstrap``
    group, whose ``kind`` says which and why. With ``policy.max_time`` (seconds since
    ``start``, a ``time.perf_counter()`` value; default now), no extension starts whose
    projected end, at the pace of the run before it scaled to its ``draws + tune``, is past the
    budget; the result then has ``attrs["stopped_by"] = "max_time"`` and a warning says so.
    """
    start = time.perf_counter() if start is None else start
    *seeds, final_seed = split_seed(seed, 2 * int(policy.bootstrap) + 1)
    rounds = []
    accept = policy.target_accept
    for round_seed, zeta_seed in zip(seeds[::2], seeds[1::2], strict=True):
        size = policy.bootstrap_draws
        result = run_extended(
            sampling, Tempering(base, log_zeta), size, size, round_seed, accept
        )
        base = _with_found_optima(base, result)
        missed = _missed(result, base)
        old_zeta = log_zeta
        base, log_zeta, refit = _refit(target, result, base, zeta_seed)
        rounds.append(_record(result, "bootstrap", old_zeta, accept, refit))
        if missed is not None:
            base, log_zeta = _widen(target, result, base, log_zeta, missed, zeta_seed)
    run_seed, *extension_seeds = split_seed(final_seed, 2 * int(policy.max_extensions) + 1)
    began = time.perf_counter()
    result = run_extended(
        sampling, Tempering(base, log_zeta), draws, tune, run_seed, accept
    )
    seconds = time.perf_counter() - began
    stopped = None
    for run_seed, zeta_seed in zip(extension_seeds[::2], extension_seeds[1::2], strict=True):
        if policy.target_se is not None:  # what the run was asked for, which the checks read
            result.attrs["target_se"] = float(policy.target_se)
        base = _with_found_optima(base, result)
        nxt = _extension(target, result, base, log_zeta, draws, accept, zeta_seed)
        if nxt is None:
            break
        if policy.max_time is not None:
            pace = seconds * (nxt.draws + tune) / (draws + tune)
            elapsed = time.perf_counter() - start
            if elapsed + pace > policy.max_time:
                stopped = (elapsed, pace)
                break
        kind = "extension after " + " and ".join(nxt.reasons)
        rounds.append(_record(result, kind, log_zeta, accept, nxt.refit))
        base, log_zeta, draws, accept = nxt.base, nxt.log_zeta, nxt.draws, nxt.target_accept
        began = time.perf_counter()
        result = run_extended(sampling, Tempering(base, log_zeta), draws, tune, run_seed, accept)
        seconds = time.perf_counter() - began
    add_rounds(result, rounds, {
        "bootstrap": int(policy.bootstrap),
        "extensions": len(rounds) - int(policy.bootstrap),
        "target_accept": float(accept),
        # diagnose compares the final run with target_se
        "target_se": None if policy.target_se is None else float(policy.target_se),
        "max_time": None if policy.max_time is None else float(policy.max_time),
        "stopped_by": None if stopped is None else "max_time",
    })
    if stopped is not None:
        warn(
            f"Stopped extending after {stopped[0]:.0f} s: the next run would take about "
            f"{stopped[1]:.0f} s at the last one's pace, past max_time ({policy.max_time:g} s). "
            "The problems reported are those of the last run; a larger max_time lets it go on."
        )
    return warn_weighted(result)
