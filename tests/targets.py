"""What the tests compare against that is no problem of its own: reference log densities written
by hand and a numeric gradient. The models with known answers are in
:mod:`pymc_tempering.problems`."""

from __future__ import annotations

import numpy as np
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
