"""Checks that catch a tempering run that looks fine and is wrong.

They read only the result layout (``pymc_tempering.results``); checks whose inputs a result does
not carry are skipped. Each check is a record of :mod:`pymc_tempering.checks` (its name, what it
bears on, what mends it); a problem of a check that does not bear on the evidence is one of the
draws alone (``Diagnosis.draws_only``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats
from xarray import DataTree

from pymc_tempering.estimators import (
    KHAT_LIMIT,
    beyond_edge,
    kish_ess,
    log_ratio_of_means,
    psis_khat,
    unseen_share,
    weighted_mean,
)
from pymc_tempering.checks import (
    BASE_MOMENTS, BETA_NEAR_0, BETA_NEAR_1, CHAIN_AGREEMENT, DIVERGENCES, ESS_WEIGHTS,
    FLAT_DIRECTIONS, FUNNEL_MASS, MASS_BEYOND_DRAWS, MASS_NEAR_OPTIMA, MIN_END_TO_END_PASSAGES,
    MISSED_MODE_MASS, PARETO_KHAT, STANDARD_ERROR, UNSEEN_OPTIMA, Check,
)
from pymc_tempering.coverage import BEYOND_LIMIT, Beyond, read_coverage
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    check_result,
    flat_draws_from_result,
    numerical_floor,
)
from pymc_tempering.target import DECAY_RADIUS

__all__ = ["Diagnosis", "diagnose", "missed_modes"]

MISSED_MASS_LIMIT = 0.05  # Laplace share of the optima that the weighted draws never reached
FUNNEL_MASS_LIMIT = 0.05  # share of the mass in a funnel's neck that the draws never reached
# ... and in standard errors of that share (the error is partly a bound): high enough that a
# well-sampled neck passes, low enough that runs which miss a neck's mass do not.
FUNNEL_Z = 2.5
# Good-Turing chance that a new run of the base's mode search finds an optimum not found yet
# (Modes.unseen) above which the search is too incomplete to vouch for the estimate
UNSEEN_OPTIMA_LIMIT = 0.5
FAMILY_P = 1e-3  # family-wise false-alarm rate of the z-score and chi-square checks


@dataclass
class Diagnosis:
    """The outcome of :func:`diagnose`.

    Attributes
    ----------
    checks : pandas.DataFrame
        One row per check: ``value``, ``limit``, ``ok`` and what it means.
    problems : list of str
        One sentence per failed check, naming the likely cause and what to do.
    draws_only : list of str
        Those of ``problems`` that concern the draws but not the log marginal likelihood,
        which the result corrects for them (a funnel's neck, whose mass the estimate takes
        from the profile of the target).
    improper : list of str
        Those of ``problems`` that say the model's prior is improper: its log marginal
        likelihood is no evidence, but its joint density's normalizing constant can still be
        right (:func:`~pymc_tempering.log_normalizing_constant`).
    """

    checks: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    draws_only: list[str] = field(default_factory=list)
    improper: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return not self.problems

    @property
    def evidence_problems(self) -> list[str]:
        """The problems that bear on the log marginal likelihood."""
        return [p for p in self.problems if p not in self.draws_only]

    @property
    def normalizing_constant_problems(self) -> list[str]:
        """The problems that bear on the normalizing constant of the model's joint density
        (those of the log marginal likelihood but the prior's impropriety)."""
        return [p for p in self.evidence_problems if p not in self.improper]

    def __str__(self) -> str:
        text = self.checks.to_string()
        if self.problems:
            text += "\n\nProblems:\n" + "\n".join(f"- {p}" for p in self.problems)
        return text


def _round_trips(beta: np.ndarray, near: float) -> np.ndarray:
    """Per chain, the number of passages between beta < near and beta > 1 - near."""
    trips = []
    for chain in beta:
        state = np.where(chain < near, 0, np.where(chain > 1 - near, 1, -1))
        ends = state[state >= 0]
        trips.append(int(np.count_nonzero(np.diff(ends))))
    return np.array(trips)


def diagnose(idata: DataTree, near: float = 0.1) -> Diagnosis:
    """Check a tempering result for the failures that bias its estimates silently.

    Checks (each skipped when the result lacks its inputs; each one's record, what it bears on
    and what mends it, is in :data:`pymc_tempering.checks.CHECKS`):

    - ``beta_near_0``, ``beta_near_1``: fraction of draws with the inverse temperature within
      ``near`` of 0 and of 1; a problem when one end is never visited (the base or the target
      is not reached, so eq. 20 has nothing to compare).
    - ``min_end_to_end_passages``: fewest passages between the two ends in any chain.
    - ``base_moments_max_abs_z``: the base-moment check of eq. (22): the means and variances of
      the draws weighted towards beta = 0 against the base's known ones, in Monte Carlo standard
      errors; a problem above the Bonferroni limit for a family-wise rate of 0.001.
    - ``ess_weights``: Kish's effective sample size of the importance weights.
    - ``pareto_khat``: Pareto k-hat of the weights from arviz-stats' PSIS (``psislw``); a
      problem above 0.7, except for continuous tempering, whose weights ``p(beta = 1 | x)``
      are bounded by 1 and so cannot have a heavy tail.
    - ``divergences``: NUTS transitions that diverged after tuning (``sample_stats.diverging``);
      a problem when there is any, as in PyMC. A divergence marks a region the sampler could not
      enter, such as a funnel, and missing mass biases the log marginal likelihood low while its
      standard error stays small.
    - an improper prior (``pm.Flat``, ``pm.HalfFlat``; root attr ``improper_prior``): the
      model has no marginal likelihood (``Diagnosis.improper``; its normalizing constant can
      still be right).
    - ``mass_beyond_draws``: the share of the target's mass that the run's draws never
      reached, from an importance sampler at 1 to 64 times the base's and the optima's widths
      (:mod:`pymc_tempering.coverage`, stored in the ``coverage`` group): the mass beyond every draw (in the Mahalanobis
      distance of the weighted draws), or the sampler's log Z above the run's by more than
      three standard errors, or the mass within an optimum's Laplace ellipsoid more than
      twice the draws' share there; a problem from 0.005 (and three of its standard errors)
      where the bias it makes, ``-log(1 - share)``, exceeds the run's standard error.
    - ``mass_near_optima``: that share about one optimum where the weighted draws hold less than
      half of it; a problem for the draws (a mode's probability is off) and, through
      ``mass_beyond_draws``, for the evidence where it biases it beyond its standard error.
    - ``flat_directions``: with an improper prior, the coordinate directions (each way) in
      which the log density's profile does not fall far from the weighted draws
      (:func:`~pymc_tempering.target.flat_directions`); a problem when there is any: the joint
      density's integral is infinite.
    - ``missed_mode_mass``: when the base carries the optima of its mode search
      (:func:`~pymc_tempering.find_modes`, stored in the ``base`` group), the share of their
      Laplace mass around optima that the weighted draws never came near (each draw counted
      at its nearest optimum; an optimum is missed when at least 10 effective draws were due
      there and under a tenth of that came); a problem from 0.05. A run whose base misses a
      mode never samples it at any temperature and every other check passes: this one
      compares the run with an independent look at the target.
    - ``unseen_optima``: with the optima, the share of the search's converged runs whose
      optimum no other run reached: the Good-Turing estimate of the chance that another run
      finds an optimum not found yet; a problem above 0.5 (a search that found a new maximum
      with nearly every run has seen only part of the modes, and the run can miss the mass of
      the others while every other check passes).
    - ``chains_log_z_chi2_p``: the p-value of the per-chain log Z estimates agreeing within
      their standard errors (chi-square with chains - 1 degrees of freedom); a problem below
      0.001.
    - ``funnel_mass``: when the base's mode search climbed a spike (a centred group's scale
      run off towards 0) that the draws stay far from, the share of the target's mass on the
      spike's side of the draws that they never reached, from a profile Laplace approximation
      of the target along it (:func:`~pymc_tempering.extended.funnel.funnel_mass`); a
      problem from 0.05 and 2.5 of its standard errors (``funnel_mass_se``: the Monte Carlo
      error of the draws' quartiles and the importance sampling's). The neck of a funnel that
      NUTS never enters gives neither divergences nor disagreeing chains. Continuous
      tempering's log marginal likelihood takes the neck's mass from the profile in any case
      (root attr ``funnel_correction``,
      :func:`~pymc_tempering.extended.funnel.funnel_correction`), so this problem is one of
      the draws alone (``Diagnosis.draws_only``): their summaries lack the neck, the evidence
      does not. So are divergences when every one ended at a draw beyond such a corrected
      neck's edge.
    - ``standard_error``: when the result carries the ``target_se`` it was run for (root attrs
      of :func:`~pymc_tempering.sample_ct` and :func:`~pymc_tempering.sample_gibbs_ct`), the
      standard error of log Z against it; a problem above it: the run's extensions did not
      bring it down, and an estimate that imprecise is not what the run was asked for. A
      ``target_se`` below the rounding floor of the estimate (``1e-7 |log Z|``, the accuracy of
      the log densities themselves) is raised to it.

    Parameters
    ----------
    idata : xarray.DataTree
        A result of a pymc_tempering method.
    near : float
        Width of the bands at beta = 0 and beta = 1.

    Returns
    -------
    Diagnosis

    Raises
    ------
    TypeError
        When ``idata`` is not a DataTree (``fit_ergodic``'s approximation, say).
    """
    check_result(idata)
    checks = _Checks()
    if "improper_prior" in idata.attrs:
        _check_improper(checks, idata.attrs)
    beyond = read_coverage(idata)
    if beyond is not None and "log_marginal_likelihood" in idata.attrs:
        _check_beyond(checks, beyond, idata.attrs)
    if "target_se" in idata.attrs and "log_marginal_likelihood_se" in idata.attrs:
        _check_precision(
            checks,
            float(idata.attrs["log_marginal_likelihood_se"]),
            precision_goal(idata.attrs["target_se"], idata.attrs["log_marginal_likelihood"]),
        )
    stats_ = idata["sample_stats"] if "sample_stats" in idata.children else None
    posterior = idata["posterior"] if "posterior" in idata.children else None
    # One inverse temperature per draw (continuous tempering); pseudo-extended results carry one
    # per pseudo-sample, to which the checks of the two ends do not apply.
    beta = None
    if (
        posterior is not None
        and INVERSE_TEMPERATURE in posterior
        and set(posterior[INVERSE_TEMPERATURE].dims) == {"chain", "draw"}
    ):
        beta = posterior[INVERSE_TEMPERATURE].transpose("chain", "draw").values
        _check_temperature_ends(checks, beta, near)
    if stats_ is not None and "diverging" in stats_:
        neck = _corrected_necks(idata) if bool(stats_["diverging"].any()) else None
        _check_divergences(checks, stats_["diverging"], beta, idata.attrs.get("method"), neck)
    if stats_ is not None and "log_weight" in stats_ and stats_["log_weight"].ndim == 2:
        lw = stats_["log_weight"].transpose("chain", "draw").values
        # Continuous tempering's weights are probabilities, p(beta = 1 | x) <= 1.
        _check_weights(checks, lw, bounded="log_base_weight" in stats_)
        if "log_base_weight" in stats_:
            lw0 = stats_["log_base_weight"].transpose("chain", "draw").values
            if "base" in idata.children:
                _check_base_moments(checks, idata, lw0)
                if "mode_point" in idata["base"]:
                    _check_modes(checks, idata)
                if "funnel_mass" in idata["base"]:
                    _check_funnels(checks, idata["base"], idata.attrs.get("funnel_correction"))
            if lw.shape[0] > 1:
                _check_chain_agreement(checks, lw, lw0)
    return Diagnosis(
        checks=pd.DataFrame.from_dict(checks.rows, orient="index"),
        problems=checks.problems,
        draws_only=checks.draws_only,
        improper=checks.improper,
    )


@dataclass
class _Checks:
    """The table of checks and the list of problems that :func:`diagnose` fills."""

    rows: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    draws_only: list[str] = field(default_factory=list)
    improper: list[str] = field(default_factory=list)

    def add(self, check: Check, value, limit, ok, meaning) -> None:
        """The row of ``check``: its value, the limit it is held to, whether it passed, and what
        it measures."""
        self.rows[check.name] = {"value": value, "limit": limit, "ok": bool(ok), "meaning": meaning}

    def fail(self, check: Check, problem: str, *, evidence: bool | None = None) -> None:
        """A problem found by ``check``: one of the draws alone (``draws_only``) where it does
        not bear on the evidence, by the registry or by ``evidence`` (a funnel's neck whose mass
        the estimate takes from the profile)."""
        self.problems.append(problem)
        if not (check.evidence if evidence is None else evidence):
            self.draws_only.append(problem)


def _check_improper(checks: _Checks, attrs) -> None:
    improper = (
        f"The model has improper priors ({attrs['improper_prior']}): it has no marginal "
        "likelihood, and the weights bridge to a density that does not integrate to one. Give "
        "those variables proper priors to compare models by evidence; "
        "pmt.log_normalizing_constant gives the integral of the joint density."
    )
    checks.problems.append(improper)
    checks.improper.append(improper)
    if "flat_directions" not in attrs:
        return
    flat = int(attrs["flat_directions"])
    checks.add(
        FLAT_DIRECTIONS, flat, "0", flat == 0,
        f"coordinate directions in which the log density has not fallen {DECAY_RADIUS:.0e} "
        "draw widths out",
    )
    if flat:
        checks.fail(
            FLAT_DIRECTIONS,
            f"The log density does not fall in {flat} coordinate directions (10^4 of the draws' "
            "widths out, its profile is within log(10^4) of its value at their mean): the "
            "integral of the joint density is infinite, so the model has no normalizing "
            "constant and any estimate of it is arbitrary. Bound the flat variables with a "
            "proper prior or a potential."
        )


def _check_beyond(checks: _Checks, beyond: Beyond, attrs) -> None:
    share, se = beyond.share, beyond.se
    # the check's own log Z above the run's: mass the run missed, inside the draws' reach too
    gap = beyond.log_z - float(attrs["log_marginal_likelihood"])
    gap_se = float(np.hypot(beyond.log_z_se, attrs["log_marginal_likelihood_se"]))
    # an optimum's region the draws under-represent (a spike inside the slab, sampled rarely)
    near = beyond.near_optimum
    above = gap > 3 * gap_se
    missed = max(share, -np.expm1(-gap) if above else 0.0, near)
    # what the missed mass takes off log Z: the check's own log Z above the run's, where it is
    bias = gap if above else -np.log1p(-min(missed, 0.99))
    ok = (missed < BEYOND_LIMIT or (share <= 3 * se and gap <= 3 * gap_se and near == 0.0)
          or bias <= float(attrs["log_marginal_likelihood_se"]))
    checks.add(
        MASS_BEYOND_DRAWS, missed, f"< {BEYOND_LIMIT}, 3 SE or a bias within the SE", ok,
        "share of the mass the draws never reached, seen by a proposal at 1 to 64 times the "
        "base's widths",
    )
    if not ok:
        checks.fail(
            MASS_BEYOND_DRAWS,
            f"About {missed:.1%} of the target's mass lies where no draw of the run went, at "
            "other scales than its base's (a broad slab under a narrow spike, say): an "
            "importance sampler at 1 to 64 times the base's widths finds it (log Z "
            f"{beyond.log_z:.3f} ± {beyond.log_z_se:.3f}, "
            f"{share:.1%} ± {se:.1%} of it beyond every draw, {near:.1%} more about an optimum "
            "than the draws hold there). The log marginal likelihood is "
            f"too low by about {bias:.2f} nats and the posterior "
            "lacks that mass, while the standard error does not show it. Pass a base that "
            "covers those scales (pmt.Base.from_moments with their covariance)."
        )
    _check_near_optima(checks, near, reported=not ok)


def _check_near_optima(checks: _Checks, near: float, reported: bool) -> None:
    """The mass about an optimum that the weighted draws under-represent: a problem for the
    posterior (its share of that region is off), for the evidence only through
    ``mass_beyond_draws``."""
    checks.add(
        MASS_NEAR_OPTIMA, near, "0", near == 0.0,
        "share of the mass within an optimum's Laplace ellipsoid that the weighted draws lack "
        "(where they hold less than half of it)",
    )
    if near > 0.0 and not reported:
        problem = (
            f"About {near:.1%} of the target's mass lies about one of the optima (within its "
            "Laplace ellipsoid, by an importance sampler over the run's log Z) that the "
            "weighted draws give less than half of: the posterior's share of that region, a "
            "mode's probability say, is off by about as much. The log marginal likelihood is "
            "not affected beyond its standard error. Longer runs (draws) visit the modes more "
            "evenly."
        )
        checks.fail(MASS_NEAR_OPTIMA, problem)


def _check_temperature_ends(checks: _Checks, beta: np.ndarray, near: float) -> None:
    low, high = float(np.mean(beta < near)), float(np.mean(beta > 1 - near))
    trips = _round_trips(beta, near)
    checks.add(BETA_NEAR_0, low, "> 0", low > 0, f"fraction of draws with beta < {near}")
    checks.add(BETA_NEAR_1, high, "> 0", high > 0, f"fraction of draws with beta > {1 - near}")
    checks.add(
        MIN_END_TO_END_PASSAGES,
        int(trips.min()),
        "> 0",
        trips.min() > 0,
        "fewest passages between the two ends of beta in one chain",
    )
    if low == 0:
        checks.fail(
            BETA_NEAR_0,
            "The inverse temperature never came near 0: the chains never visited the base, "
            "so the log marginal likelihood is extrapolated. log_zeta is probably far below "
            "log Z, or the base far from the target: use bootstrap rounds or a better base."
        )
    if high == 0:
        checks.fail(
            BETA_NEAR_1,
            "The inverse temperature never came near 1: the chains never visited the "
            "target, so the weights rest on base draws. log_zeta is probably far above "
            "log Z: use bootstrap rounds or a better log_zeta."
        )
    if low > 0 and high > 0 and trips.min() == 0:
        checks.fail(
            MIN_END_TO_END_PASSAGES,
            "A chain never moved between the base and the target ends of beta: it mixes "
            "poorly in the temperature, so the chains' estimates are not independent views."
        )


def _corrected_necks(idata: DataTree) -> np.ndarray | None:
    """``(chain, draw)``: whether each draw lies beyond the edge of a funnel whose mass there the
    log marginal likelihood takes from the profile (``funnel_correction``); None without one."""
    if "funnel_correction" not in idata.attrs or "base" not in idata.children:
        return None
    base = idata["base"]
    if "funnel_inner" not in base or "funnel_tail_ratio" not in base:
        return None
    corrected = np.isfinite(base["funnel_tail_ratio"].values)
    if not corrected.any():
        return None
    x = flat_draws_from_result(idata)
    neck = np.zeros(x.shape[:2], dtype=bool)
    for k, edge, inner in zip(
        base["funnel_index"].values[corrected],
        base["funnel_edge"].values[corrected],
        base["funnel_inner"].values[corrected],
        strict=True,
    ):
        neck |= beyond_edge(x[..., int(k)], edge, inner)
    return neck


def _check_divergences(
    checks: _Checks, diverging, beta: np.ndarray | None, method=None, neck=None
) -> None:
    diverging = diverging.transpose("chain", "draw").values.astype(bool)
    n_div = int(diverging.sum())
    checks.add(DIVERGENCES, n_div, "0", n_div == 0, "divergent transitions after tuning")
    if n_div and neck is not None and neck.shape == diverging.shape and neck[diverging].all():
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
        checks.fail(DIVERGENCES, problem, evidence=False)
        return
    # An AIS draw is the end of a run of one transition per rung; it is flagged when any was.
    what = "runs had a divergent transition" if method == "ais" else "transitions diverged"
    if n_div and beta is None:  # no inverse temperature per draw (AIS, ergodic inference, ...)
        checks.fail(
            DIVERGENCES,
            f"{n_div} of {diverging.size} {what}: the sampler could not enter part "
            "of the density it samples, so the draws miss its mass there (and a log marginal "
            "likelihood, where the method gives one, comes out low, with a standard error that "
            "does not show it). Reparameterise the model (centred or non-centred groups) as you "
            "would for pm.sample, or take smaller steps (a higher target_accept)."
        )
    elif n_div:
        checks.fail(
            DIVERGENCES,
            f"{n_div} of {diverging.size} transitions diverged, at a median beta of "
            f"{np.median(beta[diverging]):.2f}: the sampler could not "
            "enter part of the tempered density, so the estimates miss its mass there (the log "
            "marginal likelihood comes out low, with a standard error that does not show "
            "it). Divergences near beta = 1 come from the model's own geometry: "
            "reparameterise it (centred or non-centred groups) as you would for pm.sample. "
            "Elsewhere, raise target_accept."
        )


def _check_weights(checks: _Checks, lw: np.ndarray, bounded: bool = False) -> None:
    ess = kish_ess(lw)
    khat = psis_khat(lw)  # the tail index of the weights
    checks.add(ESS_WEIGHTS, ess, "-", True, "Kish effective sample size of the weights")
    # Weights bounded above have every moment finite, so their tail cannot be heavy: a k-hat
    # beyond the limit there is the generalised Pareto fit meeting the bound. It is shown, not
    # held against the run.
    ok = bounded or not khat > KHAT_LIMIT
    meaning = "Pareto k-hat of weights" + (" (bounded by 1: not a check)" if bounded else "")
    checks.add(PARETO_KHAT, khat, f"<= {KHAT_LIMIT}", ok, meaning)
    if not ok:
        checks.fail(
            PARETO_KHAT,
            f"The importance weights are heavy-tailed (Pareto k-hat {khat:.2f} > "
            f"{KHAT_LIMIT}; Kish ESS {ess:.0f} of {lw.size} draws): the largest weights may "
            "dominate the weighted estimates, whose standard errors are then unreliable. "
            "With a Kish ESS near the number of draws the tail is heavy only relative to "
            "very uniform weights; with a small one the base is far from the target."
        )


def _check_base_moments(checks: _Checks, idata: DataTree, lw0: np.ndarray) -> None:
    z = _base_moment_z(idata, lw0)
    limit = float(stats.norm.isf(FAMILY_P / (2 * z.size)))
    max_z = float(np.nanmax(np.abs(z)))
    checks.add(
        BASE_MOMENTS,
        max_z,
        f"<= {limit:.2f}",
        max_z <= limit,
        "eq. (22): base mean and variance from beta->0 weighted draws, in MCSE",
    )
    if max_z > limit:
        checks.fail(
            BASE_MOMENTS,
            "The draws weighted towards beta = 0 do not reproduce the base's mean and "
            f"variance (max |z| = {max_z:.1f}): the chains have not converged to the "
            "tempered joint density, so its estimates are biased. Run longer chains."
        )


def missed_modes(idata: DataTree) -> tuple[np.ndarray, float]:
    """The optima of the base's mode search that a continuous tempering run never came near
    (:func:`missed_optima` with the base's standard deviations and the importance weights).

    Returns
    -------
    missed : ndarray of bool, shape (mode,)
    mass : float
        The Laplace share of the missed optima.
    """
    points = idata["base"]["mode_point"].values
    lw = idata["sample_stats"]["log_weight"].transpose("chain", "draw").values
    flat = flat_draws_from_result(idata).reshape(-1, points.shape[1])
    return missed_optima(
        points, idata["base"]["mode_log_mass"].values, flat,
        np.sqrt(idata["base"]["variance"].values), lw.ravel(),
    )


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
    dist2 = (z**2).sum(1)[:, None] - 2 * z @ centres.T + (centres**2).sum(1)[None, :]
    w = np.exp(lw - lw.max())
    share = np.bincount(np.argmin(dist2, axis=1), weights=w / w.sum(), minlength=len(centres))
    expected = np.exp(log_mass - np.logaddexp.reduce(log_mass))
    missed = (expected * kish_ess(lw) >= 10) & (share < 0.1 * expected)
    return missed, float(expected[missed].sum())


def _check_modes(checks: _Checks, idata: DataTree) -> None:
    missed, missed_mass = missed_modes(idata)
    points = idata["base"]["mode_point"].values
    if "mode_hits" in idata["base"]:
        hits = idata["base"]["mode_hits"].values
        unseen = unseen_share(hits)
        checks.add(
            UNSEEN_OPTIMA, unseen, f"<= {UNSEEN_OPTIMA_LIMIT}", unseen <= UNSEEN_OPTIMA_LIMIT,
            "Good-Turing chance that another run of the base's mode search finds a new optimum",
        )
        if unseen > UNSEEN_OPTIMA_LIMIT:
            checks.fail(
                UNSEEN_OPTIMA,
                f"The base's mode search is far from complete: {int(np.sum(hits == 1))} of its "
                f"{int(hits.sum())} converged runs reached a local maximum that no other run "
                f"reached ({len(hits)} maxima in all), so by the Good-Turing estimate another "
                f"run would find a new one with probability about {unseen:.2f}. The target has "
                "more modes than were found, and the run can miss their mass without its "
                "standard error or the other checks showing it: the log marginal likelihood "
                "may be too low (measured on 22-unit Boltzmann machine relaxations, whose "
                "searches reached a new maximum with 29 to 32 of their 32 runs: runs passing "
                "every other check came out 0.47 to 1.3 nats, 4.9 to 17.4 standard errors, "
                "low). Treat it as a lower bound, or check it with an independent method "
                "(pmt.sample_ais, pmt.sample_simulated_tempering)."
            )
    checks.add(
        MISSED_MODE_MASS,
        missed_mass,
        f"< {MISSED_MASS_LIMIT}",
        missed_mass < MISSED_MASS_LIMIT,
        "Laplace share of the base's mode-search optima that the weighted draws never reached",
    )
    if missed_mass >= MISSED_MASS_LIMIT:
        checks.fail(
            MISSED_MODE_MASS,
            f"The weighted draws never came near {int(missed.sum())} of the {len(points)} "
            "local maxima that the base's mode search found (optimisations from prior draws), "
            f"which hold about {missed_mass:.0%} of their Laplace mass: the run probably "
            "missed a mode, so the log marginal likelihood is too low by about "
            f"{-np.log1p(-min(missed_mass, 0.999)):.2f} nats or more and its standard error "
            "does not show it. Pass a base that covers every mode (fit_base(method="
            "'mixture', n_fits=...)), or run longer."
        )


def _check_funnels(checks: _Checks, base, correction: float | None) -> None:
    mass = base["funnel_mass"].values
    # Each estimate rests on the draws' quartiles of the spike's coordinate, whose Monte Carlo
    # error (funnel_mass_se) sets how far above 0 it may be by chance.
    limits = np.maximum(FUNNEL_MASS_LIMIT, FUNNEL_Z * base["funnel_mass_se"].values)
    i = int(np.argmax(mass - limits))
    limit = float(limits[i])
    checks.add(
        FUNNEL_MASS,
        float(mass[i]),
        f"< {limit:.3g}",
        mass[i] < limit,
        "share of the mass near a spike of the log density (a funnel's neck) that the weighted "
        "draws never reached, from a profile Laplace approximation of the target",
    )
    if mass[i] >= limit:
        name = str(base["funnel_variable"].values[i])
        edge = float(base["funnel_edge"].values[i])
        where = (
            f"Beyond {name} = {edge:.3g}, towards the spike that the base's mode search climbed "
            f"there, the target has about {mass[i]:.0%} of the draws' mass more than they hold (a "
            "profile Laplace approximation along it, which reproduces the draws where they "
            "are): the neck of a funnel that the sampler did not enter. "
        )
        fix = "Non-centre that group, as for pm.sample (x = mu + sigma * z with z ~ N(0, 1))."
        ratio = base["funnel_tail_ratio"].values[i] if "funnel_tail_ratio" in base else np.nan
        corrected = correction is not None and np.isfinite(ratio)
        if not corrected:
            checks.fail(
                FUNNEL_MASS,
                where + "The log marginal likelihood is then too low by about "
                f"{np.log1p(min(mass[i], 1e3)):.2f} nats and its standard error does not show "
                "it (measured on the centred eight schools: up to 0.59 nats low with no "
                "divergence). " + fix
            )
            return
        problem = (
            where + "The draws and every summary of them lack that mass (the group's scale "
            "comes out too large). The log marginal likelihood includes it, from the profile "
            f"({float(correction):+.2f} nats, attrs['funnel_correction']). " + fix
        )
        checks.fail(FUNNEL_MASS, problem, evidence=False)


def precision_goal(target_se: float, log_z: float) -> float:
    """The standard error a run asked for ``target_se`` can reach: ``target_se``, or the
    rounding floor of an estimate ``log_z`` where that is larger (no longer chain lowers it)."""
    return max(float(target_se), numerical_floor(log_z))


def _check_precision(checks: _Checks, se: float, target_se: float) -> None:
    checks.add(
        STANDARD_ERROR, se, f"<= {target_se:g}", se <= target_se,
        "standard error of log Z against the target_se the run was asked for",
    )
    if se > target_se:
        checks.fail(
            STANDARD_ERROR,
            f"The standard error of log Z ({se:.3g}) is above target_se ({target_se:g}) after "
            "the extensions allowed: run longer chains (draws) or allow more extensions "
            "(max_extensions, max_time), or pass a larger target_se if that precision is enough."
        )


def _check_chain_agreement(checks: _Checks, lw: np.ndarray, lw0: np.ndarray) -> None:
    p = _chain_agreement(lw, lw0)
    checks.add(
        CHAIN_AGREEMENT,
        p,
        f">= {FAMILY_P}",
        p >= FAMILY_P,
        "per-chain log Z estimates agree within their standard errors",
    )
    if p < FAMILY_P:
        checks.fail(
            CHAIN_AGREEMENT,
            "The chains' log marginal likelihood estimates disagree beyond their "
            f"standard errors (chi-square p = {p:.1e}): some chains explored other "
            "modes or temperatures than others. Run longer chains or improve the base."
        )


def _base_moment_z(idata: DataTree, lw0: np.ndarray) -> np.ndarray:
    base = idata["base"]
    x = flat_draws_from_result(idata)
    mean = base["mean"].values
    var = base["variance"].values
    est_mean, se_mean = weighted_mean(x, lw0)
    est_var, se_var = weighted_mean((x - mean) ** 2, lw0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.concatenate([(est_mean - mean) / se_mean, (est_var - var) / se_var])


def _chain_agreement(lw1: np.ndarray, lw0: np.ndarray) -> float:
    est, se = np.array([log_ratio_of_means(a, b) for a, b in zip(lw1, lw0, strict=True)]).T
    if np.ptp(est) <= 1e-9 * (1.0 + np.max(np.abs(est))):  # agree to rounding (an exact base)
        return 1.0
    if np.any(~(se > 0)):
        return float("nan")
    w = 1 / se**2
    pooled = np.sum(w * est) / np.sum(w)
    chi2 = float(np.sum(w * (est - pooled) ** 2))
    return float(stats.chi2.sf(chi2, df=len(est) - 1))
