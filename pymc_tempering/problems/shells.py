"""The two Gaussian shells of Feroz & Hobson (2008) in a uniform box: log Z by radial
quadrature, checked against the published values, and a mode per shell."""

from __future__ import annotations

import functools
import math

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp

from pymc_tempering.problems.nested import LOG_2PI, log_mean_exp, prior_monte_carlo, uniform_box
from pymc_tempering.problems.record import Nested, Problem, Truth

__all__ = ["SHELL_BOX", "SHELL_PUBLISHED", "SHELL_R", "SHELL_W", "problems", "shells"]

SHELL_R, SHELL_W, SHELL_BOX = 2.0, 0.1, 6.0
# Feroz & Hobson (2008) / Feroz, Hobson & Bridges (2009): analytic log Z, to 2 decimals.
SHELL_PUBLISHED = {2: -1.75, 5: -5.67, 10: -14.59, 20: -36.09, 30: -60.13}


def _shell_centres(d: int) -> np.ndarray:
    c = np.zeros((2, d))
    c[:, 0] = (-3.5, 3.5)
    return c


def _shell_log_radial_integral(d: int) -> float:
    """``log int_0^inf rho^(d-1) N(rho; r, w) drho`` by adaptive quadrature (scaled by r^(d-1))."""
    r, w = SHELL_R, SHELL_W

    def f(rho):
        return np.exp((d - 1) * np.log(rho / r) - 0.5 * ((rho - r) / w) ** 2) / (math.sqrt(2 * math.pi) * w)

    # the integrand is negligible (< e^-100 of its peak) outside r +- 15 w and beyond r + 30 w
    value, abserr = integrate.quad(f, r - 15 * w, r + 30 * w, points=[r, r + (d - 1) * w**2 / r], epsrel=1e-12)
    assert abserr < 1e-9 * value
    return float((d - 1) * np.log(r) + np.log(value))


def shells(d: int) -> Problem:
    """The two Gaussian shells in ``d`` dimensions, with log Z, mode probabilities (0.5 each,
    ``x_0 < 0`` / ``x_0 > 0``) and the nested-sampling form."""
    centres = _shell_centres(d)
    prior_transform, log_prior = uniform_box(-SHELL_BOX, SHELL_BOX, d)
    log_norm = -0.5 * LOG_2PI - np.log(SHELL_W)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -SHELL_BOX, SHELL_BOX, shape=d)
            dist = pt.sqrt(((x - centres) ** 2).sum(axis=-1))
            pm.Potential("likelihood", pm.math.logsumexp(-0.5 * ((dist - SHELL_R) / SHELL_W) ** 2) + log_norm)
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        dist = np.sqrt(((theta[..., None, :] - centres) ** 2).sum(-1))
        return logsumexp(-0.5 * ((dist - SHELL_R) / SHELL_W) ** 2, axis=-1) + log_norm

    @functools.cache
    def truth():
        # Z = (2 shells) * area(S^(d-1)) * int rho^(d-1) N(rho; r, w) drho / 12^d, the shells being
        # inside the box (checked by --check); area(S^(d-1)) = 2 pi^(d/2) / Gamma(d/2).
        log_area = np.log(2) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d)
        log_z = float(np.log(2) + log_area + _shell_log_radial_integral(d) - d * np.log(2 * SHELL_BOX))
        if d in SHELL_PUBLISHED:  # the published values are rounded to 2 decimals
            assert abs(log_z - SHELL_PUBLISHED[d]) <= 0.0051, (d, log_z, SHELL_PUBLISHED[d])
        return log_z

    def mc_check(rng, n):
        if d <= 5:
            return prior_monte_carlo(nested, rng, n)
        # prior draws almost never hit a 20-D shell: importance sampling from the shells
        # themselves, q(x) = (1/2) sum_i N(|x - c_i|; r, w) / (area rho^(d-1)) (radius from
        # the radial density on a fine grid, direction uniform), estimating E_q[U(x) L(x) / q(x)]
        return _shell_importance_check(nested, d, rng, n)

    def cross_check():
        inside = _shell_mass_inside_box(d, np.random.default_rng(1), 1_000_000)
        return [f"fraction of each shell's mass inside the box (MC, 10^6 draws): {inside:.7f}",
                f"published (Feroz & Hobson 2008): {SHELL_PUBLISHED.get(d)}"]

    def label(draws):
        return (np.asarray(draws["x"])[..., 0] > 0).astype(int)

    nested = Nested((("x", (d,)),), loglike, prior_transform, log_prior, mc_check=mc_check,
                    cross_check=cross_check)
    return Problem(
        f"shells_{d}d", "shells",  build,
        lambda: Truth(log_z=truth(), mode_probabilities=np.array([0.5, 0.5])),
        f"two Gaussian shells (r 2, w 0.1) in U(-6, 6)^{d}", modes=("x0<0", "x0>0"), label=label,
        nested=nested,
    )


def _shell_mass_inside_box(d: int, rng: np.random.Generator, n: int) -> float:
    """Fraction of the shells' mass inside the box, from ``n`` exact draws of the shells (radius
    from ``rho^(d-1) N(rho; r, w)`` by a grid inverse CDF, direction uniform)."""
    grid = np.linspace(SHELL_R - 15 * SHELL_W, SHELL_R + 30 * SHELL_W, 200_001)
    logf = (d - 1) * np.log(grid) + stats.norm.logpdf(grid, SHELL_R, SHELL_W)
    f = np.exp(logf - logf.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(grid))])
    rho = np.interp(rng.uniform(size=n) * cdf[-1], cdf, grid)
    direction = rng.normal(size=(n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    x = _shell_centres(d)[rng.integers(2, size=n)] + rho[:, None] * direction
    return float(np.mean(np.all(np.abs(x) <= SHELL_BOX, axis=1)))


def _shell_importance_check(problem: Nested, d: int, rng: np.random.Generator, n: int):
    """Importance sampling from a proposal that is not the target: a shell of radius
    ``N(2.1, 0.15)`` about a centre chosen at random, in a uniform direction, so
    ``q(x) = (1/2) sum_i N(|x - c_i|; 2.1, 0.15) / (area |x - c_i|^(d-1))``. Independent of the
    radial quadrature of the truth."""
    centres = _shell_centres(d)
    q_r, q_w = 2.1, 0.15
    rho = np.abs(rng.normal(q_r, q_w, size=n))  # |.|: P(rho < 0) < 1e-40
    direction = rng.normal(size=(n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    x = centres[rng.integers(2, size=n)] + rho[:, None] * direction
    log_area = np.log(2) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d)
    dist = np.linalg.norm(x[:, None, :] - centres, axis=-1)
    log_q_each = stats.norm.logpdf(dist, q_r, q_w) - log_area - (d - 1) * np.log(dist)
    log_q = logsumexp(log_q_each, axis=1) - np.log(2)
    est, se = log_mean_exp(problem.log_prior(x) + problem.loglike(x) - log_q)
    return est, se, "importance sampling from shells of radius N(2.1, 0.15)"


def problems() -> list[Problem]:
    """``shells_2d``, ``shells_5d`` and ``shells_20d``."""
    return [shells(2), shells(5), shells(20)]
