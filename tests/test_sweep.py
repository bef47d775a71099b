"""sample_many: many models in one call, serially and on a LocalCluster of two one-thread workers.

Same seed, same numbers serially and on the cluster (builders and pickled models alike); a model
that raises costs no other; a worker killed mid-run loses nothing (Dask runs its model again,
with the same numbers); a store resumes a sweep. The models are one-parameter conjugate normals
sampled briefly from a fixed base, so no base search runs.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings

import numpy as np
import pymc as pm
import pytest
import xarray as xr
from scipy import stats

import pymc_tempering as pmt
from checks import assert_within_se
from pymc_tempering.sweep import SERIAL, Sweep, model_seed, read_store

Y = np.array([0.3, -0.2, 1.1, 0.5, 0.9, 0.4, 1.3, -0.1])
BASE = pmt.Base.from_moments(np.array([0.5]), np.array([0.4]))
# Short runs from a fixed base (no base search, no bootstrap), each chain on one core.
SETTINGS = dict(draws=200, tune=200, chains=2, base=BASE, bootstrap=0, cores=1)
SEED = 20


def normal_model(prior_sd: float) -> pm.Model:
    """``mu ~ N(0, prior_sd^2)``, ``y_i ~ N(mu, 1)``: the prior's width is what the sweep varies."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, prior_sd)
        pm.Normal("y", mu, 1.0, observed=Y)
    return model


def broken_model() -> pm.Model:
    raise RuntimeError("no data for this subject")


def dying_model(marker: str) -> pm.Model:
    """Kills its own worker process the first time it runs (no marker yet), as a lost machine
    would; builds ``normal_model(1.0)`` the next time."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return normal_model(1.0)


def builders() -> dict:
    return {f"sd{sd:g}": functools.partial(normal_model, sd) for sd in (1.0, 3.0, 10.0)}


def quiet(**kwargs) -> Sweep:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # diagnose's warnings on short runs
        return pmt.sample_many(random_seed=SEED, progressbar=False, **SETTINGS, **kwargs)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    import cloudpickle

    # The builders live in this test file, which the workers cannot import by name: send them
    # by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def serial():
    return quiet(models={**builders(), "broken": broken_model}, client=SERIAL)


@pytest.fixture(scope="module")
def on_cluster(client):
    models = {**builders(), "broken": broken_model}
    models["sd3"] = normal_model(3.0)  # a pm.Model travels too (pickled whole)
    return quiet(models=models, client=client)


def assert_same_numbers(a, b):
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    np.testing.assert_array_equal(
        a["sample_stats"]["log_weight"].values, b["sample_stats"]["log_weight"].values
    )
    assert a.attrs["log_marginal_likelihood"] == b.attrs["log_marginal_likelihood"]
    assert a.attrs["random_seed"] == b.attrs["random_seed"]


# ------------------------------------------------------------------------------- seeds
def test_seeds_by_name():
    """A model's seed depends on the root seed and its name only."""
    assert model_seed(SEED, "a") == model_seed(SEED, "a")
    assert len({model_seed(SEED, n) for n in ("a", "b", "c")} | {model_seed(SEED + 1, "a")}) == 4
    seeds = [model_seed(s, "a") for s in range(5)]
    assert all(isinstance(s, int) and 0 <= s < 2**32 for s in seeds)


def test_serial(serial):
    assert list(serial.results) == ["sd1", "sd3", "sd10"]
    assert serial.random_seed == SEED
    assert serial.seeds == {name: model_seed(SEED, name) for name in [*builders(), "broken"]}
    for name, idata in serial.results.items():
        assert idata.attrs["random_seed"] == serial.seeds[name]
    assert set(serial.durations) == {*builders(), "broken"}
    assert all(seconds > 0 for seconds in serial.durations.values())
    table = serial.table
    assert set(table.index) == {"sd1", "sd3", "sd10"}
    assert np.isclose(table["posterior_probability"].sum(), 1.0)
    # The wider the prior, the smaller the evidence for the same data (Occam's razor).
    assert list(table.index) == ["sd1", "sd3", "sd10"]


