import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from checks import seed
from conftest import model_fingerprint
from scipy import stats
from targets import conjugate_normal

import pymc_tempering as pmt


@pytest.mark.parametrize("diagonal", [True, False])
def test_from_moments_density_and_sampler(diagonal):
    rng = np.random.default_rng(seed(0))
    mean = np.array([0.5, -1.0, 2.0])
    if diagonal:
        cov = np.array([0.5, 2.0, 1.5])
        full = np.diag(cov)
    else:
        a = rng.normal(size=(3, 3))
        full = cov = a @ a.T + np.eye(3)
    base = pmt.Base.from_moments(mean, cov, log_zeta=-3.0)
    assert base.diagonal == diagonal
    assert base.log_zeta == -3.0
    ref = stats.multivariate_normal(mean, full)
    x = rng.normal(size=(5, 3))
    np.testing.assert_allclose(base.logp(x), ref.logpdf(x), rtol=1e-12)
    xs = pt.vector("x")
    fn = pytensor.function([xs], base.logp_graph(xs))
    np.testing.assert_allclose([fn(r) for r in x], ref.logpdf(x), rtol=1e-12)
    # the same density from pieces of the flat vector, as a model's value variables
    a, b = pt.scalar("a"), pt.vector("b", shape=(2,))
    fn_pieces = pytensor.function([a, b], base.logp_graph([a, b]))
    np.testing.assert_allclose([fn_pieces(r[0], r[1:]) for r in x], ref.logpdf(x), rtol=1e-12)
    with pytest.raises(ValueError, match="2 elements; the base has 3"):
        base.logp_graph([b])
    draws = base.sample(20_000, random_seed=seed(1))
    # mean within 5 standard errors, covariance within 5 standard errors of its entries (12
    # comparisons at 5 sigma: 12 * 5.7e-7 by chance)
    se_mean = np.sqrt(np.diag(full) / len(draws))
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se_mean)
    se_cov = np.sqrt((np.outer(np.diag(full), np.diag(full)) + full**2) / len(draws))
    assert np.all(np.abs(np.cov(draws.T) - full) < 5 * se_cov)
    np.testing.assert_array_equal(draws, base.sample(20_000, random_seed=seed(1)))


def test_from_moments_bad_input():
    with pytest.raises(ValueError, match="does not match"):
        pmt.Base.from_moments(np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="positive definite"):
        pmt.Base.from_moments(np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="finite"):
        pmt.Base.from_moments(np.array([np.nan, 0.0]), np.eye(2))


@pytest.mark.parametrize("method", ["advi", "fullrank_advi"])
def test_fit_base_on_conjugate_model(method):
    # The posterior is Gaussian, so ADVI is exact: its ELBO is log Z up to optimisation noise.
    model, log_z, post_mean, post_sd = conjugate_normal()
    before = model_fingerprint(model)
    base = pmt.fit_base(model, method=method, n=20_000, random_seed=seed(0), progressbar=False)
    assert model_fingerprint(model) == before
    assert base.method == method and base.ndim == 1
    # Stochastic optimisation (Adam, step 0.01, stopped at a plateau) may leave the scale ~10%
    # off; the ELBO is insensitive to that (a 10% scale error costs 0.005 nats of KL).
    assert base.mean[0] == pytest.approx(post_mean, abs=0.25 * post_sd)
    assert base.std[0] == pytest.approx(post_sd, rel=0.25)
    assert base.log_zeta == pytest.approx(log_z, abs=0.1)
    assert base.log_zeta < log_z + 0.02  # a lower bound, up to the noise of its average


def test_advi_cuts_its_step_then_stops_when_the_elbo_stops_improving():
    from pymc_tempering.base import (
        ADVI_DECAY,
        ADVI_TOLERANCE,
        ADVI_WINDOW,
        _plateau,
        _ReduceOnPlateau,
    )

    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 1.0, 6 * ADVI_WINDOW)
    falling = 100.0 - 20 * ADVI_TOLERANCE * np.arange(4 * ADVI_WINDOW) / ADVI_WINDOW + noise[: 4 * ADVI_WINDOW]
    for i in (ADVI_WINDOW, 2 * ADVI_WINDOW, 3 * ADVI_WINDOW, 4 * ADVI_WINDOW):
        assert not _plateau(falling[:i])  # still gaining 20 tolerances a window
    # window means differ by ~0.006 (noise sd 0.1), far below the tolerance
    flat = 100.0 + 0.1 * noise
    assert _plateau(flat[: 3 * ADVI_WINDOW])
    # one flat window after a falling one is not yet a plateau
    assert not _plateau(np.concatenate([falling[:ADVI_WINDOW] + 50.0, flat[: 2 * ADVI_WINDOW]]))

    step = pytensor.shared(0.01)
    callback = _ReduceOnPlateau(step)
    callback(None, flat[: 3 * ADVI_WINDOW + 1], 3 * ADVI_WINDOW + 1)  # not at a window's end
    assert step.get_value() == 0.01
    callback(None, flat[: 3 * ADVI_WINDOW], 3 * ADVI_WINDOW)  # first plateau: a smaller step
    assert step.get_value() == pytest.approx(0.01 * ADVI_DECAY)
    # the next plateau is judged on the windows after the cut only
    callback(None, flat[: 5 * ADVI_WINDOW], 5 * ADVI_WINDOW)
    with pytest.raises(StopIteration):
        callback(None, flat[: 6 * ADVI_WINDOW], 6 * ADVI_WINDOW)


