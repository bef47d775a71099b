"""Every check of a run, one record each: when it applies, how it judges, what it bears on and
what mends it.

This is the one place a check is written. :func:`~pymc_tempering.checks.diagnose` runs the
records that apply, in the order of :data:`CHECKS`; the posterior's verdict
(:func:`~pymc_tempering.checks.posterior_check`) reads those that bear on the posterior; the
extension policy of continuous tempering
(:func:`~pymc_tempering.extended.rounds.run_with_bootstrap`) applies the mend of each failed
record. A new check is a judge function and a :class:`~pymc_tempering.checks.record.Check`
added to :data:`CHECKS`; the lists of names below are derived from the records.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from pymc_tempering.checks.calibration import FAMILY_P, calibrated, chains_agreement_p
from pymc_tempering.checks.record import Check, Finding, Mend
from pymc_tempering.checks.run import Run
from pymc_tempering.coverage import BEYOND_LIMIT
from pymc_tempering.estimators import (
    AGREEMENT_Z,
    KHAT_LIMIT,
    beyond_edge,
    kish_ess,
    psis_khat,
    unseen_share,
    weighted_mean,
)
from pymc_tempering.results import numerical_floor
from pymc_tempering.target import DECAY_RADIUS

__all__ = [
    "CHECKS",
    "POSTERIOR_CHECKS",
    "NOT_REFIT",
    "check",
    "MISSED_MASS_LIMIT",
    "FUNNEL_MASS_LIMIT",
    "UNSEEN_OPTIMA_LIMIT",
    "FAMILY_P",
    "missed_modes",
    "missed_optima",
    "precision_goal",
    "search_incomplete",
]

MISSED_MASS_LIMIT = 0.05  # Laplace share of the optima that the weighted draws never reached
FUNNEL_MASS_LIMIT = 0.05  # share of the mass in a funnel's neck that the draws never reached
# ... and in standard errors of that share (the error is partly a bound): high enough that a
# well-sampled neck passes, low enough that runs which miss a neck's mass do not.
FUNNEL_Z = 2.5
# Good-Turing chance that a new run of the base's mode search finds an optimum not found yet
# (Modes.unseen) above which the search is too incomplete to vouch for the estimate
UNSEEN_OPTIMA_LIMIT = 0.5


def search_incomplete(modes) -> bool:
    """Whether a base's mode search (its :class:`~pymc_tempering.bases.Modes`, or None: no
    search) is too incomplete to vouch for a run: its unseen share above
    :data:`UNSEEN_OPTIMA_LIMIT`."""
    return modes is not None and modes.unseen > UNSEEN_OPTIMA_LIMIT


# ---------------------------------------------------------------------------------------------
# The model: an improper prior
# ---------------------------------------------------------------------------------------------


def _improper(run: Run) -> Finding:
    problem = (
        f"The model has improper priors ({run.improper_prior}): it has no marginal "
        "likelihood, and the weights bridge to a density that does not integrate to one. Give "
        "those variables proper priors to compare models by evidence; "
        "pmt.log_normalizing_constant gives the integral of the joint density."
    )
    return Finding(run.improper_prior, "none", False, "variables with an improper prior",
                   problem)


def _flat_directions(run: Run) -> Finding:
    flat = run.flat_directions
    problem = None
    if flat:
        problem = (
            f"The log density does not fall in {flat} coordinate directions (10^4 of the draws' "
            "widths out, its profile is within log(10^4) of its value at their mean): the "
            "integral of the joint density is infinite, so the model has no normalizing "
            "constant and any estimate of it is arbitrary. Bound the flat variables with a "
            "proper prior or a potential."
        )
    meaning = (f"coordinate directions in which the log density has not fallen {DECAY_RADIUS:.0e} "
               "draw widths out")
    return Finding(flat, "0", flat == 0, meaning, problem)


# ---------------------------------------------------------------------------------------------
# Mass the draws did not reach, seen by an independent importance sampler (the coverage group)
# ---------------------------------------------------------------------------------------------


def _beyond(run: Run) -> dict:
    """The coverage check's numbers, computed once for its two records."""
    if "beyond" in run.cache:
        return run.cache["beyond"]
    beyond = run.coverage
    share, se = beyond.share, beyond.se
    # the check's own log Z above the run's: mass the run missed, inside the draws' reach too
    gap = beyond.log_z - run.log_z
    gap_se = float(np.hypot(beyond.log_z_se, run.log_z_se))
    # an optimum's region the draws under-represent (a spike inside the slab, sampled rarely).
    # It counts for a stratified run too: the strata's masses can be off with standard errors
    # that do not show it (measured: a tanh network's importance-sampled probabilities 0.10 off,
    # 20 of their standard errors, told only by 14.5% more mass about an optimum than the
    # draws held), at the price of false alarms where they are right (Kou's (a), 1 to 4 runs in
    # 10 at 5 to 9%).
    near = beyond.near_optimum
    above = gap > 3 * gap_se
    missed = max(share, -np.expm1(-gap) if above else 0.0, near)
    # what the missed mass takes off log Z: the check's own log Z above the run's, where it is
    bias = gap if above else -np.log1p(-min(missed, 0.99))
    ok = (missed < BEYOND_LIMIT or (share <= 3 * se and gap <= 3 * gap_se and near == 0.0)
          or bias <= run.log_z_se)
    run.cache["beyond"] = dict(share=share, se=se, near=near, missed=missed, bias=bias, ok=ok)
    return run.cache["beyond"]


