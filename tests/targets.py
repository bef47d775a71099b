"""What the tests compare against that is no problem of its own: reference log densities written
by hand and a numeric gradient. The models with known answers are in
:mod:`pymc_tempering.problems`."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy import stats


def reference_logp(x, y):
    """Hand-written log density of the normal_model fixture on (mu, log s), with the Jacobian."""
    mu, log_s = x
    s = np.exp(log_s)
    return (
        stats.norm.logpdf(mu, 0, 2)
        + stats.halfnorm.logpdf(s, scale=1.5)
        + log_s
        + stats.norm.logpdf(y, mu, s).sum()
    )


def numeric_grad(f, x, h=1e-6):
    """Central differences of ``f`` at ``x``, one coordinate at a time."""
    x = np.asarray(x, dtype=float)
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)])


def data_model(y):
    """mu ~ N(0, 1), y_i ~ N(mu, 1), y in pm.Data: log Z = log N(y; 0, I + 11')
    (:func:`data_model_log_z`)."""
    with pm.Model() as model:
        data = pm.Data("y", y)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("obs", mu, 1.0, observed=data, shape=data.shape)
    return model


def data_model_log_z(y):
    """The exact log Z of :func:`data_model` for data ``y``."""
    n = len(y)
    return stats.multivariate_normal(np.zeros(n), np.eye(n) + np.ones((n, n))).logpdf(y)


def tiny_factor() -> pm.Model:
    """A one-factor model of 6 rows and 3 features: the sign of (lambda, f) is not identified,
    so P(lambda[0] > 0) = 1/2 exactly, and its density is unbounded (a noise scale going to 0
    while the factors fit its feature exactly), so no L-BFGS run of the mode search converges."""
    rng = np.random.default_rng(5)
    f = rng.normal(size=6)
    y = f[:, None] * np.array([1.5, 1.2, 1.0])[None] + rng.normal(0.0, 0.4, (6, 3))
    with pm.Model() as model:
        lam = pm.Normal("lambda", 0.0, 1.0, shape=3)
        factor = pm.Normal("f", 0.0, 1.0, shape=6)
        psi = pm.HalfNormal("psi", 1.0, shape=3)
        pm.Normal("y", factor[:, None] * lam[None], psi, observed=y)
    return model
