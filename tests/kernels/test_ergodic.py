"""Hamiltonian ergodic inference's numerics: the statistic that tells whether further cycles of
the tuned chain moved its draws, which parameters each way of tuning ``P_0`` trains, and the two
kernels (the symbolic transition and the fit's Adam iteration)."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest


def test_cycle_drift_sees_a_change_and_no_change():
    """``cycle_drift``: draws that one more cycle left where they were score 0; draws whose
    spread one cycle widened by 20% (4000 draws: the paired z of the squared deviations is
    about 30) score far beyond the Bonferroni bound, as does a shift of the log density alone;
    rows that are not finite are dropped. The bound is the two-sided Bonferroni quantile for
    2 d + 1 statistics at family-wise rate 0.01."""
    from scipy.stats import norm

    from pymc_tempering.kernels.ergodic import CYCLE_DRIFT_ALPHA, cycle_drift

    rng = np.random.default_rng(0)  # fixed draws: the assertions hold by a wide margin
    x = rng.standard_normal((4000, 3))
    lp = -0.5 * (x**2).sum(axis=1)
    z, critical = cycle_drift(x, lp, x, lp)
    assert z == 0.0
    assert critical == pytest.approx(norm.isf(CYCLE_DRIFT_ALPHA / 14))
    wider = 1.2 * x
    assert cycle_drift(x, lp, wider, -0.5 * (wider**2).sum(axis=1))[0] > 10 * critical
    assert cycle_drift(x, lp, x, lp - 0.1 + 0.01 * rng.standard_normal(4000))[0] > 10 * critical
    x_nan = x.copy()
    x_nan[0] = np.nan
    assert cycle_drift(x_nan, lp, x, lp)[0] == 0.0


def test_tune_initial_true_in_any_spelling_tunes_p0():
    """``True`` (also ``1``, ``np.True_``, which the option check accepts) tunes P_0's mean and
    sds by the objective's gradient; ``False``, ``0`` and ``"stein"`` share one graph, which
    tunes P_0's common scale only (along the Stein gap, or not at all)."""
    from pymc_tempering.kernels import ergodic as hei

    params = hei.init_parameters(np.zeros(2), np.ones(2), np.full(3, 0.1))
    total = sum(pt.sum(p) for p in params)
    objective = hei.Objective(*[total] * 6)

    def tunes(flag, p):
        return any(q is p for q in hei.tuning_gradients(objective, params, flag)[0])

    for flag in (True, 1, np.True_):
        assert tunes(flag, params.mean) and tunes(flag, params.log_std), flag
        assert not tunes(flag, params.log_scale), flag
    for flag in (False, 0, "stein"):
        assert tunes(flag, params.log_scale) and not tunes(flag, params.mean), flag


def test_step_is_a_kernel_with_the_leapfrog_and_selection_of_eq_8():
    """``step(state, params, rng)`` on symbolic variables: for a standard normal target the
    proposal is the hand-written leapfrog, a uniform of 0 accepts it, a uniform of 1 keeps the
    start where the energy rises, and the info carries the acceptance probability, the
    divergence flag and the energy ``-log pi*`` of the returned state."""
    import pymc as pm

    import pymc_tempering as pmt
    from pymc_tempering.kernels import ergodic as hei

    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=2)
    target = pmt.Target(model)
    x0 = pt.matrix("x0", dtype="float64")
    eps_r = pt.matrix("eps_r", dtype="float64")
    u = pt.vector("u", dtype="float64")
    log_step = pt.scalar("log_step", dtype="float64")
    log_var = pt.vector("log_var", dtype="float64")
    params = hei.TransitionParams(target, log_step, log_var, 2, False)
    state, info = hei.step(hei.ChainState(x0, None), params, hei.TransitionNoise(eps_r, u))
    assert isinstance(state, hei.ChainState) and isinstance(info, hei.TransitionInfo)
    run = pm.compile([x0, eps_r, u, log_step, log_var], [*state, *info])

    rng = np.random.default_rng(0)
    x, noise = rng.standard_normal((5, 2)), rng.standard_normal((5, 2))
    h, var = 0.3, np.array([1.0, 2.0])
    r = np.sqrt(var) * noise
    y, s = x.copy(), r.copy()
    for _ in range(2):  # leapfrog with grad log pi* = -x and inverse mass 1 / var
        s = s - 0.5 * h * y
        y = y + h / var * s
        s = s - 0.5 * h * y
    log_pi = lambda z: -0.5 * (z**2).sum(axis=1) - np.log(2 * np.pi)  # noqa: E731
    log_accept = (log_pi(y) - 0.5 * (s**2 / var).sum(axis=1)) - (
        log_pi(x) - 0.5 * (r**2 / var).sum(axis=1)
    )
    args = (np.log(h), np.log(var))
    x_new, lp_new, prob, accepted, diverging, energy = run(x, noise, np.zeros(5), *args)
    np.testing.assert_allclose(x_new, y, rtol=1e-12)
    np.testing.assert_allclose(lp_new, log_pi(y), rtol=1e-12)
    np.testing.assert_allclose(prob, np.exp(np.minimum(log_accept, 0.0)), rtol=1e-12)
    assert accepted.all() and not diverging.any()
    np.testing.assert_allclose(energy, -lp_new)
    x_new, _, _, accepted, _, _ = run(x, noise, np.ones(5), *args)
    np.testing.assert_array_equal(accepted, log_accept > 0)
    np.testing.assert_array_equal(x_new[~accepted], x[~accepted])


def test_fit_step_draws_its_noise_and_averages_the_second_half():
    """``fit_step(state, params, rng)``: the noise shapes in order, the skipped counters and
    the Polyak-Ruppert sums from ``first_averaged`` on, with a stand-in training step."""
    from pymc_tempering.kernels import ergodic as hei

    shared = [pytensor.shared(np.zeros(3))]
    calls = []

    def train(eps0, eps_r, u):
        calls.append((eps0.shape, eps_r.shape, u.shape))
        shared[0].set_value(shared[0].get_value() + 1.0)
        finite = len(calls) != 2  # the second iteration is skipped
        return (np.array(1.0), np.array(-2.0), np.full(4, 0.5), np.array(3.0), np.array(0.1),
                np.array(finite))

    params = hei.FitParams(train, shared, n_particles=6, n_steps=4, ndim=3, first_averaged=1)
    state = hei.fit_init(shared)
    rng = np.random.default_rng(0)
    for _ in range(3):
        state, info = hei.fit_step(state, params, rng)
    assert calls == [((6, 3), (4, 6, 3), (4, 6))] * 3
    assert state.iteration == 3 and state.skipped == 1 and state.skipped_in_a_row == 0
    np.testing.assert_array_equal(state.sums[0], np.full(3, 2.0 + 3.0))  # iterations 1 and 2
    assert isinstance(info, hei.FitInfo) and not info.diverging and info.energy == 2.0
    np.testing.assert_array_equal(info.acceptance_rate, np.full(4, 0.5))
