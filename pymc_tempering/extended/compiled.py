"""One compiled extended model per model and method: its runs swap data, not graphs.

Continuous tempering samples one extended model many times: bootstrap rounds, extensions, later
calls with another seed or on other data. The runs differ only in the base and ``log zeta``,
which the extended model holds as shared data (:func:`run_data`; see
:func:`~pymc_tempering.extended.tempered.tempered_model`), so one compilation serves them all:

- :func:`extended_model` keeps the extended model built for a user's model and a graph (the
  method and the base's parametrisation) and finds it again for the next run
  (:class:`~pymc_tempering.per_model.PerModel`);
- :func:`sample_extended` sets the run's values and samples. With nutpie (PyMC's default NUTS)
  the model is compiled once (``nutpie.compile_pymc_model``'s work, done by
  :func:`~pymc_tempering.extended.nutpie_cache.compile_pymc_model`) and each run takes the
  current values of every shared variable of its graph (``CompiledModel.with_data``: the run's
  base and the model's ``pm.Data``, which ``pm.set_data`` may have changed since). PyMC's own
  NUTS, NumPyro, and nutpie with options ``pm.sample`` must handle itself run through
  :func:`pymc.sample`, which compiles again (PyTensor's cache finds the same graph).

The extended model is kept per model object; what its compilation costs is kept by the graph.
A new model object of an already-seen graph (a rebuilt model, a re-run notebook cell, a test's
fixture) and a new process build the extended model and PyTensor's functions again (PyTensor
finds them in its cache on disk) and find nutpie's callbacks, the compilation's largest part,
in the process or on disk under the graph's key (:mod:`pymc_tempering.extended.nutpie_cache`).

Why it is written here: ``pm.sample`` takes a model and compiles it on every call; it cannot be
given a compiled one. For nutpie it does three things around ``nutpie.sample``, which are
called here as it calls them: the chains' seed from ``random_seed``, PyMC's progress bar
(``NutpieProgressBarManager``), and the result's data groups (``patch_nutpie_idata``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import graph_inputs

from pymc_tempering.extended.nutpie_cache import compile_pymc_model
from pymc_tempering.per_model import PerModel
from pymc_tempering.timing import add_phase, phase

__all__ = [
    "ExtendedModel",
    "extended_model",
    "nutpie_direct",
    "run_data",
    "sample_extended",
    "stored_variables",
]

#: The name of the shared vector that holds what a run sets (:func:`run_data`).
RUN_DATA = "pmt_run_data"
#: ``pm.sample`` keywords that :func:`sample_extended` passes to nutpie itself; with any other,
#: the run goes through ``pm.sample``.
NUTPIE_KEYWORDS = frozenset(
    {"nuts", "target_accept", "cores", "idata_kwargs", "blas_cores", "quiet", "progressbar_theme"}
)

_MODELS = PerModel()


def run_data(values: Mapping[str, np.ndarray]) -> dict:
    """The parts of an extended model that each run sets, as views of one shared vector.

    One vector rather than a shared variable each: nutpie's compilation of a small model took
    most of a second longer for every shared variable of its graph, and not longer for a
    vector's length. Its layout (names, offsets and shapes) is kept on the vector
    (``tag.layout``) for :meth:`ExtendedModel.set`.

    Parameters
    ----------
    values : dict of str to array_like
        The first run's values; their shapes are fixed.

    Returns
    -------
    dict of str to TensorVariable
        A view of the vector for each name, with its static shape.
    """
    layout, offset = {}, 0
    for name, value in values.items():
        shape = np.shape(value)
        layout[name] = (offset, shape)
        offset += int(np.prod(shape, dtype=int))
    vector = pytensor.shared(_pack(layout, values, offset), name=RUN_DATA, shape=(offset,))
    vector.tag.layout = layout
    return {
        name: vector[start : start + int(np.prod(shape, dtype=int))].reshape(shape)
        for name, (start, shape) in layout.items()
    }


def _pack(layout: dict, values: Mapping, size: int) -> np.ndarray:
    if set(values) != set(layout):
        raise ValueError(f"A run sets {sorted(layout)}, got {sorted(values)}.")
    packed = np.empty(size)
    for name, (start, shape) in layout.items():
        value = np.asarray(values[name], dtype=float)
        if value.shape != shape:
            raise ValueError(f"{name} has shape {shape}, got {value.shape}.")
        packed[start : start + value.size] = value.ravel()
    return packed


def stored_variables(model: pm.Model) -> list[str]:
    """The ``var_names`` of ``pm.sample`` for an extended model: its free variables (the user's
    value variables and the method's temperature variables) only. The method's ``weigh``
    computes the user's constrained variables and deterministics from them, once per draw, with
    the function the :class:`~pymc_tempering.Target` compiled already; the samplers would
    compile them again (nutpie compiles them into a second function, which costs more than the
    calls on a large model).
    """
    return [rv.name for rv in model.free_RVs]


@dataclass(eq=False)
class ExtendedModel:
    """An extended model, its run-data vector, and its nutpie compilation.

    Attributes
    ----------
    model : pymc.Model
    data : SharedVariable or None
        The run-data vector (:func:`run_data`).
    compilations : int
        How many times nutpie compiled it (once, however many runs).
    """

    model: pm.Model
    data: Any = None
    compilations: int = 0
    lock: Any = field(default_factory=threading.Lock, repr=False)
    _nutpie: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, model: pm.Model) -> ExtendedModel:
        """``model`` with the run-data vector of its graph (:func:`run_data`), if any."""
        outputs = [*model.potentials, *model.deterministics]
        outputs += [v for v in model.rvs_to_initial_values.values() if isinstance(v, Variable)]
        found = [
            v for v in graph_inputs(outputs)
            if isinstance(v, SharedVariable) and v.name == RUN_DATA
        ]
        return cls(model, found[0] if found else None)

    def set(self, values: Mapping[str, np.ndarray]) -> None:
        """Set the run data (every name of :func:`run_data`'s; none without run data)."""
        if self.data is None:
            if values:
                raise ValueError(f"This model has no run data; got {sorted(values)}.")
            return
        layout = self.data.tag.layout
        self.data.set_value(_pack(layout, values, self.data.type.shape[0]))

    def nutpie_model(self):
        """The nutpie compilation at the current values of every shared variable of its graph
        (compiled on the first call; its callbacks found again by the graph,
        :mod:`pymc_tempering.extended.nutpie_cache`)."""
        if self._nutpie is None:
            with phase("compile"):
                compiled = compile_pymc_model(self.model, var_names=stored_variables(self.model))
            self.compilations += 1
            names = [v.name for v in compiled.shared_var_keys]
            if None not in names and len(set(names)) == len(names):
                self._nutpie = compiled  # else not kept: it cannot be given new values by name
            return compiled  # at the current values
        compiled = self._nutpie
        return compiled.with_data(
            **{v.name: v.get_value(borrow=True) for v in compiled.shared_var_keys}
        )


def extended_model(user_model: pm.Model, key: Hashable | None, build: Callable) -> ExtendedModel:
    """The extended model ``build()`` gives, kept for ``user_model`` under ``key``.

    ``key`` names the graph among the extended models of ``user_model`` (the method and what
    else fixes the graph); every run of the same key reuses the model and its compilation.
    ``None``: built afresh (a graph that holds a run's values as constants).
    """
    if key is None:
        return ExtendedModel.of(build())
    return _MODELS.get(user_model, key, lambda: ExtendedModel.of(build()))


def nutpie_direct(nuts_sampler: str | None, kwargs: Mapping) -> bool:
    """Whether :func:`sample_extended` runs nutpie itself: nutpie chosen (or PyMC's choice with
    the Numba backend) and only keywords it handles as ``pm.sample`` does."""
    if nuts_sampler not in (None, "nutpie") or set(kwargs) - NUTPIE_KEYWORDS:
        return False
    if kwargs.get("blas_cores") is not None:
        return False
    if set(kwargs.get("idata_kwargs") or {}) - {"include_transformed"}:
        return False
    if {"backend", "gradient_backend"} & set(kwargs.get("nuts") or {}):
        return False
    from pymc.sampling.mcmc import NUTPIE_INSTALLED
    from pytensor.compile.mode import get_mode
    from pytensor.link.numba.linker import NumbaLinker

    return NUTPIE_INSTALLED and isinstance(get_mode(None).linker, NumbaLinker)


def _cores(cores, chains: int) -> int:
    """``pm.sample``'s parallel chains: ``cores`` (default up to 4 CPUs), at most ``chains``."""
    if cores is None:
        available = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        )
        cores = min(4, available or 1)
    return int(min(cores, chains))


def _sample_nutpie(extended: ExtendedModel, draws, tune, chains, seed, progressbar, kwargs):
    """``pm.sample(nuts_sampler="nutpie")`` on the kept compilation (its own steps, in order)."""
    import nutpie
    from pymc.backends.arviz import patch_nutpie_idata
    from pymc.progress_bar import NutpieProgressBarManager
    from pymc.util import get_random_generator

    nuts = dict(kwargs.get("nuts") or {})
    if "target_accept" in kwargs:
        nuts["target_accept"] = kwargs["target_accept"]
    if "max_treedepth" in nuts:
        nuts["maxdepth"] = nuts.pop("max_treedepth")
    compiled = extended.nutpie_model()
    seeds = [rng.integers(2**30) for rng in get_random_generator(seed).spawn(chains)]
    bar = NutpieProgressBarManager(
        chains=chains, draws=draws, progressbar=progressbar,
        progressbar_theme=kwargs.get("progressbar_theme"),
    )
    began = time.time()
    with bar, phase("sampling"):
        idata = nutpie.sample(
            compiled,
            draws=draws,
            tune=max(int(tune), 1),  # nuts-rs needs a tuning step
            chains=chains,
            cores=_cores(kwargs.get("cores"), chains),
            seed=int(seeds[0]),
            save_warmup=True,  # for the tuning's share of the gradients; dropped below
            store_unconstrained=bool((kwargs.get("idata_kwargs") or {}).get("include_transformed")),
            progress_bar=False,
            progress_callback=bar.update,
            **nuts,
        )
    seconds = time.time() - began
    tuning = int(idata["warmup_sample_stats"]["n_steps"].sum())
    total = tuning + int(idata["sample_stats"]["n_steps"].sum())
    add_phase("tuning", seconds * tuning / max(total, 1), within="sampling")
    for group in [g for g in idata.children if g.startswith("warmup_")]:
        del idata[group]
    patch_nutpie_idata(idata, extended.model, sampling_time=seconds)
    return idata


def sample_extended(
    extended: ExtendedModel, *, draws, tune, chains, seed, nuts_sampler, progressbar, step,
    kwargs,
):
    """One run of ``extended`` (its run data set): nutpie on the kept compilation where
    :func:`nutpie_direct` allows, else :func:`pymc.sample` with ``step`` and ``kwargs``.

    Its seconds go to the phases ``compile``, ``tuning`` (nutpie: the share of the run's
    gradient evaluations spent tuning; ``pm.sample``: counted with ``sampling``) and
    ``sampling`` (:mod:`pymc_tempering.timing`).
    """
    if step is None and nutpie_direct(nuts_sampler, kwargs):
        return _sample_nutpie(extended, draws, tune, chains, seed, progressbar, kwargs)
    began = time.perf_counter()
    with phase("sampling"):
        sampled = pm.sample(
            draws,
            tune=tune,
            chains=chains,
            step=step,
            nuts_sampler=nuts_sampler,
            random_seed=seed,
            progressbar=progressbar,
            model=extended.model,
            var_names=stored_variables(extended.model),
            **kwargs,
        )
    # pm.sample compiles before it samples; its sampling_time is the sampling alone
    sampling_time = sampled["posterior"].attrs.get("sampling_time")
    if sampling_time is not None:
        add_phase("compile", time.perf_counter() - began - float(sampling_time), within="sampling")
    return sampled
