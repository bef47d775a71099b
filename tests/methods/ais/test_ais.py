"""Annealed importance sampling: the evidence of analytic models within the standard error (the
schedule and the annealing kernel: tests/kernels/test_ladder.py; the HMC kernel:
tests/kernels/test_hmc.py)."""

import numpy as np
import pytest
from checks import assert_within_se, seed
from conftest import model_fingerprint
from pymc_tempering.problems.conjugate import conjugate_normal
from pymc_tempering.problems.gaussian import hierarchical_linear_gaussian

import pymc_tempering as pmt
from pymc_tempering.estimators import weighted_mean


@pytest.fixture(scope="module")
def conjugate_result():
    model, log_z, post_mean, post_sd = conjugate_normal()
    before = model_fingerprint(model)
    with model:
        idata = pmt.sample_ais(
            500, 64, 4, n_temperatures=100, n_leapfrog=5, random_seed=seed(11),
            progressbar=False,
        )
    assert model_fingerprint(model) == before
    return idata, log_z, post_mean, post_sd


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_conjugate_evidence_within_standard_error(conjugate_result):
    idata, log_z, post_mean, post_sd = conjugate_result
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.1
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
    mu = idata["posterior"]["mu"].values
    lw = idata["sample_stats"]["log_weight"].values
    mean, se = weighted_mean(mu[..., None], lw)
    assert_within_se(mean[0], post_mean, se[0], what="posterior mean")
    m2, se2 = weighted_mean((mu - post_mean)[..., None] ** 2, lw)
    assert_within_se(m2[0], post_sd**2, se2[0], what="posterior variance")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_result_layout(conjugate_result):
    idata = conjugate_result[0]
    assert idata["posterior"]["mu"].dims == ("chain", "draw")
    assert idata["posterior"].sizes == {"chain": 4, "draw": 500}
    stats_ = idata["sample_stats"]
    expected = {"log_weight", "acceptance_rate", "diverging", "lp", "log_marginal_likelihood"}
    assert expected <= set(stats_.data_vars)
    assert 0.5 < float(stats_["acceptance_rate"].mean()) < 1.0
    assert stats_["diverging"].dtype == bool
    assert idata.attrs["method"] == "ais"
    assert all(np.ndim(v) == 0 for v in idata.attrs.values())
    assert "y" in idata["observed_data"]
    resampled = pmt.resample(idata, random_seed=0)
    assert resampled["posterior"]["mu"].dims == ("chain", "draw")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_transformed_variables_and_reproducible(normal_model):
    model, _ = normal_model
    base = pmt.Base.from_moments([0.4, -0.5], [[0.3, 0.05], [0.05, 0.2]])
    kwargs = dict(draws=20, tune=30, chains=2, n_temperatures=10, base=base, model=model,
                  progressbar=False)
    a = pmt.sample_ais(random_seed=seed(3), **kwargs)
    b = pmt.sample_ais(random_seed=seed(3), **kwargs)
    assert {"mu", "s", "mu_twice"} <= set(a["posterior"].data_vars)
    assert "s_log__" in a["unconstrained_posterior"]
    np.testing.assert_allclose(a["posterior"]["s"], np.exp(a["unconstrained_posterior"]["s_log__"]))
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    c = pmt.sample_ais(random_seed=seed(4), **kwargs)
    assert not np.array_equal(a["posterior"]["mu"].values, c["posterior"]["mu"].values)
    # tune: pilot runs that adapt the step size; none with tune=0 or a given step size
    assert a.attrs["tune"] == 30 and a.attrs["mean_step_size"] != pytest.approx(2**-0.25)
    untuned = pmt.sample_ais(random_seed=seed(3), **{**kwargs, "tune": 0})
    assert untuned.attrs["mean_step_size"] == pytest.approx(2**-0.25)
    fixed = pmt.sample_ais(random_seed=seed(3), **{**kwargs, "step_size": 0.3})
    assert fixed.attrs["tune"] == 0 and fixed.attrs["mean_step_size"] == pytest.approx(0.3)
    for bad, match in [
        ({"n_leapfrog": 0}, "n_leapfrog"),
        ({"step_size": -1.0}, "step_size"),
        ({"target_accept": 1.5}, "target_accept"),
        ({"draws": 0}, "draws"),
        ({"tune": -1}, "tune"),
        ({"base": pmt.Base.from_moments([0.0], [1.0])}, "dimension"),
    ]:
        with pytest.raises(ValueError, match=match):
            pmt.sample_ais(**{**kwargs, **bad})


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow  # CT checks the same hierarchy in the default run
def test_hierarchical_evidence_within_standard_error():
    model, log_z, post_mean = hierarchical_linear_gaussian()
    with model:
        idata = pmt.sample_ais(
            250, 64, 4, n_temperatures=200, n_leapfrog=5, random_seed=seed(3), progressbar=False
        )
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.5
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
