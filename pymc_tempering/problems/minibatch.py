"""Models for the minibatch samplers (``pm.Minibatch`` data): a regression whose intercept and
slope are correlated about -0.99, and a model whose gradient noise lies along one direction.
Their references are Laplace fits (no exact truth), so they are builders, not problems."""

from __future__ import annotations

import numpy as np
import pymc as pm

__all__ = ["minibatch_regression", "shared_noise_model"]


def minibatch_regression(n: int, batch_size: int | None = None, seed: int = 3):
    """``y ~ N(a + b x, s)`` on ``n`` simulated points: ``a ~ N(0, 10)``, ``b ~ N(0, 1)``,
    ``s ~ HalfNormal(2)``, the covariate of mean 50 and sd 10 (``a`` and ``b`` correlated about
    -0.99 in the posterior); ``pm.Minibatch`` batches of ``batch_size`` (with ``total_size``)
    when given. Returns the model."""
    rng = np.random.default_rng(seed)
    x = rng.normal(50, 10, n)
    y = 3.0 + 0.02 * x + rng.normal(0, 0.5, n)
    with pm.Model() as model:
        if batch_size:
            x, y = pm.Minibatch(x, y, batch_size=batch_size)
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 1)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + b * x, s, observed=y, total_size=n if batch_size else None)
    return model


def shared_noise_model(n: int = 10_000, batch_size: int | None = None) -> pm.Model:
    """``y_i ~ N(t_1 + t_2, 1)``, ``t ~ N(0, I)``: both coordinates' gradients are the same sum
    of residuals, so a minibatch's gradient noise lies along ``t_1 + t_2`` only."""
    y = np.random.default_rng(0).normal(1.0, 1.0, n)
    data = y if batch_size is None else pm.Minibatch(y, batch_size=batch_size)
    with pm.Model() as model:
        t = pm.Normal("t", 0, 1, shape=2)
        pm.Normal("y", t[0] + t[1], 1.0, observed=data, total_size=n)
    return model
