"""Shared statistical checks for the tests: one tolerance, one MCSE, one source of seeds.

Every statistical test asserts ``|estimate - truth| < K * standard error`` with the standard
error from arviz-stats (the Monte Carlo standard error of the chains) or from the method's own
error bar. For a calibrated standard error the estimate is Gaussian to good approximation and a
test fails with probability ``2 * Phi(-K)`` = 6.3e-5 for ``K = 4``: below the 1e-3 per test the
suite allows, with room for the standard error itself being estimated.

Seeds: tests take theirs from :func:`seed` (or the ``seed`` fixture), which adds the environment
variable ``PMT_TEST_SEED`` (default 0) to a per-test offset, so one variable shifts every seed
of the suite and ``benchmarks/seed_sweep.py`` can rerun it under other seeds.
"""

from __future__ import annotations

import os

import numpy as np
from arviz_stats.base import array_stats

K = 4.0  # |estimate - truth| < K * standard error; 2 * Phi(-4) = 6.3e-5 per comparison

__all__ = [
    "K",
    "seed",
    "mcse_of_mean",
    "assert_within_mcse",
    "assert_within_se",
    "assert_diagnosed_ok",
]


def seed(offset: int = 0) -> int:
    """The suite's seed for one use: ``PMT_TEST_SEED`` (default 0) plus ``offset``."""
    return int(os.environ.get("PMT_TEST_SEED", "0")) + int(offset)


def _chain_draw(values) -> np.ndarray:
    """Values as ``(chain, draw, ...)``; a 1-D array is one chain."""
    values = np.asarray(values, dtype=float)
    return values[None] if values.ndim == 1 else values


def mcse_of_mean(values) -> np.ndarray:
    """Monte Carlo standard error of the mean of ``(chain, draw, ...)`` draws (arviz-stats)."""
    return np.asarray(array_stats.mcse(_chain_draw(values), method="mean", chain_axis=0, draw_axis=1))


def assert_within_se(estimate, truth, se, k: float = K, what: str = "estimate") -> None:
    """Assert ``|estimate - truth| < k * se`` elementwise, with a message giving the z-scores."""
    estimate, truth, se = (np.asarray(v, dtype=float) for v in (estimate, truth, se))
    z = (estimate - truth) / se
    assert np.all(np.abs(z) < k), f"{what}: {estimate} vs truth {truth}, se {se}, z {z} (k={k})"


def assert_within_mcse(values, truth, k: float = K, what: str = "mean", min_ess: float = 50.0):
    """Assert the mean of draws ``(chain, draw, ...)`` is within ``k`` MCSE of ``truth``.

    The MCSE is arviz-stats'; it is trustworthy only with enough effective draws, so the ESS is
    checked first (``min_ess``): a run too short for its own check fails loudly instead of
    passing or failing by luck. Returns ``(mean, mcse)``.
    """
    draws = _chain_draw(values)
    ess = np.asarray(array_stats.ess(draws, method="bulk", chain_axis=0, draw_axis=1))
    assert np.all(ess > min_ess), f"{what}: ESS {ess} below {min_ess}: the run is too short"
    mean = draws.mean(axis=(0, 1))
    se = mcse_of_mean(draws)
    assert_within_se(mean, truth, se, k, what)
    return mean, se


def assert_near_laplace(draws, mean: float, sd: float, what: str = "draws") -> None:
    """Issue 16's tolerances for a stochastic-gradient sampler against a Laplace approximation
    that is Gaussian to well within the Monte Carlo error: the mean of ``draws (chain, draw)``
    within 0.25 ``sd`` plus ``K`` Monte Carlo standard errors of ``mean``, and their sd within
    25% of ``sd`` plus ``K`` standard errors of the ratio (from the ESS of the squared
    deviations)."""
    d = np.asarray(draws, dtype=float)
    ess = float(array_stats.ess(d, method="mean", chain_axis=0, draw_axis=1))
    assert abs(d.mean() - mean) < 0.25 * sd + K * d.std() / np.sqrt(ess), (
        f"{what}: mean {d.mean():.5g} against {mean:.5g} (sd {sd:.3g}, ESS {ess:.0f})"
    )
    ess2 = float(array_stats.ess((d - d.mean()) ** 2, method="mean", chain_axis=0, draw_axis=1))
    ratio, se = d.std() / sd, np.sqrt(2 / ess2) / 2
    assert abs(ratio - 1) < 0.25 + K * se, f"{what}: sd {ratio:.3f} x Laplace (se {se:.3f})"


def assert_diagnosed_ok(idata, family_p: float = 1e-5) -> None:
    """Assert ``pmt.diagnose(idata)`` finds nothing wrong with a run that is right by construction.

    ``diagnose`` tests the per-chain log Z agreement (chi-square) and the base moments (z-scores)
    at a family-wise false-alarm rate of 1e-3 each: on a correct run they fail with probability
    about 2e-3, above the 1e-3 a test may fail by chance. Here those two checks are judged at
    ``family_p`` (default 1e-5) from the values ``diagnose`` reports; every other check
    (divergences, both ends of beta visited, Pareto k-hat, ...) must pass as it stands.
    """
    from scipy import stats

    import pymc_tempering as pmt

    checks = pmt.diagnose(idata).checks
    for name, row in checks.iterrows():
        value = row["value"]
        if name == "chains_log_z_chi2_p":
            ok = value >= family_p
        elif name == "base_moments_max_abs_z":
            n_z = 2 * idata["base"].sizes["flat"]  # a mean and a variance per flat element
            ok = value <= stats.norm.isf(family_p / (2 * n_z))
        else:
            ok = bool(row["ok"])
        assert ok, f"diagnose: {name} = {value} (limit {row['limit']}): {row['meaning']}\n{checks}"
