"""Posteriors shaped by a nonlinear or heavy-tailed likelihood: Rosenbrock's curved valley, a
Cauchy likelihood with two clusters, and a bilinear regression with two branches."""

from __future__ import annotations

import functools
import math

import numpy as np
import pymc as pm
from scipy import integrate, stats

from pymc_tempering.problems.nested import LOG_2PI, grid_integral, prior_monte_carlo, uniform_box
from pymc_tempering.problems.record import Nested, Problem, Truth

__all__ = ["cauchy_2d", "problems", "rosenbrock_2d"]

# --- rosenbrock_2d ---------------------------------------------------------------------------

ROSEN_BOX = 5.0


def rosenbrock_2d() -> Problem:
    prior_transform, log_prior = uniform_box(-ROSEN_BOX, ROSEN_BOX, 2)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -ROSEN_BOX, ROSEN_BOX)
            y = pm.Uniform("y", -ROSEN_BOX, ROSEN_BOX)
            pm.Potential("likelihood", -((1 - x) ** 2 + 100 * (y - x**2) ** 2))
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        x, y = theta[..., 0], theta[..., 1]
        return -((1 - x) ** 2 + 100 * (y - x**2) ** 2)

    def inner(x):
        # int_{-5}^{5} exp(-100 (y - x^2)^2) dy = sqrt(pi / 100) P(-5 < N(x^2, 1/200) < 5)
        s = 1 / math.sqrt(200)
        return math.sqrt(math.pi / 100) * (stats.norm.cdf(ROSEN_BOX, x**2, s) - stats.norm.cdf(-ROSEN_BOX, x**2, s))

    @functools.cache
    def truth():
        # Z = (1/100) int_{-5}^{5} exp(-(1 - x)^2) inner(x) dx, inner() dropping to 0 at x^2 = 5
        cut = math.sqrt(ROSEN_BOX)
        value, abserr = integrate.quad(
            lambda x: np.exp(-((1 - x) ** 2)) * inner(x), -ROSEN_BOX, ROSEN_BOX,
            points=[-cut, 1.0, cut], epsabs=0, epsrel=1e-12, limit=200,
        )
        assert abserr < 1e-9 * value
        return float(np.log(value) - 2 * np.log(2 * ROSEN_BOX))

    def cross_check():
        x, y = np.linspace(-ROSEN_BOX, ROSEN_BOX, 4001), np.linspace(-ROSEN_BOX, ROSEN_BOX, 8001)
        grid = grid_integral(lambda a, b: loglike(np.stack(np.broadcast_arrays(a, b), -1)), x, y)
        return [f"dense 4001 x 8001 trapezoid grid: log Z = {np.log(grid) - 2 * np.log(10):.6f}"]

    nested = Nested((("x", ()), ("y", ())), loglike, prior_transform, log_prior,
                    mc_check=lambda rng, n: prior_monte_carlo(nested, rng, n), cross_check=cross_check)
    return Problem("rosenbrock_2d", "nonlinear", build, lambda: Truth(log_z=truth()),
                   "Rosenbrock likelihood (a = 1, b = 100) in U(-5, 5)^2", nested=nested)


# --- cauchy_2d -------------------------------------------------------------------------------

CAUCHY_Y = np.array([-4.2, -3.9, -4.0, -3.6, 3.8, 4.1, 4.4, 0.3])
CAUCHY_MU_SD, CAUCHY_SIGMA_SD = 10.0, 3.0