def _mass_beyond_draws(run: Run) -> Finding:
    b, beyond = _beyond(run), run.coverage
    problem = None
    if not b["ok"]:
        problem = (
            f"About {b['missed']:.1%} of the target's mass lies where no draw of the run went, at "
            "other scales than its base's (a broad slab under a narrow spike, say): an "
            "importance sampler at 1 to 64 times the base's widths finds it (log Z "
            f"{beyond.log_z:.3f} ± {beyond.log_z_se:.3f}, "
            f"{b['share']:.1%} ± {b['se']:.1%} of it beyond every draw, {b['near']:.1%} more "
            "about an optimum than the draws hold there). The log marginal likelihood is "
            f"too low by about {b['bias']:.2f} nats and the posterior "
            "lacks that mass, while the standard error does not show it. Pass a base that "
            "covers those scales (pmt.Base.from_moments with their covariance)."
        )
    return Finding(
        b["missed"], f"< {BEYOND_LIMIT}, 3 SE or a bias within the SE", b["ok"],
        "share of the mass the draws never reached, seen by a proposal at 1 to 64 times the "
        "base's widths", problem,
    )


def _mass_near_optima(run: Run) -> Finding:
    """The mass about an optimum that the weighted draws under-represent: a problem for the
    posterior (its share of that region is off), for the evidence only through
    ``mass_beyond_draws``, which tells it when that fails."""
    b = _beyond(run)
    near = b["near"]
    problem = None
    if near > 0.0 and b["ok"]:
        problem = (
            f"About {near:.1%} of the target's mass lies about one of the optima (within its "
            "Laplace ellipsoid, by an importance sampler over the run's log Z) that the "
            "weighted draws give less than half of: the posterior's share of that region, a "
            "mode's probability say, is off by about as much. The log marginal likelihood is "
            "not affected beyond its standard error. Longer runs (draws) visit the modes more "
            "evenly."
        )
    return Finding(
        near, "0", near == 0.0,
        "share of the mass within an optimum's Laplace ellipsoid that the weighted draws lack "
        "(where they hold less than half of it)", problem,
    )


# ---------------------------------------------------------------------------------------------
# The precision asked for
# ---------------------------------------------------------------------------------------------

DRAWS_GROWTH = 4.0  # most growth of the draws per extension for target_se


