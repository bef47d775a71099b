"""Simulated tempering: the Rao-Blackwellised evidence of analytic models within the standard
error (the ladder conditional and its draws: tests/kernels/test_ladder.py)."""

import numpy as np
import pytest
from checks import assert_within_se, seed
from conftest import model_fingerprint
from pymc_tempering.problems.conjugate import conjugate_normal
from pymc_tempering.problems.gaussian import hierarchical_linear_gaussian

import pymc_tempering as pmt


@pytest.fixture(scope="module")
def conjugate_result():
    model, log_z, post_mean, post_sd = conjugate_normal()
    before = model_fingerprint(model)
    with model:
        idata = pmt.sample_simulated_tempering(random_seed=seed(11), progressbar=False)
    assert model_fingerprint(model) == before
    return idata, log_z, post_mean


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_conjugate_evidence_within_standard_error(conjugate_result):
    idata, log_z, post_mean = conjugate_result
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.2
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
    row = pmt.weighted_summary(idata, var_names=["mu"]).loc["mu"]
    assert_within_se(row["mean"], post_mean, row["mcse_mean"], what="posterior mean")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_result_layout(conjugate_result):
    idata = conjugate_result[0]
    post = idata["posterior"]
    assert {"mu", "inverse_temperature"} <= set(post.data_vars)
    beta = post["inverse_temperature"].values
    assert set(np.unique(beta)) <= set(np.linspace(0, 1, 101))
    assert (beta < 0.1).mean() > 0.01 and (beta > 0.9).mean() > 0.01
    stats_ = idata["sample_stats"]
    expected = {"log_weight", "acceptance_rate", "diverging", "lp", "step_size",
                "log_marginal_likelihood"}
    assert expected <= set(stats_)
    assert stats_["diverging"].dtype == bool
    assert 0.3 < float(stats_["acceptance_rate"].mean()) < 1.0
    assert idata.attrs["method"] == "simulated_tempering"
    assert all(np.ndim(v) == 0 for v in idata.attrs.values())


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_bad_input_and_reproducible(normal_model):
    model, _ = normal_model
    base = pmt.Base.from_moments([0.4, -0.5], [[0.3, 0.05], [0.05, 0.2]])
    kwargs = dict(draws=30, tune=30, chains=2, base=base, log_zeta=-4.2, model=model,
                  progressbar=False)
    a = pmt.sample_simulated_tempering(random_seed=seed(3), **kwargs)
    b = pmt.sample_simulated_tempering(random_seed=seed(3), **kwargs)
    np.testing.assert_array_equal(a["posterior"]["s"].values, b["posterior"]["s"].values)
    assert "s_log__" in a["unconstrained_posterior"]
    for bad, match in [
        ({"n_leapfrog": 0}, "n_leapfrog"),
        ({"step_size": 0.0}, "step_size"),
        ({"draws": 2}, "draws"),
        ({"tune": -1}, "tune"),
        ({"target_accept": 0.0}, "target_accept"),
        ({"n_temperatures": 1}, "at least 2"),
        ({"base": pmt.Base.from_moments([0.0], [1.0])}, "dimension"),
    ]:
        with pytest.raises(ValueError, match=match):
            pmt.sample_simulated_tempering(**{**kwargs, **bad})


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow  # CT checks the same hierarchy in the default run
def test_hierarchical_evidence_within_standard_error():
    model, log_z, post_mean = hierarchical_linear_gaussian()
    with model:
        idata = pmt.sample_simulated_tempering(random_seed=seed(3), progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.5
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
    summary = pmt.weighted_summary(idata, var_names=["mu_a", "b"])
    exact = np.concatenate([[post_mean[0]], post_mean[-2:]])
    assert_within_se(summary["mean"].values, exact, summary["mcse_mean"].values, what="means")
