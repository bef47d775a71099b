"""Joint continuous tempering: the extended model exactly, then evidence and weights by sampling."""

import arviz as az
import numpy as np
import pymc as pm
import pytest
from arviz_stats.base.array import array_stats
from checks import assert_within_se, seed
from conftest import model_fingerprint
from scipy import stats
from scipy.special import expit, log_expit
from pymc_tempering.problems.conjugate import beta_binomial, conjugate_normal, dirichlet_multinomial
from pymc_tempering.problems.gaussian import hierarchical_linear_gaussian
from pymc_tempering.problems.mixtures import TWO_MODES_SEP as SEP
from pymc_tempering.problems.mixtures import bimodal_mixture, two_modes
from targets import numeric_grad, reference_logp

import pymc_tempering as pmt
from pymc_tempering.bases import find_modes
from pymc_tempering.checks import missed_modes
from pymc_tempering.estimators import weighted_mean
from pymc_tempering.target import Target

BASE_MEAN = np.array([0.4, -0.5])
BASE_COV = np.array([[0.3, 0.05], [0.05, 0.2]])
LOG_ZETA = -4.2


def reference_ct_logp(x, u, y):
    """Eq. (15) written out by hand for the normal_model fixture."""
    beta = expit(u)
    logq = stats.multivariate_normal(BASE_MEAN, BASE_COV).logpdf(x)
    log_dbeta = log_expit(u) + log_expit(-u)
    return beta * (reference_logp(x, y) - LOG_ZETA) + (1 - beta) * logq + log_dbeta


@pytest.fixture
def ct_setup(normal_model):
    model, y = normal_model
    base = pmt.Base.from_moments(BASE_MEAN, BASE_COV)
    before = model_fingerprint(model)
    ct_model = pmt.continuously_tempered_model(model, base, log_zeta=LOG_ZETA)
    assert model_fingerprint(model) == before
    return model, ct_model, y


def test_extended_model_structure(ct_setup):
    model, ct_model, _ = ct_setup
    assert ct_model.parent is None
    assert [v.name for v in ct_model.value_vars] == ["mu", "s_log__", "temperature_control"]
    names = {d.name for d in ct_model.deterministics}
    assert {"s", "mu_twice", "inverse_temperature"} <= names
    assert dict(ct_model.coords) == dict(model.coords)


def test_extended_logp_and_gradient_match_reference(ct_setup):
    _, ct_model, y = ct_setup
    logp_fn, dlogp_fn = ct_model.compile_logp(), ct_model.compile_dlogp()
    for x, u in [((0.1, -0.3), 0.0), ((-1.5, 0.8), 2.5), ((2.0, -2.0), -3.0), ((0.5, 0.1), 7.0)]:
        point = {"mu": np.array(x[0]), "s_log__": np.array(x[1]), "temperature_control": np.array(u)}
        ref = reference_ct_logp(np.array(x), u, y)
        assert logp_fn(point) == pytest.approx(ref, rel=1e-7)
        full = np.array([*x, u])
        ref_grad = numeric_grad(lambda z: reference_ct_logp(z[:2], z[2], y), full)
        np.testing.assert_allclose(dlogp_fn(point), ref_grad, rtol=1e-6, atol=1e-8)


