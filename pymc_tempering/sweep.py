"""Many models in one call: one sampler run over a mapping of models, locally or on a cluster.

:func:`sample_many` runs a sampler (``sample_ct`` by default, or any function with the sampler
contract) on each model of a mapping, gives each model its own seed, collects the results and
the failures by name, writes each result to a store as it finishes, and compares the evidences
with :func:`~pymc_tempering.compare_evidence`.

Why it is written here: scheduling is Dask's (``dask.distributed``: a ``LocalCluster`` on the local
machine, or any ``Client`` of a cluster), and so are moving tasks between processes and
rescheduling a task whose worker died. What Dask does not know is what a sweep of models needs
around it, and only that is written here: a seed per model that does not depend on where or in
which order the models run, a failure of one model that costs no other, a store that a rerun
resumes from, and the comparison table. Dask is an optional extra
(``pip install pymc-tempering[distributed]``); ``client="serial"`` runs the same sweep in this
process without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
import pandas as pd
import pymc as pm
import xarray as xr
from xarray import DataTree

from pymc_tempering.analysis import compare_evidence
from pymc_tempering.contract import warn
from pymc_tempering.progress import progress_bar
from pymc_tempering.methods.ct import sample_ct

__all__ = ["Sweep", "sample_many", "model_seed", "read_store", "SERIAL"]

#: The ``client`` that runs a sweep in this process, one model after another, without Dask.
SERIAL = "serial"

_INSTALL = "pip install pymc-tempering[distributed]"
_MANIFEST = "sweep.json"
_SUFFIX = ".zarr"


@dataclass(repr=False)
class Sweep:
    """The outcome of :func:`sample_many`.

    Attributes
    ----------
    results : dict of name to xarray.DataTree
        The sampler's result for each model that finished, in the order of the ``models``
        mapping (whether it ran now or was read back from the store).
    failures : dict of name to str
        For each model that did not finish, why: the exception's type and message, whether it
        was raised by the model's builder, by the sampler or by Dask (for example
        ``KilledWorker`` when the model's worker died more often than Dask allows).
    seeds : dict of name to int
        The seed each model's sampler was given (:func:`model_seed`).
    random_seed : int
        The root seed; a sweep given ``random_seed=None`` draws one and records it here, so
        that it can be repeated.
    tracebacks : dict of name to str
        The full traceback of each failure.
    durations : dict of name to float
        Seconds each model took where it ran (building and sampling; not the time it waited
        for a worker), for the models run by this call, finished or failed.
    """

    results: dict[str, DataTree]
    failures: dict[str, str]
    seeds: dict[str, int]
    random_seed: int
    tracebacks: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)

    @cached_property
    def table(self) -> pd.DataFrame:
        """:func:`~pymc_tempering.compare_evidence` over the results (failed models have no
        row: their Bayes factors and probabilities are among the models that finished).
        Empty when no model finished."""
        if not self.results:
            columns = ["log_marginal_likelihood", "standard_error", "log_bayes_factor",
                       "log_bayes_factor_se", "posterior_probability", "reliable", "problems"]
            return pd.DataFrame(columns=columns, index=pd.Index([], name="model"))
        return compare_evidence(self.results)

    def __repr__(self) -> str:
        return (f"Sweep({len(self.results)} results, {len(self.failures)} failures, "
                f"random_seed={self.random_seed})")


def model_seed(random_seed: int, name: str) -> int:
    """The seed of model ``name`` in a sweep with root seed ``random_seed``.

    The child of ``numpy.random.SeedSequence(random_seed)`` whose spawn key is a hash
    (SHA-256) of the name, as :meth:`~numpy.random.SeedSequence.spawn` makes children with
    their index as key. Keyed by name rather than by position, a model's seed depends on the
    root seed and its name only: not on which other models are in the sweep, their order, or
    where it runs, so a serial sweep, a distributed one, a resumed one and a sweep of more
    models give each model the same draws.
    """
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:16], "little")
    child = np.random.SeedSequence(random_seed, spawn_key=(key,))
    return int(child.generate_state(1)[0])


def _root_seed(random_seed) -> int:
    if random_seed is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(random_seed, np.random.Generator):
        return int(random_seed.integers(2**63))
    if isinstance(random_seed, bool) or not isinstance(random_seed, int | np.integer) \
            or random_seed < 0:
        raise ValueError(
            f"random_seed must be a non-negative integer, a numpy Generator or None, "
            f"got {random_seed!r}."
        )
    return int(random_seed)


def _check_models(models) -> dict:
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty mapping of names to models or builders.")
    for name, spec in models.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"Model names must be non-empty strings, got {name!r}.")
        if not (isinstance(spec, pm.Model) or callable(spec)):
            raise TypeError(
                f"Model {name!r} must be a pymc.Model or a function of no arguments that "
                f"builds one, got {type(spec).__name__}."
            )
    return dict(models)


def _data_sets(model, data) -> dict:
    """The tasks of a sweep over data sets, by data set name."""
    if not (isinstance(model, pm.Model) or callable(model)) or isinstance(model, Mapping):
        raise TypeError("With data=, give one pymc.Model or a function that builds it.")
    if not isinstance(data, Mapping) or not data:
        raise ValueError("data must be a non-empty mapping of names to data sets.")
    token = uuid.uuid4().hex
    tasks = {}
    for name, values in data.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"Data set names must be non-empty strings, got {name!r}.")
        if not isinstance(values, Mapping) or not values:
            raise ValueError(f"Data set {name!r} must be a mapping of pm.Data names to values.")
        tasks[name] = _DataSet(token, model, dict(values))
    return tasks


@dataclass
class _Outcome:
    name: str
    result: DataTree | None = None
    message: str | None = None
    traceback: str | None = None
    warnings: list = field(default_factory=list)
    seconds: float = float("nan")


def _failure(name: str, exc: BaseException) -> _Outcome:
    message = "".join(traceback.format_exception_only(exc)).strip()
    return _Outcome(name, message=message, traceback="".join(traceback.format_exception(exc)))


@dataclass(frozen=True)
class _DataSet:
    """A task of a sweep over data sets: the sweep's one model (or its builder), the sweep's
    token, and the values ``pm.set_data`` gives the model for this task."""

    token: str
    model: object
    values: dict


#: The model of the sweep over data sets running in this process (a worker, or the caller for a
#: serial sweep), by the sweep's token, with a lock: built once, so that the sampler's
#: compilation (kept per model) serves every data set the process runs.
_SWEEP_MODELS: dict = {}
_SWEEP_LOCK = threading.Lock()


def _build(name: str, spec) -> pm.Model:
    """The model a builder returns (checked), or the model itself."""
    built = spec if isinstance(spec, pm.Model) else spec()
    if not isinstance(built, pm.Model):
        raise TypeError(
            f"The builder of model {name!r} returned {type(built).__name__}, not a pymc.Model."
        )
    return built


def _sweep_model(name: str, task: _DataSet):
    """The sweep's model in this process and its lock, built (or copied) on first use."""
    import cloudpickle

    with _SWEEP_LOCK:
        if task.token not in _SWEEP_MODELS:
            spec = task.model
            # a copy of a model (the caller's own in a serial sweep is not to be changed)
            if isinstance(spec, pm.Model):
                spec = cloudpickle.loads(cloudpickle.dumps(spec))
            _SWEEP_MODELS.clear()  # one sweep's model per process
            _SWEEP_MODELS[task.token] = (_build(name, spec), threading.Lock())
        return _SWEEP_MODELS[task.token]