def test_fit_base_orders_like_target(normal_model):
    model, _ = normal_model
    assert pmt.fit_base(model, n=500, random_seed=seed(0), progressbar=False).diagonal
    base = pmt.fit_base(model, method="fullrank_advi", n=3000, random_seed=seed(0), progressbar=False)
    target = pmt.Target(model)
    assert base.ndim == target.ndim
    assert not base.diagonal and base.cov[0, 1] != 0
    # mu's posterior mean is near the data mean; log s near log(sd(y)) ~ -0.9
    point = target.unravel(base.mean)
    assert abs(point["mu"] - 0.5) < 0.5
    assert point["s_log__"] < 0.5


def test_fit_base_prior(normal_model):
    model, _ = normal_model
    base = pmt.fit_base(model, method="prior", n=4000, random_seed=seed(0))
    assert base.log_zeta is None
    # mu ~ N(0, 2): mean 0, sd 2; log s for HalfNormal(1.5) has sd pi / (2 sqrt 2) ~ 1.11
    assert abs(base.mean[0]) < 5 * 2 / np.sqrt(4000)
    assert base.std[0] == pytest.approx(2.0, rel=0.1)
    assert base.std[1] == pytest.approx(np.pi / np.sqrt(8), rel=0.1)


def test_fit_base_bad_input(discrete_model, no_free_model, nan_model, normal_model):
    with pytest.raises(ValueError, match="discrete"):
        pmt.fit_base(discrete_model, progressbar=False)
    with pytest.raises(ValueError, match="no free variables"):
        pmt.fit_base(no_free_model, progressbar=False)
    with pytest.raises(ValueError, match="Unknown base method"):
        pmt.fit_base(normal_model[0], method="svgd", progressbar=False)
    before = model_fingerprint(nan_model)
    with pytest.raises(ValueError, match="diverged to NaN"):
        pmt.fit_base(nan_model, n=2000, random_seed=seed(0), progressbar=False)
    assert model_fingerprint(nan_model) == before


def test_estimate_log_zeta_on_conjugate_model():
    model, log_z, post_mean, post_sd = conjugate_normal()
    target = pmt.Target(model)
    base = pmt.Base.from_moments([post_mean], [post_sd**2])  # the exact posterior
    assert pmt.estimate_log_zeta(target, base, n=100, random_seed=seed(0)) == pytest.approx(log_z)


def test_mixture_base_density_draws_and_moments():
    """A MixtureBase is an exact mixture: its log density is scipy's, its draws have the moments
    it reports, and its moment-matched Gaussian keeps a defensive share only with several parts."""
    a = pmt.Base.from_moments([-3.0, 0.0], [0.5, 1.0])
    b = pmt.Base.from_moments([2.0, 1.0], [[1.0, 0.3], [0.3, 0.6]])
    mix = pmt.MixtureBase(components=(a, b), weights=[1.0, 3.0], log_zeta=-1.0)
    np.testing.assert_allclose(mix.weights, [0.25, 0.75])
    x = np.random.default_rng(seed(0)).normal(size=(6, 2))
    ref = np.logaddexp(
        np.log(0.25) + stats.multivariate_normal(a.mean, a.cov).logpdf(x),
        np.log(0.75) + stats.multivariate_normal(b.mean, b.cov).logpdf(x),
    )
    np.testing.assert_allclose(mix.logp(x), ref, rtol=1e-12)
    draws = mix.sample(40_000, random_seed=seed(1))
    se_mean = np.sqrt(np.diag(mix.cov) / len(draws))
    assert np.all(np.abs(draws.mean(0) - mix.mean) < 5 * se_mean)
    # variances: the se of a sample variance is at most sqrt(E[(x - m)^4] / n); bound it by draws
    dev = (draws - mix.mean) ** 2
    assert np.all(np.abs(dev.mean(0) - np.diag(mix.cov)) < 5 * dev.std(0) / np.sqrt(len(draws)))
    # The Gaussian is defensive: moment-matched with the weights blended half and half with
    # equal ones (0.375, 0.625 here), and it tells the bootstrap to keep half of it.
    gauss = mix.gaussian()
    blended = pmt.MixtureBase(components=(a, b), weights=[0.375, 0.625])
    np.testing.assert_allclose(gauss.mean, blended.mean)
    np.testing.assert_allclose(gauss.cov, blended.cov)
    assert gauss.log_zeta == -1.0 and gauss.defensive_weight == 0.5
    assert pmt.MixtureBase(components=(a,), weights=[1.0]).gaussian().defensive_weight == 0
    with pytest.raises(ValueError, match="one weight per"):
        pmt.MixtureBase(components=(a, b), weights=[1.0])
    with pytest.raises(ValueError, match="positive exactly when"):
        pmt.MixtureBase(components=(a,), weights=[1.0], prior_weight=0.2)


