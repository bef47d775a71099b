"""The ladder kernels: AIS's temperature schedule and annealing step exactly, and simulated
tempering's ladder conditional and its draws."""

import numpy as np
import pytest
from checks import seed
from scipy import stats

import pymc_tempering as pmt
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels import Info
from pymc_tempering.kernels.ladder import (
    AnnealParams,
    LadderParams,
    anneal_init,
    anneal_step,
    draw_ladder_index,
    ladder_init,
    ladder_log_conditional,
    ladder_step,
    temperature_schedule,
)


@pytest.mark.parametrize("schedule", ["sigmoid", "linear", "geometric"])
def test_schedule(schedule):
    betas = temperature_schedule(50, schedule)
    assert betas.shape == (50,) and betas[0] == 0.0 and betas[-1] == 1.0
    assert np.all(np.diff(betas) > 0)
    with pytest.raises(ValueError, match="schedule"):
        temperature_schedule(50, "cubic")
    with pytest.raises(ValueError, match="at least 2"):
        temperature_schedule(1)


def test_anneal_step_exact(normal_model):
    """One rung: the weight increment of eq. (10), the HMC step's Info, the run's bookkeeping."""
    model, _ = normal_model
    target = pmt.Target(model)
    base = pmt.Base.from_moments([0.3, -0.1], [[0.5, 0.1], [0.1, 0.3]])
    evaluate = hmc.whitened_density(target, base)
    betas = temperature_schedule(5, "linear")
    rng = np.random.default_rng(seed(1))
    start = anneal_init(hmc.init(rng.standard_normal((30, 2)), evaluate))
    assert start.index == 0 and not start.log_weight.any() and not start.diverged.any()
    params = AnnealParams(betas, 0.3, 3, evaluate)
    state, info = anneal_step(start, params, rng)
    expected = 0.25 * (start.position.log_target - start.position.log_base)
    np.testing.assert_allclose(state.log_weight, expected)
    assert state.index == 1
    np.testing.assert_array_equal(state.acceptance_rate, info.acceptance_rate)
    np.testing.assert_array_equal(state.diverged, info.diverging)
    state2, info2 = anneal_step(state, params, rng)
    np.testing.assert_allclose(
        state2.acceptance_rate, (info.acceptance_rate + info2.acceptance_rate) / 2
    )


@pytest.mark.parametrize("delta", [-1e4, -5.0, -1e-12, 0.0, 1e-12, 2.0, 1e4])
def test_ladder_conditional_exact_and_stable(delta):
    betas = np.linspace(0, 1, 11)
    log_p = ladder_log_conditional(np.array([delta]), betas)[0]
    assert np.all(np.isfinite(log_p))
    assert np.exp(log_p).sum() == pytest.approx(1.0, rel=1e-12)
    if abs(delta) < 50:
        ref = np.exp(-betas * delta) / np.exp(-betas * delta).sum()
        np.testing.assert_allclose(np.exp(log_p), ref, rtol=1e-12)
    else:  # all mass at the favoured end, the next rung exp(-|delta|/10) below
        end = 0 if delta > 0 else -1
        assert log_p[end] == pytest.approx(0.0, abs=1e-300)


def test_ladder_draws_follow_the_conditional():
    betas = np.linspace(0, 1, 6)
    log_p = ladder_log_conditional(np.array([1.7]), betas)[0]
    rng = np.random.default_rng(seed(1))
    idx = draw_ladder_index(np.broadcast_to(log_p, (50_000, 6)), rng.random(50_000))
    counts = np.bincount(idx, minlength=6)
    # the p-value is uniform under the null: each check fails with probability 1e-4
    assert stats.chisquare(counts, 50_000 * np.exp(log_p)).pvalue > 1e-4
    # the move: one uniform per chain, the same conditional for every rung; Delta(x) =
    # log zeta + log q(x) - log p(x) = 1.7 at every position
    n = 50_000
    position = hmc.TemperedState(
        z=np.zeros((n, 1)), log_target=np.full(n, -2.0), grad_target=np.zeros((n, 1)),
        log_base=np.full(n, -0.8), grad_base=np.zeros((n, 1)),
    )
    params = LadderParams(betas, log_zeta=0.5)
    start = ladder_init(position, np.zeros(n, dtype=int), params)
    np.testing.assert_allclose(start.log_conditional[0], log_p)
    state, info = ladder_step(start, params, rng)
    assert state.position is position
    np.testing.assert_allclose(state.log_conditional[0], log_p)
    counts = np.bincount(state.level, minlength=6)
    assert stats.chisquare(counts, n * np.exp(log_p)).pvalue > 1e-4
    # an exact draw: always accepted, never diverging; the energy is -log pi(x | beta) at the
    # new rung
    assert isinstance(info, Info)
    assert np.all(info.acceptance_rate == 1.0) and not info.diverging.any()
    np.testing.assert_allclose(info.energy, -hmc.tempered_logp(position, betas[state.level]))
