"""Step sizes and their limits (:mod:`pymc_tempering.adaptation.step_size`): the tempering
step's cap, and the first window's preconditioner capped by the curvature alone so that a
far start reaches the posterior.

Statistical checks are ``|estimate - truth| < K * MCSE`` (``tests/checks.py``, ``K = 4``) with
the MCSE from arviz-stats, after checking the ESS. Seeds come from ``checks.seed``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from arviz_stats.base import array_stats
from checks import K, mcse_of_mean, seed

import pymc_tempering as pmt
from pymc_tempering import adaptation
from pymc_tempering.kernels import thermostats

BATCH = 200


def test_tempering_step_cap_holds_the_kicks_of_xi_to_their_budget():
    """``tempering_step_cap``: at the cap, the largest kick ``eta_xi |lambda'| T sqrt(d / 2)``
    over the well is ``XI_KICK_BUDGET`` thermal sds ``sqrt(eta_xi)``; the default 0.001 is
    kept below 8 parameters, and there is no cap without tempering."""
    settings = thermostats.ThermostatParams(
        0.01, 0.05, 1.0, tempering=thermostats.TemperingParams(0.001, 0.05, 1.0, lambda_min=0.1)
    )
    xi = np.linspace(0.0, 1.0, 100_001)
    lam, dlam = thermostats.coupling(xi, settings)
    for d in (1, 7, 8, 89, 1000):
        eta = adaptation.tempering_step_cap(settings, d)
        kick = eta * np.max(np.abs(dlam) / lam) * np.sqrt(max(d, 1) / 2)
        assert kick / np.sqrt(eta) == pytest.approx(adaptation.XI_KICK_BUDGET, rel=1e-3)
        assert (eta > 0.001) == (d < 8)
        assert adaptation.tempering_step_size(0.0, cap=eta) == min(0.001, eta)
    assert adaptation.tempering_step_cap(settings._replace(tempering=None), 89) == np.inf
    held = settings._replace(tempering=settings.tempering._replace(moves=False))
    assert adaptation.tempering_step_cap(held, 89) == np.inf


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_tact_reaches_a_posterior_far_from_its_start():
    """The warm-up's first window is a transit, capped by the curvature only. A linear regression
    on 100,000 points, coefficients in units of 1e-3 and 10 (posterior sds 1.6e-6 and 3e-4),
    starts 1.3e5 posterior sds from the mode: with the first preconditioner capped by the
    minibatch gradient noise as well, the chains were still 2e4 sds away after the default
    warm-up. Each coefficient's mean must be within 25% of its exact posterior sd and its spread
    within 25% of it, up to ``K`` Monte Carlo standard errors."""
    n = 100_000
    rng = np.random.default_rng(11)
    x = np.column_stack([rng.normal(0, 1e3, n), rng.normal(5, 0.01, n)])
    sigma, prior_sd = 0.5, np.array([1.0, 100.0])
    y = x @ np.array([2e-3, 40.0]) + rng.normal(0, sigma, n)
    cov = np.linalg.inv(x.T @ x / sigma**2 + np.diag(1 / prior_sd**2))
    mean, sd = cov @ (x.T @ y / sigma**2), np.sqrt(np.diag(cov))
    with pm.Model():
        xb, yb = pm.Minibatch(x, y, batch_size=BATCH)
        b = pm.Normal("b", 0, prior_sd, shape=2)
        pm.Normal("y", pm.math.dot(xb, b), np.float64(sigma), observed=yb, total_size=n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # R-hat / ESS of a 4-chain, 500-draw run
            idata = pmt.sample_tact(500, random_seed=seed(62), progressbar=False)
    draws = idata["posterior"]["b"].values  # (chain, draw, 2)
    for i in range(2):
        d = draws[..., i]
        ess = float(np.asarray(array_stats.ess(d, method="bulk", chain_axis=0, draw_axis=1)))
        assert ess > 50, f"b[{i}]: ESS {ess}, too short a run for its own check"
        mean_se = float(mcse_of_mean(d))
        assert abs(d.mean() - mean[i]) < 0.25 * sd[i] + K * mean_se, (
            f"b[{i}]: mean {d.mean()} against {mean[i]} (sd {sd[i]}, se {mean_se})"
        )
        squared = (d - d.mean()) ** 2
        ratio = np.sqrt(squared.mean()) / sd[i]
        ratio_se = ratio * float(mcse_of_mean(squared)) / (2 * squared.mean())
        assert abs(ratio - 1) < 0.25 + K * ratio_se, f"b[{i}]: spread {ratio} x exact (se {ratio_se})"