def test_extended_model_ends_are_target_and_base(ct_setup):
    model, ct_model, y = ct_setup
    logp_fn = ct_model.compile_logp()
    base_logpdf = stats.multivariate_normal(BASE_MEAN, BASE_COV).logpdf
    for x in [np.array([0.1, -0.3]), np.array([-1.5, 0.8])]:
        for u, expected in [(40.0, reference_logp(x, y) - LOG_ZETA), (-40.0, base_logpdf(x))]:
            point = {"mu": x[0], "s_log__": x[1], "temperature_control": np.array(u)}
            log_dbeta = log_expit(u) + log_expit(-u)
            assert logp_fn(point) - log_dbeta == pytest.approx(expected, rel=1e-7)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_extended_model_bad_input(normal_model, discrete_model, no_free_model):
    model, _ = normal_model
    before = model_fingerprint(model)
    with pytest.raises(ValueError, match="dimension 3 but the model's unconstrained space has dimension 2"):
        pmt.continuously_tempered_model(model, pmt.Base.from_moments(np.zeros(3), np.eye(3)), 0.0)
    with pytest.raises(ValueError, match="log_zeta must be a finite number"):
        pmt.continuously_tempered_model(model, pmt.Base.from_moments(np.zeros(2), np.eye(2)))
    with pytest.raises(ValueError, match="base is required"):
        pmt.continuously_tempered_model(model, None, 0.0)
    with pytest.raises(TypeError, match="pymc_tempering.Base"):
        pmt.continuously_tempered_model(model, (np.zeros(2), np.eye(2)), 0.0)
    assert model_fingerprint(model) == before
    with pytest.raises(ValueError, match="discrete"):
        pmt.sample_ct(model=discrete_model, progressbar=False)
    with pytest.raises(ValueError, match="no free variables"):
        pmt.sample_ct(model=no_free_model, progressbar=False)
    with pytest.raises(ValueError, match="dimension"):
        pmt.sample_ct(model=model, base=pmt.Base.from_moments(np.zeros(1), np.eye(1)), progressbar=False)
    assert model_fingerprint(model) == before


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_sample_ct_bad_input_advi_nan(nan_model):
    before = model_fingerprint(nan_model)
    with pytest.raises(ValueError, match="diverged to NaN"):
        with nan_model:
            pmt.sample_ct(progressbar=False, random_seed=seed(0))
    assert model_fingerprint(nan_model) == before


@pytest.fixture(scope="module")
def conjugate_result():
    model, log_z, post_mean, post_sd = conjugate_normal()
    before = model_fingerprint(model)
    with model:
        idata = pmt.sample_ct(random_seed=seed(11), progressbar=False)
    assert model_fingerprint(model) == before
    return idata, model, log_z, post_mean, post_sd


# The evidence of the conjugate model, for every method, is in test_conformance.py.


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_conjugate_weighted_posterior(conjugate_result):
    idata, _, _, post_mean, post_sd = conjugate_result
    summary = pmt.weighted_summary(idata, var_names=["mu"])
    row = summary.loc["mu"]
    # CT weights p(beta = 1 | x) are bounded, so Kish's ESS is a large fraction of the 4000
    # draws (~40%); 500 is a precondition with a wide margin, not a property of the seed.
    assert summary.attrs["ess_weights"] > 500
    assert_within_se(row["mean"], post_mean, row["mcse_mean"], what="weighted mean of mu")
    # the weighted second moment, through the same estimator
    lw = idata["sample_stats"]["log_weight"].values
    mu = idata["posterior"]["mu"].values
    m2, se2 = weighted_mean((mu - post_mean)[..., None] ** 2, lw)
    assert_within_se(m2[0], post_sd**2, se2[0], what="weighted variance of mu")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_result_layout(conjugate_result):
    idata, model, _, _, _ = conjugate_result
    post = idata["posterior"]
    assert {"mu", "inverse_temperature", "temperature_control"} <= set(post.data_vars)
    assert post["mu"].dims == ("chain", "draw")
    beta = post["inverse_temperature"].values
    np.testing.assert_allclose(beta, expit(post["temperature_control"].values))
    stats_ = idata["sample_stats"]
    assert stats_["log_weight"].dims == ("chain", "draw")
    assert stats_["log_marginal_likelihood"].dims == ("chain",)
    assert np.all(np.isfinite(stats_["log_weight"].values))
    assert "y" in idata["observed_data"]
    assert idata.attrs["method"] == "continuous_tempering"
    assert {"log_marginal_likelihood", "log_marginal_likelihood_se", "log_zeta"} <= set(idata.attrs)
    assert all(np.ndim(v) == 0 for v in idata.attrs.values())


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_resample_works_with_arviz(conjugate_result):
    idata, _, _, post_mean, post_sd = conjugate_result
    resampled = pmt.resample(idata, random_seed=seed(0))
    assert resampled["posterior"]["mu"].dims == ("chain", "draw")
    n = idata["posterior"].sizes["chain"] * 1000
    assert resampled["posterior"].sizes["draw"] == n
    summary = az.summary(resampled, var_names=["mu"])
    # the resampled mean = the weighted mean + resampling noise, whose variance is at most
    # sd^2 / n (multinomial; stratified resampling has less)
    mcse = pmt.weighted_summary(idata, var_names=["mu"]).loc["mu", "mcse_mean"]
    se = np.hypot(mcse, post_sd / np.sqrt(n))
    assert_within_se(summary.loc["mu", "mean"], post_mean, se, what="resampled mean of mu")
    import matplotlib

    matplotlib.use("Agg")
    az.plot_dist(resampled, var_names=["mu"])
    az.plot_trace_dist(resampled, var_names=["mu"])
    smaller = pmt.resample(idata, draws=500, random_seed=seed(0))
    assert smaller["posterior"].sizes["draw"] == 500
    xr_same = pmt.resample(idata, random_seed=seed(0))["posterior"]["mu"].values
    np.testing.assert_array_equal(resampled["posterior"]["mu"].values, xr_same)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_weighted_summary_defaults_to_model_variables(conjugate_result):
    idata = conjugate_result[0]
    summary = pmt.weighted_summary(idata)
    assert list(summary.index) == ["mu"]
    assert {"mean", "sd", "eti_lo", "median", "eti_hi", "mcse_mean", "ess_weights"} <= set(summary)
    with pytest.raises(ValueError, match="not in the posterior"):
        pmt.weighted_summary(idata, var_names=["nope"])


