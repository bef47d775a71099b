"""The thermostat kernel (:mod:`pymc_tempering.kernels.thermostats`): the coupling, the Euler
step, Theorem 1's thermostat values, the kernel's report and errors, and the kick bound.

Statistical checks are ``|estimate - truth| < K * standard error`` (``tests/checks.py``,
``K = 4``). Seeds come from ``checks.seed`` (shifted by ``PMT_TEST_SEED``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
import scipy.linalg
from checks import assert_within_se, seed

from pymc_tempering.contract import DivergenceError
from pymc_tempering.methods.tact import sample_tact
from pymc_tempering.kernels import Info, thermostats
from pymc_tempering.kernels.thermostats import (
    StepParams,
    TemperingParams,
    ThermostatParams,
    coupling,
)
from pymc_tempering.target import Target


def test_coupling_is_one_on_flat_part_and_smooth():
    tempering = TemperingParams(0.001, 0.05, 1.0, unit_temperature_fraction=0.3, lambda_min=0.1)
    s = ThermostatParams(0.01, 0.05, 1.0, tempering=tempering)
    xi = np.linspace(0, 1, 1001)
    lam, dlam = coupling(xi, s)
    assert np.all(lam[xi <= 0.3] == 1.0) and np.all(dlam[xi <= 0.3] == 0.0)
    assert lam[-1] == pytest.approx(0.1) and np.all(np.diff(lam) <= 0)
    fd = np.gradient(lam, xi)
    np.testing.assert_allclose(dlam[1:-1], fd[1:-1], atol=1e-2)


def test_step_without_noise_friction_or_tempering_is_symplectic_euler():
    """With c = 0, constant friction 0 and lambda = 1 a step is r += eta f; theta += r."""
    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=3)
    evaluate = Target(model).batched_logp_and_grad()
    s = ThermostatParams(0.01, 0.0, 1.0, thermostat=False)
    rng = np.random.default_rng(0)
    state = thermostats.init(rng.normal(size=(5, 3)), s, rng)
    new, info = thermostats.step(state, StepParams(s, evaluate), rng)
    r = state.r_theta + 0.01 * (-state.theta)
    np.testing.assert_allclose(new.r_theta, r)
    np.testing.assert_allclose(new.theta, state.theta + r)
    energy = 0.5 * np.sum(state.theta**2, -1) + 1.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(info.energy, energy)
    assert state.theta is not new.theta  # the old state is left alone


def test_thermostat_holds_the_euler_dynamics_at_theorem_1_and_the_positions_exact():
    """The kernel alone, 2,000 independent chains of a 1-D Gaussian (curvature ``k``, exact
    gradient plus white noise of variance ``sigma^2`` with ``eta sigma^2 / 2 = 0.1``, the warm-up's
    budget), no momentum refresh, a slow thermostat (``gamma = 100``, so its fluctuations do not
    bend its mean): the thermostat settles at Theorem 1's ``D = c + eta sigma^2 / 2`` with its
    variance ``eta / gamma``, and the positions' variance is that of the linear recursion at
    ``z = D`` (discrete Lyapunov equation; ``1 + O(eta k)``). A thermostat that held the Euler momenta at ``E r^2 = eta``
    settled at ``1 - sqrt(1 - 2 D)`` (0.163 here against 0.15) with the variance 8% low. The
    standard errors are the spread over the chains, which are independent."""
    eta, c, k, gamma = 0.01, 0.05, 1.0, 100.0
    sigma = np.sqrt(2 * 0.1 / eta)
    noise_rng = np.random.default_rng(seed(17))

    def logp_and_grad(theta):
        return -0.5 * k * theta[:, 0] ** 2, -k * theta + sigma * noise_rng.standard_normal(theta.shape)

    s = ThermostatParams(eta, c, gamma, per_coordinate=True)
    rng = np.random.default_rng(seed(18))
    n, burn, steps = 2000, 4000, 12000
    state = thermostats.init(rng.normal(0, 1 / np.sqrt(k), (n, 1)), s, rng)
    x2, z = np.zeros(n), np.zeros(n)
    for t in range(burn + steps):
        state, _ = thermostats.step(state, StepParams(s, logp_and_grad), rng)
        if t >= burn:
            x2 += k * state.theta[:, 0] ** 2 / steps
            z += state.z_theta[:, 0] / steps
    d = c + eta * sigma**2 / 2
    a = np.array([[1 - eta * k, 1 - d], [-eta * k, 1 - d]])  # (q, r) -> (q', r') at z = D
    noise = 2 * d * eta * np.ones((2, 2))
    variance = k * scipy.linalg.solve_discrete_lyapunov(a, noise)[0, 0]
    assert abs(variance - 1) < 0.01  # the recursion's own bias is small at eta k = 0.01
    assert_within_se(z.mean(), d, z.std(ddof=1) / np.sqrt(n), what="thermostat mean")
    assert_within_se(x2.mean(), variance, x2.std(ddof=1) / np.sqrt(n), what="k Var[theta]")
    # Theorem 1's variance eta / gamma, over the independent chains at the last step
    z_var = state.z_theta[:, 0].var(ddof=1)
    assert_within_se(z_var, eta / gamma, z_var * np.sqrt(2 / (n - 1)), what="thermostat variance")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_kernel_step_reports_info_and_raises_on_blow_up():
    """The kernel returns an ``Info`` (no Metropolis test: acceptance 1, never diverging); a
    position or energy that becomes non-finite raises the library's ``DivergenceError``."""
    with pm.Model() as model:
        pm.Normal("x", 0, 1, shape=2)
    evaluate = Target(model).batched_logp_and_grad()
    s = ThermostatParams(0.01, 0.05, 1.0, tempering=TemperingParams(0.001, 0.05, 1.0))
    rng = np.random.default_rng(0)
    state = thermostats.init(np.zeros((3, 2)), s, rng)
    new, info = thermostats.step(state, StepParams(s, evaluate), rng)
    assert isinstance(info, Info)
    np.testing.assert_array_equal(info.acceptance_rate, np.ones(3))
    np.testing.assert_array_equal(info.diverging, np.zeros(3, dtype=bool))
    np.testing.assert_allclose(info.energy, -evaluate(state.theta)[0])
    assert new.abf_count.sum() == 3 and new.energy_count.tolist() == [1.0] * 3
    # a step size far beyond stability: |theta| grows by ~ eta per step until it overflows
    wild = s._replace(eta_theta=1e6, thermostat=False)
    blown = state._replace(theta=np.full((3, 2), 1e300))
    with pytest.raises(DivergenceError, match="step_size"), np.errstate(all="ignore"):
        thermostats.step(blown, StepParams(wild, evaluate), rng)
    # the driver names the step: |theta| grows a million-fold per step from 1e100
    with pytest.raises(DivergenceError, match=r"diverged at step \d+.*step_size"):
        with np.errstate(all="ignore"):
            sample_tact(5, 0, 1, model=model, step_size=1e6, steps_per_sample=50,
                        initial_points=np.full((1, 2), 1e100), progressbar=False)


