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
    # Stochastic optimisation at PyMC's default learning rate leaves the scale ~10% off; the
    # ELBO is insensitive to that (a 10% scale error costs 0.005 nats of KL).
    assert base.mean[0] == pytest.approx(post_mean, abs=0.25 * post_sd)
    assert base.std[0] == pytest.approx(post_sd, rel=0.25)
    assert base.log_zeta == pytest.approx(log_z, abs=0.1)
    assert base.log_zeta < log_z + 0.02  # a lower bound, up to the noise of its average


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