def test_reserved_names_refused():
    with pm.Model() as model:
        pm.Normal("inverse_temperature")
    with pytest.raises(ValueError, match="rename them"):
        pmt.continuously_tempered_model(model, pmt.Base.from_moments([0.0], [1.0]), 0.0)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow  # 22 s (five runs); test_conformance checks same seed, same draws for every sampler
def test_same_seed_same_result():
    model, _, _, _ = conjugate_normal(n_obs=5)
    kwargs = dict(
        draws=200, tune=200, chains=2, bootstrap=1, bootstrap_draws=100, random_seed=seed(5),
        progressbar=False, model=model,
    )
    a, b = pmt.sample_ct(**kwargs), pmt.sample_ct(**kwargs)  # base fits, bootstrap and all
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    assert a.attrs["log_marginal_likelihood"] == b.attrs["log_marginal_likelihood"]
    quick = {**kwargs, "bootstrap": 0, "base": pmt.Base.from_moments([0.0], [1.0])}
    g1 = pmt.sample_ct(**{**quick, "random_seed": np.random.default_rng(seed(1))})
    g2 = pmt.sample_ct(**{**quick, "random_seed": np.random.default_rng(seed(1))})
    np.testing.assert_array_equal(g1["posterior"]["mu"].values, g2["posterior"]["mu"].values)
    c = pmt.sample_ct(**{**quick, "random_seed": seed(6)})
    assert not np.array_equal(g1["posterior"]["mu"].values, c["posterior"]["mu"].values)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_hierarchical_evidence_within_standard_error():
    """53 parameters (50 group intercepts, a mean and two slopes), default ADVI base."""
    model, log_z, post_mean = hierarchical_linear_gaussian()
    with model:
        idata = pmt.sample_ct(random_seed=seed(3), progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.5
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
    beta = idata["posterior"]["inverse_temperature"].values
    assert (beta < 0.1).mean() > 0.01 and (beta > 0.9).mean() > 0.01  # both ends visited
    summary = pmt.weighted_summary(idata, var_names=["mu_a", "b"])
    exact = np.concatenate([[post_mean[0]], post_mean[-2:]])
    # three comparisons at K: 3 * 6.3e-5, still far below 1e-3
    assert_within_se(summary["mean"].values, exact, summary["mcse_mean"].values, what="means")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize(
    "make",
    [beta_binomial, pytest.param(dirichlet_multinomial, marks=pytest.mark.slow)],  # 33 s
)
def test_constrained_models_evidence_within_standard_error(make):
    """Interval and simplex transforms: the Jacobians must enter log Z exactly once."""
    model, log_z, post_mean = make()
    with model:
        idata = pmt.sample_ct(random_seed=seed(4), progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    assert 0 < lml.standard_error < 0.2
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
    summary = pmt.weighted_summary(idata, var_names=["p"])
    assert_within_se(summary["mean"].values, np.ravel(post_mean), summary["mcse_mean"].values,
                     what="posterior means")


class TestBimodal:
    """1-D mixture 0.3 N(-3, 0.5^2) + 0.7 N(3, 0.5^2), log Z = 0: the barrier is 18 nats."""

    def test_plain_nuts_stays_in_one_mode(self):
        model, _, _, _ = bimodal_mixture()
        idata = pm.sample(
            500, tune=500, chains=4, model=model, random_seed=seed(1), progressbar=False
        )
        upper = (idata["posterior"]["x"].values > 0).mean(axis=1)
        # no chain ever crosses the 18-nat barrier after tuning: NUTS would need a trajectory
        # through a density e^-18 below the modes, for any seed
        assert set(upper) <= {0.0, 1.0}

    @pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
    def test_sample_ct_recovers_mode_weights(self):
        model, weights, mean, var = bimodal_mixture()
        base = pmt.Base.from_moments([mean], [var])  # moment-matched, as in section 7.1
        with model:
            idata = pmt.sample_ct(base=base, draws=8000, random_seed=seed(2), progressbar=False)
        x = idata["posterior"]["x"].values
        lw = idata["sample_stats"]["log_weight"].values
        frac, se = weighted_mean((x > 0).astype(float)[..., None], lw)
        # Trust the standard error only with enough effective draws of the weighted indicator.
        # The chains change mode only through excursions to beta ~ 0, so this ESS varies a lot
        # between seeds: at 3000 draws per chain it was 82, 197 and 285 for seeds 2, 1 and 3
        # (82 failed "ESS > 100" on two machines). 8000 draws put the worst of those near 220:
        # ESS > 100 and se < 0.05 (which needs ESS > ~85) hold with a margin of 2 or more.
        w = np.exp(lw - lw.max())
        ess = array_stats.ess(w * ((x > 0) - frac[0]), chain_axis=0, draw_axis=1, method="mean")
        assert ess > 100
        assert 0 < se[0] < 0.05
        assert_within_se(frac[0], weights[1], se[0], what="weight of the upper mode")
        lml = pmt.log_marginal_likelihood(idata)
        assert_within_se(lml.estimate, 0.0, lml.standard_error, what="log Z")
        # every chain visits both modes (a chain visits each a few dozen times in 8000 draws)
        assert np.all((x > 0).any(axis=1)) and np.all((x < 0).any(axis=1))


@pytest.fixture(scope="module")
def small_base():
    """A transformed variable (s_log__) too: PyMC's converters drop such names unless told."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        s = pm.HalfNormal("s", 1.5)
        pm.Deterministic("mu_twice", 2 * mu)
        pm.Normal("y", mu, s, observed=np.array([0.3, -0.2, 1.1, 0.5, 0.9]))
    return model, pmt.fit_base(model, n=3000, random_seed=seed(0), progressbar=False)


def _run_backend(small_base, sampler, chains=2):
    model, base = small_base
    idata = pmt.sample_ct(
        100, tune=100, chains=chains, model=model, base=base, nuts_sampler=sampler,
        bootstrap=0, random_seed=seed(0), progressbar=False,
    )
    post = idata["posterior"]
    assert {"mu", "s", "mu_twice", "inverse_temperature"} <= set(post.data_vars)
    assert "s_log__" in idata["unconstrained_posterior"]
    # computed from the stored free variables, not by the sampler (stored_variables)
    np.testing.assert_allclose(post["s"], np.exp(idata["unconstrained_posterior"]["s_log__"]))
    np.testing.assert_allclose(post["mu_twice"], 2 * post["mu"])
    np.testing.assert_allclose(post["inverse_temperature"], expit(post["temperature_control"]))
    assert np.isfinite(pmt.log_marginal_likelihood(idata).estimate)
    assert idata.attrs["nuts_sampler"] == sampler


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize("sampler", ["pymc", "nutpie"])
def test_runs_under_sampler(small_base, sampler):
    _run_backend(small_base, sampler)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize("sampler", ["pymc", "nutpie"])
def test_nuts_kwargs_survive_a_second_run_and_stay_the_callers(small_base, sampler):
    """pm.sample writes target_accept into the nuts dict it is given: the bootstrap round's
    run then made the final run raise "target_accept was defined twice", and the caller's
    dict came back changed."""
    model, base = small_base
    nuts = {"max_treedepth": 8}
    idata = pmt.sample_ct(
        50, tune=50, chains=2, model=model, base=base, nuts_sampler=sampler, bootstrap=1,
        bootstrap_draws=50, max_extensions=0, nuts=nuts, random_seed=seed(0), progressbar=False,
    )
    assert nuts == {"max_treedepth": 8}
    assert idata["bootstrap"].sizes["round"] == 1
    empty = {}  # an empty dict was passed on as it was, and written into
    pmt.sample_ct(
        50, tune=50, chains=2, model=model, base=base, nuts_sampler=sampler, bootstrap=1,
        bootstrap_draws=50, max_extensions=0, nuts=empty, random_seed=seed(0), progressbar=False,
    )
    assert empty == {}
    with pytest.raises(ValueError, match="target_accept was given twice"):
        pmt.sample_ct(
            50, tune=50, model=model, base=base, nuts={"target_accept": 0.95}, progressbar=False
        )
    with pytest.raises(ValueError, match="var_names is not taken"):
        pmt.sample_ct(50, tune=50, model=model, var_names=["mu"], progressbar=False)  # no fit


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_runs_under_numpyro(small_base):
    pytest.importorskip("numpyro")
    _run_backend(small_base, "numpyro")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_numpyro_takes_pymcs_deprecated_keyword(small_base):
    """``nuts_sampler_kwargs``, which PyMC 6.4 still accepts alone, is merged into the ``nuts``
    that the method passes (pm.sample refuses both), with PyMC's FutureWarning."""
    pytest.importorskip("numpyro")
    model, base = small_base
    with pytest.warns(FutureWarning, match="nuts_sampler_kwargs` is deprecated"):
        idata = pmt.sample_ct(
            100, tune=100, chains=2, model=model, base=base, nuts_sampler="numpyro",
            nuts_sampler_kwargs={"chain_method": "vectorized"}, bootstrap=0,
            random_seed=seed(0), progressbar=False,
        )
    assert np.isfinite(pmt.log_marginal_likelihood(idata).estimate)
    with pytest.raises(ValueError, match="both in nuts_sampler_kwargs and in nuts"), \
            pytest.warns(FutureWarning, match="nuts_sampler_kwargs` is deprecated"):
        pmt.sample_ct(model=model, nuts_sampler="numpyro", nuts_sampler_kwargs={"a": 1},
                      nuts={"a": 2}, progressbar=False)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_blackjax_is_refused_before_the_fit(small_base):
    """PyMC 6.4 with BlackJAX 1.7.1 (the newest releases) fails inside pm.sample; the methods
    refuse it at once, naming the upstream problem. When a release mends it, the check in
    ``contract.pm_sample_kwargs`` should go, and ``pm.sample`` shows whether it has."""
    model, _ = small_base
    with pytest.raises(ValueError, match="blackjax.*progress_bar.*nutpie"):
        pmt.sample_ct(model=model, nuts_sampler="blackjax", progressbar=False)
    with pytest.raises(ValueError, match="blackjax"):
        pmt.sample_gibbs_ct(model=model, nuts_sampler="blackjax", progressbar=False)


def _one_mode_run(max_extensions, random_seed):
    """sample_ct with a base on the left mode only, carrying the mode search's optima."""
    model = two_modes()
    modes = find_modes(Target(model), random_seed=random_seed)
    base = pmt.Base(mean=[-SEP], cov=[[1.0]], modes=modes)
    with model:
        return pmt.sample_ct(
            draws=500,
            tune=500,
            chains=2,
            base=base,
            log_zeta=-np.log(2.0),
            bootstrap=0,
            max_extensions=max_extensions,
            random_seed=random_seed,
            progressbar=False,
        )


@pytest.fixture(scope="module")
def one_mode_run():
    with pytest.warns(UserWarning, match="missed a mode"):
        return _one_mode_run(0, seed(83))


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_missed_mode_fires_when_the_base_sees_one_of_two_modes(one_mode_run):
    # The base N(-8, 1) puts the right mode 16 sd away, behind a valley of 32 nats: no draw at
    # any temperature reaches it.
    missed, mass = missed_modes(one_mode_run)
    assert missed.sum() == 1 and mass == pytest.approx(0.5, abs=1e-6)
    lml = pmt.log_marginal_likelihood(one_mode_run)
    assert not lml.reliable
    assert any("missed a mode" in p for p in lml.problems)
    # ... the path's estimate is exactly the confidently wrong answer it guards against: log 2
    # low. The regions' summed masses (the missed mode importance-sampled from its optimum's
    # proposal) disagree with it, and the result reports theirs, still flagged.
    a = one_mode_run.attrs
    path, path_se = a["log_marginal_likelihood_path"], a["log_marginal_likelihood_path_se"]
    assert abs(path + np.log(2.0)) < 4 * path_se + 0.05
    assert any("two estimates of log Z disagree" in p for p in lml.problems)
    assert abs(lml.estimate) < 4 * lml.standard_error + 0.05


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_missed_mode_quiet_when_the_base_covers_both_modes():
    model = two_modes()
    modes = find_modes(Target(model), random_seed=seed(84))
    base = pmt.Base(mean=[0.0], cov=[[SEP**2 + 1.0]], modes=modes)
    with model:
        idata = pmt.sample_ct(
            draws=500, tune=500, chains=2, base=base, bootstrap=0, max_extensions=0,
            random_seed=seed(85), progressbar=False,
        )
    checks = pmt.diagnose(idata).checks
    assert checks.loc["missed_mode_mass", "ok"]
    assert checks.loc["missed_mode_mass", "value"] == 0.0


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_run_widens_its_base_to_a_missed_mode_and_gets_the_evidence():
    idata = _one_mode_run(1, seed(86))
    kinds = list(idata["bootstrap"]["kind"].values)
    # the widened base's run has MISSED_MODE_GROWTH (2) times the draws: more excursions
    assert kinds == ["extension after a missed mode and 1000 draws per chain"]
    assert idata.attrs["extensions"] == 1 and idata["posterior"].sizes["draw"] == 1000
    lml = pmt.log_marginal_likelihood(idata)
    assert pmt.diagnose(idata).checks.loc["missed_mode_mass", "ok"]
    assert_within_se(lml.estimate, 0.0, lml.standard_error, what="log Z after widening")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_run_raises_target_accept_after_divergences():
    """A wall in the log density (a drop of 1e4 nats at |x| = 2) makes NUTS diverge whenever a
    trajectory at beta > 0 crosses it; the run is repeated halfway closer to an acceptance of 1,
    and the bootstrap group records why."""
    with pm.Model():
        x = pm.Normal("x", 0.0, 3.0)
        pm.Potential("wall", pm.math.switch(abs(x) < 2.0, 0.0, -1e4))
        idata = pmt.sample_ct(
            draws=300, tune=300, chains=2, bootstrap=0, max_extensions=1,
            random_seed=seed(87), progressbar=False,
        )
    first = idata["bootstrap"].to_dataset().isel(round=0)
    assert first["divergences"] > 0
    assert "divergences" in str(first["kind"].values)
    assert float(first["target_accept"]) == 0.9
    assert idata.attrs["target_accept"] == pytest.approx(0.95)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_run_extends_itself_while_the_standard_error_is_above_target_se():
    # a Student-t: the Laplace base is not the target, so the standard error is Monte Carlo
    # error far above the rounding floor (1e-7 here) and far above target_se
    with pm.Model():
        pm.StudentT("x", nu=3.0, mu=1.0, sigma=2.0)
        idata = pmt.sample_ct(
            draws=200, tune=200, chains=2, max_extensions=1, target_se=1e-5,
            random_seed=seed(90), progressbar=False,
        )
        with pytest.raises(ValueError, match="target_se"):
            pmt.sample_ct(target_se=-1.0, progressbar=False)
    assert idata.attrs["bootstrap"] == 0  # the base sample_ct fitted
    (kind,) = idata["bootstrap"]["kind"].values
    assert "standard error" in str(kind) and "refit" in str(kind)
    assert idata.attrs["extensions"] == 1
    # the chains of the repeat are longer: by the factor the standard error asks for, at most 4
    assert idata["bootstrap"]["draws"].values.tolist() == [200]
    assert idata["posterior"].sizes["draw"] == 800 and "800 draws per chain" in str(kind)
    # still above target_se when the budget is spent: unreliable, and the reason given
    lml = pmt.log_marginal_likelihood(idata)
    assert not lml.reliable
    assert any("above target_se" in p for p in lml.problems)
    assert not pmt.diagnose(idata).checks.loc["standard_error", "ok"]
    idata.attrs["target_se"] = 1.0  # the same run asked for less precision: no problem
    assert pmt.diagnose(idata).checks.loc["standard_error", "ok"]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_max_time_stops_the_extensions_and_says_so():
    """A wall-clock budget the first final run already spends: no extension starts, the result
    says why (``stopped_by``, a warning) and is the run ``max_extensions=0`` gives, bit for bit
    (the extensions' seeds come after the final run's). The budget is checked against the
    projected end, so a budget this small cannot be met on any machine."""
    kwargs = dict(draws=200, tune=200, chains=2, target_se=1e-5, random_seed=seed(90),
                  progressbar=False)
    with pm.Model():
        pm.StudentT("x", nu=3.0, mu=1.0, sigma=2.0)
        with pytest.warns(UserWarning, match=r"Stopped extending after .* past max_time"):
            idata = pmt.sample_ct(max_extensions=1, max_time=1e-3, **kwargs)
        with pytest.warns(UserWarning, match="above target_se"):
            plain = pmt.sample_ct(max_extensions=0, **kwargs)
        for bad in (0.0, -1.0, "1 min"):
            with pytest.raises(ValueError, match="max_time"):
                pmt.sample_ct(max_time=bad, progressbar=False)
            with pytest.raises(ValueError, match="max_time"):
                pmt.sample_gibbs_ct(max_time=bad, progressbar=False)
    assert idata.attrs["stopped_by"] == "max_time" and idata.attrs["max_time"] == 1e-3
    assert idata.attrs["extensions"] == 0 and "bootstrap" not in idata.children
    assert "stopped_by" not in plain.attrs
    assert idata.attrs["log_marginal_likelihood"] == plain.attrs["log_marginal_likelihood"]
    lml = pmt.log_marginal_likelihood(idata)
    assert not lml.reliable and any("max_time" in p for p in lml.problems)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_target_se_below_the_rounding_floor_is_the_floor():
    """A standard error at the rounding floor (1e-7 |log Z|: the log densities are no more
    accurate) is not extended and passes: no longer chain lowers it. Before, a normal mean with
    100,000 data (log Z = -1.1e6) had a floor of 1.1 nats, above the default target_se, and every
    run was extended twice and marked unreliable."""
    rng = np.random.default_rng(3)
    n, sigma, m0, s0 = 20_000, np.float64(2e4), 1e5, 1e5  # float64: exact constants
    y = rng.normal(1.3e5, sigma, size=n)
    ybar, ss = y.mean(), np.sum((y - y.mean()) ** 2)
    log_z = (
        -0.5 * n * np.log(2 * np.pi * sigma**2) - ss / (2 * sigma**2)
        + 0.5 * np.log(2 * np.pi * sigma**2 / n)
        + stats.norm.logpdf(ybar, m0, np.sqrt(s0**2 + sigma**2 / n))
    )
    with pm.Model():
        mu = pm.Normal("mu", m0, s0)
        pm.Normal("y", mu, sigma, observed=y)
        idata = pmt.sample_ct(
            draws=200, tune=200, chains=2, target_se=1e-4, random_seed=seed(91), progressbar=False
        )
    lml = pmt.log_marginal_likelihood(idata)
    floor = 1e-7 * abs(lml.estimate)
    assert floor > 1e-4  # the case: target_se below the floor
    assert lml.standard_error == pytest.approx(floor)
    assert idata.attrs["extensions"] == 0
    assert lml.reliable, lml.problems
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")
