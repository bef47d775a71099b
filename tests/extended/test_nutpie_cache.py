"""nutpie's callbacks found again by the graph: across model objects, not across graphs, and on
disk without growing (counted compilations, not seconds)."""

import ctypes
import json
import os
import subprocess
import sys

import nutpie
import numpy as np
import pymc as pm
import pytest
from checks import assert_within_se, seed
from targets import data_model
from targets import data_model_log_z as exact_log_z
from nutpie import compile_pymc

import pymc_tempering as pmt
from pymc_tempering.extended import nutpie_cache

pytestmark = pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # short runs

SHORT = {"draws": 300, "tune": 300, "chains": 2, "progressbar": False}


def constant_model(y):
    """The sign-flip model of the quickstart with ``y`` held as a constant of the graph."""
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.5, 1.5)
        pm.Normal("y", theta**2, 1.0, observed=y)
    return model




@pytest.fixture
def fresh():
    """The callbacks obtained from outside the process (compiled or loaded) since the test
    began, and those reused from it, with nothing kept from earlier tests."""
    nutpie_cache.clear()
    start = nutpie_cache.callback_compilations()

    def counts():
        now = nutpie_cache.callback_compilations()
        new = now["compiled"] + now["loaded"] - start["compiled"] - start["loaded"]
        return new, now["reused"] - start["reused"]

    return counts


def logp_of(compiled, x):
    """The log density and gradient nuts-rs gets from a compiled model's callback at ``x``."""
    x = np.ascontiguousarray(x, dtype=float)
    grad, logp = np.empty_like(x), np.empty(())
    status = compiled.compiled_logp_func.ctypes(
        len(x), x.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
        grad.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
        logp.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
        ctypes.c_void_p(compiled.user_data.ctypes.data),
    )
    assert status == 0
    return float(logp), grad


def test_a_new_model_object_of_the_same_graph_reuses_the_compilation(fresh, monkeypatch):
    """A rebuilt model (a re-run cell) samples with the compilation of the first (PyTensor's
    functions not even built again) and its own data: each call's evidence is that of its
    data."""
    built = []
    make_functions = compile_pymc._make_functions
    monkeypatch.setattr(
        compile_pymc, "_make_functions", lambda *a, **k: built.append(1) or make_functions(*a, **k)
    )
    y_a = np.array([0.3, -0.2, 1.1, 0.5])
    y_b = np.array([2.5, 3.1, 1.9, 2.2])
    a = pmt.sample_ct(model=data_model(y_a), random_seed=seed(), **SHORT)
    assert fresh() == (2, 0) and len(built) == 1  # the log density's and the expansion's
    b = pmt.sample_ct(model=data_model(y_b), random_seed=seed(1), **SHORT)
    # pm.Data of another length: the same graph, its shape read at run time
    y_c = np.array([-1.0, 0.4])
    c = pmt.sample_ct(model=data_model(y_c), random_seed=seed(2), **SHORT)
    assert fresh() == (2, 4) and len(built) == 1
    for result, y in [(a, y_a), (b, y_b), (c, y_c)]:
        assert_within_se(
            result.attrs["log_marginal_likelihood"], exact_log_z(y),
            result.attrs["log_marginal_likelihood_se"], what="log Z",
        )


def test_different_graphs_do_not_share(fresh):
    """Observed data held as constants are part of the graph: two data sets, two callbacks,
    each computing its own model's log density."""
    y = np.random.default_rng(42).normal(2.25, 1.0, size=10)
    models = [constant_model(y), constant_model(y + 1.0), constant_model(y)]
    compiled = [nutpie_cache.compile_pymc_model(m) for m in models]
    # two log densities; one expansion (theta itself, whatever the data), reused twice; the
    # third model's log density is the first's graph
    assert fresh() == (3, 3)
    assert compiled[0].compiled_logp_func is compiled[2].compiled_logp_func
    assert compiled[0].compiled_logp_func is not compiled[1].compiled_logp_func
    assert compiled[0].compiled_expand_func is compiled[1].compiled_expand_func
    for model, c in zip(models, compiled, strict=True):
        logp, dlogp = model.compile_logp(), model.compile_dlogp()
        for theta in [-1.5, 0.2, 1.4]:
            value, grad = logp_of(c, [theta])
            assert np.isclose(value, logp({"theta": theta}), rtol=1e-12)
            assert np.allclose(grad, dlogp({"theta": theta}), rtol=1e-10)


def test_the_callbacks_give_the_draws_of_nutpies_own_compilation(fresh):
    model = data_model(np.array([0.3, -0.2, 1.1, 0.5]))
    ours = nutpie_cache.compile_pymc_model(model)
    theirs = nutpie.compile_pymc_model(model, backend="numba")
    kwargs = {"draws": 100, "tune": 100, "chains": 2, "seed": seed(), "progress_bar": False}
    draws = [nutpie.sample(c, **kwargs)["posterior"]["mu"].values for c in (ours, theirs)]
    np.testing.assert_array_equal(*draws)


PROCESS = r"""
import json, warnings
warnings.simplefilter("ignore")
import pymc as pm
from pymc_tempering.extended import nutpie_cache
with pm.Model() as model:
    a = pm.Normal("a", 0.0, 1.0)
    pm.Normal("y", a, 1.0, observed=[0.1, 0.7])
nutpie_cache.compile_pymc_model(model)
print(json.dumps(nutpie_cache.callback_compilations()))
"""


def _files(directory) -> dict:
    return {
        os.path.relpath(os.path.join(root, f), directory): os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(directory) for f in files
    }


def test_a_new_process_loads_the_callbacks_and_the_cache_does_not_grow(tmp_path):
    """Three processes on an empty compile directory: the first compiles, the others load and
    leave the directory's files and sizes as they were."""
    env = dict(os.environ)
    flags = [f for f in env.get("PYTENSOR_FLAGS", "").split(",") if f and "compiledir" not in f]
    env["PYTENSOR_FLAGS"] = ",".join([*flags, f"base_compiledir={tmp_path}"])
    counts, files = [], []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", PROCESS], env=env, capture_output=True, text=True,
            check=True, timeout=600,
        )
        counts.append(json.loads(out.stdout.strip().splitlines()[-1]))
        files.append(_files(tmp_path))
    assert counts[0]["compiled"] == 2 and counts[0]["loaded"] == 0
    assert all(c["compiled"] == 0 and c["loaded"] == 2 for c in counts[1:])
    assert files[1] == files[2]
    assert any("pmt_nutpie_logp" in name for name in files[2])
