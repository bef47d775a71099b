"""The tempered HMC kernel: its density exactly, then invariance, Info, divergences and adaptation.

Statistical checks use independent chains (one kernel per row of a batch), so their draws are
independent and the standard errors of ``checks`` are calibrated; each comparison fails with
probability ~6e-5 (``K = 4``).
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from checks import assert_within_mcse, seed
from scipy import stats

import pymc_tempering as pmt
from pymc_tempering.kernels import Info
from pymc_tempering.kernels import hmc


def _gaussian(mean, cov):
    """A model ``x ~ N(mean, cov)`` and its target."""
    with pm.Model() as model:
        pm.MvNormal("x", mean, cov)
    return pmt.Target(model)


MEAN = np.array([1.0, -2.0, 0.5])
COV = np.array([[1.0, 0.6, 0.0], [0.6, 2.0, -0.3], [0.0, -0.3, 0.5]])


def test_batched_density_matches_target(normal_model):
    model, _ = normal_model
    target = pmt.Target(model)
    points = np.random.default_rng(0).normal(size=(7, target.ndim))
    logp, grad = target.batched_logp_and_grad()(points)
    for i, row in enumerate(points):
        lp, g = target.logp_and_grad(row)
        assert logp[i] == pytest.approx(lp, rel=1e-12)
        np.testing.assert_allclose(grad[i], g, rtol=1e-12)
    # whitened: log q is the base's, log p the target's at x = mean + L z
    base = pmt.Base.from_moments([0.3, -0.1], [[0.5, 0.1], [0.1, 0.3]])
    state = hmc.init(points, hmc.whitened_density(target, base))
    x = base.unwhiten(points)
    np.testing.assert_allclose(state.log_base, base.logp(x), rtol=1e-12)
    np.testing.assert_allclose(state.log_target, target.logp(x), rtol=1e-12)
    # gradients in z: d/dz = L^T d/dx, checked by finite differences of the tempered density
    beta, h = 0.7, 1e-6
    evaluate = hmc.whitened_density(target, base)
    for k in range(target.ndim):
        step = np.zeros(target.ndim)
        step[k] = h
        up = hmc.tempered_logp(evaluate(points + step), beta)
        down = hmc.tempered_logp(evaluate(points - step), beta)
        np.testing.assert_allclose(
            hmc.tempered_grad(state, beta)[:, k], (up - down) / (2 * h), rtol=1e-5, atol=1e-6
        )


def test_one_bad_row_leaves_the_others_alone(normal_model):
    """A row where a parameter check fails (s underflows to 0) is -inf on its own."""
    model, _ = normal_model
    target = pmt.Target(model)
    points = np.array([[0.1, 0.0], [0.2, -800.0], [0.3, 0.1]])
    logp, _ = target.batched_logp_and_grad()(points)
    assert logp[1] == -np.inf
    for i in (0, 2):
        assert logp[i] == pytest.approx(target.logp_and_grad(points[i])[0], rel=1e-12)


def test_step_leaves_the_base_invariant():
    """beta = 0 is the standard normal in whitened coordinates: exact draws stay exact."""
    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=3)
    target = pmt.Target(model)
    base = pmt.Base.from_moments(np.zeros(3), np.ones(3))
    evaluate = hmc.whitened_density(target, base)
    rng = np.random.default_rng(seed(1))
    state = hmc.init(rng.standard_normal((4000, 3)), evaluate)
    for _ in range(5):
        state, info = hmc.step(state, hmc.HMCParams(0.0, 1.3, 4, evaluate), rng)
    assert 0.3 < info.acceptance_rate.mean() < 1.0
    # Independent runs: KS against N(0, 1); a p-value is uniform under the null, so three
    # columns at 1e-4 fail together with probability 3e-4.
    for col in state.z.T:
        assert stats.kstest(col, "norm").pvalue > 1e-4
    np.testing.assert_allclose(hmc.tempered_logp(state, 1.0), state.log_target)


def test_step_leaves_a_gaussian_target_invariant():
    """Exact draws of a correlated Gaussian in, after HMC at beta = 1 its moments out.

    The base is deliberately off (shifted, isotropic), so the kernel's target density and the
    whitening both matter. 4000 independent chains give 4000 independent draws; 3 means and 3
    variances at K = 4 fail together with probability ~4e-4.
    """
    target = _gaussian(MEAN, COV)
    base = pmt.Base.from_moments(MEAN + 0.5, np.full(3, 1.5))
    evaluate = hmc.whitened_density(target, base)
    rng = np.random.default_rng(seed(2))
    x0 = rng.multivariate_normal(MEAN, COV, size=4000)
    z0 = np.linalg.solve(base.scale_tril, (x0 - base.mean).T).T
    state = hmc.init(z0, evaluate)
    accepted = []
    for _ in range(10):
        move = hmc.HMCParams(1.0, hmc.jittered(0.4, 4000, rng), 5, evaluate)
        state, info = hmc.step(state, move, rng)
        accepted.append(info.acceptance_rate.mean())
    assert np.mean(accepted) > 0.5  # the chains do move
    x = base.unwhiten(state.z)[None]  # (chain=1, draw=4000, 3): independent draws
    assert_within_mcse(x, MEAN, what="mean")
    assert_within_mcse((x - MEAN) ** 2, np.diag(COV), what="variance")


def test_info_fields_and_shapes():
    target = _gaussian(MEAN, COV)
    base = pmt.Base.from_moments(MEAN, COV)
    evaluate = hmc.whitened_density(target, base)
    rng = np.random.default_rng(seed(3))
    state = hmc.init(rng.standard_normal((50, 3)), evaluate)
    beta = np.linspace(0.0, 1.0, 50)
    new, info = hmc.step(state, hmc.HMCParams(beta, 0.5, 3, evaluate), rng)
    assert isinstance(info, Info) and isinstance(new, hmc.TemperedState)
    assert info.acceptance_rate.shape == info.diverging.shape == info.energy.shape == (50,)
    assert info.diverging.dtype == bool and not info.diverging.any()
    assert np.all((info.acceptance_rate >= 0) & (info.acceptance_rate <= 1))
    # energy: the tempered potential of the returned state; -log p(x) at beta = 1
    np.testing.assert_allclose(info.energy, -hmc.tempered_logp(new, beta))
    np.testing.assert_allclose(info.energy[-1], -new.log_target[-1])
    # a rejected chain keeps its state exactly, an accepted one moves
    moved = np.any(new.z != state.z, axis=1)
    assert moved.any()
    np.testing.assert_array_equal(new.log_target[~moved], state.log_target[~moved])
    with pytest.raises(AttributeError):
        new.z = state.z  # immutable


@pytest.mark.parametrize("kind", ["energy", "nan"])
def test_divergence_flagged(kind):
    """An exploding trajectory (step far beyond the stability limit) or a NaN log density."""
    with pm.Model() as model:
        x = pm.Normal("x", 0, 0.01 if kind == "energy" else 1, shape=2)
        if kind == "nan":  # undefined for x[0] < 2: most of the base
            pm.Potential("bad", pt.log(x[0] - 2.0))
    target = pmt.Target(model)
    base = pmt.Base.from_moments(np.full(2, 3.0 if kind == "nan" else 0.0), np.ones(2))
    evaluate = hmc.whitened_density(target, base)
    rng = np.random.default_rng(seed(4))
    state = hmc.init(rng.standard_normal((200, 2)) * (0.01 if kind == "energy" else 0.1), evaluate)
    assert np.all(np.isfinite(state.log_target))
    new, info = hmc.step(state, hmc.HMCParams(1.0, 2.0, 10, evaluate), rng)
    assert info.diverging.mean() > 0.5
    assert np.all(info.acceptance_rate[info.diverging] < 1e-100)
    np.testing.assert_array_equal(new.z[info.diverging], state.z[info.diverging])
    _, calm = hmc.step(state, hmc.HMCParams(1.0, 1e-4, 10, evaluate), rng)
    assert not calm.diverging.any()


def test_step_size_adaptation_is_exact():
    adaptation = hmc.step_size_adaptation_init(np.array([0.5, 2.0]))
    np.testing.assert_allclose(np.exp(adaptation.log_step_size), [0.5, 2.0])
    # above the target the step grows, below it shrinks; gain 1/sqrt(1) + 0.05 at iteration 0
    up = hmc.step_size_adaptation_update(adaptation, np.array([1.0, 0.2]), 0.8, 0, tune=10)
    np.testing.assert_allclose(
        up.log_step_size - adaptation.log_step_size, 1.05 * np.array([0.2, -0.6])
    )
    assert up.n_averaged == 0  # averaging starts at tune // 2
    for it in range(1, 10):
        up = hmc.step_size_adaptation_update(up, np.array([0.8, 0.8]), 0.8, it, tune=10)
    assert up.n_averaged == 5
    np.testing.assert_allclose(up.log_step_size_avg, up.log_step_size)  # constant after it 0
    assert hmc.adapt_log_step_size(0.0, 0.9, 0.8, gain=2.0) == pytest.approx(0.2)


@pytest.mark.parametrize("start", [5.0, 0.01])
def test_step_size_adaptation_reaches_the_target_acceptance(start):
    """From far too large or far too small, 300 warm-up steps bring the mean acceptance near 0.8.

    400 independent chains, each adapting its own step size: the mean acceptance over chains
    and 20 further steps has a standard error of about 0.01, far inside the 0.12 allowed.
    """
    target = _gaussian(MEAN, COV)
    base = pmt.Base.from_moments(MEAN, np.diag(COV))
    evaluate = hmc.whitened_density(target, base)
    rng = np.random.default_rng(seed(5))
    n, tune = 400, 300
    state = hmc.init(rng.standard_normal((n, 3)), evaluate)
    adaptation = hmc.step_size_adaptation_init(np.full(n, start))
    eps = np.exp(adaptation.log_step_size)
    for it in range(tune):
        move = hmc.HMCParams(1.0, hmc.jittered(eps, n, rng), 5, evaluate)
        state, info = hmc.step(state, move, rng)
        adaptation = hmc.step_size_adaptation_update(
            adaptation, info.acceptance_rate, 0.8, it, tune
        )
        eps = np.exp(adaptation.log_step_size)
    eps = np.exp(adaptation.log_step_size_avg)
    assert np.all(eps < start) if start > 1 else np.all(eps > start)
    rates = []
    for _ in range(20):
        move = hmc.HMCParams(1.0, hmc.jittered(eps, n, rng), 5, evaluate)
        state, info = hmc.step(state, move, rng)
        rates.append(info.acceptance_rate.mean())
    assert abs(np.mean(rates) - 0.8) < 0.12


def test_options_checked():
    assert hmc.check_options(3.0, None, 0.8) == 3
    for bad, match in [((0, None, 0.8), "n_leapfrog"), ((3, -1.0, 0.8), "step_size"),
                       ((3, np.nan, 0.8), "step_size"), ((3, None, 1.0), "target_accept")]:
        with pytest.raises(ValueError, match=match):
            hmc.check_options(*bad)
    eps = hmc.jittered(np.array([1.0, 2.0]), 2, np.random.default_rng(0))
    assert 0.8 <= eps[0] <= 1.2 and 1.6 <= eps[1] <= 2.4