# ------------------------------------------------------------------------------- failures
@pytest.mark.parametrize("sweep", ["serial", "on_cluster"])
def test_failing_model_is_isolated(sweep, request):
    sweep = request.getfixturevalue(sweep)
    assert list(sweep.failures) == ["broken"]
    assert sweep.failures["broken"] == "RuntimeError: no data for this subject"
    assert "broken_model" in sweep.tracebacks["broken"]
    assert set(sweep.results) == {"sd1", "sd3", "sd10"}
    assert "broken" not in sweep.table.index


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_no_result_gives_an_empty_table():
    sweep = pmt.sample_many({"broken": broken_model}, client=SERIAL, progressbar=False)
    assert sweep.results == {} and list(sweep.failures) == ["broken"]
    assert sweep.table.empty and "log_marginal_likelihood" in sweep.table.columns


# ------------------------------------------------------------------------------- the cluster
def test_same_numbers_serial_and_cluster(serial, on_cluster):
    assert on_cluster.seeds == serial.seeds
    assert list(on_cluster.results) == list(serial.results)
    for name in serial.results:
        assert_same_numbers(on_cluster.results[name], serial.results[name])


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_worker_killed_mid_run(client, serial, tmp_path):
    """The worker running ``sd1`` dies; Dask runs ``sd1`` again, with the same numbers."""
    marker = tmp_path / "killed"
    models = {"sd1": functools.partial(dying_model, str(marker)), "sd10": builders()["sd10"]}
    sweep = quiet(models=models, client=client)
    assert marker.exists()  # the first try did die
    assert sweep.failures == {}
    for name in models:
        assert_same_numbers(sweep.results[name], serial.results[name])


# ------------------------------------------------------------------------------- the store
@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_resume_from_store(serial, tmp_path):
    store = tmp_path / "store"
    first = quiet(models={"sd1": builders()["sd1"], "broken": broken_model}, client=SERIAL,
                  store=store)
    assert sorted(p.name for p in store.iterdir()) == ["sd1.zarr", "sweep.json"]
    assert_same_numbers(first.results["sd1"], serial.results["sd1"])

    def must_not_run():
        raise AssertionError("a stored model ran again")

    # The rerun reads sd1 back, tries the model that failed again and takes the store's seed.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        second = pmt.sample_many(
            {"sd1": must_not_run, "broken": builders()["sd10"]}, client=SERIAL, store=store,
            progressbar=False, **SETTINGS,
        )
    assert second.random_seed == SEED and second.failures == {}
    xr.testing.assert_identical(second.results["sd1"], first.results["sd1"])
    assert second.results["broken"].attrs["random_seed"] == model_seed(SEED, "broken")
    assert sorted(p.name for p in store.iterdir()) == ["broken.zarr", "sd1.zarr", "sweep.json"]
    with pytest.raises(ValueError, match="random_seed=20"):
        pmt.sample_many({"sd1": must_not_run}, client=SERIAL, store=store, random_seed=3)
    with pytest.raises(ValueError, match="sample_ais"):
        pmt.sample_many({"sd1": must_not_run}, pmt.sample_ais, client=SERIAL, store=store)


