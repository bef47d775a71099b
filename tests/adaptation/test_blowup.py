"""Blow-ups of the ``"auto"`` step size (:mod:`pymc_tempering.adaptation.blowup`): undone
during the warm-up, dropped as divergent draws after it, a kick beyond the bound undone for
the chains it names; a non-finite gradient named at once instead.

Seeds come from ``checks.seed`` (shifted by ``PMT_TEST_SEED``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from checks import seed
from pymc_tempering.problems.sign_flip import sign_flip, sign_flip_laplace

import pymc_tempering as pmt
from pymc_tempering.adaptation import blowup
from pymc_tempering.kernels import thermostats


def test_blow_ups_are_undone_in_the_warm_up_and_dropped_as_divergences_after_it():
    """``blowup.update``: during the warm-up the iteration restarts from its start with the
    preconditioner halved (counted; more than ``MAX_WARMUP_BLOWUPS`` raise), after it the start
    is kept with the same preconditioner and the blow-up counted as a divergence; an explicit
    step size (no record) re-raises, and so does a non-finite gradient during the warm-up."""
    settings = thermostats.ThermostatParams(0.01, 0.05, 1.0)
    rng = np.random.default_rng(0)
    state = thermostats.init(np.ones((3, 2)), settings, rng)
    scale = np.full((3, 2), 4.0)
    err = pmt.DivergenceError("diverged at step 7")
    recovery = blowup.init(tune=10)
    recovery, new, new_scale = blowup.update(recovery, err, state, settings, scale, rng,
                                             tempering=False)
    np.testing.assert_allclose(new_scale, 2.0)
    np.testing.assert_allclose(new.theta * new_scale, state.theta * scale)  # the same position
    assert recovery.blowups == 1 and recovery.divergences == 0
    with pytest.raises(pmt.NonFiniteGradientError):
        blowup.update(recovery, pmt.NonFiniteGradientError("nan"), state, settings, scale, rng,
                      tempering=False)
    with pytest.raises(pmt.DivergenceError, match="halved the step"):
        blowup.update(recovery._replace(blowups=blowup.MAX_WARMUP_BLOWUPS), err, state,
                      settings, scale, rng, tempering=False)
    recovery = blowup.final(recovery)
    for error in (err, pmt.NonFiniteGradientError("nan")):
        recovery, new, new_scale = blowup.update(recovery, error, state, settings, scale, rng,
                                                 tempering=False)
        assert new_scale is scale and np.array_equal(new.theta, state.theta)
        assert not np.array_equal(new.r_theta, state.r_theta)  # fresh momenta
    assert recovery.divergences == 2 and recovery.blowups == 1
    with pytest.raises(pmt.DivergenceError):
        blowup.update(None, err, state, settings, scale, rng, tempering=False)


def test_a_kick_beyond_the_bound_in_the_warm_up_halves_that_chains_preconditioner_only():
    """From the end of the warm-up's first window to its end (``kick_raises``), a kick beyond
    ``max_kick`` is not tamed but undone: the step raises, naming the chains, and
    :func:`blowup.update` returns the iteration's start with those chains' preconditioner
    halved and the others' as they were, counted apart from the blow-ups (whose limit it does
    not use up) and not warned about. Replica exchange on a two-component normal mixture
    (10,000 data in minibatches of 200) at its defaults threw a mean to 144 in one such kick,
    with every value finite."""
    def force(theta):
        return np.zeros(theta.shape[0]), np.array([[1.0, 0.0], [1e6, -1e6], [0.0, 2.0]])

    settings = thermostats.ThermostatParams(0.01, 0.0, 1.0, thermostat=False, max_kick=10.0,
                                            kick_raises=True)
    state = thermostats.init(np.array([[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]]), settings,
                             np.random.default_rng(1))
    with pytest.raises(thermostats.KickBeyondBound, match="beyond max_kick") as caught:
        params = thermostats.StepParams(settings, force, where="here")
        thermostats.step(state, params, np.random.default_rng(2))
    np.testing.assert_array_equal(caught.value.rows, [False, True, False])
    recovery = blowup.init(tune=10)
    scale = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    recovery, back, new_scale = blowup.update(
        recovery, caught.value, state, settings, scale, np.random.default_rng(3), tempering=False
    )
    np.testing.assert_array_equal(new_scale, [[1.0, 2.0], [1.5, 2.0], [5.0, 6.0]])
    np.testing.assert_array_equal(back.theta * new_scale, state.theta * scale)  # same positions
    assert recovery.kicks == 1 and recovery.blowups == 0
    # a shared preconditioner (one row for every chain) is halved for all
    recovery, _, shared = blowup.update(
        recovery, caught.value, state, settings, scale[:1], np.random.default_rng(3),
        tempering=False,
    )
    np.testing.assert_array_equal(shared, [[0.5, 1.0]])
    assert recovery.kicks == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # counted (attrs["warmup_kicks_undone"]), not warned
        blowup.warn_blowups("Replica exchange", recovery)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize("method", ["tact", "replica_exchange"])
def test_blow_up_during_warm_up_is_undone_and_reported(method):
    """Safe defaults: a run that blows up during the warm-up is not an error. Started
    at ``theta = 50`` on the sign-flip model (n = 150, full batch), where the curvature is about
    6,700 times that at the model's initial point 0 which sets the first preconditioner, the
    first step overshoots to a larger ``|theta|`` and the next ones overflow; each blow-up repeats the iteration with a preconditioner half as wide, and the
    run warns saying so and counts them in ``attrs["warmup_blowups"]``. With an explicit step
    size the same start raises, naming the step."""
    sampler = pmt.sample_tact if method == "tact" else pmt.sample_replica_exchange
    model, y = sign_flip(150, 1.0)
    kwargs = dict(model=model, chains=2, random_seed=seed(63), progressbar=False,
                  initial_points=np.full((2, 1), 50.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.warns(UserWarning, match="blew up .* during the warm-up"):
            idata = sampler(50, tune=100, **kwargs)
        assert idata.attrs["warmup_blowups"] > 0
        theta = idata["posterior"]["theta"].values
        assert np.all(np.isfinite(theta))
        mode, sd = sign_flip_laplace(y, 1.0)
        assert np.all(np.abs(np.abs(theta) - mode) < 20 * sd)  # at a mode after the warm-up
        with pytest.raises(pmt.DivergenceError, match="diverged at step"):
            sampler(5, tune=5, step_size=0.01, **kwargs)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize("method", ["tact", "replica_exchange"])
def test_non_finite_gradient_is_named_at_once(method):
    """A finite log density with a non-finite gradient is the model's arithmetic, not the step:
    a mixture weight written as ``w`` and ``1 - w`` has a NaN gradient at ``w_logodds__ = 40``
    (``1 - w`` rounds to 0), where hot replicas of a minibatched mixture went. The run raises
    at once, naming the coordinate, instead of halving its step ``MAX_WARMUP_BLOWUPS`` times."""
    y = np.random.default_rng(0).normal(size=50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5, shape=2)
        w = pm.Beta("w", 2, 2)
        pm.Mixture("y", w=pm.math.stack([w, 1 - w]), comp_dists=pm.Normal.dist(mu, 1.0),
                   observed=y)
    sampler = pmt.sample_tact if method == "tact" else pmt.sample_replica_exchange
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(pmt.NonFiniteGradientError, match=r"w_logodds__ = 40 .*chain 0"):
            sampler(5, tune=5, chains=2, model=model, random_seed=seed(65), progressbar=False,
                    initial_points=np.array([[0.0, 0.0, 40.0]] * 2))