def run_model(name: str, model, sampler: Callable, random_seed: int, sampler_kwargs: dict):
    """Build model ``name`` (when given a builder) and run ``sampler`` on it: one sweep task.

    Runs in a Dask worker, or in this process for a serial sweep. An exception of the
    builder or the sampler is returned as the model's failure, not raised, so that Dask does
    not run the model again (the same seed fails the same way). The warnings the sampler
    raises are returned too, and :func:`sample_many` raises them again where it was called,
    prefixed with the model's name. A task of a sweep over data sets runs the process's one
    model (:func:`_sweep_model`), given its data set, under that model's lock.
    """
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # under the filters in force
        try:
            if isinstance(model, _DataSet):
                (built, lock), values = _sweep_model(name, model), model.values
            else:
                built, lock, values = _build(name, model), contextlib.nullcontext(), None
            with lock:
                if values is not None:
                    with built:
                        pm.set_data(values)
                result = sampler(model=built, random_seed=random_seed, progressbar=False,
                                 **sampler_kwargs)
        except Exception as exc:  # noqa: BLE001 - a model's failure is its row, not the sweep's
            return replace(_failure(name, exc), seconds=time.perf_counter() - start)
    kept = list(dict.fromkeys((str(w.message), w.category) for w in caught))
    return _Outcome(name, result=result, warnings=kept, seconds=time.perf_counter() - start)


