"""The base densities (Gaussian, mixture, prior): log densities, in NumPy and graphs, and draws."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from checks import seed
from scipy import stats

import pymc_tempering as pmt


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
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


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
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
    import pymc_tempering.bases.densities as densities

    monkeypatch.setattr(densities, "ELEMENTWISE_MAX_DIM", max_dim)
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
