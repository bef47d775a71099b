"""Mass beyond a run's draws, at scales its base never reached.

A base fitted at the optima of the mode search has their curvature. A target made of a narrow
spike on a broad slab around the same point (a phase change, Skilling 2006) has one optimum,
whose Laplace Gaussian is the spike's: every chain then stays in the spike at every
temperature, the chains agree, and the standard error measures the spike alone while the slab
holds any share of the mass.

This check looks at wider scales on its own. Its proposal is a mixture of the base's Gaussian
and the Laplace Gaussians of the (up to ``MAX_CENTRES - 1`` heaviest) optima, each with its
covariance scaled by ``SCALE_FACTOR^2k`` for ``k = 0 .. N_SCALES - 1``, all with equal weight:
``Z_out = E_q[p(x) 1{x beyond the draws} / q(x)]`` over ``N_DRAWS`` draws is the mass that lies
beyond every draw of the run (further, in the Mahalanobis distance of the run's weighted mean
and covariance, than its farthest draw at any temperature), with its standard error. Measured
on spike-and-slab targets in 5 to 20 dimensions, the whole proposal's estimate of log Z came
within about 2 of its standard errors (0.03 to 0.09 nats) of the truth at every spike share
from 1% to 99%, where the run's was 0.01 to 4.6 nats low. The share ``Z_out / (Z + Z_out)``
is reported, and so is the whole proposal's estimate of log Z, which also sees a phase within
the draws' reach that the run missed (a spike inside the slab that the chains sampled).
:func:`~pymc_tempering.diagnose` flags either from ``BEYOND_LIMIT`` of the mass and three
standard errors, where the run's log Z, too low by about ``-log(1 - share)`` without that
mass, is off by more than its own standard error. (Beyond the farthest of ``n`` exact draws
lies about ``1 / n`` of the mass; a run's tempered draws reach less far into a heavy tail, the
draws at inverse temperatures below 1 held back by the base: a Gaussian cut by the face of its
uniform prior box, whose tail in the unconstrained space is exponential, has 1 to 2% of its
mass beyond every draw, a bias within the run's standard error.)

A phase inside the draws' reach that the chains sampled too rarely (a spike holding 1% of the
mass in the middle of a slab) changes log Z by less than the check's standard error. The check
therefore also compares, about each optimum of its proposal, the share of the mass within the
optimum's Laplace ellipsoid (its ``OPTIMUM_REGION`` chi-square quantile), by importance
sampling over the run's log Z, with the run's weighted share there: an optimum holding
``BEYOND_LIMIT`` or more of the mass, three standard errors above what the run gave it and
more than twice that, is mass the run missed.

The check's record (:class:`Beyond`) is stored in a result as its ``coverage`` group
(:func:`coverage_group`) and read back from there (:func:`read_coverage`).

Why by hand: no library offers a scale-mixture importance check of an MCMC run's coverage.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import xarray as xr
from scipy.linalg import solve_triangular
from scipy.special import expit, logsumexp
from scipy.stats import chi2

from pymc_tempering.estimators import log_mean_exp
from pymc_tempering.target import Target

__all__ = [
    "Beyond", "mass_beyond_draws", "BEYOND_LIMIT", "COVERAGE", "coverage_group", "read_coverage"
]

SCALE_FACTOR = 2.0  # ratio of the proposal's widths from one scale to the next
N_SCALES = 7  # widths 1 to 64 times the base's and the optima's
N_DRAWS = 2000  # proposal draws
MAX_CENTRES = 5  # the base and the heaviest optima of its mode search
MAX_DIM = 300  # no check above this dimension (the proposal's densities cost ndim^2 per draw)
BEYOND_LIMIT = 0.005  # share of the mass beyond the draws that makes a problem
OPTIMUM_REGION = 0.99  # chi-square quantile of the ellipsoid about an optimum


class Beyond(NamedTuple):
    """The mass beyond a run's draws: its share of the total, that share's standard error, and
    the check's own estimate of log Z with its standard error (which sees a phase inside the draws' reach that the run missed), and the
    largest share of the mass about one optimum that the run's draws lack (zero where each
    optimum has at least half its share in the run), with its standard error."""

    share: float
    se: float
    log_z: float
    log_z_se: float
    near_optimum: float = 0.0
    near_optimum_se: float = 0.0


#: The result group that holds a run's :class:`Beyond`.
COVERAGE = "coverage"
# The group's variable for each field of Beyond.
_VARIABLES = {
    "share": "mass_beyond_draws",
    "se": "mass_beyond_draws_se",
    "log_z": "log_z",
    "log_z_se": "log_z_se",
    "near_optimum": "mass_near_optima",
    "near_optimum_se": "mass_near_optima_se",
}


def coverage_group(beyond: Beyond) -> xr.Dataset:
    """The ``coverage`` group of a result: each field of ``beyond`` as a scalar variable,
    ``mass_beyond_draws`` (``share``) and its ``mass_beyond_draws_se``, the check's own
    ``log_z`` and ``log_z_se``, and ``mass_near_optima`` (``near_optimum``) with its
    ``mass_near_optima_se``."""
    return xr.Dataset({_VARIABLES[k]: float(v) for k, v in beyond._asdict().items()})


def read_coverage(idata) -> Beyond | None:
    """The :class:`Beyond` a result's ``coverage`` group holds; None where it has none."""
    if COVERAGE not in idata.children:
        return None
    group = idata[COVERAGE]
    return Beyond(**{k: float(group[name].values) for k, name in _VARIABLES.items()})


def _heaviest(modes) -> np.ndarray:
    """The indices of the optima that are centres of the proposal, the heaviest first."""
    return np.argsort(-np.asarray(modes.log_mass))[: MAX_CENTRES - 1]