# ------------------------------------------------------------------------------- the call
@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_any_sampler_and_its_warnings():
    """Any function with the sampler contract; its warnings are raised again, by model."""

    def sampler(*, model, random_seed, progressbar, value):
        warnings.warn(f"checked {value}")
        return xr.DataTree(xr.Dataset(attrs={"seed": random_seed, "n": len(model.free_RVs)}))

    with pytest.warns(UserWarning, match="Model 'a': checked 7"):
        sweep = pmt.sample_many({"a": functools.partial(normal_model, 1.0)}, sampler,
                                client=SERIAL, random_seed=1, progressbar=False, value=7)
    assert sweep.results["a"].attrs == {"seed": model_seed(1, "a"), "n": 1}


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_store_names_and_read_store(tmp_path):
    """Any name makes a file name; read_store gives the results back by name."""

    def sampler(*, model, random_seed, progressbar):
        return xr.DataTree(xr.Dataset({"x": ("draw", np.arange(3.0))}, attrs={"s": random_seed}))

    names = ["a/b", "1+floor", "..", "ü"]
    sweep = pmt.sample_many({n: functools.partial(normal_model, 1.0) for n in names}, sampler,
                            client=SERIAL, store=tmp_path, random_seed=4, progressbar=False)
    stored = read_store(tmp_path)
    assert list(stored) == sorted(names)
    for name in names:
        xr.testing.assert_identical(stored[name], sweep.results[name])
    with pytest.raises(FileNotFoundError, match="not a sweep's store"):
        read_store(tmp_path / "nothing")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_bad_arguments():
    with pytest.raises(ValueError, match="non-empty mapping"):
        pmt.sample_many({}, client=SERIAL)
    with pytest.raises(ValueError, match="strings"):
        pmt.sample_many({1: broken_model}, client=SERIAL)
    with pytest.raises(TypeError, match="function of no arguments"):
        pmt.sample_many({"a": 3}, client=SERIAL)
    with pytest.raises(ValueError, match="random_seed"):
        pmt.sample_many({"a": broken_model}, client=SERIAL, random_seed=-1)
    with pytest.raises(ValueError, match=r"\['model'\]"):
        pmt.sample_many({"a": broken_model}, client=SERIAL, model=normal_model(1.0))
    with pytest.raises(ValueError, match="n_workers"):
        pmt.sample_many({"a": broken_model}, client=SERIAL, n_workers=2)
    with pytest.raises(ValueError, match="client must be"):
        pmt.sample_many({"a": broken_model}, client="threads", progressbar=False)
    sweep = pmt.sample_many({"a": lambda: 3}, client=SERIAL, progressbar=False)
    assert "returned int, not a pymc.Model" in sweep.failures["a"]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_without_dask(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pymc-tempering\[distributed\]"):
        pmt.sample_many({"a": broken_model}, progressbar=False)


# --------------------------------------------------------------------------- many data sets
def data_model() -> pm.Model:
    """``normal_model(1.0)`` with its data in ``pm.Data``, for a sweep over data sets."""
    with pm.Model() as model:
        y = pm.Data("y", Y)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("obs", mu, 1.0, observed=y, shape=y.shape)
    return model


DATA_SETS = {f"set{k}": {"y": Y + k} for k in range(3)}


@pytest.fixture(scope="module")
def over_data_sets():
    return quiet(models=data_model(), data=DATA_SETS, client=SERIAL)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_data_sets_compile_once_and_match_their_own_models(monkeypatch):
    from pymc_tempering.extended import compiled

    calls = []  # what the extended model's nutpie compilation asks for, once per model
    inner = compiled.compile_pymc_model
    monkeypatch.setattr(compiled, "compile_pymc_model",
                        lambda *a, **k: calls.append(1) or inner(*a, **k))
    model = data_model()
    sweep = quiet(models=model, data=DATA_SETS, client=SERIAL)
    assert len(calls) == 1  # one compilation for the three data sets
    np.testing.assert_array_equal(model["y"].get_value(), Y)  # the model given is not changed
    for name, values in DATA_SETS.items():  # each set's own evidence: N(y; 0, I + 11')
        y = values["y"]
        exact = stats.multivariate_normal(np.zeros(len(y)), np.eye(len(y)) + 1.0).logpdf(y)
        result = sweep.results[name]
        assert_within_se(result.attrs["log_marginal_likelihood"], exact,
                         result.attrs["log_marginal_likelihood_se"], what="log Z")
    assert list(sweep.table.index) == list(DATA_SETS)


@pytest.mark.slow  # a cluster's workers each compile; the serial sweep checks the numbers
def test_data_sets_same_numbers_on_the_cluster(client, over_data_sets):
    sweep = quiet(models=data_model, data=DATA_SETS, client=client)
    for name in DATA_SETS:
        assert_same_numbers(sweep.results[name], over_data_sets.results[name])


def test_data_sets_refuse_bad_arguments():
    with pytest.raises(TypeError, match="one pymc.Model"):
        pmt.sample_many({"a": data_model}, data=DATA_SETS, client=SERIAL)
    with pytest.raises(ValueError, match="non-empty mapping"):
        pmt.sample_many(data_model, data={}, client=SERIAL)
    with pytest.raises(ValueError, match="pm.Data names"):
        pmt.sample_many(data_model, data={"a": [1.0]}, client=SERIAL)
