"""One compiled tempered model per model: counted compilations, swapped data, the phase report."""

import numpy as np
import pymc as pm
import pytest
from checks import assert_within_se, seed
from targets import data_model
from targets import data_model_log_z as exact_log_z

import pymc_tempering as pmt
from pymc_tempering.extended import compiled
from pymc_tempering.timing import PHASES, TIMING

pytestmark = pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # short runs

SHORT = {"draws": 300, "tune": 300, "chains": 2, "progressbar": False}


@pytest.fixture
def compilations(monkeypatch):
    """The number of nutpie compilations so far, counted by wrapping the compiler the kept
    extended models call (:func:`pymc_tempering.extended.nutpie_cache.compile_pymc_model`)."""
    count = []
    inner = compiled.compile_pymc_model

    def counting(*args, **kwargs):
        count.append(1)
        return inner(*args, **kwargs)

    monkeypatch.setattr(compiled, "compile_pymc_model", counting)
    compiled._MODELS.clear()
    return lambda: len(count)




def test_one_compilation_for_every_round_extension_and_call(compilations):
    model = data_model(np.array([0.3, -0.2, 1.1, 0.5]))
    # a bootstrap round and a standard error goal no short run meets: three runs per call
    first = pmt.sample_ct(model=model, random_seed=seed(), bootstrap=1, target_se=1e-6, **SHORT)
    assert first["bootstrap"].sizes["round"] == 3  # the round and two extensions before the last
    assert compilations() == 1
    pmt.sample_ct(model=model, random_seed=seed(1), bootstrap=1, **SHORT)
    assert compilations() == 1
    # another model compiles its own
    pmt.sample_ct(model=data_model(np.array([0.1, 0.2])), random_seed=seed(), **SHORT)
    assert compilations() == 2


def test_a_kept_compilation_gives_the_bits_of_a_fresh_one(compilations):
    model = data_model(np.array([0.3, -0.2, 1.1, 0.5]))
    fresh = pmt.sample_ct(model=model, random_seed=seed(), **SHORT)
    pmt.sample_ct(model=model, random_seed=seed(1), **SHORT)
    kept = pmt.sample_ct(model=model, random_seed=seed(), **SHORT)
    assert compilations() == 1
    np.testing.assert_array_equal(fresh["posterior"]["mu"].values, kept["posterior"]["mu"].values)
    assert fresh.attrs["log_marginal_likelihood"] == kept.attrs["log_marginal_likelihood"]


def test_new_data_reach_the_kept_compilation(compilations):
    """pm.set_data between calls: the second call's evidence is that of the new data."""
    y_a = np.array([0.3, -0.2, 1.1, 0.5])
    y_b = np.array([2.5, 3.1, 1.9, 2.2])
    model = data_model(y_a)
    a = pmt.sample_ct(model=model, random_seed=seed(), **SHORT)
    with model:
        pm.set_data({"y": y_b})
    b = pmt.sample_ct(model=model, random_seed=seed(1), **SHORT)
    assert compilations() == 1
    for result, y in [(a, y_a), (b, y_b)]:
        assert_within_se(
            result.attrs["log_marginal_likelihood"], exact_log_z(y),
            result.attrs["log_marginal_likelihood_se"], what="log Z",
        )


def test_other_samplers_run_the_same_extended_model(compilations):
    """PyMC's own NUTS samples the kept model at the run's base (through pm.sample)."""
    model = data_model(np.array([0.3, -0.2, 1.1, 0.5]))
    result = pmt.sample_ct(model=model, random_seed=seed(), nuts_sampler="pymc", **SHORT)
    assert compilations() == 0
    assert np.isfinite(result.attrs["log_marginal_likelihood"])


def test_the_phase_report_accounts_for_the_call(normal_model):
    model, _ = normal_model
    result = pmt.sample_ct(model=model, random_seed=seed(), **SHORT)
    timing = result[TIMING].to_dataset()
    assert set(timing.data_vars) == {*PHASES, "total"}
    seconds = np.array([float(timing[p]) for p in PHASES])
    assert np.all(seconds >= 0)
    assert np.isclose(seconds.sum(), float(timing["total"]), rtol=1e-6)
    assert float(timing["sampling"]) > 0 and float(timing["mode_search"]) > 0


def test_run_data_are_checked():
    data = compiled.run_data({"a": np.zeros(2), "b": np.array(1.0)})
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Potential("p", -0.5 * ((x - data["a"]) ** 2).sum() + data["b"])
    extended = compiled.ExtendedModel.of(model)
    assert extended.data is not None and extended.data.name == compiled.RUN_DATA
    extended.set({"a": np.ones(2), "b": np.array(2.0)})
    np.testing.assert_array_equal(extended.data.get_value(), [1.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        extended.set({"a": np.ones(3), "b": np.array(2.0)})
    with pytest.raises(ValueError, match="sets"):
        extended.set({"a": np.ones(2)})
