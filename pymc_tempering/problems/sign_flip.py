"""Sign-flip posteriors: ``y ~ N(theta^2, 1)`` puts one mode at each sign of ``theta``. The
quickstart's small one with exact mode probabilities, and the minibatched one of the
thermostat tests with its Laplace approximation."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy import integrate, stats

from pymc_tempering.problems.record import Problem, Truth

__all__ = ["problems", "sign_flip", "sign_flip_laplace"]


def _quickstart() -> Problem:
    rng = np.random.default_rng(42)  # as in examples/quickstart.py
    y = rng.normal(1.5**2, 1.0, size=10)
    prior_mu, prior_sd = 0.5, 1.5

    def build():
        with pm.Model() as model:
            theta = pm.Normal("theta", prior_mu, prior_sd)
            pm.Normal("y", theta**2, 1.0, observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["theta"]) > 0).astype(int)

    def truth():
        def log_joint(t):
            return stats.norm.logpdf(t, prior_mu, prior_sd) + stats.norm.logpdf(y, t**2, 1.0).sum()

        peak = max(log_joint(-1.5), log_joint(1.5))
        z_neg = integrate.quad(lambda t: np.exp(log_joint(t) - peak), -8, 0, points=[-1.5], limit=200)[0]
        z_pos = integrate.quad(lambda t: np.exp(log_joint(t) - peak), 0, 8, points=[1.5], limit=200)[0]
        z = z_neg + z_pos
        return Truth(log_z=float(peak + np.log(z)), mode_probabilities=np.array([z_neg / z, z_pos / z]))

    return Problem("quickstart", "sign_flip", build, truth,
                   "y_i ~ N(theta^2, 1), 10 observations (examples/quickstart.py)",
                   modes=("theta<0", "theta>0"), label=label)


def sign_flip(n: int, s: float, batch_size: int = 200):
    """The sign-flip posterior: ``theta ~ N(0, 3 s)``, ``y_i ~ N((theta / s)^2, 1)`` for ``n``
    data drawn with mean ``1.5^2``, in minibatches of ``batch_size`` when ``n`` exceeds it; the
    parameter in units of ``s``. Two modes at ``theta = +-s u0`` with a barrier of
    ``n ybar^2 / 2`` nats between them (:func:`sign_flip_laplace`). Returns ``(model, y)``."""
    y = np.random.default_rng(5).normal(1.5**2, 1.0, size=n)
    with pm.Model() as model:
        data = pm.Minibatch(y, batch_size=batch_size) if n > batch_size else y
        theta = pm.Normal("theta", 0, 3 * s)
        pm.Normal("y", (theta / s) ** 2, 1.0, observed=data, total_size=n)
    return model, y


def sign_flip_laplace(y, s: float) -> tuple[float, float]:
    """The sign-flip modes' position ``s u0`` (``u0^2 = ybar - 1 / (18 n)``) and Laplace standard
    deviation ``s / sqrt(4 n u0^2 + 1/9)`` in ``theta``."""
    n = y.size
    u0 = np.sqrt(y.mean() - 1.0 / (18 * n))
    return s * u0, s / np.sqrt(4 * n * u0**2 + 1.0 / 9.0)


def problems() -> list[Problem]:
    """``quickstart``: its mode probabilities and log Z by 1-D quadrature."""
    return [_quickstart()]
