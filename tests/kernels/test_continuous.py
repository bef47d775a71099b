"""The continuous tempering kernels on a batch: the joint kernel's gradients exactly, and the
Gibbs kernel's draw of beta against its conditional (eq. 17)."""

import numpy as np
from checks import seed
from scipy import stats
from scipy.special import expit

import pymc_tempering as pmt
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels.continuous import (
    JointState,
    TemperingParams,
    _joint_grads,
    _joint_logp,
    gibbs_init,
    gibbs_step,
    joint_init,
    joint_step,
)


def _setup(normal_model, n=40):
    model, _ = normal_model
    target = pmt.Target(model)
    base = pmt.Base.from_moments([0.3, -0.1], [[0.5, 0.1], [0.1, 0.3]])
    evaluate = hmc.whitened_density(target, base)
    rng = np.random.default_rng(seed(2))
    return evaluate, hmc.init(rng.standard_normal((n, 2)), evaluate), rng


def test_joint_gradients_are_those_of_its_log_density(normal_model):
    evaluate, position, rng = _setup(normal_model)
    u = rng.normal(0.0, 2.0, size=position.z.shape[0])
    log_zeta, h = -7.3, 1e-6
    gz, gu = _joint_grads(position, u, log_zeta)
    numeric_u = (_joint_logp(position, u + h, log_zeta) - _joint_logp(position, u - h, log_zeta)) / (2 * h)
    np.testing.assert_allclose(gu, numeric_u, rtol=1e-5, atol=1e-6)
    for i in range(2):
        step = np.zeros(2)
        step[i] = h
        up, down = evaluate(position.z + step), evaluate(position.z - step)
        numeric = (_joint_logp(up, u, log_zeta) - _joint_logp(down, u, log_zeta)) / (2 * h)
        np.testing.assert_allclose(gz[:, i], numeric, rtol=1e-5, atol=1e-6)


def test_gibbs_draws_beta_from_its_conditional(normal_model):
    """Each chain's beta after a step is its truncated exponential given the new position: the
    probability integral transforms are uniform."""
    evaluate, position, rng = _setup(normal_model, n=2000)
    params = TemperingParams(-8.0, 0.3, 3, evaluate)
    state, info = gibbs_step(gibbs_init(position, params, rng), params, rng)
    delta = -8.0 + state.position.log_base - state.position.log_target
    pit = -np.expm1(-delta * state.beta) / -np.expm1(-delta)  # the CDF of eq. (17) at beta
    assert stats.kstest(pit, "uniform").pvalue > 1e-4
    assert info.acceptance_rate.shape == (2000,) and np.all((state.beta >= 0) & (state.beta <= 1))


def test_joint_step_reports_its_move(normal_model):
    evaluate, position, rng = _setup(normal_model)
    state = joint_init(position, rng)
    assert isinstance(state, JointState)
    np.testing.assert_allclose(state.beta, expit(state.u))
    new, info = joint_step(state, TemperingParams(-8.0, 0.2, 4, evaluate), rng)
    moved = np.any(new.position.z != state.position.z, axis=1)
    assert 0 < moved.sum() < len(moved) + 1 and np.all(moved == (new.u != state.u))
    np.testing.assert_allclose(info.energy, -_joint_logp(new.position, new.u, -8.0))
