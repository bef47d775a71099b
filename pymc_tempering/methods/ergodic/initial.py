"""The initial distribution ``P_0`` of the ergodic chain and the entropy bound ``h`` of eq. (5).

Hamiltonian ergodic inference (the ergodic-inference paper) starts its ``T``-step HMC chain from
a factorised Gaussian ``P_0`` and keeps ``H(P_0) > h`` (eq. 5). This module builds both:

- :func:`initial_and_bound`: ``P_0``'s mean and sds from ``initial`` (``"auto"``, ``"prior"`` or
  a :class:`~pymc_tempering.Base`) and the bound ``h``, checked against eq. (5);
- :func:`auto_initial`: ``initial="auto"``, from the optima of the library's mode search
  (:mod:`pymc_tempering.bases`), each optimum's Laplace Gaussian capped at
  :func:`profile_width` half-widths, and the entropy bound of their mixture
  (:func:`mixture_entropy_bound`);
- :func:`calibrate_scale`: after training, the common factor on ``P_0``'s sds that zeroes the
  Stein gap of ``P_T`` (:func:`calibrate_log_scale`, Brent's method on common random numbers).

The chain itself, its objective and its tuning are in :mod:`pymc_tempering.kernels.ergodic`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq

from pymc_tempering.bases import (
    N_MODE_STARTS,
    Base,
    MixtureBase,
    Modes,
    find_modes,
    fit_base,
    fit_base_to_target,
    laplace_cov,
)
from pymc_tempering.contract import DivergenceError, warn
from pymc_tempering.kernels.ergodic import gaussian_entropy, mean_and_se, stein_terms
from pymc_tempering.target import Target

__all__ = [
    "AUTO_WIDEN",
    "CALIBRATION_K",
    "PROFILE_FACTOR",
    "AutoInitial",
    "auto_initial",
    "calibrate_log_scale",
    "calibrate_scale",
    "initial_and_bound",
    "mixture_entropy_bound",
    "profile_width",
]


# ------------------------------------------------------------------------------ NumPy helpers
#: ``initial="auto"`` caps each marginal sd of a mode's Laplace Gaussian at this many profile
#: half-widths (:func:`profile_width`): a zero curvature along a ridge (a ring-shaped target
#: at a lobe) would otherwise make ``P_0`` arbitrarily wide and the chain accept nothing.
PROFILE_FACTOR = 2.0


def profile_width(logp, mode, guess, drop: float = 0.5, n_iter: int = 60) -> np.ndarray:
    """Per coordinate, the distance from ``mode`` along the axis at which ``log pi*`` has dropped
    by ``drop`` (0.5: one standard deviation of a Gaussian's conditional), mean of the two
    directions. Found for all coordinates at once by doubling from ``guess`` and bisecting in
    ``log t`` (one batched call of ``d`` points per direction and iteration); a direction that
    never drops counts as infinitely wide.

    Parameters
    ----------
    logp : callable
        ``xs (n, d) -> log pi* (n,)``, batched.
    mode : array_like, shape (d,)
    guess : array_like, shape (d,)
        First trial distances (non-finite or non-positive entries start at 1).
    drop : float
    n_iter : int

    Returns
    -------
    ndarray, shape (d,)
    """
    mode = np.asarray(mode, dtype=float)
    d = mode.size
    lp0 = float(np.asarray(logp(mode[None]), dtype=float)[0])
    widths = []
    for sign in (1.0, -1.0):
        lo, hi = np.zeros(d), np.where(np.isfinite(guess) & (guess > 0), guess, 1.0)
        found = np.zeros(d, bool)
        for _ in range(n_iter):
            t = np.where(found, np.sqrt(np.maximum(lo, 1e-300) * hi), hi)
            t = np.where(found & (lo == 0), 0.5 * hi, t)
            points = mode + sign * np.diag(t)
            with np.errstate(all="ignore"):
                lp = np.asarray(logp(points), dtype=float)
            dropped = ~np.isfinite(lp) | (lp0 - lp >= drop)
            hi = np.where(dropped, t, hi)
            lo = np.where(found & ~dropped, t, lo)
            hi = np.where(~found & ~dropped, 2.0 * t, hi)
            found |= dropped
        widths.append(np.where(found, hi, np.inf))
    return 0.5 * (widths[0] + widths[1])


def mixture_entropy_bound(weights, stds) -> float:
    """An upper bound on the entropy of a mixture of factorised Gaussians.

    ``sum_k w_k H(N(m_k, diag(s_k^2))) + H(w)`` (the entropy of a mixture is at most the mean
    entropy of its components plus the entropy of the component label); for one component it
    is that Gaussian's entropy.

    Parameters
    ----------
    weights : array_like, shape (k,)
        Component weights (normalised here).
    stds : array_like, shape (k, d)
        Each component's standard deviations.
    """
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    entropies = [gaussian_entropy(np.asarray(s, dtype=float) ** 2) for s in stds]
    return float(w @ entropies - np.sum(w * np.log(w)))


# ------------------------------------------------------------------------------ P_0 and h
#: ``initial="auto"``: P_0's sds are those of the moment-matched Gaussian of the Laplace mixture
#: over the optima of the mode search (for one optimum, its Laplace sds) times this.
AUTO_WIDEN = 2.0


class AutoInitial(NamedTuple):
    """``initial="auto"``: ``P_0``'s centre and sds before widening, the bound ``h``, the
    number of optima the mode search found and the root-mean-square of their Laplace sds
    (``local_std``, the scale of one mode: where the leapfrog's units come from)."""

    mean: np.ndarray
    std: np.ndarray
    entropy_bound: float
    n_modes: int
    local_std: np.ndarray
    source: str = "modes"


def _mode_search(target: Target, seed) -> Modes | None:
    """The optima of the project's mode search (:func:`~pymc_tempering.find_modes`) for a
    model with an improper prior (``pm.Flat``), which cannot be drawn from: from
    ``N_MODE_STARTS`` points jittered around the model's initial point by ``U(-1, 1)``, as
    ``pm.sample`` jitters its chains' starts. ``None`` where no run found an optimum.
    """
    rng = np.random.default_rng(seed)
    start = target.ravel(target.model.initial_point())
    starts = start + rng.uniform(-1.0, 1.0, size=(N_MODE_STARTS, target.ndim))
    return find_modes(target, starts=starts)


def _components(mixture: MixtureBase):
    """A mixture base's Gaussian components as (means, marginal sds, weights)."""
    means = np.array([c.mean for c in mixture.components], dtype=float)
    stds = np.array([c.std for c in mixture.components], dtype=float)
    return means, stds, np.asarray(mixture.weights, dtype=float)


def _library_base(target: Target, method: str, seed) -> MixtureBase:
    """``fit_base(method=method)`` (``"laplace"`` or ``"mixture"``, both a
    :class:`MixtureBase`) for ``initial="auto"``, its failure said in its terms."""
    try:
        return fit_base_to_target(target, method, random_seed=seed, progressbar=False)
    except ValueError as err:
        raise ValueError(
            "initial='auto': the mode search found no maximum of the log density that "
            "describes it (no optimisation converged to a finite maximum, or the optima's "
            "Laplace Gaussians failed the base's importance-sampling check) and the ADVI fits "
            f"that replace them failed ({err}). Pass initial=pmt.Base(...) (a P_0 wider than "
            "the posterior) or initial='prior'."
        ) from err


def auto_initial(target: Target, seed=None) -> AutoInitial:
    """``initial="auto"``: ``P_0`` from the optima of the mode search, ``h`` from their mixture.

    The optima are those of the library's base (``fit_base(method="laplace")``: a mode search
    from prior draws, whose optima's Laplace mixture must pass the tempering base's
    importance-sampling check); for a model with an improper prior, of a search from jittered
    starts (:func:`_mode_search`). Each optimum gets its Laplace Gaussian (the inverse of minus
    the Hessian, with no prior floor: a flat direction is bounded by the cap instead), its
    marginal sds capped at ``PROFILE_FACTOR`` (2) profile half-widths along each axis
    (:func:`profile_width`). ``P_0``'s centre and sds are
    those of :meth:`MixtureBase.gaussian <pymc_tempering.MixtureBase.gaussian>` of the mixture
    of these (factorised) Gaussians weighted by the optima's Laplace masses: for one optimum,
    its mode and Laplace sds; for several, a Gaussian whose diagonal covers every optimum. The
    bound ``h`` is :func:`mixture_entropy_bound` of that
    mixture, an upper estimate of the posterior's entropy (for one optimum, the entropy of its
    factorised Laplace Gaussian). Where the search finds no optimum (a centred hierarchical
    model's funnel, whose density is unbounded at its neck; a flat direction), or (with proper
    priors) their Laplace mixture fails the check (a joint mode far from the mass, as on a
    non-centred hierarchical model), the components of the base's ADVI mixture (fits started
    where the search's runs ended and from prior draws; their marginal sds) take the optima's
    place.
    """
    if target.improper_variables:
        modes = _mode_search(target, seed)
        base = _library_base(target, "mixture", seed) if modes is None else None
    else:
        base = _library_base(target, "laplace", seed)
        laplace = all(c.method == "laplace" for c in base.components)
        modes = base.modes if laplace else None
    if modes is None:
        return _initial_from_components(*_components(base))._replace(source="advi")
    logp = target.logp
    stds = []
    for x, cov in zip(modes.points, modes.cov, strict=True):
        # modes.cov is floored at the prior's precision; redo it with a negligible floor (the
        # largest curvature times 1e-12) so the cap, not the prior, bounds a flat direction
        floor = 1e-12 / float(np.linalg.eigvalsh(cov).min())
        unfloored = laplace_cov(target, x, floor)
        std = np.sqrt(np.diag(unfloored[0])) if unfloored is not None else np.sqrt(np.diag(cov))
        std = np.fmin(std, PROFILE_FACTOR * profile_width(logp, x, std))
        stds.append(std)
    stds = np.array(stds)
    if not (np.all(np.isfinite(stds)) and np.all(stds > 0)):
        raise ValueError(
            "initial='auto': the Laplace Gaussians of the optima found have non-finite or zero "
            "scales. Pass initial=pmt.Base(...) (a P_0 wider than the posterior) or "
            "initial='prior'."
        )
    return _initial_from_components(modes.points, stds, modes.probabilities)


def _initial_from_components(points, stds, masses) -> AutoInitial:
    """``P_0`` and ``h`` from factorised Gaussians (``points``, ``stds``) of masses ``masses``:
    the moment-matched Gaussian of their mixture and its entropy bound (see
    :func:`auto_initial`)."""
    weights = np.maximum(masses, 1e-3 * np.max(masses))
    mixture = MixtureBase(
        components=tuple(Base(mean=x, cov=s**2) for x, s in zip(points, stds, strict=True)),
        weights=weights,
    )
    gaussian = mixture.gaussian()
    w = mixture.weights / mixture.weights.sum()
    return AutoInitial(
        np.array(gaussian.mean, dtype=float),
        np.array(gaussian.std, dtype=float),
        mixture_entropy_bound(w, stds),
        len(points),
        np.sqrt(w @ stds**2),
    )


def _initial_gaussian(target: Target, initial, prior_base: Base | None, auto=None):
    """Mean and sds of the factorised ``P_0`` from ``initial`` ("auto", "prior" or a Base)."""
    if isinstance(initial, Base):
        if initial.ndim != target.ndim:
            raise ValueError(
                f"The initial Base has dimension {initial.ndim}; the model's flat unconstrained "
                f"space has {target.ndim}."
            )
        return np.array(initial.mean, dtype=float), np.array(initial.std, dtype=float)
    if isinstance(initial, str) and initial == "prior":
        return np.array(prior_base.mean, dtype=float), np.array(prior_base.std, dtype=float)
    if isinstance(initial, str) and initial == "auto":
        return auto.mean.copy(), AUTO_WIDEN * auto.std
    raise ValueError(
        f"initial must be 'auto', 'prior' or a pymc_tempering.Base, got {initial!r}."
    )


def initial_and_bound(model, target, initial, entropy_lower_bound, n_prior_draws, seed):
    """``P_0``'s mean and sds, the bound ``h`` of eq. (5), where it came from and (for
    ``initial="auto"``) the number of optima found; checks eq. (5)."""
    prior_base = auto = None
    if isinstance(initial, str) and initial == "auto":
        auto = auto_initial(target, seed)
    if (isinstance(initial, str) and initial == "prior") or (
        entropy_lower_bound is None and auto is None
    ):
        try:
            prior_base = fit_base(model, method="prior", n=n_prior_draws, random_seed=seed)
        except ValueError as err:
            raise ValueError(
                "The prior cannot be drawn from on the unconstrained space, so neither "
                "initial='prior' nor the default entropy_lower_bound is available. Pass "
                "initial=pmt.Base(...) and an entropy_lower_bound (an upper estimate of the "
                "posterior's entropy on the unconstrained space)."
            ) from err
    mean0, std0 = _initial_gaussian(target, initial, prior_base, auto)
    if entropy_lower_bound is None and auto is not None:
        h, source = auto.entropy_bound, "laplace_entropy"
    elif entropy_lower_bound is None:
        h, source = gaussian_entropy(prior_base.cov), "prior_gaussian_entropy"
    else:
        h, source = float(entropy_lower_bound), "user"
    if not np.isfinite(h):
        raise ValueError(
            f"The entropy lower bound is {h}; pass a finite entropy_lower_bound (the prior's "
            "unconstrained entropy could not be estimated)."
        )
    h0 = gaussian_entropy(std0**2)
    if not h0 >= h - 1e-12 * max(1.0, abs(h)):
        raise ValueError(
            f"The initial distribution P_0 has entropy {h0:.4g}, below the bound "
            f"h = {h:.4g} of eq. (5) ({source}). Ergodic inference needs a P_0 wider than "
            "the target: widen `initial` (scale its standard deviations by at least "
            f"{np.exp((h - h0) / target.ndim):.3g}) or lower `entropy_lower_bound`."
        )
    return mean0, std0, float(h), source, auto


# ------------------------------------------------------------------------------ calibration
def calibrate_log_scale(gap: Callable[[float], float], lowest: float, highest: float = 5.0):
    """The log factor ``log c >= lowest`` on ``P_0``'s sds that zeroes the Stein gap of ``P_T``.

    ``gap(log_c)`` is the gap of a fixed set of chains (common random numbers) started from
    ``P_0`` widened by ``c``; a wider ``P_0`` gives a lower gap. If the gap is not positive at
    ``lowest`` (the entropy bound), ``lowest`` is returned; otherwise the root is bracketed by
    steps of 0.5 in ``log c`` and found by Brent's method (``xtol=1e-3``).

    Raises
    ------
    ValueError
        If the gap stays positive beyond ``highest``.
    """
    if gap(lowest) > 0:
        high = max(lowest, 0.0) + 0.25
        while gap(high) > 0:
            if high > highest:
                raise ValueError(
                    "Calibrating the scale of P_0: the last state of the tuned chain stays too "
                    f"concentrated even with P_0 {np.exp(high):.3g} times wider. Use more "
                    "n_iterations, a longer chain (n_steps) or tune_initial=True."
                )
            lowest, high = high, high + 0.5
        lowest = brentq(gap, lowest, high, xtol=1e-3)
    return lowest


#: Standard errors of the Stein gap beyond which the calibration warns (or, when the gap never
#: changes sign, gives up).
CALIBRATION_K = 4.0


def calibrate_scale(
    last_states: Callable, mean, std, h: float, n: int, seed
) -> tuple[float, float]:
    """The factor on ``P_0``'s standard deviations that zeroes the Stein gap of ``P_T``.

    Returns the factor and the Monte Carlo standard error of the gap at it (the precision of
    the calibration). ``last_states(x0, rng) -> (x_T, grad log pi*(x_T))`` runs the tuned
    chain from the start states ``x0`` (n, d), which stays fixed: the gap of ``n`` chains is a
    function of the factor ``c`` alone when every evaluation reuses the same noise (common
    random numbers), and :func:`calibrate_log_scale` finds its root in ``log c``, never taking
    ``H(P_0) = H(N(mean, diag(std^2)))`` below the bound ``h``. The gap need not fall as
    ``P_0`` widens (where the chain forgets its start it is flat); when it stays positive for
    every factor tried but is within ``CALIBRATION_K`` standard errors of zero at ``P_0``'s own
    scale (or at the bound), that scale is kept.
    """
    d = len(mean)
    rng = np.random.default_rng(seed)
    eps0 = rng.standard_normal((n, d))
    chain_seed = int(rng.integers(2**63))
    h0 = gaussian_entropy(std**2)
    lowest = (h - h0) / d  # log c at the bound (<= 0)

    @functools.cache  # brentq re-evaluates the bracket ends; each evaluation runs n chains
    def terms(log_c):
        x0 = mean + np.exp(log_c) * std * eps0
        return stein_terms(*last_states(x0, np.random.default_rng(chain_seed)))

    def gap(log_c):
        value = float(np.mean(terms(float(log_c))))
        if not np.isfinite(value):
            raise DivergenceError(
                f"Ergodic inference: calibrating the scale of P_0, the Stein gap became {value} "
                f"with P_0 {np.exp(log_c):.3g} times wider (non-finite log density or gradient "
                "at the chains' last states); use tune_initial=True or calibration_draws=0."
            )
        return value

    try:
        log_c = calibrate_log_scale(gap, lowest)
    except ValueError:
        # The gap stayed positive however wide P_0 was made. It need not fall as P_0 widens:
        # on the mixture of Gaussians target P_T does not depend on P_0's scale (the chain
        # forgets its start), and on the ring chains from far away end inside the ring, which
        # raises the gap. Where the gap at P_0's own scale (or at the bound) is within K
        # standard errors of zero, keep that scale; otherwise P_T is too concentrated and the
        # error stands.
        log_c = max(lowest, 0.0)
        value, value_se = mean_and_se(terms(log_c))
        if abs(value) > CALIBRATION_K * value_se:
            raise
    final, final_se = mean_and_se(terms(float(log_c)))
    if abs(final) > CALIBRATION_K * final_se:
        warn(
            f"Ergodic inference: after the Stein calibration the Stein gap of P_T is "
            f"{final:.3g} +- {final_se:.2g} (zero for the target; negative: too dispersed) with "
            "P_0 at its entropy bound: P_T does not match the posterior's spread, e.g. because "
            "P_0 covers one mode of a multimodal posterior or the chain is too short. Pass a "
            "wider initial=pmt.Base(...) and a lower entropy_lower_bound, or more n_steps."
        )
    return float(np.exp(log_c)), final_se

