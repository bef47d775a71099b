"""Conjugate models: evidence and posterior moments in closed form."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy import stats
from scipy.special import betaln, gammaln

from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "beta_binomial",
    "conjugate_normal",
    "conjugate_normal_vector",
    "dirichlet_multinomial",
    "problems",
]


def conjugate_normal(n_obs: int = 20, seed: int = 0):
    """``mu ~ N(1, 2^2)``, ``y_i ~ N(mu, 1.5^2)``. Returns ``(model, log_evidence, post_mean, post_sd)``."""
    rng = np.random.default_rng(seed)
    m0, s0, sigma = 1.0, 2.0, 1.5
    y = rng.normal(0.3, sigma, size=n_obs)
    with pm.Model(coords={"obs": np.arange(n_obs)}) as model:
        mu = pm.Normal("mu", m0, s0)
        pm.Normal("y", mu, sigma, observed=y, dims="obs")
    cov = s0**2 * np.ones((n_obs, n_obs)) + sigma**2 * np.eye(n_obs)
    log_z = stats.multivariate_normal(np.full(n_obs, m0), cov).logpdf(y)
    post_var = 1 / (1 / s0**2 + n_obs / sigma**2)
    post_mean = post_var * (m0 / s0**2 + y.sum() / sigma**2)
    return model, float(log_z), float(post_mean), float(np.sqrt(post_var))


def conjugate_normal_vector(n_obs: int = 10, seed: int = 0):
    """``mu_k ~ N(1, 2^2)``, ``y_ik ~ N(mu_k, 1.5^2)`` for ``k`` in two coords: a free variable
    with dims, two independent conjugate problems. Returns ``(model, log_evidence, post_mean,
    post_sd)``, the last two per element of ``mu``.

    The data are fixed by ``seed`` (a fixed problem, not Monte Carlo noise: ``PMT_TEST_SEED``
    leaves it alone).
    """
    rng = np.random.default_rng(seed)
    m0, s0, sigma = 1.0, 2.0, 1.5
    y = rng.normal([0.3, -0.8], sigma, size=(n_obs, 2))
    with pm.Model(coords={"obs": np.arange(n_obs), "coef": ["a", "b"]}) as model:
        mu = pm.Normal("mu", m0, s0, dims="coef")
        pm.Normal("y", mu, sigma, observed=y, dims=("obs", "coef"))
    cov = s0**2 * np.ones((n_obs, n_obs)) + sigma**2 * np.eye(n_obs)
    log_z = sum(stats.multivariate_normal(np.full(n_obs, m0), cov).logpdf(y[:, k]) for k in range(2))
    post_var = 1 / (1 / s0**2 + n_obs / sigma**2)
    post_mean = post_var * (m0 / s0**2 + y.sum(axis=0) / sigma**2)
    return model, float(log_z), post_mean, np.full(2, np.sqrt(post_var))


def dirichlet_multinomial(counts=(12, 3, 7, 0), alpha=(1.0, 2.0, 1.5, 0.5)):
    """``p ~ Dirichlet(alpha)``, ``counts ~ Multinomial(n, p)``: a simplex-transformed variable
    whose unconstrained shape (K - 1) differs from its own (K). Returns ``(model, log_evidence,
    posterior_mean)``."""
    counts, alpha = np.asarray(counts), np.asarray(alpha, dtype=float)
    n = counts.sum()
    with pm.Model(coords={"category": np.arange(len(counts))}) as model:
        p = pm.Dirichlet("p", a=alpha, dims="category")
        pm.Multinomial("counts", n=n, p=p, observed=counts, dims="category")
    log_z = (
        gammaln(n + 1)
        - gammaln(counts + 1).sum()
        + gammaln(alpha.sum())
        - gammaln(alpha).sum()
        + gammaln(alpha + counts).sum()
        - gammaln(alpha.sum() + n)
    )
    post_mean = (alpha + counts) / (alpha.sum() + n)
    return model, float(log_z), post_mean


def beta_binomial(k=7, n=20, a=2.0, b=3.0):
    """``p ~ Beta(a, b)``, ``k ~ Binomial(n, p)`` (logit-transformed p)."""
    with pm.Model() as model:
        p = pm.Beta("p", a, b)
        pm.Binomial("k", n=n, p=p, observed=k)
    log_z = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + betaln(k + a, n - k + b) - betaln(a, b)
    return model, float(log_z), (k + a) / (n + a + b)


def problems() -> list[Problem]:
    """``conjugate_normal`` (1 parameter), ``conjugate_normal_vector`` (2), ``beta_binomial``
    and ``dirichlet_multinomial``, with log Z and posterior means."""

    def truth(builder, mean_at):
        def compute():
            out = builder()
            return Truth(log_z=out[1], moments={"mean": np.asarray(out[mean_at])})

        return compute

    return [
        Problem("conjugate_normal", "conjugate", lambda: conjugate_normal()[0],
                truth(conjugate_normal, 2), "conjugate normal, 20 observations (1 parameter)"),
        Problem("conjugate_normal_vector", "conjugate", lambda: conjugate_normal_vector()[0],
                truth(conjugate_normal_vector, 2), "two conjugate normals with dims"),
        Problem("beta_binomial", "conjugate", lambda: beta_binomial()[0],
                truth(beta_binomial, 2), "Beta(2, 3) prior, 7 of 20"),
        Problem("dirichlet_multinomial", "conjugate", lambda: dirichlet_multinomial()[0],
                truth(dirichlet_multinomial, 2), "Dirichlet prior on 4 categories"),
    ]
