"""driver.py: the one loop (run_kernel), check_finite and driver_result, on a toy kernel."""

from typing import NamedTuple

import numpy as np
import pytest

import pymc_tempering as pmt
from pymc_tempering.driver import driver_result, run_kernel
from pymc_tempering.results import constrained_draws, draws_to_datatree
from pymc_tempering.kernels import Info, check_finite
from pymc_tempering.contract import DivergenceError

CHAINS = 3


class Counter(NamedTuple):
    """A toy kernel's state: how many steps each chain took."""

    n: np.ndarray


def count_step(state, params, rng):
    """Adds ``params`` to a counter; accepts with probability 1; never diverges."""
    n = state.n + params
    info = Info(np.ones(CHAINS), np.zeros(CHAINS, dtype=bool), -n.astype(float))
    return Counter(n), info


def record(state, info):
    return {"n": state.n.copy(), "acceptance_rate": info.acceptance_rate}


def test_tune_is_discarded_and_draws_kept():
    trace = run_kernel(
        count_step, Counter(np.zeros(CHAINS, dtype=int)), 1, draws=4, tune=3, chains=CHAINS,
        rng=np.random.default_rng(0), record=record, progressbar=False,
    )
    # the first kept draw is the state after tune + 1 steps
    np.testing.assert_array_equal(trace.draws["n"], np.tile([4, 5, 6, 7], (CHAINS, 1)))
    assert trace.draws["acceptance_rate"].shape == (CHAINS, 4)
    assert trace.n_iterations == 4 and trace.trajectory is None
    np.testing.assert_array_equal(trace.state.n, 7)


def test_warmup_adapts_params_during_tune_only():
    calls = []

    def warmup(state, info, params, iteration):
        calls.append(iteration)
        return state, params + 1  # the step grows during warm-up, then stays

    trace = run_kernel(
        count_step, Counter(np.zeros(CHAINS, dtype=int)), 1, draws=2, tune=3, chains=CHAINS,
        rng=np.random.default_rng(0), record=record, warmup=warmup, progressbar=False,
    )
    assert calls == [0, 1, 2] and trace.params == 4
    # warm-up steps of 1, 2, 3 (n = 6), then steps of 4
    np.testing.assert_array_equal(trace.draws["n"][0], [10, 14])


def test_keep_mask_and_trajectory():
    """Chains keep a draw only where the mask says so, each until it has ``draws``."""

    def keep(state, info):
        return state.n % np.array([1, 2, 3]) == 0  # chain c keeps every (c + 1)-th state

    trace = run_kernel(
        count_step, Counter(np.zeros(CHAINS, dtype=int)), 1, draws=2, tune=0, chains=CHAINS,
        rng=np.random.default_rng(0), record=record, keep=keep, progressbar=False,
        trajectory=True,
    )
    np.testing.assert_array_equal(trace.draws["n"], [[1, 2], [2, 4], [3, 6]])
    assert trace.n_iterations == 6
    traj = trace.trajectory
    assert traj["n"].shape == (CHAINS, 6)
    np.testing.assert_array_equal(traj["n"][0], np.arange(1, 7))
    # "kept" marks the draws only (chain 0 stops keeping once it has two)
    np.testing.assert_array_equal(traj["kept"].sum(axis=1), [2, 2, 2])
    np.testing.assert_array_equal(traj["kept"][0], [True, True, False, False, False, False])


def test_max_iterations_error():
    with pytest.raises(RuntimeError, match="only 0 of 2 draws"):
        run_kernel(
            count_step, Counter(np.zeros(CHAINS, dtype=int)), 1, draws=2, tune=0, chains=CHAINS,
            rng=np.random.default_rng(0), record=record,
            keep=lambda state, info: np.zeros(CHAINS, dtype=bool), max_iterations=10,
            progressbar=False,
        )