def test_prior_density_is_the_normalised_prior_on_the_flat_space():
    """The prior component is PyMC's prior with the log transform's Jacobian: for mu ~ N(1, 2)
    and s ~ HalfNormal(1.5) it is N(mu; 1, 2) * HalfNormal(e^v; 1.5) * e^v at (mu, v = log s)."""
    import pymc as pm

    with pm.Model() as model:
        pm.Normal("mu", 1.0, 2.0)
        s = pm.HalfNormal("s", 1.5)
        pm.Normal("y", 0.0, s, observed=[0.3, -0.2])  # the likelihood is not part of it
    target = pmt.Target(model)
    prior = pmt.PriorDensity(target, n_moments=20_000, random_seed=seed(0))
    x = np.random.default_rng(seed(1)).normal(size=(5, 2))
    ref = stats.norm(1.0, 2.0).logpdf(x[:, 0]) + stats.halfnorm(scale=1.5).logpdf(np.exp(x[:, 1])) + x[:, 1]
    np.testing.assert_allclose(prior.logp(x), ref, atol=1e-7)  # PyMC's constants: ~1e-8
    # moments of the draws against the closed forms: E[mu] = 1, E[log s] = log(1.5) + E[log|Z|]
    e_log_abs_z = -0.5 * (np.euler_gamma + np.log(2.0))
    se = np.sqrt(np.diag(prior.cov) / 20_000)
    assert np.all(np.abs(prior.mean - [1.0, np.log(1.5) + e_log_abs_z]) < 5 * se)
    mix = pmt.MixtureBase(
        components=(pmt.Base.from_moments([1.0, 0.0], [0.1, 0.1]),), weights=[1.0],
        prior=prior, prior_weight=0.25,
    )
    np.testing.assert_allclose(
        mix.logp(x),
        np.logaddexp(np.log(0.75) + mix.components[0].logp(x), np.log(0.25) + ref),
        atol=1e-7,
    )
    # the same density in a graph, from the flat vector and from the model's value variables
    xs = pt.vector("x")
    np.testing.assert_allclose([pytensor.function([xs], mix.logp_graph(xs))(r) for r in x], mix.logp(x))
    a, b = pt.scalar("a"), pt.scalar("b")
    fn = pytensor.function([a, b], mix.logp_graph([a, b]))
    np.testing.assert_allclose([fn(*r) for r in x], mix.logp(x))
    with pm.Model() as flat:
        pm.Flat("a")
    with pytest.raises(ValueError, match="improper"):
        pmt.PriorDensity(pmt.Target(flat))


@pytest.mark.parametrize("max_dim", [0, 256])
def test_full_rank_logp_graph_and_gradient_both_forms(monkeypatch, max_dim):
    """The full-rank quadratic form as a matrix product (above ELEMENTWISE_MAX_DIM) and
    elementwise (below) gives the density and its gradient of the closed form."""
    import pymc_tempering.base as base_module

    monkeypatch.setattr(base_module, "ELEMENTWISE_MAX_DIM", max_dim)
    rng = np.random.default_rng(seed(2))
    a = rng.normal(size=(4, 4))
    cov, mean = a @ a.T + np.eye(4), rng.normal(size=4)
    base = pmt.Base.from_moments(mean, cov)
    s, v = pt.scalar("s"), pt.vector("v", shape=(3,))
    logp = base.logp_graph([s, v])
    fn = pytensor.function([s, v], [logp, *pytensor.grad(logp, [s, v])])
    precision = np.linalg.inv(cov)
    for x in rng.normal(size=(3, 4)):
        value, grad_s, grad_v = fn(x[0], x[1:])
        np.testing.assert_allclose(value, stats.multivariate_normal(mean, cov).logpdf(x), rtol=1e-12)
        np.testing.assert_allclose(np.r_[grad_s, grad_v], -precision @ (x - mean), rtol=1e-9, atol=1e-12)


