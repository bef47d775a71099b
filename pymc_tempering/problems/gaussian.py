"""Gaussian targets: linear-Gaussian hierarchies, a correlated Gaussian and a Gaussian cut by a
box, with log Z in closed form."""

from __future__ import annotations

import functools

import numpy as np
import pymc as pm
from scipy import stats

from pymc_tempering.problems.nested import log_mean_exp, uniform_box
from pymc_tempering.problems.record import Nested, Problem, Truth

__all__ = [
    "gauss_corr_10d",
    "gauss_in_box",
    "hier_gauss_11d",
    "hierarchical_linear_gaussian",
    "problems",
]


def hierarchical_linear_gaussian(n_groups: int = 50, per_group: int = 4, seed: int = 0, data=None):
    """Group intercepts, two regressors, known scales: the marginal of y is Gaussian.

    ``mu_a ~ N(0, 2^2)``, ``a_j ~ N(mu_a, 0.5^2)``, ``b ~ N(0, 1)^2``,
    ``y_i ~ N(a_{g_i} + X_i b, 0.8^2)``. ``n_groups + 3`` parameters. Simulated data by default;
    ``data=(group, X, y)`` uses given data (e.g. the radon counties and regressors).
    Returns ``(model, log_evidence, posterior_mean_of_(mu_a, a, b))``.
    """
    rng = np.random.default_rng(seed)
    s_mu, tau, s_b, sigma = 2.0, 0.5, 1.0, 0.8
    if data is None:
        n = n_groups * per_group
        group = np.repeat(np.arange(n_groups), per_group)
        X = rng.normal(size=(n, 2))
        a_true = rng.normal(1.0, tau, size=n_groups)
        y = a_true[group] + X @ np.array([0.5, -0.7]) + rng.normal(0, sigma, size=n)
    else:
        group, X, y = (np.asarray(d) for d in data)
        n, n_groups = len(y), int(group.max()) + 1
    coords = {"group": np.arange(n_groups), "coef": ["x1", "x2"], "obs": np.arange(n)}
    with pm.Model(coords=coords) as model:
        mu_a = pm.Normal("mu_a", 0, s_mu)
        a = pm.Normal("a", mu_a, tau, dims="group")
        b = pm.Normal("b", 0, s_b, dims="coef")
        pm.Normal("y", a[group] + pm.math.dot(X, b), sigma, observed=y, dims="obs")
    # theta = (mu_a, a, b) is Gaussian a priori; y = A theta + eps.
    k = 1 + n_groups + 2
    prior_cov = np.zeros((k, k))
    prior_cov[0, 0] = s_mu**2
    prior_cov[0, 1 : 1 + n_groups] = prior_cov[1 : 1 + n_groups, 0] = s_mu**2
    prior_cov[1 : 1 + n_groups, 1 : 1 + n_groups] = s_mu**2 + tau**2 * np.eye(n_groups)
    prior_cov[1 + n_groups :, 1 + n_groups :] = s_b**2 * np.eye(2)
    A = np.zeros((n, k))
    A[np.arange(n), 1 + group] = 1.0
    A[:, 1 + n_groups :] = X
    cov_y = A @ prior_cov @ A.T + sigma**2 * np.eye(n)
    log_z = stats.multivariate_normal(np.zeros(n), cov_y).logpdf(y)
    gain = prior_cov @ A.T @ np.linalg.inv(cov_y)
    post_mean = gain @ y
    return model, float(log_z), post_mean


# --- gauss_corr_10d --------------------------------------------------------------------------

CORR_D, CORR_RHO, CORR_PRIOR_SD = 10, 0.9, 5.0
CORR_SIGMA = (1 - CORR_RHO) * np.eye(CORR_D) + CORR_RHO * np.ones((CORR_D, CORR_D))
CORR_Y = np.array([1.2, -0.4, 0.9, 2.1, -1.3, 0.3, 1.7, -0.8, 0.5, 1.0])


def gauss_corr_10d() -> Problem:
    lik = stats.multivariate_normal(np.zeros(CORR_D), CORR_SIGMA)

    def build():
        with pm.Model() as model:
            theta = pm.Normal("theta", 0, CORR_PRIOR_SD, shape=CORR_D)
            pm.MvNormal("y", mu=theta, cov=CORR_SIGMA, observed=CORR_Y)
        return model

    def loglike(theta):
        return lik.logpdf(CORR_Y - np.asarray(theta, dtype=float))

    def prior_transform(u):
        return CORR_PRIOR_SD * stats.norm.ppf(u)

    def log_prior(theta):
        return stats.norm.logpdf(theta, 0, CORR_PRIOR_SD).sum(-1)

    @functools.cache
    def truth():
        # y = theta + e with theta ~ N(0, 25 I), e ~ N(0, Sigma): y ~ N(0, Sigma + 25 I)
        cov = CORR_SIGMA + CORR_PRIOR_SD**2 * np.eye(CORR_D)
        return float(stats.multivariate_normal(np.zeros(CORR_D), cov).logpdf(CORR_Y))

    def mc_check(rng, n):
        # L(theta) = N(theta; y, Sigma) as a density in theta, so Z = E_{theta ~ N(y, Sigma)}[prior]
        theta = rng.multivariate_normal(CORR_Y, CORR_SIGMA, size=n)
        return log_mean_exp(log_prior(theta)) + ("mean prior density over likelihood draws",)

    nested = Nested((("theta", (CORR_D,)),), loglike, prior_transform, log_prior, mc_check=mc_check)
    return Problem("gauss_corr_10d", "gaussian", build, lambda: Truth(log_z=truth()),
                   "10-D Gaussian likelihood, correlation 0.9, N(0, 5^2) prior", nested=nested)