def precision_goal(target_se: float, log_z: float) -> float:
    """The standard error a run asked for ``target_se`` can reach: ``target_se``, or the
    rounding floor of an estimate ``log_z`` where that is larger (no longer chain lowers it)."""
    return max(float(target_se), numerical_floor(log_z))


def _standard_error(run: Run) -> Finding:
    se, goal = run.log_z_se, precision_goal(run.target_se, run.log_z)
    problem = growth = None
    if se > goal:
        problem = (
            f"The standard error of log Z ({se:.3g}) is above target_se ({goal:g}) after "
            "the extensions allowed: run longer chains (draws) or allow more extensions "
            "(max_extensions, max_time), or pass a larger target_se if that precision is enough."
        )
        # the standard error falls as 1 / sqrt(draws): enough draws for the goal with a fifth
        # to spare, at most DRAWS_GROWTH times more per extension
        growth = min(DRAWS_GROWTH, 1.2 * (se / goal) ** 2)
    return Finding(se, f"<= {goal:g}", se <= goal,
                   "standard error of log Z against the target_se the run was asked for",
                   problem, remedy=growth)


def _path_regions_agreement(run: Run) -> Finding:
    path, path_se, regions, regions_se = run.two_estimators
    z = abs(regions - path) / float(np.hypot(path_se, regions_se))
    problem = None
    if not z <= AGREEMENT_Z:
        problem = (
            f"The run's two estimates of log Z disagree: the tempered path gives {path:.3f} ± "
            f"{path_se:.3f}, the sum of its regions' importance-sampled masses {regions:.3f} ± "
            f"{regions_se:.3f}, {z:.1f} standard errors apart. One of them misses mass or "
            "understates its error (a path whose base is far wider than narrow modes, or a "
            "region whose proposal misses part of it), and the modes' probabilities, which "
            "the masses set, may be off too. The result reports the regions' estimate, whose "
            "error is that of independent importance sampling; check it with longer runs "
            "(draws) or an independent method (pmt.sample_ais)."
        )
    return Finding(z, f"<= {AGREEMENT_Z:g}", z <= AGREEMENT_Z,
                   "standard errors between the path's log Z and the regions' summed masses",
                   problem)


# ---------------------------------------------------------------------------------------------
# The temperature path: both ends visited, and passages between them
# ---------------------------------------------------------------------------------------------


def _round_trips(beta: np.ndarray, near: float) -> np.ndarray:
    """Per chain, the number of passages between beta < near and beta > 1 - near."""
    trips = []
    for chain in beta:
        state = np.where(chain < near, 0, np.where(chain > 1 - near, 1, -1))
        ends = state[state >= 0]
        trips.append(int(np.count_nonzero(np.diff(ends))))
    return np.array(trips)


def _ends(run: Run) -> tuple[float, float, int]:
    if "ends" not in run.cache:
        beta, near = run.beta, run.near
        run.cache["ends"] = (float(np.mean(beta < near)), float(np.mean(beta > 1 - near)),
                             int(_round_trips(beta, near).min()))
    return run.cache["ends"]


def _beta_near_0(run: Run) -> Finding:
    low = _ends(run)[0]
    problem = None if low > 0 else (
        "The inverse temperature never came near 0: the chains never visited the base, "
        "so the log marginal likelihood is extrapolated. log_zeta is probably far below "
        "log Z, or the base far from the target: use bootstrap rounds or a better base."
    )
    return Finding(low, "> 0", low > 0, f"fraction of draws with beta < {run.near}", problem)


def _beta_near_1(run: Run) -> Finding:
    high = _ends(run)[1]
    problem = None if high > 0 else (
        "The inverse temperature never came near 1: the chains never visited the "
        "target, so the weights rest on base draws. log_zeta is probably far above "
        "log Z: use bootstrap rounds or a better log_zeta."
    )
    return Finding(high, "> 0", high > 0, f"fraction of draws with beta > {1 - run.near}",
                   problem)


