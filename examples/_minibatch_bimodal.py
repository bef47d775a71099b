"""The minibatch model shared by ``tact_hmc.py`` and ``replica_exchange.py`` (not an example).

``theta ~ N(0.5, 1.5^2)``, ``y_i ~ N(theta^2, 10^2)`` for 1000 simulated ``y`` (true
``theta^2 = 1.44``), written with ``pm.Minibatch(y, batch_size=100)`` and ``total_size``: two modes
near ``theta = +-1``, the positive one more probable. The full-data posterior comes from quadrature.
"""

import numpy as np
import pymc as pm
from arviz_stats.base.array import array_stats
from scipy import stats

N, BATCH, NOISE_SD, PRIOR_MU, PRIOR_SD = 1000, 100, 10.0, 0.5, 1.5
Y = np.random.default_rng(0).normal(1.2**2, NOISE_SD, size=N)


def build_model() -> pm.Model:
    with pm.Model() as model:
        theta = pm.Normal("theta", PRIOR_MU, PRIOR_SD)
        batch = pm.Minibatch(Y, batch_size=BATCH)
        pm.Normal("y", theta**2, NOISE_SD, observed=batch, total_size=N)
    return model


def exact_posterior(grid: np.ndarray) -> np.ndarray:
    """The full-data posterior density on an even grid (normalised numerically)."""
    log_joint = stats.norm.logpdf(grid, PRIOR_MU, PRIOR_SD) + np.array(
        [stats.norm.logpdf(Y, t**2, NOISE_SD).sum() for t in grid]
    )
    density = np.exp(log_joint - log_joint.max())
    return density / (density.sum() * (grid[1] - grid[0]))


def weighted_sd(values: np.ndarray, weights: np.ndarray) -> float:
    mean = (values * weights).sum() / weights.sum()
    return float(np.sqrt(((values - mean) ** 2 * weights).sum() / weights.sum()))


def exact_summary(grid: np.ndarray, density: np.ndarray):
    """``P(theta > 0)`` and the sd within each mode (negative, positive) of the exact density."""
    p_pos = density[grid > 0].sum() * (grid[1] - grid[0])
    return p_pos, [weighted_sd(grid[half], density[half]) for half in (grid < 0, grid > 0)]


def mean_and_mcse(series: np.ndarray):
    """Mean and MCSE of a (chain, draw) series, the ESS from arviz-stats (chains pooled)."""
    ess = float(array_stats.ess(series, method="mean"))
    return series.mean(), series.std() / np.sqrt(ess)


def print_theta_summary(theta: np.ndarray, exact_p_pos: float, exact_sd) -> None:
    """Print ``P(theta > 0)`` with its MCSE and the sd within each mode of (chain, draw) draws."""
    p_pos, p_se = mean_and_mcse((theta > 0).astype(float))
    sd = [theta[half].std() if np.any(half) else np.nan for half in (theta < 0, theta > 0)]
    print(f"  P(theta > 0) = {p_pos:.3f} ± {p_se:.3f}   (exact {exact_p_pos:.3f});"
          f"  per chain {np.round((theta > 0).mean(axis=1), 2)}")
    print(f"  sd within the modes = {sd[0]:.3f}, {sd[1]:.3f}   "
          f"(exact {exact_sd[0]:.3f}, {exact_sd[1]:.3f})")
