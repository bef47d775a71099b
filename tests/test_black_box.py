"""sample_ct at its defaults on the models where a plain ADVI base fails silently (issue 3)."""

import warnings

import matplotlib
import numpy as np
import pymc as pm
import pytest
from targets import conjugate_normal, four_mode_mixture, radon_linear_gaussian

import pymc_tempering as pmt

matplotlib.use("Agg")

K = 3  # the issue asks for 3 standard errors here


def test_radon_linear_gaussian_at_defaults():
    """85 groups, 919 observations: mean-field ADVI's ELBO is ~28 nats below log Z."""
    model, log_z, _ = radon_linear_gaussian()
    with model:
        idata = pmt.sample_ct(random_seed=2, progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.3
    assert abs(lml.estimate - log_z) < K * lml.standard_error
    rounds = idata["bootstrap"]
    assert rounds.sizes["round"] == 1
    assert idata.attrs["bootstrap"] == 1
    beta = idata["posterior"]["inverse_temperature"].values
    assert (beta < 0.1).mean() > 0.02 and (beta > 0.9).mean() > 0.02
    assert pmt.diagnose(idata).ok


def test_four_mode_mixture_at_defaults():
    """Full-rank ADVI fits one mode; the default mixture base and bootstrap find all four."""
    model, mean = four_mode_mixture()
    with model:
        idata = pmt.sample_ct(random_seed=1, progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    assert abs(lml.estimate - 0.0) < K * lml.standard_error
    summary = pmt.weighted_summary(idata, var_names=["x"])
    assert np.all(np.abs(summary["mean"].values - mean) < K * summary["mcse_mean"].values)
    x = idata["posterior"]["x"].values.reshape(-1, 2)
    for sx in (-1, 1):
        for sy in (-1, 1):  # every quadrant is visited
            assert np.any((np.sign(x[:, 0]) == sx) & (np.sign(x[:, 1]) == sy))


def test_bad_base_warns_naming_the_cause():
    model, _ = four_mode_mixture()
    one_mode = pmt.Base.from_moments([4.0, 4.0], [0.36, 0.36])
    with pytest.warns(UserWarning, match="never came near 0.*log_zeta is probably far below"):
        with model:
            pmt.sample_ct(
                500, tune=500, base=one_mode, log_zeta=-50.0, bootstrap=0, random_seed=0,
                progressbar=False,
            )


def test_good_run_raises_no_warning_and_diagnoses_ok():
    model, log_z, _, _ = conjugate_normal()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        idata = pmt.sample_ct(model=model, bootstrap=1, random_seed=3, progressbar=False)
    diagnosis = pmt.diagnose(idata)
    assert diagnosis.ok, str(diagnosis)
    assert {"beta_near_0", "pareto_khat", "base_moments_max_abs_z", "chains_log_z_chi2_p"} <= set(
        diagnosis.checks.index
    )


def test_base_from_result_matches_posterior():
    model, log_z, post_mean, post_sd = conjugate_normal()
    idata = pmt.sample_ct(model=model, bootstrap=0, random_seed=4, progressbar=False)
    base = pmt.base_from_result(idata, model)
    summary = pmt.weighted_summary(idata, var_names=["mu"])
    assert base.mean[0] == pytest.approx(summary.loc["mu", "mean"])
    assert base.std[0] == pytest.approx(summary.loc["mu", "sd"], rel=1e-6)
    assert base.log_zeta == idata.attrs["log_marginal_likelihood"]
    assert abs(base.mean[0] - post_mean) < 4 * summary.loc["mu", "mcse_mean"]
    with pytest.raises(ValueError, match="no log weights"):
        with pm.Model():
            pm.Normal("mu")
            plain = pm.sample(50, tune=50, chains=1, progressbar=False)
        pmt.base_from_result(plain, model)


def test_mixture_base_is_eq_25():
    """Six fits from dispersed prior draws find the four modes; eq. (25) weights them by ELBO.

    Each fit is exact for its mode (an isotropic Gaussian), so its ELBO is log w_i and eq. (25)'s
    log zeta is log sum w_i = 0, and the moment-matched mean is the mixture's, up to the
    optimiser's noise (ELBOs within ~0.1 nats of the optimum, as in test_base).
    """
    model, mean = four_mode_mixture()
    base = pmt.fit_base(model, method="mixture", n_fits=6, random_seed=0, progressbar=False)
    assert base.method == "mixture of 4"
    assert base.log_zeta == pytest.approx(0.0, abs=0.1)
    np.testing.assert_allclose(base.mean, mean, atol=0.3)
    # the covariance of the mixture: modes at +-4, weights 0.1/0.2/0.3/0.4, sd 0.6
    assert np.all(base.std > 3.5)
    with pytest.raises(ValueError, match="n_fits"):
        pmt.fit_base(model, method="mixture", n_fits=0, progressbar=False)


def test_plots_draw():
    model, _ = four_mode_mixture()
    base = pmt.Base.from_moments([1.6, 0.8], [17.0, 17.0])
    idata = pmt.sample_ct(
        300, tune=300, model=model, base=base, bootstrap=0, random_seed=5, progressbar=False
    )
    pmt.plot_inverse_temperature(idata)
    ax = pmt.plot_log_marginal_likelihood(idata)
    assert ax.get_ylabel() == "log marginal likelihood"
    axes = pmt.plot_joint(idata)
    assert len(axes) == 2


def test_bayes_factor_between_conjugate_models():
    """Two priors for the same data: the exact log Bayes factor is the difference of the
    closed-form evidences; the estimate must lie within K combined standard errors."""
    model_1, log_z_1, _, _ = conjugate_normal()
    data = model_1.rvs_to_values[model_1["y"]].data  # the same data for the second model
    from scipy import stats

    with pm.Model() as model_2:
        mu = pm.Normal("mu", -1.0, 0.5)
        pm.Normal("y", mu, 1.5, observed=data)
    n = len(data)
    cov = 0.25 * np.ones((n, n)) + 1.5**2 * np.eye(n)
    log_z_2 = stats.multivariate_normal(np.full(n, -1.0), cov).logpdf(data)
    runs = {
        "wide prior": pmt.sample_ct(model=model_1, random_seed=7, progressbar=False),
        "narrow prior": pmt.sample_ct(model=model_2, random_seed=8, progressbar=False),
    }
    bf = pmt.bayes_factor(runs["wide prior"], runs["narrow prior"])
    assert abs(bf.estimate - (log_z_1 - log_z_2)) < K * bf.standard_error
    table = pmt.compare_evidence(runs)
    assert list(table.columns) == [
        "log_marginal_likelihood", "standard_error", "log_bayes_factor",
        "log_bayes_factor_se", "posterior_probability",
    ]
    assert table["log_marginal_likelihood"].is_monotonic_decreasing
    assert table["posterior_probability"].sum() == pytest.approx(1.0)
    best = table.index[0]
    assert table.loc[best, "log_bayes_factor"] == 0.0
    exact_p1 = 1 / (1 + np.exp(log_z_2 - log_z_1))
    se_p1 = exact_p1 * (1 - exact_p1) * bf.standard_error  # delta method
    assert abs(table.loc["wide prior", "posterior_probability"] - exact_p1) < K * se_p1
    with pytest.raises(ValueError, match="prior must give"):
        pmt.compare_evidence(runs, prior={"wide prior": 1.0})


def test_log_marginal_likelihood_reads_pm_sample_smc():
    """``log_marginal_likelihood`` reads a ``pm.sample_smc`` result for comparisons: per chain the
    last finite stage value, pooled by the mean, no standard error."""
    model, log_z, *_ = conjugate_normal()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smc = pm.sample_smc(draws=300, chains=2, random_seed=3, progressbar=False)
    lml = pmt.log_marginal_likelihood(smc)
    raw = smc["sample_stats"]["log_marginal_likelihood"].values
    expected = [np.asarray(raw[c], dtype=float).ravel() for c in range(2)]
    expected = np.array([v[np.isfinite(v)][-1] for v in expected])
    np.testing.assert_array_equal(lml.per_chain, expected)
    assert lml.estimate == expected.mean() and np.isnan(lml.standard_error)
    assert lml.method == "smc"
    # sanity check against the closed form (one parameter: the two chains give -35.73 and
    # -35.59 against -35.64; the first stage's entry is NaN and must be skipped)
    assert abs(lml.estimate - log_z) < 0.5
