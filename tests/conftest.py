import logging
import sys
from pathlib import Path

import numpy as np
import pytensor.tensor as pt
import pymc as pm
import pytest

sys.path.insert(0, str(Path(__file__).parent))

logging.getLogger("pymc").setLevel(logging.ERROR)

#: Where the tests are: :data:`HEAVIEST_FILES` names files by their path relative to it.
TESTS = Path(__file__).parent

#: The test files that take most of the default run, heaviest first, as paths relative to
#: ``tests/`` (two files may share a name in different folders). pytest-xdist's
#: ``--dist loadfile`` gives each worker whole files in collection order
#: (``--no-loadscope-reorder`` in ``pyproject.toml``; by default it orders them by their number
#: of tests, which put these last): longest first, so that neither worker ends on a long file
#: while the other idles. The order changes which worker runs a file, not what a test does.
HEAVIEST_FILES = (
    "methods/ct/test_continuous_tempering.py",
    "test_sweep.py",
    "methods/ergodic/test_ergodic.py",
    "methods/pseudo_extended/test_pseudo_extended.py",
    "test_conformance.py",
    "bases/test_modes.py",
    "methods/ct/test_defaults.py",
    "methods/replica_exchange/test_replica_exchange.py",
    "methods/tact/test_tact.py",
    "adaptation/test_blowup.py",
    "adaptation/test_windows.py",
    "extended/test_funnel.py",
    "test_normalizing_constant.py",
    "problems/test_radon.py",
    "methods/test_thermostat_defaults.py",
    "methods/gibbs_ct/test_gibbs_ct.py",
    "methods/tact/test_minibatch.py",
)


def pytest_collection_modifyitems(config, items):
    """Run :data:`HEAVIEST_FILES` first, in that order; the other files after them, in their
    collection order (a stable sort: the tests of a file keep theirs)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FILES)}

    def key(item):
        path = item.path
        return rank.get(path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else "",
                        len(rank))

    items.sort(key=key)


@pytest.fixture
def normal_model():
    """mu ~ N(0, 2), s ~ HalfNormal(1.5), y ~ N(mu, s): one transformed variable, dims, data."""
    y = np.array([0.3, -0.2, 1.1, 0.5, 0.9])
    with pm.Model(coords={"obs": np.arange(5)}) as model:
        mu = pm.Normal("mu", 0, 2)
        s = pm.HalfNormal("s", 1.5)
        pm.Deterministic("mu_twice", 2 * mu)
        pm.Normal("y", mu, s, observed=y, dims="obs")
    return model, y


def model_fingerprint(model):
    """Everything about a model that a transformation must leave alone."""
    point = model.initial_point()
    return {
        "named_vars": sorted(model.named_vars),
        "free": [v.name for v in model.free_RVs],
        "values": [v.name for v in model.value_vars],
        "observed": [v.name for v in model.observed_RVs],
        "potentials": [v.name for v in model.potentials],
        "deterministics": [v.name for v in model.deterministics],
        "coords": {k: tuple(v) for k, v in model.coords.items()},
        "logp": repr(float(model.compile_logp()(point))),  # repr: NaN equals itself
        "parent": model.parent,
    }


@pytest.fixture
def discrete_model():
    with pm.Model() as model:
        pm.Poisson("k", 3.0)
        pm.Normal("x", 0, 1)
    return model


@pytest.fixture
def no_free_model():
    with pm.Model() as model:
        pm.Normal("y", 0, 1, observed=np.array([0.1, 0.2]))
    return model


@pytest.fixture
def nan_model():
    """A model whose log density is NaN for x < 0, so ADVI diverges."""
    with pm.Model() as model:
        x = pm.Normal("x", -3, 1)
        pm.Potential("bad", pt.log(x))
    return model


@pytest.fixture
def seed():
    """The suite's seed function (``checks.seed``): ``PMT_TEST_SEED`` plus an offset."""
    from checks import seed as _seed

    return _seed
