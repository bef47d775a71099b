"""The thermostat driver (:mod:`pymc_tempering.driver.thermostat`) on its own: one iteration's
steps, exchange rounds, momentum refresh and testing hook, and its starting points.

Seeds come from ``checks.seed`` (shifted by ``PMT_TEST_SEED``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from checks import seed

from pymc_tempering.driver.thermostat import Replicas, run_thermostats, starting_points
from pymc_tempering.kernels.thermostats import ThermostatParams
from pymc_tempering.target import Target


def _gaussian(theta):
    return -0.5 * np.sum(theta**2, -1), -theta


def _plan(chains, n_rep, exchange=None, every=1, resample=True):
    return Replicas(
        "Test", "change something", _gaussian, _gaussian, chains, n_rep, 3, resample,
        window_mask=lambda loop, settings: np.ones(chains, bool),
        window_scale=lambda v, sds, olds, basis, settings: (np.ones(v.shape[-1]), settings),
        exchange=exchange, exchange_every=every,
    )


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_one_iteration_runs_its_steps_exchanges_and_hook_in_order():
    """``steps_per_sample`` steps per iteration, an exchange round every ``exchange_every``
    steps counted from the start, the testing hook before every step; the record holds every
    replica per chain and the steps so far."""
    rounds, hooked = [], []

    def exchange(record, theta):
        assert theta.shape == (2, 3, 1)
        rounds.append(record)
        return record + 1, theta

    settings = ThermostatParams(0.01, 0.05, 1.0)
    trace = run_thermostats(
        _plan(2, 3, exchange, every=2), settings, scale=np.ones(1), start=np.zeros((6, 1)),
        draws=4, tune=0, rng=np.random.default_rng(seed(1)), auto=False, exchange=0,
        progressbar=False, _before_step=hooked.append,
    )
    assert hooked == list(range(12)) and trace.state.n_steps == 12
    assert rounds == list(range(6)) and trace.state.exchange == 6
    assert trace.draws["x"].shape == (2, 4, 3, 1)
    assert trace.draws["potential_energy"].shape == trace.draws["diverging"].shape == (2, 4, 3)
    np.testing.assert_array_equal(trace.draws["step"], np.tile([3.0, 6.0, 9.0, 12.0], (2, 1)))


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_a_blow_up_with_an_explicit_step_names_the_method_step_and_remedy():
    from pymc_tempering.contract import DivergenceError

    settings = ThermostatParams(1e6, 0.05, 1.0, thermostat=False)
    with pytest.raises(DivergenceError, match=r"^Test diverged at step \d+ .*change something"):
        with np.errstate(all="ignore"):
            run_thermostats(
                _plan(1, 1), settings, scale=np.ones(1), start=np.full((1, 1), 1e290),
                draws=5, tune=0, rng=np.random.default_rng(0), auto=False, progressbar=False,
            )


def test_starting_points_take_one_position_per_chain_for_every_replica():
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=2)
    target = Target(model)
    given = np.arange(4.0).reshape(2, 2)
    scale, start = starting_points(target, _gaussian, False, given, 1.0, (2, 3, 2), 0)
    np.testing.assert_array_equal(scale, np.ones(2))
    np.testing.assert_array_equal(start.reshape(2, 3, 2), np.repeat(given[:, None], 3, 1))
    with pytest.raises(ValueError, match=r"initial_points must have shape \(2, 2\), got"):
        starting_points(target, _gaussian, False, np.zeros((3, 2)), 1.0, (2, 1, 2), 0)
    _, jittered = starting_points(target, _gaussian, False, None, 0.5, (2, 1, 2), seed(2))
    assert jittered.shape == (2, 2) and np.all(np.abs(jittered) <= 0.5)