def test_progressbar_on_and_off_give_the_same_draws(capsys):
    """The progress bar changes nothing but the display; with it off nothing is printed."""
    kwargs = dict(draws=3, tune=2, chains=CHAINS, record=record)

    def noisy_step(state, params, rng):
        return count_step(Counter(state.n + rng.integers(0, 3, CHAINS)), params, rng)

    off = run_kernel(noisy_step, Counter(np.zeros(CHAINS, dtype=int)), 1,
                     rng=np.random.default_rng(5), progressbar=False, **kwargs)
    assert capsys.readouterr().out == ""
    on = run_kernel(noisy_step, Counter(np.zeros(CHAINS, dtype=int)), 1,
                    rng=np.random.default_rng(5), progressbar=True, **kwargs)
    np.testing.assert_array_equal(off.draws["n"], on.draws["n"])


def test_check_finite_raises_divergence_error():
    check_finite([np.ones(3), np.array(2.0)], "step 3", "lower step_size")
    with pytest.raises(DivergenceError, match="step 3.*lower step_size"):
        check_finite([np.ones(3), np.array([1.0, np.nan])], "step 3", "lower step_size")
    with pytest.raises(FloatingPointError):  # DivergenceError is a FloatingPointError
        check_finite([np.array([np.inf])], "here", "fix it")
    assert issubclass(pmt.DivergenceError, FloatingPointError)


@pytest.fixture
def target(normal_model):
    return pmt.Target(normal_model[0])


def _stats(chains, draws):
    return {
        "diverging": np.zeros((chains, draws), dtype=bool),
        "acceptance_rate": np.full((chains, draws), 0.9),
        "lp": np.zeros((chains, draws)),
    }


def test_constrained_draws_and_datatree(target):
    x = np.array([[[0.1, -0.3], [1.0, 0.5]]])  # (chain, draw, ndim)
    named = constrained_draws(target, x)
    np.testing.assert_allclose(named["s"], np.exp(x[..., 1]))
    np.testing.assert_allclose(named["mu_twice"], 2 * x[..., 0])
    tree = draws_to_datatree(target, x, sample_stats=_stats(1, 2))
    assert {"mu", "s", "mu_twice", "s_log__"} <= set(tree["posterior"].data_vars)
    with pytest.raises(ValueError, match="shape"):
        draws_to_datatree(target, x[0])


def test_constrained_draws_without_transforms_split_the_flat_draws():
    import pymc as pm

    with pm.Model() as model:
        pm.Normal("a", shape=(2, 3))
        pm.Normal("b")
    target = pmt.Target(model)
    x = np.random.default_rng(0).normal(size=(2, 4, 7))
    named = constrained_draws(target, x)
    np.testing.assert_array_equal(named["a"], x[..., :6].reshape(2, 4, 2, 3))
    np.testing.assert_array_equal(named["b"], x[..., 6])
    # the same as the compiled function's, draw by draw
    np.testing.assert_allclose(named["a"][1, 2], target.constrained(x[1, 2])["a"])
    x[0, 0, 0] = 99.0  # the result does not share the caller's array
    assert named["a"][0, 0, 0, 0] != 99.0


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_driver_result(target):
    x = np.random.default_rng(0).normal(size=(2, 4, 2))
    result = driver_result(
        target, x, method="toy", sample_stats=_stats(2, 4), random_seed=3,
        attrs={"step_size": 0.1}, extra_posterior={"inverse_temperature": np.ones((2, 4))},
        warn=False,  # beta never near 0: diagnose would warn
    )
    assert result.attrs == {"method": "toy", "random_seed": 3, "step_size": 0.1}
    assert {"mu", "s", "inverse_temperature"} <= set(result["posterior"].data_vars)
    assert "s_log__" in result["unconstrained_posterior"]
    np.testing.assert_array_equal(result["sample_stats"]["log_weight"].values, 0.0)
    with pytest.raises(ValueError, match="lp"):
        driver_result(target, x, method="toy", random_seed=3,
                      sample_stats={k: v for k, v in _stats(2, 4).items() if k != "lp"})


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_driver_result_warns_from_diagnose(target):
    x = np.random.default_rng(0).normal(size=(2, 4, 2))
    stats = _stats(2, 4)
    stats["diverging"][0, 1] = True
    with pytest.warns(UserWarning, match="1 of 8 transitions diverged"):
        driver_result(target, x, method="toy", sample_stats=stats, random_seed=None)