def cauchy_2d() -> Problem:
    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, CAUCHY_MU_SD)
            sigma = pm.HalfNormal("sigma", CAUCHY_SIGMA_SD)
            pm.Cauchy("y", alpha=mu, beta=sigma, observed=CAUCHY_Y)
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        mu, sigma = theta[..., 0, None], theta[..., 1, None]
        return stats.cauchy.logpdf(CAUCHY_Y, mu, sigma).sum(-1)

    def prior_transform(u):
        u = np.asarray(u, dtype=float)
        mu = CAUCHY_MU_SD * stats.norm.ppf(u[..., 0])
        # sigma > 0 for u in (0, 1); the floor guards against u = 0 exactly
        sigma = np.maximum(CAUCHY_SIGMA_SD * stats.norm.ppf(0.5 + 0.5 * u[..., 1]), 1e-300)
        return np.stack([mu, sigma], axis=-1)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        return stats.norm.logpdf(theta[..., 0], 0, CAUCHY_MU_SD) + stats.halfnorm.logpdf(
            theta[..., 1], scale=CAUCHY_SIGMA_SD
        )

    # the integrand is scaled by exp(-SHIFT) (about its maximum) to keep quad's tolerances relative
    shift = 20.0

    log_prior_norm = -LOG_2PI + math.log(2 / (CAUCHY_MU_SD * CAUCHY_SIGMA_SD))

    def integrand(mu, sigma):  # log_prior + loglike written out, for speed
        log_f = (
            log_prior_norm - 0.5 * (mu / CAUCHY_MU_SD) ** 2 - 0.5 * (sigma / CAUCHY_SIGMA_SD) ** 2
            - len(CAUCHY_Y) * math.log(math.pi * sigma) - np.log1p(((CAUCHY_Y - mu) / sigma) ** 2).sum()
        )
        return math.exp(log_f + shift)

    @functools.cache
    def truth():
        # Z = int_0^inf int_R p(mu) p(sigma) prod_i Cauchy(y_i; mu, sigma) dmu dsigma; beyond
        # |mu| > 60 or sigma > 40 the integrand is below e^-70 of its peak (prior and tails)
        def over_mu(sigma):
            return integrate.quad(integrand, -60, 60, args=(sigma,), points=[-4.0, 0.3, 4.0],
                                  epsabs=0, epsrel=1e-10, limit=200)[0]

        value, abserr = integrate.quad(over_mu, 0, 40, points=[0.5, 2.0, 5.0], epsabs=0, epsrel=1e-9, limit=200)
        assert abserr < 1e-7 * value
        return float(np.log(value) - shift)

    def cross_check():
        mu, sigma = np.linspace(-60, 60, 12001), np.linspace(1e-6, 40, 4001)

        def log_f(a, b):
            theta = np.stack(np.broadcast_arrays(a, b), -1)
            return log_prior(theta) + loglike(theta) + shift

        grid = grid_integral(log_f, mu, sigma)
        return [f"dense 12001 x 4001 trapezoid grid: log Z = {np.log(grid) - shift:.6f}"]

    nested = Nested((("mu", ()), ("sigma", ())), loglike, prior_transform, log_prior,
                    mc_check=lambda rng, n: prior_monte_carlo(nested, rng, n), cross_check=cross_check)
    return Problem("cauchy_2d", "nonlinear", build, lambda: Truth(log_z=truth()),
                   "Cauchy likelihood, 8 points in two clusters; mu ~ N(0, 10), sigma ~ HN(3)",
                   nested=nested)


# --- bilinear_regression ---------------------------------------------------------------------


def _bilinear_regression() -> Problem:
    rng = np.random.default_rng(5)
    n, sigma, a_mu, a_sd, b_sd = 20, 0.5, 0.3, 1.0, 1.0
    x = rng.normal(size=n)
    y = 2.0 * x + rng.normal(0.0, sigma, size=n)
    xx, xy, yy = x @ x, x @ y, y @ y

    def build():
        with pm.Model() as model:
            a = pm.Normal("a", a_mu, a_sd)
            b = pm.Normal("b", 0.0, b_sd)
            pm.Normal("y", a * b * x, sigma, observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["a"]) > 0).astype(int)

    def log_joint_a(a):
        # y | a ~ N(0, sigma^2 I + v x x'), v = a^2 b_sd^2: determinant lemma and Sherman-Morrison
        v = a**2 * b_sd**2
        s2 = sigma**2
        logdet = n * np.log(s2) + np.log1p(v * xx / s2)
        quad = (yy - v * xy**2 / (s2 + v * xx)) / s2
        return stats.norm.logpdf(a, a_mu, a_sd) - 0.5 * (n * np.log(2 * np.pi) + logdet + quad)

    def truth():
        grid = np.linspace(-8, 8, 4001)
        peak = float(np.max(log_joint_a(grid)))
        a_star = float(grid[np.argmax(log_joint_a(grid))])
        f = lambda a: np.exp(log_joint_a(a) - peak)  # noqa: E731
        z_neg = integrate.quad(f, -10, 0, points=[-abs(a_star)], limit=400, epsabs=0, epsrel=1e-10)[0]
        z_pos = integrate.quad(f, 0, 10, points=[abs(a_star)], limit=400, epsabs=0, epsrel=1e-10)[0]
        z = z_neg + z_pos
        return Truth(log_z=float(peak + np.log(z)), mode_probabilities=np.array([z_neg / z, z_pos / z]))

    return Problem("bilinear_regression", "nonlinear", build, truth,
                   "y ~ N(a b x, 0.5^2): only a b identified, two branches", modes=("a<0", "a>0"),
                   label=label)


def problems() -> list[Problem]:
    """``rosenbrock_2d``, ``cauchy_2d`` and ``bilinear_regression``."""
    return [rosenbrock_2d(), cauchy_2d(), _bilinear_regression()]