# --- gauss_in_box ----------------------------------------------------------------------------

BOX_UPPER, BOX_SD = 10.0, 0.2
BOX_Y = np.array([5.0, 0.0, 9.9])


def gauss_in_box() -> Problem:
    d = len(BOX_Y)
    prior_transform, log_prior = uniform_box(0.0, BOX_UPPER, d)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", 0, BOX_UPPER, shape=d)
            pm.Normal("y", mu=x, sigma=BOX_SD, observed=BOX_Y)
        return model

    def loglike(theta):
        return stats.norm.logpdf(BOX_Y, np.asarray(theta, dtype=float), BOX_SD).sum(-1)

    @functools.cache
    def truth():
        # Z = 10^-3 prod_k P(0 < x_k < 10) under x_k ~ N(y_k, 0.2)
        mass = stats.norm.cdf(BOX_UPPER, BOX_Y, BOX_SD) - stats.norm.cdf(0.0, BOX_Y, BOX_SD)
        return float(np.log(mass).sum() - d * np.log(BOX_UPPER))

    def mc_check(rng, n):
        # L is N(x; y, 0.2^2 I) as a density in x: Z = E_{x ~ N(y, 0.2^2 I)}[prior density]
        x = rng.normal(BOX_Y, BOX_SD, size=(n, d))
        return log_mean_exp(log_prior(x)) + ("mean prior density over likelihood draws",)

    nested = Nested((("x", (d,)),), loglike, prior_transform, log_prior, mc_check=mc_check)
    return Problem("gauss_in_box", "gaussian", build, lambda: Truth(log_z=truth()),
                   "narrow Gaussian (sd 0.2) in U(0, 10)^3, cut by two faces", nested=nested)


# --- hier_gauss_11d --------------------------------------------------------------------------

# hierarchical_linear_gaussian: mu_a ~ N(0, 2), a_j ~ N(mu_a, 0.5),
# b ~ N(0, 1)^2, y_i ~ N(a_{g_i} + X_i b, 0.8); the data here are simulated once (seed 11)
HIER_GROUPS, HIER_PER_GROUP = 8, 4
HIER_S_MU, HIER_TAU, HIER_S_B, HIER_SIGMA = 2.0, 0.5, 1.0, 0.8


def _hier_data():
    rng = np.random.default_rng(11)
    group = np.repeat(np.arange(HIER_GROUPS), HIER_PER_GROUP)
    X = rng.normal(size=(len(group), 2))
    a_true = rng.normal(1.0, HIER_TAU, size=HIER_GROUPS)
    y = a_true[group] + X @ np.array([0.5, -0.7]) + rng.normal(0, HIER_SIGMA, size=len(group))
    return group, X, y


def hier_gauss_11d() -> Problem:
    group, X, y = _hier_data()
    g = HIER_GROUPS

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        a, b = theta[..., 1 : 1 + g], theta[..., 1 + g :]
        mean = a[..., group] + np.einsum("nk,...k->...n", X, b)
        return stats.norm.logpdf(y, mean, HIER_SIGMA).sum(-1)

    def prior_transform(u):
        z = stats.norm.ppf(np.asarray(u, dtype=float))
        mu_a = HIER_S_MU * z[..., :1]
        return np.concatenate([mu_a, mu_a + HIER_TAU * z[..., 1 : 1 + g], HIER_S_B * z[..., 1 + g :]], axis=-1)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        mu_a = theta[..., 0]
        return (
            stats.norm.logpdf(mu_a, 0, HIER_S_MU)
            + stats.norm.logpdf(theta[..., 1 : 1 + g], mu_a[..., None], HIER_TAU).sum(-1)
            + stats.norm.logpdf(theta[..., 1 + g :], 0, HIER_S_B).sum(-1)
        )

    @functools.cache
    def truth():
        return hierarchical_linear_gaussian(data=(group, X, y))[1]  # closed form (y is Gaussian)

    nested = Nested((("mu_a", ()), ("a", (g,)), ("b", (2,))), loglike, prior_transform, log_prior)
    return Problem("hier_gauss_11d", "gaussian",
                   lambda: hierarchical_linear_gaussian(data=(group, X, y))[0],
                   lambda: Truth(log_z=truth()),
                   "hierarchical linear-Gaussian, 8 groups x 4 obs", nested=nested)


def problems() -> list[Problem]:
    """``linear_gaussian`` (:func:`hierarchical_linear_gaussian` at its defaults, 53
    parameters), ``gauss_corr_10d``, ``gauss_in_box`` and ``hier_gauss_11d``."""
    linear = Problem(
        "linear_gaussian", "gaussian", lambda: hierarchical_linear_gaussian()[0],
        lambda: Truth(log_z=hierarchical_linear_gaussian()[1],
                      moments={"mean": hierarchical_linear_gaussian()[2]}),
        "hierarchical linear-Gaussian, 50 groups x 4 obs (53 parameters)",
    )
    return [linear, gauss_corr_10d(), gauss_in_box(), hier_gauss_11d()]