def test_kicks_are_tamed_only_beyond_max_kick():
    """``ThermostatParams.max_kick`` (set after the ``"auto"`` warm-up) bounds each coordinate's
    kick ``eta * force`` to that many ``sqrt(eta)``; the step reports ``diverging`` where it
    did, and a kick inside the bound is the untamed one to the bit."""
    def force(theta):
        return np.zeros(theta.shape[0]), np.array([[1.0, 0.0], [1e6, -1e6]])

    settings = ThermostatParams(0.01, 0.0, 1.0, thermostat=False)
    rng = np.random.default_rng(1)
    state = thermostats.init(np.zeros((2, 2)), settings, rng)._replace(r_theta=np.zeros((2, 2)))
    free, info = thermostats.step(state, StepParams(settings, force), np.random.default_rng(2))
    assert not info.diverging.any()
    tamed, info = thermostats.step(state, StepParams(settings._replace(max_kick=10.0), force),
                                   np.random.default_rng(2))
    np.testing.assert_array_equal(info.diverging, [False, True])
    np.testing.assert_array_equal(tamed.r_theta[0], free.r_theta[0])
    np.testing.assert_allclose(tamed.r_theta[1], [1.0, -1.0])  # 10 sqrt(0.01), no noise (c = 0)


def test_a_blow_up_names_what_the_params_say_and_fixed_temperatures_need_no_tempering():
    """The message of a blow-up is ``StepParams.where`` and ``remedy``; without a tempering
    variable (replica exchange) ``xi`` and its thermostat stay at 0, there are no biasing-force
    bins, and Theorem 1's reference has no tempering thermostat."""
    def force(theta):
        return np.zeros(theta.shape[0]), np.full(theta.shape, np.inf)

    s = ThermostatParams(0.01, 0.05, 1.0, inverse_temperature=np.array([1.0, 0.5]))
    rng = np.random.default_rng(0)
    state = thermostats.init(np.zeros((2, 3)), s, rng)
    assert state.abf_sum.shape == (2, 0) and not state.xi.any() and not state.z_xi.any()
    params = StepParams(s, force, where="Here at step 3", remedy="do this")
    with pytest.raises(DivergenceError, match="^Here at step 3 .*; do this.$"):
        with np.errstate(all="ignore"):
            thermostats.step(state, params, rng)
    np.testing.assert_array_equal(coupling(state.xi, s)[0], [1.0, 0.5])
    assert set(thermostats.thermostat_reference(s, 3)) == {"thermostat_theta"}