def _passages(run: Run) -> Finding:
    low, high, trips = _ends(run)
    problem = None
    if trips == 0 and calibrated(run):  # independent batches agree: they are views enough
        return Finding(trips, "> 0 or calibrated", True, "fewest passages between the two "
                       "ends of beta in one chain; the run's batches agree (calibrated)", None)
    if low > 0 and high > 0 and trips == 0:
        problem = (
            "A chain never moved between the base and the target ends of beta: it mixes "
            "poorly in the temperature, so the chains' estimates are not independent views."
        )
    return Finding(trips, "> 0", trips > 0,
                   "fewest passages between the two ends of beta in one chain", problem)


# ---------------------------------------------------------------------------------------------
# Divergences
# ---------------------------------------------------------------------------------------------


def _corrected_necks(run: Run) -> np.ndarray | None:
    """``(chain, draw)``: whether each draw lies beyond the edge of a funnel whose mass there the
    log marginal likelihood takes from the profile (``funnel_correction``); None without one."""
    base = run.base
    if run.funnel_correction is None or base is None or base.funnels is None:
        return None
    funnels = base.funnels
    corrected = np.isfinite(funnels.tail_ratio)
    if not corrected.any():
        return None
    x = run.flat_draws
    neck = np.zeros(x.shape[:2], dtype=bool)
    for k, edge, inner in zip(funnels.index[corrected], funnels.edge[corrected],
                              funnels.inner[corrected], strict=True):
        neck |= beyond_edge(x[..., int(k)], edge, inner)
    return neck


def _divergences(run: Run) -> Finding:
    diverging, beta = run.diverging, run.beta
    n_div = int(diverging.sum())
    row = (n_div, "0", n_div == 0, "divergent transitions after tuning")
    if not n_div:
        return Finding(*row)
    neck = _corrected_necks(run)
    if neck is not None and neck.shape == diverging.shape and neck[diverging].all():
        # Every divergent transition ended in a funnel's neck, beyond the draws' quartile
        # towards its spike, where the log marginal likelihood takes the mass from the profile
        # and not from the draws: the draws miss mass there, the evidence does not.
        problem = (
            f"{n_div} of {diverging.size} transitions diverged, every one at a draw in the neck "
            "of a funnel (beyond the funnel check's edge), so the draws miss part of the mass "
            "there. The log marginal likelihood takes that mass from the profile of the target "
            "(attrs['funnel_correction']), so it does not miss it. Non-centre the group, as "
            "for pm.sample."
        )
        return Finding(*row, problem, evidence=False)
    if beta is None:  # no inverse temperature per draw (AIS, ergodic inference, ...)
        # An AIS draw is the end of a run of one transition per rung; it is flagged when any was.
        what = "runs had a divergent transition" if run.method == "ais" else "transitions diverged"
        return Finding(*row, (
            f"{n_div} of {diverging.size} {what}: the sampler could not enter part "
            "of the density it samples, so the draws miss its mass there (and a log marginal "
            "likelihood, where the method gives one, comes out low, with a standard error that "
            "does not show it). Reparameterise the model (centred or non-centred groups) as you "
            "would for pm.sample, or take smaller steps (a higher target_accept)."
        ))
    return Finding(*row, (
        f"{n_div} of {diverging.size} transitions diverged, at a median beta of "
        f"{np.median(beta[diverging]):.2f}: the sampler could not "
        "enter part of the tempered density, so the estimates miss its mass there (the log "
        "marginal likelihood comes out low, with a standard error that does not show "
        "it). Divergences near beta = 1 come from the model's own geometry: "
        "reparameterise it (centred or non-centred groups) as you would for pm.sample. "
        "Elsewhere, raise target_accept."
    ))


# ---------------------------------------------------------------------------------------------
# The weights and the estimate
# ---------------------------------------------------------------------------------------------


def _ess_weights(run: Run) -> Finding:
    return Finding(kish_ess(run.log_weight), "-", True,
                   "Kish effective sample size of the weights")