class _Store:
    """A directory holding one zarr DataTree per finished model and the sweep's root seed.

    A result is written to ``<name>.zarr.partial`` and renamed when complete, so an
    interrupted write never looks finished. ``sweep.json`` holds the root seed and the
    sampler's name: a rerun takes the seed from it, and refuses another seed or sampler.
    """

    def __init__(self, path, random_seed, sampler: Callable):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        function = getattr(sampler, "func", sampler)  # functools.partial
        name = f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', '')}"
        manifest = self.path / _MANIFEST
        if manifest.exists():
            stored = json.loads(manifest.read_text())
            if random_seed is not None and _root_seed(random_seed) != stored["random_seed"]:
                raise ValueError(
                    f"The store {str(self.path)!r} holds a sweep with random_seed="
                    f"{stored['random_seed']}; resume it with that seed (or None), or use "
                    f"another store."
                )
            if stored["sampler"] != name:
                raise ValueError(
                    f"The store {str(self.path)!r} holds a sweep of {stored['sampler']}, not "
                    f"{name}; use another store."
                )
            self.random_seed = int(stored["random_seed"])
        else:
            self.random_seed = _root_seed(random_seed)
            manifest.write_text(json.dumps({"random_seed": self.random_seed, "sampler": name}))
        for partial in self.path.glob(f"*{_SUFFIX}.partial"):
            shutil.rmtree(partial)

    def file(self, name: str) -> Path:
        return self.path / (quote(name, safe="") + _SUFFIX)

    def load(self, name: str) -> DataTree | None:
        file = self.file(name)
        return _load(file) if file.exists() else None

    def save(self, name: str, result: DataTree) -> None:
        file = self.file(name)
        partial = file.with_name(file.name + ".partial")
        result.to_zarr(partial, mode="w", consolidated=False)
        if file.exists():
            shutil.rmtree(file)
        os.replace(partial, file)


def _load(file: Path) -> DataTree:
    return xr.load_datatree(file, engine="zarr", consolidated=False)


def read_store(store: str | os.PathLike) -> dict[str, DataTree]:
    """The results a sweep wrote to ``store`` (see :func:`sample_many`), by model name.

    For reading a sweep's results in another session, or while it runs: only the models that
    finished are there. Ordered by name.
    """
    path = Path(store)
    if not (path / _MANIFEST).exists():
        raise FileNotFoundError(f"{str(path)!r} is not a sweep's store (it has no {_MANIFEST}).")
    files = sorted(path.glob(f"*{_SUFFIX}"), key=lambda f: unquote(f.name[: -len(_SUFFIX)]))
    return {unquote(f.name[: -len(_SUFFIX)]): _load(f) for f in files}


def _distributed():
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(
            f"A sweep on a Dask cluster needs dask.distributed: {_INSTALL}. Or run it in this "
            f"process with client={SERIAL!r}."
        ) from exc
    return distributed


def _run_serial(tasks, sampler, kwargs, record):
    for name, model, seed in tasks:
        record(run_model(name, model, sampler, seed, kwargs))


def _submit(client, tasks, sampler, kwargs):
    """One future per model; a model that cannot be sent to the workers is a failure."""
    import cloudpickle

    futures, unsent = {}, []
    for name, model, seed in tasks:
        if isinstance(model, pm.Model | _DataSet):
            try:
                cloudpickle.dumps(model)
            except Exception as exc:  # noqa: BLE001
                exc.add_note(f"Model {name!r} cannot be sent to the workers: pass a function "
                             f"that builds it instead of the model.")
                unsent.append(_failure(name, exc))
                continue
        future = client.submit(run_model, name, model, sampler, seed, kwargs,
                               key=f"sample_many-{name}-{uuid.uuid4().hex[:8]}")
        futures[future] = name
    return futures, unsent