def _squared_distance(points, centre, chol) -> np.ndarray:
    """Squared Mahalanobis distances of ``points`` from ``centre`` under ``chol @ chol.T``."""
    return np.sum(solve_triangular(chol, (points - centre).T, lower=True) ** 2, axis=0)


def _components(base, modes) -> list[tuple[np.ndarray, np.ndarray]]:
    centres = [(np.asarray(base.mean, float), np.atleast_2d(np.asarray(base.cov, float)))]
    if modes is not None:
        centres += [(modes.points[i], modes.cov[i]) for i in _heaviest(modes)]
    scales = SCALE_FACTOR ** (2 * np.arange(N_SCALES))
    return [(mean, cov * s) for mean, cov in centres for s in scales]


def _proposal(components, n, rng):
    """Draws of the equal-weight Gaussian mixture and its log density at them."""
    chols = [np.linalg.cholesky(cov) for _, cov in components]
    which = rng.integers(len(components), size=n)
    z = rng.standard_normal((n, components[0][0].size))
    x = np.empty_like(z)
    for k, ((mean, _), chol) in enumerate(zip(components, chols, strict=True)):
        x[which == k] = mean + z[which == k] @ chol.T
    parts = []
    for (mean, _), chol in zip(components, chols, strict=True):
        parts.append(-0.5 * _squared_distance(x, mean, chol) - np.sum(np.log(np.diag(chol))))
    log_q = logsumexp(np.stack(parts), axis=0) - np.log(len(components))
    return x, log_q - 0.5 * x.shape[1] * np.log(2 * np.pi)


def mass_beyond_draws(
    target: Target, x: np.ndarray, log_weight: np.ndarray, log_z: float, base, random_seed=None
) -> Beyond | None:
    """The share of the target's mass beyond every draw of a run (module docstring).

    Parameters
    ----------
    target : Target
    x : ndarray, shape (..., ndim)
        The run's flat draws, at every temperature.
    log_weight : ndarray, shape (...)
        Their log weights towards the target.
    log_z : float
        The run's estimate of log Z.
    base : Base
        The run's base (its ``modes``, when it has them, add centres).
    random_seed : int or numpy.random.Generator, optional

    Returns
    -------
    Beyond or None
        None above ``MAX_DIM`` dimensions or where the draws' covariance is singular.
    """
    x = np.asarray(x, dtype=float).reshape(-1, target.ndim)
    lw = np.asarray(log_weight, dtype=float).ravel()
    if target.ndim > MAX_DIM or not np.any(np.isfinite(lw)):
        return None
    w = np.exp(lw - lw.max())
    w /= w.sum()
    mean = w @ x
    cov = np.atleast_2d(np.cov(x, rowvar=False, aweights=w))
    modes = getattr(base, "modes", None)
    try:
        chol = np.linalg.cholesky(cov)
        draws, log_q = _proposal(_components(base, modes), N_DRAWS,
                                 np.random.default_rng(random_seed))
    except np.linalg.LinAlgError:
        return None
    radius = _squared_distance(x, mean, chol).max()
    with np.errstate(all="ignore"):
        log_r = target.logp(draws) - log_q
    log_r = np.where(np.isfinite(log_r), log_r, -np.inf)
    total, total_se = log_mean_exp(log_r)
    near = _missed_near_optima(modes, x, w, draws, log_r, log_z)
    outside = np.where(_squared_distance(draws, mean, chol) > radius, log_r, -np.inf)
    if not np.any(np.isfinite(outside)):
        return Beyond(0.0, 0.0, total, total_se, *near)
    # share = Z_out / (Z + Z_out), from log Z_out and its (relative) standard error
    log_z_out, relative_se = log_mean_exp(outside)
    share = float(expit(log_z_out - log_z))
    return Beyond(share, share * (1.0 - share) * relative_se, total, total_se, *near)


def _missed_near_optima(modes, x, w, draws, log_r, log_z) -> tuple[float, float]:
    """The largest share of the mass about one optimum (within its Laplace ellipsoid) that the
    run's weighted draws ``x, w`` lack, with its standard error: the importance sampler's
    (``draws, log_r``) mass there in units of the run's ``exp(log_z)``, less the run's share
    there, over the total the run would have with that difference (one where it had the mass
    and put it elsewhere: then the share is understated, as a tenth for a half becomes 0.28).
    Zero where no optimum holds ``BEYOND_LIMIT`` of the mass, three standard errors and more
    than twice what the run gave it. (Over the run's total, not the sampler's: with more
    optima than the sampler's centres, as 18 peaks, the sampler's own total misses some of
    them, and the share of those it covers would come out too large.)"""
    if modes is None or not np.any(np.isfinite(log_r)):
        return 0.0, 0.0
    radius = chi2(x.shape[1]).ppf(OPTIMUM_REGION)
    kish = 1.0 / np.sum(w**2)
    worst = (0.0, 0.0)
    for i in _heaviest(modes):
        chol = np.linalg.cholesky(modes.cov[i])
        near = _squared_distance(draws, modes.points[i], chol) <= radius
        if not np.any(near & np.isfinite(log_r)):
            continue
        log_z_near, relative_se = log_mean_exp(np.where(near, log_r, -np.inf))
        mass = float(np.exp(log_z_near - log_z))  # in units of the run's Z
        run = float(np.clip(w @ (_squared_distance(x, modes.points[i], chol) <= radius), 0, 1))
        total = 1.0 + max(mass - run, 0.0)  # the run's Z and what it lacks there
        missed = (mass - run) / total
        se = float(np.hypot(mass * relative_se, np.sqrt(run * (1 - run) / kish))) / total
        if missed >= BEYOND_LIMIT and missed > 3 * se and run < mass / 2 and missed > worst[0]:
            worst = (missed, se)
    return worst
