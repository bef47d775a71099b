"""Replica exchange with thermostats: the noise-corrected exchange test, the minibatch noise
estimate, and the mode weights of a bimodal target.

Statistical checks are ``|estimate - truth| < 4 * standard error``: binomial for acceptance
frequencies, MCSE from arviz-stats' multi-chain ESS for sampler output (after checking the ESS).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from arviz_stats.base.array import array_stats
from scipy.special import expit

from pymc_tempering.dynamics.replica_exchange import (
    CORRECTION_SD,
    corrected_acceptance_probability,
    corrected_exchange,
    correction_distribution,
    exchange_log_ratio,
    minibatch_exchange_energies,
    sample_replica_exchange,
    temperature_ladder,
)
from pymc_tempering.target import Target

K = 4.0


# ---------------------------------------------------------------------------------------------
# exact, no sampling
# ---------------------------------------------------------------------------------------------


def test_correction_convolved_with_unit_normal_is_logistic():
    support, weights = correction_distribution()
    assert np.all(weights >= 0) and weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(support, -support[::-1])
    np.testing.assert_allclose(weights, weights[::-1])
    # Var(X) = Var(logistic) - 1 is forced by the convolution
    assert weights @ support**2 == pytest.approx(np.pi**2 / 3 - 1, abs=1e-3)
    delta = np.linspace(-40, 40, 8001)
    err = np.abs(corrected_acceptance_probability(delta) - expit(delta)).max()
    assert err < 5e-5, err


def test_ladder_and_settings_are_validated():
    np.testing.assert_allclose(temperature_ladder(3, 9.0), [1, 3, 9])
    np.testing.assert_allclose(temperature_ladder([1, 2, 5]), [1, 2, 5])
    assert temperature_ladder(1).tolist() == [1.0]
    for bad in ([2, 3], [1, 3, 2], [1, 1, 2], [1, np.inf]):
        with pytest.raises(ValueError, match="ladder"):
            temperature_ladder(bad)
    with pytest.raises(ValueError, match="max_temperature"):
        temperature_ladder(4, 0.5)
    with pm.Model() as m:
        pm.Normal("x")
    with pytest.raises(ValueError, match="exchange_every"):
        sample_replica_exchange(5, model=m, exchange_every=0, progressbar=False)
    with pytest.raises(ValueError, match="ladder"):
        sample_replica_exchange(5, model=m, temperatures=[1.5, 3], progressbar=False)
    with pm.Model() as discrete:
        pm.Poisson("k", 3.0)
    with pytest.raises(ValueError, match="discrete"):
        sample_replica_exchange(5, model=discrete, progressbar=False)


def test_exchange_log_ratio_is_detailed_balance_ratio():
    beta = np.array([1.0, 0.4])
    u = np.array([2.0, 7.0])
    # pi_1(theta_2) pi_2(theta_1) / (pi_1(theta_1) pi_2(theta_2)) with pi_j = exp(-beta_j U)
    log_ratio = (-beta[0] * u[1] - beta[1] * u[0]) - (-beta[0] * u[0] - beta[1] * u[1])
    assert exchange_log_ratio(beta[0], beta[1], u[0], u[1]) == pytest.approx(log_ratio)


# ---------------------------------------------------------------------------------------------
# the corrected test accepts with the logistic probability; the uncorrected one does not
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [-2.0, 0.7, 2.5])
def test_corrected_test_accepts_with_logistic_probability(delta):
    rng = np.random.default_rng(7)
    n, sigma = 200_000, 0.9
    p = expit(delta)
    bound = K * np.sqrt(p * (1 - p) / n)
    delta_hat = delta + sigma * rng.standard_normal(n)
    accepted, skipped = corrected_exchange(delta_hat, sigma, rng)
    assert not skipped.any()
    assert abs(accepted.mean() - p) < bound, (accepted.mean(), p, bound)
    # the plain logistic test on the noisy difference (no correction) is biased
    naive = (delta_hat + rng.logistic(size=n)) > 0
    assert abs(naive.mean() - p) > 2 * bound, (naive.mean(), p, bound)


def test_corrected_test_skips_when_noise_exceeds_correction():
    rng = np.random.default_rng(3)
    sigma = np.array([0.5, CORRECTION_SD, 1.01, 5.0, np.nan])
    accepted, skipped = corrected_exchange(np.full(5, 100.0), sigma, rng)
    assert skipped.tolist() == [False, False, True, True, True]
    assert accepted.tolist() == [True, True, False, False, False]


# ---------------------------------------------------------------------------------------------
# minibatch noise estimate
# ---------------------------------------------------------------------------------------------


def test_minibatch_noise_estimate_matches_spread_of_energy_differences():
    rng = np.random.default_rng(0)
    y = rng.normal(1.0, 2.0, 2000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        yb = pm.Minibatch(y, batch_size=200)
        pm.Normal("y", mu, 2.0, observed=yb, total_size=y.size)
    target = Target(model)
    energies = minibatch_exchange_energies(target, random_seed=1)
    theta = np.array([[0.9], [1.1]])
    diffs, sds = [], []
    for _ in range(2000):
        u, t = energies(theta)
        assert t.shape == (2, 200)
        d = t[0] - t[1]
        diffs.append(u[0] - u[1])
        sds.append(np.sqrt(d.size * d.var(ddof=1)))
    diffs, sds = np.array(diffs), np.array(sds)
    # full-data energy difference, exactly
    full = -(np.sum(-0.5 * ((y - 0.9) / 2) ** 2) - np.sum(-0.5 * ((y - 1.1) / 2) ** 2))
    full += -(-0.5 * (0.9 / 10) ** 2 + 0.5 * (1.1 / 10) ** 2)
    n = diffs.size
    assert abs(diffs.mean() - full) < K * diffs.std() / np.sqrt(n)
    # the per-minibatch estimate of sigma agrees with the spread over minibatches (the sd of a
    # sample sd from n normal draws is about sd / sqrt(2 n))
    assert abs(sds.mean() - diffs.std()) < K * diffs.std() / np.sqrt(2 * n) + K * sds.std() / np.sqrt(n)


# ---------------------------------------------------------------------------------------------
# bimodal target: replica exchange finds the weights, a single replica does not
# ---------------------------------------------------------------------------------------------


def bimodal_model():
    with pm.Model() as model:
        pm.Mixture(
            "x",
            w=[0.3, 0.7],
            comp_dists=[pm.Normal.dist(-3.0, 0.5), pm.Normal.dist(3.0, 0.5)],
        )
    return model


def test_bimodal_weights_replica_exchange_vs_single_replica():
    model = bimodal_model()
    chains = 4
    start = np.full((chains, 1), -3.0)  # every replica starts in the lighter mode
    kwargs = dict(
        model=model, chains=chains, step_size=0.01, steps_per_sample=10,
        initial_points=start, burn_in=2000, progressbar=False,
    )
    re = sample_replica_exchange(3000, temperatures=8, max_temperature=20.0, random_seed=11, **kwargs)
    right = (re.posterior["x"].values > 0).astype(float)
    est = right.mean()
    ess = float(array_stats.ess(right, method="mean"))
    mcse = right.std() / np.sqrt(ess)
    assert ess > 100, ess
    assert abs(est - 0.7) < K * mcse, (est, mcse, ess)
    assert re["replicas"]["x"].sizes["replica"] == 8
    rates = re["replica_exchange"]["swap_acceptance_rate"].values
    assert np.all(rates > 0.2)
    assert int(re["replica_exchange"]["swap_skipped"].sum()) == 0
    # the same dynamics with one replica (T = 1 only) stays in the starting mode
    single = sample_replica_exchange(3000, temperatures=1, random_seed=11, **kwargs)
    frac = float((single.posterior["x"].values > 0).mean())
    assert abs(frac - 0.7) > 10 * mcse and abs(frac - 0.7) > 0.3, frac


def test_reproducible_for_a_seed():
    model = bimodal_model()
    a = sample_replica_exchange(50, model=model, temperatures=4, chains=2, random_seed=5, progressbar=False)
    b = sample_replica_exchange(50, model=model, temperatures=4, chains=2, random_seed=5, progressbar=False)
    np.testing.assert_array_equal(a.posterior["x"].values, b.posterior["x"].values)
    np.testing.assert_array_equal(
        a["replica_exchange"]["swap_accepted"].values, b["replica_exchange"]["swap_accepted"].values
    )


def test_minibatch_model_runs_with_corrected_test():
    rng = np.random.default_rng(2)
    y = rng.normal(1.0, 2.0, 1000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 2.0, observed=pm.Minibatch(y, batch_size=500), total_size=y.size)
    res = sample_replica_exchange(
        100, model=model, temperatures=[1.0, 1.05, 1.1], chains=2, step_size=1e-3,
        initial_points=np.full((2, 1), 1.0), random_seed=3, progressbar=False,
    )
    assert res.attrs["exchange_test"] == "corrected_logistic"
    ex = res["replica_exchange"]
    assert int(ex["swap_attempted"].sum()) > 0
    # neighbouring temperatures this close and batches of 500: sigma is far below 1
    assert int(ex["swap_skipped"].sum()) == 0 and int(ex["swap_accepted"].sum()) > 0
    assert float(ex["exchange_noise_sd_max"].max()) < CORRECTION_SD
    assert int((ex["swap_accepted"] + ex["swap_skipped"]).sum()) <= int(ex["swap_attempted"].sum())
    assert np.isfinite(res.posterior["mu"].values).all()


def test_minibatch_run_reproducible_for_a_seed():
    """Both compiled minibatch functions (dynamics and exchange test) draw seeded minibatches."""
    y = np.random.default_rng(2).normal(1.0, 2.0, 1000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 2.0, observed=pm.Minibatch(y, batch_size=500), total_size=y.size)
    energies = [minibatch_exchange_energies(Target(model), random_seed=1) for _ in range(2)]
    theta = np.array([[0.9], [1.1]])
    assert [float(energies[0](theta)[0][0]) for _ in range(5)] == [
        float(energies[1](theta)[0][0]) for _ in range(5)
    ]
    kwargs = dict(model=model, temperatures=[1.0, 1.05, 1.1], chains=2, step_size=1e-3,
                  initial_points=np.full((2, 1), 1.0), random_seed=3, progressbar=False)
    a, b = sample_replica_exchange(100, **kwargs), sample_replica_exchange(100, **kwargs)
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)
    np.testing.assert_array_equal(
        a["replica_exchange"]["swap_accepted"].values, b["replica_exchange"]["swap_accepted"].values
    )