def _run_distributed(client, tasks, sampler, kwargs, record):
    distributed = _distributed()
    futures, unsent = _submit(client, tasks, sampler, kwargs)
    for outcome in unsent:
        record(outcome)
    try:
        for future in distributed.as_completed(futures):
            name = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker, CancelledError, ...
                outcome = _failure(name, exc)
            record(outcome)
            future.release()
    finally:
        client.cancel([f for f in futures if not f.done()])


def _run(client, n_workers, tasks, sampler, kwargs, record):
    if isinstance(client, str):
        if client != SERIAL:
            raise ValueError(f"client must be a dask Client, None or {SERIAL!r}, got {client!r}.")
        return _run_serial(tasks, sampler, kwargs, record)
    if client is not None:
        return _run_distributed(client, tasks, sampler, kwargs, record)
    distributed = _distributed()
    n_workers = (os.cpu_count() or 1) if n_workers is None else int(n_workers)
    with (
        distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster,
        distributed.Client(cluster) as local,
    ):
        return _run_distributed(local, tasks, sampler, kwargs, record)


def sample_many(
    models: Mapping[str, pm.Model | Callable[[], pm.Model]] | pm.Model | Callable[[], pm.Model],
    sampler: Callable = sample_ct,
    *,
    data: Mapping[str, Mapping] | None = None,
    client=None,
    n_workers: int | None = None,
    random_seed=None,
    store: str | os.PathLike | None = None,
    progressbar: bool = True,
    **sampler_kwargs,
) -> Sweep:
    """Run one sampler on many models, locally or on a Dask cluster, and compare them.

    Each model gets its own seed from ``random_seed`` (:func:`model_seed`), so a sweep gives
    the same numbers serially, on a local cluster and on a remote one. A model whose builder or
    sampler raises costs no other model: its exception is its entry in ``failures``. A worker
    that dies (a crash, a machine lost) loses only the model it was running: Dask runs that
    model again on another worker, up to its ``distributed.scheduler.allowed-failures``
    setting (three by default), after which the model fails with ``KilledWorker``.

    Parameters
    ----------
    models : mapping of str to pymc.Model or function
        The models by name. A function of no arguments that builds the model (a
        ``functools.partial`` of a model factory, say) is the better way to give a model to a
        cluster: what travels to a worker is the function (and, pickled with it, the data it
        closes over), and the worker builds and compiles the model there. A ``pymc.Model``
        given as such is pickled whole with its data and rebuilt from the pickle on the worker;
        that works for models of plain tensors, but a model holding something that cannot be
        pickled (an open file, a compiled function of a C library) fails to travel, and is
        reported as that model's failure, naming this remedy. Serially, both are used as they
        are, and the models are not modified. Names are strings; they name the results, the
        rows of the table and the store's files. With ``data``: one model (or its builder).
    sampler : callable, default :func:`~pymc_tempering.sample_ct`
        Any function with the sampler contract (``model=``, ``random_seed=``,
        ``progressbar=`` keywords, a DataTree back), e.g. ``pmt.sample_ais``; it must be
        importable on the workers (a function of an installed package, or one cloudpickle
        can send by value).
    data : mapping of str to mapping, optional
        A sweep over data sets of one model (a simulation study, or calibrating a Bayes factor
        by simulation): each entry is a data set, named by its key, that ``pm.set_data`` gives
        the model (``{"y": y_1}``: values of the model's ``pm.Data``). The model is built (or,
        given as a model, copied) once per process, so that the sampler's compilation, which
        ``sample_ct`` keeps per model, serves every data set the process runs; the model you
        pass is not modified.
    client : dask.distributed.Client, None or "serial"
        Where the models run. ``None`` (default): a ``LocalCluster`` started for this sweep
        and closed after it, with ``n_workers`` processes of one thread each; a script that
        starts one needs the ``if __name__ == "__main__":`` guard, as any script that starts
        processes. A ``Client``: its cluster, which may span machines (the store then stays
        on this one). ``"serial"``: this process, one model after another, without Dask.
    n_workers : int, optional
        Workers of the local cluster (``client=None`` only). Default: the number of cores.
    random_seed : int, numpy.random.Generator or None
        The root seed. ``None`` draws one, recorded in :attr:`Sweep.random_seed`, or, when
        resuming from ``store``, takes the store's.
    store : path, optional
        A directory for the results: each model's DataTree is written as
        ``<name>.zarr`` as soon as it finishes, next to ``sweep.json`` (the root seed and the
        sampler). A sweep given a store that already holds models reads them back instead of
        running them again, so an interrupted sweep resumes where it stopped (with the same
        seeds: the store's root seed is used, and another seed or sampler is refused). Failed
        models are not stored, and a rerun tries them again. The sampler's other arguments are
        not recorded: resume with the same ones.
    progressbar : bool
        A bar over models. The samplers run without theirs.
    **sampler_kwargs
        Passed to ``sampler`` for every model: ``draws``, ``tune``, ``chains``, the method's
        options. Keep per-model options (a ``base`` fitted to one model) out of them. On a
        cluster of one-thread workers, ``cores=1`` (a ``pm.sample`` keyword, for the samplers
        that take it) keeps each model on its worker's core instead of running its chains in
        threads that compete with the other workers.

    Returns
    -------
    Sweep
        ``results`` and ``failures`` by name, the ``seeds`` used, and ``table``, the
        :func:`~pymc_tempering.compare_evidence` table of the results.

    Warns
    -----
    UserWarning
        Each warning a model's sampler raised (they are raised again here, where they are
        seen, prefixed with the model's name); a result that could not be written to the store.

    Examples
    --------
    >>> import pymc_tempering as pmt
    >>> from pymc_tempering.problems.radon import radon_intercepts_model, radon_pooled_model
    >>> models = {"pooled": radon_pooled_model, "intercepts": radon_intercepts_model}
    >>> sweep = pmt.sample_many(models, random_seed=1, store="radon_sweep")  # doctest: +SKIP
    >>> sweep.table  # doctest: +SKIP
    """
    models = _check_models(models) if data is None else _data_sets(models, data)
    reserved = {"model", "random_seed", "progressbar"} & set(sampler_kwargs)
    if reserved:
        raise ValueError(
            f"sample_many sets {sorted(reserved)} for each model; give the models in `models`, "
            f"the root seed as random_seed and the sweep's bar as progressbar."
        )
    if n_workers is not None and client is not None:
        raise ValueError("n_workers sets the size of the local cluster (client=None) only.")
    store = None if store is None else _Store(store, random_seed, sampler)
    root = _root_seed(random_seed) if store is None else store.random_seed
    seeds = {name: model_seed(root, name) for name in models}
    results = {} if store is None else {
        name: tree for name in models if (tree := store.load(name)) is not None
    }
    failures, tracebacks, durations = {}, {}, {}
    tasks = [(name, models[name], seeds[name]) for name in models if name not in results]

    with progress_bar(len(models), "Models", progressbar) as advance:
        advance(len(results))

        def record(outcome: _Outcome) -> None:
            for message, category in outcome.warnings:
                warn(f"Model {outcome.name!r}: {message}", category)
            durations[outcome.name] = outcome.seconds
            if outcome.result is None:
                failures[outcome.name] = outcome.message
                tracebacks[outcome.name] = outcome.traceback
            else:
                results[outcome.name] = outcome.result
                if store is not None:
                    try:
                        store.save(outcome.name, outcome.result)
                    except Exception as exc:  # noqa: BLE001 - the result is still returned
                        warn(f"Model {outcome.name!r}: its result could not be stored: {exc}")
            advance()

        if tasks:
            _run(client, n_workers, tasks, sampler, sampler_kwargs, record)
    return Sweep(
        results={name: results[name] for name in models if name in results},
        failures={name: failures[name] for name in models if name in failures},
        seeds=seeds,
        random_seed=root,
        tracebacks=tracebacks,
        durations=durations,
    )