def test_advi_fits_of_one_base_compile_once_and_reach_the_closed_form(monkeypatch):
    """The ADVI fits of one base compile one step function per method (_AdviSteps), with the
    noise as an input and no random generator, and reach the closed-form optimum of a Gaussian
    target as pymc.fit does: mean-field ADVI's optimum is the mean and 1 / sqrt(diag(S^-1)),
    full-rank ADVI's the mean and S. pymc.fit with the same optimiser and stop comes within
    0.11 standard deviations of them over 12 seeds (Adam's last iterate jitters), these fits
    within 0.08; the bound is 0.2. After a fit that diverged to NaN the next fit starts
    afresh."""
    import pymc as pm
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.tensor.random.type import RandomType

    from pymc_tempering.base import ADVI_ITERATIONS, _AdviSteps, _fit_advi

    compiled = []
    compile_step = _AdviSteps._compile

    def counting(self, method, *args, **kwargs):
        compiled.append(method)
        return compile_step(self, method, *args, **kwargs)

    monkeypatch.setattr(_AdviSteps, "_compile", counting)
    cov = np.array([[2.0, 0.8, 0.3], [0.8, 1.0, -0.2], [0.3, -0.2, 0.5]])
    mean = np.array([1.0, -2.0, 0.5])
    with pm.Model() as model:
        pm.MvNormal("x", mean, cov)
    target = pmt.Target(model)
    steps = _AdviSteps(model)
    optimum_sd = {
        "advi": 1 / np.sqrt(np.diag(np.linalg.inv(cov))),
        "fullrank_advi": np.sqrt(np.diag(cov)),
    }
    for k in range(3):
        for method, sd in optimum_sd.items():
            start = {"x": mean + (k - 1.0)}
            fit = _fit_advi(target, method, ADVI_ITERATIONS, seed(k), False, steps=steps, start=start)
            assert np.max(np.abs(fit.mean - mean) / sd) < 0.2
            assert np.max(np.abs(np.sqrt(np.diag(fit.cov)) / sd - 1)) < 0.2
    assert compiled == ["advi", "fullrank_advi"]
    for method in optimum_sd:
        step = steps._compiled[method][1]
        shared = [v for v in step.maker.fgraph.inputs if isinstance(v, SharedVariable)]
        assert shared and not any(isinstance(v.type, RandomType) for v in shared)

    with pm.Model() as nan_far_left:
        x = pm.Normal("x", 0, 1)
        pm.Potential("nan", pt.switch(x > -10, 0.0, np.nan))
    target = pmt.Target(nan_far_left)
    steps = _AdviSteps(nan_far_left)
    for s, start in [(seed(6), 0.5), (seed(7), -20.0), (seed(8), 1.0)]:
        kwargs = {"start": {"x": start}}
        if start < -10:
            with pytest.raises(ValueError, match="diverged to NaN"):
                _fit_advi(target, "advi", 1500, s, False, steps=steps, **kwargs)
            continue
        fit = _fit_advi(target, "advi", ADVI_ITERATIONS, s, False, steps=steps, **kwargs)
        assert abs(fit.mean[0]) < 0.2 and abs(fit.std[0] - 1) < 0.2


def test_advi_fits_share_no_step_function_with_an_optimiser_of_the_users():
    import pymc as pm

    from pymc_tempering.base import _AdviSteps

    assert _AdviSteps.can_share("advi", {"start": {}, "start_sigma": {}, "obj_n_mc": 2})
    assert _AdviSteps.can_share("fullrank_advi", {"callbacks": []})
    assert not _AdviSteps.can_share("advi", {"obj_optimizer": pm.adam(learning_rate=0.1)})
    assert not _AdviSteps.can_share("advi", {"more_updates": {}})
    assert not _AdviSteps.can_share("advi", {"score": False})
    assert not _AdviSteps.can_share("fullrank_advi", {"start_sigma": {}})


def test_advi_fits_start_at_widths_above_the_overflow_of_pymcs_softplus_inverse():
    """A mean-field fit started at a width of 2000 (PyMC's log(expm1(sigma)) is inf above 709):
    the fit of N(5000, 2000^2) stays finite and near it, where it diverged to NaN."""
    import pymc as pm

    from pymc_tempering.base import _fit_advi

    with pm.Model() as model:
        pm.Normal("x", 5000.0, 2000.0)
    target = pmt.Target(model)
    fit = _fit_advi(
        target, "advi", 3000, seed(3), False, start_sd=np.array([2000.0]), start={"x": 5000.0}
    )
    assert np.isfinite(fit.log_zeta)
    assert abs(fit.mean[0] - 5000.0) < 200 and abs(fit.std[0] / 2000.0 - 1) < 0.1
