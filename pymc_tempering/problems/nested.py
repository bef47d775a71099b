"""What the constrained-space forms of the problems share: a uniform box prior and the Monte
Carlo and grid checks of a truth."""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate

from pymc_tempering.problems.record import Nested

__all__ = ["grid_integral", "log_mean_exp", "prior_monte_carlo", "uniform_box"]

LOG_2PI = math.log(2 * math.pi)


def uniform_box(lower: float, upper: float, ndim: int):
    """Prior transform and log density of ``U(lower, upper)^ndim``.

    Returns
    -------
    (prior_transform, log_prior) : callables on arrays of shape ``(..., ndim)``
    """
    width = upper - lower

    def prior_transform(u):
        return lower + width * np.asarray(u, dtype=float)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        inside = np.all((theta >= lower) & (theta <= upper), axis=-1)
        return np.where(inside, -ndim * math.log(width), -np.inf)

    return prior_transform, log_prior


def log_mean_exp(log_values) -> tuple[float, float]:
    """``log mean exp(log_values)`` and its delta-method standard error."""
    log_values = np.asarray(log_values, dtype=float)
    top = np.max(log_values)
    w = np.exp(log_values - top)
    return float(top + np.log(w.mean())), float(w.std() / (w.mean() * math.sqrt(w.size)))


def prior_monte_carlo(nested: Nested, rng: np.random.Generator, n: int, chunk: int = 250_000):
    """``log mean L`` over ``n`` prior draws, its standard error and how it was computed."""
    logl = []
    for start in range(0, n, chunk):
        u = rng.uniform(size=(min(chunk, n - start), nested.ndim))
        logl.append(nested.loglike(nested.prior_transform(u)))
    return log_mean_exp(np.concatenate(logl)) + ("mean of L over prior draws",)


def grid_integral(log_f, x, y, chunk: int = 200) -> float:
    """Trapezoid rule for ``int int exp(log_f(x, y)) dy dx`` on a grid, ``chunk`` x values at a
    time (memory)."""
    inner = np.concatenate([
        integrate.trapezoid(np.exp(log_f(x[i : i + chunk, None], y[None, :])), y, axis=1)
        for i in range(0, len(x), chunk)
    ])
    return float(integrate.trapezoid(inner, x))
