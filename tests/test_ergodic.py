"""Ergodic inference (HEI): section 3.3 of the ergodic-inference paper and the API contract."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from conftest import model_fingerprint

import pymc_tempering as pmt
from pymc_tempering.dynamics.ergodic import fit_ergodic, gaussian_entropy

SIGMA = np.array([[2.0, 1.5], [1.5, 1.6]])  # section 3.3's target covariance
P0 = pmt.Base.from_moments(np.zeros(2), 3.0 * np.eye(2))  # section 3.3's valid P_0
N_DRAWS = 10_000  # as in the paper's Fig. 2


def gaussian_target():
    with pm.Model() as model:
        pm.MvNormal("x", mu=np.zeros(2), cov=SIGMA)
    return model


def expected_log_density_truth():
    """E_pi[log pi*] for the normalised Gaussian pi = N(0, SIGMA): minus its entropy."""
    return -gaussian_entropy(SIGMA)


def mean_and_mcse(values):
    values = np.asarray(values, dtype=float)
    return values.mean(), values.std(ddof=1) / np.sqrt(values.size)


def covariance_and_mcse(x):
    """Sample covariance of independent draws and the MCSE of each entry.

    For independent draws, S_ij = mean((x_i - m_i)(x_j - m_j)) is (up to O(1/n)) the mean of the
    i.i.d. products z_ij = (x_i - mu_i)(x_j - mu_j), so its standard error is sd(z_ij) / sqrt(n)
    (delta method; for a Gaussian, Var z_ij = S_ii S_jj + S_ij^2).
    """
    n = x.shape[0]
    centred = x - x.mean(axis=0)
    products = centred[:, :, None] * centred[:, None, :]
    cov = products.mean(axis=0) * n / (n - 1)
    mcse = products.std(axis=0, ddof=1) / np.sqrt(n)
    return cov, mcse


@pytest.fixture(scope="module")
def section_3_3():
    """Untuned and tuned T = 9 chains from P_0 = N(0, 3I) (P_0 kept fixed, as in section 3.3)."""
    model = gaussian_target()
    before = model_fingerprint(model)
    kwargs = dict(
        n_steps=9,
        leapfrog_steps=5,
        initial=P0,
        tune_initial=False,
        n_particles=100,
        learning_rate=0.05,
        progressbar=False,
    )
    untuned = fit_ergodic(model, n_iterations=0, random_seed=11, **kwargs)
    tuned = fit_ergodic(model, n_iterations=200, random_seed=11, **kwargs)
    assert model_fingerprint(model) == before
    return model, untuned, tuned


def test_section_3_3_tuned_chain_is_much_closer_than_untuned(section_3_3):
    _, untuned, tuned = section_3_3
    truth = expected_log_density_truth()
    x_t, lp_t, _ = tuned.run_chain(N_DRAWS, random_seed=123)
    x_u, lp_u, _ = untuned.run_chain(N_DRAWS, random_seed=123)
    err_tuned = abs(lp_t[-1].mean() - truth)
    err_untuned = abs(lp_u[-1].mean() - truth)
    # Untuned: about 3.6 nats off; tuned: a few hundredths (see the xfail below for the rest).
    assert err_tuned < 0.05 * err_untuned, (err_tuned, err_untuned)
    cov_err_t = np.abs(np.cov(x_t.T) - SIGMA).max()
    cov_err_u = np.abs(np.cov(x_u.T) - SIGMA).max()
    assert cov_err_t < 0.2 * cov_err_u, (cov_err_t, cov_err_u)
    # The training curve of Fig. 2 moved towards the truth from the untuned start.
    curve = tuned.expected_log_density
    assert curve.shape == (200,) and np.all(np.isfinite(curve))
    assert abs(np.mean(curve[-20:]) - truth) < 0.05 * abs(curve[0] - truth)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Measured: the EMLBO optimum is over-concentrated. P_9 covariance entries come out ~5% "
        "small ([[1.90, 1.40], [1.40, 1.51]]) and E_p9[log pi*] ~0.027 too high, the same with "
        "600 iterations at a lower learning rate and without stop-gradient; at 40k draws that "
        "is > 4 MCSE. Strict: flags itself if the bias goes away."
    ),
)
def test_section_3_3_tuned_chain_reaches_target_within_mcse(section_3_3):
    _, _, tuned = section_3_3
    x, log_density, _ = tuned.run_chain(4 * N_DRAWS, random_seed=123)
    truth = expected_log_density_truth()
    est, mcse = mean_and_mcse(log_density[-1])
    cov, cov_mcse = covariance_and_mcse(x)
    assert abs(est - truth) < 4 * mcse and np.all(np.abs(cov - SIGMA) < 4 * cov_mcse), (
        est, mcse, cov, cov_mcse,
    )


def test_section_3_3_tuned_chain_leaves_the_target_invariant(section_3_3):
    """The over-concentration above is the objective's, not a wrong kernel.

    Started from exact draws of the target, the tuned chain's last state must have the target's
    covariance (each M-H HMC transition leaves it invariant). Started from P_0 it comes out
    narrower (the xfail above): the tuned transitions exploit the transient from the wider P_0,
    which raises E_{p_T}[log pi*], the quantity eq. (4) rewards.
    """
    _, _, tuned = section_3_3
    n = 4 * N_DRAWS
    start = np.random.default_rng(7).multivariate_normal(np.zeros(2), SIGMA, size=n)
    x, _, _ = tuned.run_chain(n, random_seed=123, x0=start)
    cov, cov_mcse = covariance_and_mcse(x)
    assert np.all(np.abs(cov - SIGMA) < 4 * cov_mcse), (cov, cov_mcse)
    with pytest.raises(ValueError, match="x0 must have shape"):
        tuned.run_chain(3, x0=start[:2])


def test_section_3_3_untuned_chain_does_not(section_3_3):
    _, untuned, _ = section_3_3
    x, log_density, _ = untuned.run_chain(N_DRAWS, random_seed=123)
    truth = expected_log_density_truth()
    est, mcse = mean_and_mcse(log_density[-1])
    assert abs(est - truth) > 4 * mcse, (est, truth, mcse)
    cov, cov_mcse = covariance_and_mcse(x)
    assert np.any(np.abs(cov - SIGMA) > 4 * cov_mcse)
    # Untuned parameters are the paper's: step sizes in [0.01, 0.025], unit momentum variance.
    assert np.all((untuned.step_size >= 0.01) & (untuned.step_size <= 0.025))
    assert np.all(untuned.momentum_variance == 1.0)


def test_sample_returns_library_layout(section_3_3):
    model, _, tuned = section_3_3
    idata = tuned.sample(500, random_seed=1, chains=2)
    post = idata["posterior"]
    assert post["x"].shape == (2, 500, 2)
    assert "log_weight" not in idata["sample_stats"]
    assert idata["sample_stats"]["lp"].shape == (2, 500)
    assert idata.attrs["method"] == "ergodic_inference"
    assert idata.attrs["n_steps"] == 9
    # Reproducible for a given seed, different for another.
    again = tuned.sample(500, random_seed=1, chains=2)
    np.testing.assert_array_equal(post["x"].values, again["posterior"]["x"].values)
    other = tuned.sample(500, random_seed=2, chains=2)
    assert not np.array_equal(post["x"].values, other["posterior"]["x"].values)
    # lp is the model's log density at the draw.
    flat = post["x"].values.reshape(-1, 2)[:5]
    lp = idata["sample_stats"]["lp"].values.reshape(-1)[:5]
    np.testing.assert_allclose(lp, [model.compile_logp()({"x": v}) for v in flat])


@pytest.fixture(scope="module")
def transformed_model():
    with pm.Model(coords={"obs": np.arange(4)}) as model:
        mu = pm.Normal("mu", 0, 2)
        s = pm.HalfNormal("s", 1.5)
        pm.Normal("y", mu, s, observed=np.array([0.3, -0.2, 1.1, 0.5]), dims="obs")
    return model


@pytest.mark.slow  # ~100 s on the shared 2-core machine (compiling a 4-observation model twice)
def test_fit_is_reproducible_and_handles_transforms(transformed_model):
    before = model_fingerprint(transformed_model)
    kwargs = dict(n_steps=1, leapfrog_steps=1, n_particles=20, n_iterations=5, progressbar=False)
    a = fit_ergodic(transformed_model, random_seed=5, **kwargs)
    b = fit_ergodic(transformed_model, random_seed=5, **kwargs)
    np.testing.assert_array_equal(a.step_size, b.step_size)
    np.testing.assert_array_equal(a.objective, b.objective)
    np.testing.assert_array_equal(a.initial_mean, b.initial_mean)
    assert model_fingerprint(transformed_model) == before
    idata = a.sample(50, random_seed=0)
    assert np.all(idata["posterior"]["s"].values > 0)
    assert "s_log__" in idata["unconstrained_posterior"]
    np.testing.assert_allclose(
        np.log(idata["posterior"]["s"].values), idata["unconstrained_posterior"]["s_log__"].values
    )
    # Default bound: the prior's entropy (Gaussian moment-matched to prior draws), and P_0 starts
    # from the factorised version of that Gaussian, which is at least as wide.
    assert a.settings["entropy_lower_bound_source"] == "prior_gaussian_entropy"
    assert np.all(np.isfinite(a.initial_entropy)) and np.all(a.initial_entropy >= a.entropy_lower_bound)


def test_entropy_constraint_violation_is_an_error():
    model = gaussian_target()
    narrow = pmt.Base.from_moments(np.zeros(2), 0.5 * np.eye(2))  # H < H(pi)
    with pytest.raises(ValueError, match="widen `initial`"):
        fit_ergodic(model, initial=narrow, n_iterations=1, progressbar=False)
    with pytest.raises(ValueError, match="entropy"):
        fit_ergodic(model, initial=P0, entropy_lower_bound=10.0, n_iterations=1, progressbar=False)


def test_nan_objective_names_the_iteration(nan_model):
    with pytest.raises(ValueError, match="at iteration 0"):
        fit_ergodic(
            nan_model, n_steps=1, leapfrog_steps=1, n_particles=10, n_iterations=3,
            random_seed=0, progressbar=False,
        )


def test_discrete_model_is_refused(discrete_model):
    with pytest.raises(ValueError, match="discrete"):
        fit_ergodic(discrete_model, n_iterations=1, progressbar=False)