def _pareto_khat(run: Run) -> Finding:
    lw = run.log_weight
    khat = psis_khat(lw)  # the tail index of the weights
    # Weights bounded above have every moment finite, so their tail cannot be heavy: a k-hat
    # beyond the limit there is the generalised Pareto fit meeting the bound. It is shown, not
    # held against the run. Continuous tempering's weights are probabilities p(beta = 1 | x).
    bounded = run.log_base_weight is not None
    ok = bounded or not khat > KHAT_LIMIT
    meaning = "Pareto k-hat of weights" + (" (bounded by 1: not a check)" if bounded else "")
    problem = None
    if not ok:
        problem = (
            f"The importance weights are heavy-tailed (Pareto k-hat {khat:.2f} > "
            f"{KHAT_LIMIT}; Kish ESS {kish_ess(lw):.0f} of {lw.size} draws): the largest weights "
            "may dominate the weighted estimates, whose standard errors are then unreliable. "
            "With a Kish ESS near the number of draws the tail is heavy only relative to "
            "very uniform weights; with a small one the base is far from the target."
        )
    return Finding(khat, f"<= {KHAT_LIMIT}", ok, meaning, problem)


def _base_moment_z(run: Run) -> np.ndarray:
    base, x, lw0 = run.base, run.flat_draws, run.log_base_weight
    est_mean, se_mean = weighted_mean(x, lw0)
    est_var, se_var = weighted_mean((x - base.mean) ** 2, lw0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.concatenate([(est_mean - base.mean) / se_mean, (est_var - base.variance) / se_var])


def _base_moments(run: Run) -> Finding:
    z = _base_moment_z(run)
    limit = float(stats.norm.isf(FAMILY_P / (2 * z.size)))
    max_z = float(np.nanmax(np.abs(z)))
    problem = None
    if max_z > limit:
        problem = (
            "The draws weighted towards beta = 0 do not reproduce the base's mean and "
            f"variance (max |z| = {max_z:.1f}): the chains have not converged to the "
            "tempered joint density, so its estimates are biased. Run longer chains."
        )
    return Finding(max_z, f"<= {limit:.2f}", max_z <= limit,
                   "eq. (22): base mean and variance from beta->0 weighted draws, in MCSE", problem)


def _chain_agreement(run: Run) -> Finding:
    p = chains_agreement_p(run)
    problem = None
    if p < FAMILY_P:
        problem = (
            "The chains' log marginal likelihood estimates disagree beyond their "
            f"standard errors (chi-square p = {p:.1e}): some chains explored other "
            "modes or temperatures than others. Run longer chains or improve the base."
        )
    return Finding(p, f">= {FAMILY_P}", p >= FAMILY_P,
                   "per-chain log Z estimates agree within their standard errors", problem)


# ---------------------------------------------------------------------------------------------
# The modes: the base's mode search against the run's draws
# ---------------------------------------------------------------------------------------------


NEAREST_BLOCK = 8192  # draws per block of the nearest-optimum search


def missed_optima(points, log_mass, flat, scale, log_weight=None) -> tuple[np.ndarray, float]:
    """The optima ``points (k, ndim)`` that the flat draws ``(n, ndim)`` never came near.

    Each draw belongs to its nearest optimum (distances in units of ``scale``); an optimum is
    missed when its share of the Laplace mass ``exp(log_mass)`` of all optima is worth at least
    10 effective draws (Kish, of ``log_weight``; equal weights when None) and the (weighted)
    draws that belong to it hold under a tenth of that share. Returns the missed optima (bool)
    and their Laplace share.
    """
    lw = np.zeros(len(flat)) if log_weight is None else np.asarray(log_weight, dtype=float)
    z = np.asarray(flat, dtype=float) / scale
    centres = np.asarray(points, dtype=float) / scale
    # the nearest centre minimises |c|^2 - 2 z . c; in blocks of draws, so that the (draws,
    # optima) matrix stays small (128,000 draws and 300 optima: 1.1 s whole, 0.2 s in blocks)
    norm2 = (centres**2).sum(1)
    nearest = np.concatenate([
        np.argmin(norm2 - 2 * block @ centres.T, axis=1) for block in np.split(
            z, np.arange(NEAREST_BLOCK, len(z), NEAREST_BLOCK))
    ])
    w = np.exp(lw - lw.max())
    share = np.bincount(nearest, weights=w / w.sum(), minlength=len(centres))
    expected = np.exp(log_mass - np.logaddexp.reduce(log_mass))
    missed = (expected * kish_ess(lw) >= 10) & (share < 0.1 * expected)
    return missed, float(expected[missed].sum())


def missed_modes(idata) -> tuple[np.ndarray, float]:
    """The optima of the base's mode search that a continuous tempering run never came near
    (:func:`missed_optima` with the base's standard deviations and the importance weights).

    Returns
    -------
    missed : ndarray of bool, shape (mode,)
    mass : float
        The Laplace share of the missed optima.
    """
    return _missed(Run(idata))


def _missed(run: Run) -> tuple[np.ndarray, float]:
    optima = run.base.optima
    flat = run.flat_draws.reshape(-1, optima.points.shape[1])
    return missed_optima(optima.points, optima.log_mass, flat, np.sqrt(run.base.variance),
                         run.log_weight.ravel())


def _unseen_optima(run: Run) -> Finding:
    hits = run.base.optima.hits
    unseen = unseen_share(hits)
    problem = None
    if unseen > UNSEEN_OPTIMA_LIMIT and calibrated(run):
        return Finding(unseen, f"<= {UNSEEN_OPTIMA_LIMIT} or calibrated", True,
                       "Good-Turing chance that another run of the base's mode search finds a "
                       "new optimum; the run's chains and estimators agree (calibrated)", None)
    if unseen > UNSEEN_OPTIMA_LIMIT:
        problem = (
            f"The base's mode search is far from complete: {int(np.sum(hits == 1))} of its "
            f"{int(hits.sum())} converged runs reached a local maximum that no other run "
            f"reached ({len(hits)} maxima in all), so by the Good-Turing estimate another "
            f"run would find a new one with probability about {unseen:.2f}. The target has "
            "more modes than were found, and the run can miss their mass without its "
            "standard error or the other checks showing it: the log marginal likelihood "
            "may be too low (measured on 22-unit Boltzmann machine relaxations, whose "
            "searches reached a new maximum with 29 to 32 of their 32 runs: runs passing "
            "every other check came out 0.47 to 1.3 nats, 4.9 to 17.4 standard errors, "
            "low). Treat it as a lower bound, check it with an independent method "
            "(pmt.sample_ais, pmt.sample_simulated_tempering), or run many chains "
            "(sample_ct's batched_chains), whose agreeing batches stand in for the search."
        )
    return Finding(unseen, f"<= {UNSEEN_OPTIMA_LIMIT}", unseen <= UNSEEN_OPTIMA_LIMIT,
                   "Good-Turing chance that another run of the base's mode search finds a new "
                   "optimum", problem)


def _missed_mode_mass(run: Run) -> Finding:
    missed, mass = _missed(run)
    problem = None
    if mass >= MISSED_MASS_LIMIT:
        problem = (
            f"The weighted draws never came near {int(missed.sum())} of the "
            f"{len(missed)} local maxima that the base's mode search found (optimisations from "
            f"prior draws), which hold about {mass:.0%} of their Laplace mass: the run probably "
            "missed a mode, so the log marginal likelihood is too low by about "
            f"{-np.log1p(-min(mass, 0.999)):.2f} nats or more and its standard error "
            "does not show it. Pass a base that covers every mode (fit_base(method="
            "'mixture', n_fits=...)), or run longer."
        )
    return Finding(mass, f"< {MISSED_MASS_LIMIT}", mass < MISSED_MASS_LIMIT,
                   "Laplace share of the base's mode-search optima that the weighted draws "
                   "never reached", problem, remedy=missed)


def _known_modes(run: Run) -> Finding:
    """Whether the run can account for the modes of its target: its base carries optima to
    compare the draws with (the mode search's, or where it found none the regions of the
    census of short NUTS runs, :mod:`pymc_tempering.bases.census`)."""
    found = run.base.optima is not None
    problem = None
    if not found:
        problem = (
            "The base's mode search (optimisations from prior draws) found no optimum, and no "
            "census of short runs from prior draws found its regions: the log "
            "density is unbounded or flat along the way (a noise scale or a group's scale "
            "going to 0 while the rest fits the data, as in factor and mixture models), so the "
            "run has nothing to compare its draws with and cannot tell whether they reached "
            "every mode. Draws that stay in one region agree with each other and every other "
            "check passes, whatever the posterior's other modes hold: the summaries, a mode's "
            "probability above all, may be wrong with a standard error that does not show it. "
            "Check them with independent runs from dispersed starts, or bound the scales "
            "(a prior that keeps them from 0)."
        )
    return Finding(int(found), "> 0", found,
                   "the base's mode search found an optimum to compare the draws with",
                   problem)


# ---------------------------------------------------------------------------------------------
# A funnel's neck
# ---------------------------------------------------------------------------------------------


def _funnel_mass(run: Run) -> Finding:
    funnels = run.base.funnels
    mass = funnels.mass
    # Each estimate rests on the draws' quartiles of the spike's coordinate, whose Monte Carlo
    # error (funnel_mass_se) sets how far above 0 it may be by chance.
    limits = np.maximum(FUNNEL_MASS_LIMIT, FUNNEL_Z * funnels.mass_se)
    i = int(np.argmax(mass - limits))
    limit = float(limits[i])
    row = (float(mass[i]), f"< {limit:.3g}", mass[i] < limit,
           "share of the mass near a spike of the log density (a funnel's neck) that the "
           "weighted draws never reached, from a profile Laplace approximation of the target")
    if mass[i] < limit:
        return Finding(*row)
    where = (
        f"Beyond {funnels.variable[i]} = {float(funnels.edge[i]):.3g}, towards the spike that "
        f"the base's mode search climbed there, the target has about {mass[i]:.0%} of the "
        "draws' mass more than they hold (a profile Laplace approximation along it, which "
        "reproduces the draws where they are): the neck of a funnel that the sampler did not "
        "enter. "
    )
    fix = "Non-centre that group, as for pm.sample (x = mu + sigma * z with z ~ N(0, 1))."
    correction = run.funnel_correction
    if correction is None or not np.isfinite(funnels.tail_ratio[i]):
        return Finding(*row, (
            where + "The log marginal likelihood is then too low by about "
            f"{np.log1p(min(mass[i], 1e3)):.2f} nats and its standard error does not show "
            "it (measured on the centred eight schools: up to 0.59 nats low with no "
            "divergence). " + fix
        ))
    return Finding(*row, (
        where + "The draws and every summary of them lack that mass (the group's scale "
        "comes out too large). The log marginal likelihood includes it, from the profile "
        f"({correction:+.2f} nats, attrs['funnel_correction']). " + fix
    ), evidence=False)


# ---------------------------------------------------------------------------------------------
# The records, in the order diagnose runs them
# ---------------------------------------------------------------------------------------------

# The model: an improper prior (no run mends it), whose joint density's integral may be
# infinite (no run mends that either; the rounds refit the base for it as for any check not
# named otherwise).
IMPROPER_PRIOR = Check("improper_prior", True, False, Mend.NOTHING, Run.has_improper, _improper,
                       improper=True)
FLAT_DIRECTIONS = Check("flat_directions", True, False, Mend.REFIT, Run.has_flat_directions,
                        _flat_directions)
# Mass the draws did not reach. A refit to draws that lack the mass cannot add it.
MASS_BEYOND_DRAWS = Check("mass_beyond_draws", True, True, Mend.NOTHING, Run.has_coverage,
                          _mass_beyond_draws)
# Mass about an optimum that the draws under-represent: the posterior's share of it is off; the
# evidence only through mass_beyond_draws, which counts it.
MASS_NEAR_OPTIMA = Check("mass_near_optima", False, True, Mend.LONGER_CHAINS, Run.has_coverage,
                         _mass_near_optima, answered_by_strata=True)
STANDARD_ERROR = Check("standard_error", True, False, Mend.LONGER_CHAINS, Run.has_target_se,
                       _standard_error)
# The path's estimate against the regions' summed masses: the masses also set the modes'
# probabilities. No further run of the same base mends a path far wider than narrow modes.
PATH_REGIONS_AGREEMENT = Check("path_regions_agreement", True, True, Mend.NOTHING,
                               Run.has_two_estimators, _path_regions_agreement)
# The temperature path: both ends visited, and passages between them. Chains that never reach
# the base (or never pass between it and the target) never leave the mode they began in: the
# draws' share of each mode is where the chains started, and a mode no chain began in is
# missed. Importance-sampled strata give the modes' masses without the passages.
BETA_NEAR_0 = Check("beta_near_0", True, True, Mend.REFIT, Run.has_beta, _beta_near_0,
                    answered_by_strata=True)
BETA_NEAR_1 = Check("beta_near_1", True, False, Mend.REFIT, Run.has_beta, _beta_near_1)
MIN_END_TO_END_PASSAGES = Check("min_end_to_end_passages", True, True, Mend.REFIT, Run.has_beta,
                                _passages, answered_by_strata=True)
# A higher target_accept does not enter a funnel's neck that NUTS avoids, but the bulk's.
DIVERGENCES = Check("divergences", True, True, Mend.HIGHER_TARGET_ACCEPT, Run.has_diverging,
                    _divergences)
# The weights and the estimate. A refit to weights with a heavy tail has the same tail.
ESS_WEIGHTS = Check("ess_weights", True, False, Mend.REFIT, Run.has_weights, _ess_weights)
PARETO_KHAT = Check("pareto_khat", True, False, Mend.NOTHING, Run.has_weights, _pareto_khat)
BASE_MOMENTS = Check("base_moments_max_abs_z", True, False, Mend.REFIT, Run.has_tempered_base,
                     _base_moments)
# The modes: an incomplete mode search is the base's own; a missed optimum widens the base.
UNSEEN_OPTIMA = Check("unseen_optima", True, True, Mend.NOTHING, Run.has_optima, _unseen_optima)
MISSED_MODE_MASS = Check("missed_mode_mass", True, True, Mend.WIDENED_BASE, Run.has_optima,
                         _missed_mode_mass, answered_by_strata=True)
KNOWN_MODES = Check("known_modes", False, True, Mend.NOTHING, Run.has_tempered_base_and_beta,
                    _known_modes)
FUNNEL_MASS = Check("funnel_mass", True, True, Mend.NOTHING, Run.has_funnels, _funnel_mass)
CHAIN_AGREEMENT = Check("chains_log_z_chi2_p", True, False, Mend.REFIT, Run.has_chains,
                        _chain_agreement)

#: Every check, one record each, in the order :func:`~pymc_tempering.checks.diagnose` runs them.
CHECKS: tuple[Check, ...] = (
    IMPROPER_PRIOR,
    FLAT_DIRECTIONS,
    MASS_BEYOND_DRAWS,
    MASS_NEAR_OPTIMA,
    STANDARD_ERROR,
    PATH_REGIONS_AGREEMENT,
    BETA_NEAR_0,
    BETA_NEAR_1,
    MIN_END_TO_END_PASSAGES,
    DIVERGENCES,
    ESS_WEIGHTS,
    PARETO_KHAT,
    BASE_MOMENTS,
    UNSEEN_OPTIMA,
    MISSED_MODE_MASS,
    KNOWN_MODES,
    FUNNEL_MASS,
    CHAIN_AGREEMENT,
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
