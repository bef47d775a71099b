"""Annealed importance sampling: the schedule and HMC numerics exactly, then the evidence of
analytic models within the standard error."""

import numpy as np
import pymc as pm
import pytest
from conftest import model_fingerprint
from scipy import stats
from targets import conjugate_normal, hierarchical_linear_gaussian

import pymc_tempering as pmt
from pymc_tempering.dynamics.ais import temperature_schedule
from pymc_tempering.kernels.hmc import (
    batched_logp_and_grad,
    hmc_step,
    initial_state,
    tempered_logp,
    whitened_density,
)
from pymc_tempering.estimators import log_mean_exp, weighted_mean

K = 4


@pytest.mark.parametrize("schedule", ["sigmoid", "linear", "geometric"])
def test_schedule(schedule):
    betas = temperature_schedule(50, schedule)
    assert betas.shape == (50,) and betas[0] == 0.0 and betas[-1] == 1.0
    assert np.all(np.diff(betas) > 0)
    with pytest.raises(ValueError, match="schedule"):
        temperature_schedule(50, "cubic")
    with pytest.raises(ValueError, match="at least 2"):
        temperature_schedule(1)


def test_batched_density_matches_target(normal_model):
    model, _ = normal_model
    target = pmt.Target(model)
    points = np.random.default_rng(0).normal(size=(7, target.ndim))
    logp, grad = batched_logp_and_grad(target)(points)
    for i, row in enumerate(points):
        lp, g = target.logp_and_grad(row)
        assert logp[i] == pytest.approx(lp, rel=1e-12)
        np.testing.assert_allclose(grad[i], g, rtol=1e-12)
    # whitened: log q is the base's, log p the target's at x = mean + L z
    base = pmt.Base.from_moments([0.3, -0.1], [[0.5, 0.1], [0.1, 0.3]])
    state = whitened_density(target, base)(points)
    x = base.unwhiten(points)
    np.testing.assert_allclose(state.log_base, base.logp(x), rtol=1e-12)
    np.testing.assert_allclose(state.log_target, target.logp(x), rtol=1e-12)


def test_hmc_step_leaves_a_gaussian_invariant():
    """beta = 0 is the standard normal in whitened coordinates: exact draws stay exact."""
    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=3)
    target = pmt.Target(model)
    base = pmt.Base.from_moments(np.zeros(3), np.ones(3))
    evaluate = whitened_density(target, base)
    rng = np.random.default_rng(1)
    state = initial_state(evaluate, 4000, 3, rng)
    for _ in range(5):
        state, accept = hmc_step(state, 0.0, 1.3, 4, evaluate, rng)
    assert 0.3 < accept.mean() < 1.0
    for col in state.z.T:  # independent runs: KS against N(0, 1)
        assert stats.kstest(col, "norm").pvalue > 1e-3
    np.testing.assert_allclose(tempered_logp(state, 1.0), state.log_target)


def test_log_mean_exp():
    rng = np.random.default_rng(0)
    w = rng.lognormal(0.0, 0.5, size=100_000)
    est, se = log_mean_exp(np.log(w))
    assert abs(est - 0.125) < K * se  # E[w] = exp(sigma^2 / 2)
    est2, _ = log_mean_exp(np.log(w) - 1e4)  # no underflow
    assert est2 == pytest.approx(est - 1e4)


@pytest.fixture(scope="module")
def conjugate_result():
    model, log_z, post_mean, post_sd = conjugate_normal()
    before = model_fingerprint(model)
    with model:
        idata = pmt.sample_ais(
            500, chains=4, n_temperatures=100, n_leapfrog=5, random_seed=11, progressbar=False
        )
    assert model_fingerprint(model) == before
    return idata, log_z, post_mean, post_sd


def test_conjugate_evidence_within_standard_error(conjugate_result):
    idata, log_z, post_mean, post_sd = conjugate_result
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.1
    assert abs(lml.estimate - log_z) < K * lml.standard_error
    mu = idata["posterior"]["mu"].values
    lw = idata["sample_stats"]["log_weight"].values
    mean, se = weighted_mean(mu[..., None], lw)
    assert abs(mean[0] - post_mean) < K * se[0]
    m2, se2 = weighted_mean((mu - post_mean)[..., None] ** 2, lw)
    assert abs(m2[0] - post_sd**2) < K * se2[0]


def test_result_layout(conjugate_result):
    idata = conjugate_result[0]
    assert idata["posterior"]["mu"].dims == ("chain", "draw")
    assert idata["posterior"].sizes == {"chain": 4, "draw": 500}
    stats_ = idata["sample_stats"]
    assert {"log_weight", "accept_rate", "log_marginal_likelihood"} <= set(stats_.data_vars)
    assert 0.5 < float(stats_["accept_rate"].mean()) < 1.0
    assert idata.attrs["method"] == "ais"
    assert all(np.ndim(v) == 0 for v in idata.attrs.values())
    assert "y" in idata["observed_data"]
    resampled = pmt.resample(idata, random_seed=0)
    assert resampled["posterior"]["mu"].dims == ("chain", "draw")


def test_transformed_variables_and_reproducible(normal_model):
    model, _ = normal_model
    base = pmt.Base.from_moments([0.4, -0.5], [[0.3, 0.05], [0.05, 0.2]])
    kwargs = dict(draws=20, chains=2, n_temperatures=10, base=base, model=model, progressbar=False)
    a = pmt.sample_ais(random_seed=3, **kwargs)
    b = pmt.sample_ais(random_seed=3, **kwargs)
    assert {"mu", "s", "mu_twice"} <= set(a["posterior"].data_vars)
    assert "s_log__" in a["unconstrained_posterior"]
    np.testing.assert_allclose(a["posterior"]["s"], np.exp(a["unconstrained_posterior"]["s_log__"]))
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    c = pmt.sample_ais(random_seed=4, **kwargs)
    assert not np.array_equal(a["posterior"]["mu"].values, c["posterior"]["mu"].values)
    for bad, match in [
        ({"n_leapfrog": 0}, "n_leapfrog"),
        ({"step_size": -1.0}, "step_size"),
        ({"target_accept": 1.5}, "target_accept"),
        ({"draws": 0}, "positive"),
        ({"base": pmt.Base.from_moments([0.0], [1.0])}, "dimension"),
    ]:
        with pytest.raises(ValueError, match=match):
            pmt.sample_ais(**{**kwargs, **bad})


def test_hierarchical_evidence_within_standard_error():
    model, log_z, post_mean = hierarchical_linear_gaussian()
    with model:
        idata = pmt.sample_ais(
            250, chains=4, n_temperatures=200, n_leapfrog=5, random_seed=3, progressbar=False
        )
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.5
    assert abs(lml.estimate - log_z) < K * lml.standard_error
