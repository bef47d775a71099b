"""nutpie's compilation of a model, found again by its graph: in the process and on disk.

``nutpie.compile_pymc_model`` (Numba backend) does two things. It compiles the model's log
density with its gradient, and the draws' expansion, as PyTensor functions: PyTensor keys them
by their graph and keeps them in its Numba cache on disk, so they cost a fraction of a second
in any process that meets the same graph again (the graph's rewriting is what remains). It then
compiles two C callbacks for nuts-rs around them (``numba.cfunc``), which read the shared
variables' current values from a record of pointers (``user_data``). Those callbacks took most
of the compilation's seconds (3.3 s of 3.8 s for the quickstart's tempered model on two cores)
and were compiled anew for every model object and in every process: their Python functions
close over Numba dispatchers, whose pickle carries a number made fresh in each process (numba
issue 6264), so Numba's cache never finds them.

:func:`compile_pymc_model` gives what nutpie gives, found again at two levels:

- **In the process, by the model's graph** (:func:`_graph_key`: the operations, constants and
  the names and types of the inputs, shared variables included, of the graphs nutpie
  compiles): a new model object of a graph already compiled (a rebuilt model, a re-run cell)
  takes that compilation, with its own shared variables and their values, its own initial
  point and coordinates (:func:`_for_model`); nothing is compiled or rewritten.
- **On disk, by the compiled functions**: the callbacks are compiled from nutpie's own parts
  (``_make_functions``, ``make_extraction_fn``, ``make_user_data``), written from source with
  everything they reference as globals (PyTensor's own device for its Numba cache,
  :func:`pytensor.link.numba.cache.compile_numba_function_src`) and keyed by PyTensor's cache
  keys of the two inner functions, the shared data's layout (rank and dtype, in order), the
  dimensions, the callbacks' source and the versions of nutpie, Numba and PyTensor. Numba
  stores them in PyTensor's Numba cache directory under that key, so a later process loads
  them (one entry per key: repeated runs of a model add nothing), and the process keeps them
  by it too. The shared variables' keys in ``user_data`` are their positions (``s0``,
  ``s1``, ...), not nutpie's fresh ``uuid4`` per compilation, so that the record's layout
  depends on the graph only.

What is the model's own (its initial point, coordinates, shared values) is built from the model
each time, as nutpie builds it. A graph whose inner functions PyTensor cannot key (an Op without
a cache key) is compiled by nutpie itself, and kept in the process by its graph.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import warnings

import numpy as np

from pymc_tempering.per_model import PerGraph, graph_key

__all__ = ["CALLBACK_VERSION", "callback_compilations", "clear", "compile_pymc_model"]

#: Changed whenever the callbacks' source or their layout changes (part of every key).
CALLBACK_VERSION = "1"

_LOGP_SRC = """
def pmt_nutpie_logp(dim, x_, out_, logp_, user_data_):
    if dim != n_dim:
        return -1
    try:
        x = numba.carray(x_, (n_dim,))
        out = numba.carray(out_, (n_dim,))
        logp = numba.carray(logp_, ())
        logp_val, grad = extract(x, user_data_)
        logp[()] = logp_val
        out[...] = grad
        if not np.all(np.isfinite(out)):
            return 3
        if not np.isfinite(logp_val):
            return 4
    except Exception:  # noqa: BLE001
        return 1
    return 0
"""

_EXPAND_SRC = """
def pmt_nutpie_expand(dim, expanded, x_, out_, user_data_):
    if dim != n_dim:
        return -1
    if expanded != n_expanded:
        return -1
    try:
        x = numba.carray(x_, (n_dim,))
        out = numba.carray(out_, (n_expanded,))
        (values,) = extract(x, user_data_)
        out[...] = values
    except Exception:  # noqa: BLE001
        return -2
    return 0
"""

#: The callbacks compiled or loaded in this process, by key (the most recent 64).
_CALLBACKS = PerGraph(64)
#: The compiled models of this process, by their graph (:func:`_graph_key`; the most recent 16:
#: each holds its first model's PyTensor functions and shared variables).
_MODELS = PerGraph(16)
_LOCK = threading.Lock()  # of the counts
_COUNT = {"compiled": 0, "loaded": 0, "reused": 0, "graphs_reused": 0}


def callback_compilations() -> dict[str, int]:
    """How the callbacks of this process were obtained so far: ``compiled`` (typed and
    compiled by Numba), ``loaded`` (from Numba's cache on disk) and ``reused`` (kept in the
    process); each :func:`compile_pymc_model` adds two (log density and expansion).
    ``graphs_reused`` counts the calls that found the whole compilation by the model's graph
    (PyTensor's functions not built again)."""
    return dict(_COUNT)


def clear() -> None:
    """Forget what the process keeps (the disk cache is PyTensor's)."""
    _CALLBACKS.clear()
    _MODELS.clear()


def _versions() -> tuple:
    import numba
    import nutpie
    import pytensor

    return (CALLBACK_VERSION, nutpie.__version__, numba.__version__, pytensor.__version__)


def _inner_key(function) -> str | None:
    """PyTensor's Numba cache key of a compiled PyTensor function, or ``None``."""
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    jit_fn = getattr(getattr(function, "vm", None), "jit_fn", None)
    py_func = getattr(jit_fn, "py_func", None)
    if py_func is None:
        return None
    return CACHED_SRC_FUNCTIONS.get(py_func)


def _callback(kind, src, name, c_sig, key, make_extract, constants):
    """The C callback ``name`` of ``src`` under ``key``: kept, loaded, or compiled."""
    import numba
    from pytensor.link.numba.cache import compile_numba_function_src

    found = _CALLBACKS.find(key)
    if found is not None:
        with _LOCK:
            _COUNT["reused"] += 1
        return found
    py_func = compile_numba_function_src(
        src, name,
        # an importable module's name: Numba rebuilds the callback's environment from it
        global_env={
            "__name__": __name__, "numba": numba, "np": np, "extract": make_extract(), **constants
        },
        cache_key=f"pmt_{kind}_{key}",
    )
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Cannot cache compiled function", category=numba.NumbaWarning
        )
        try:
            compiled = numba.cfunc(c_sig, cache=True)(py_func)
        except OSError:  # the cache directory cannot be written: compiled for this process only
            compiled = numba.cfunc(c_sig)(py_func)
    with _LOCK:
        _COUNT["loaded" if compiled.cache_hits else "compiled"] += 1
    _CALLBACKS.keep(key, compiled)
    return compiled


def _key(*parts) -> str:
    return hashlib.sha256(repr((_versions(), *parts)).encode()).hexdigest()


def _signatures():
    """The C signatures nuts-rs calls: ``logp(dim, x, grad, logp, user_data)`` and
    ``expand(dim, expanded, x, out, user_data)``."""
    from numba import types

    double = types.CPointer(types.double)
    return (
        types.int64(types.uint64, double, double, double, types.voidptr),
        types.int64(types.uint64, types.uint64, double, double, types.voidptr),
    )


def _shared_data(functions) -> tuple[dict, dict]:
    """The shared variables of ``functions`` (in order, each once): their current values
    (read-only copies) and their keys in ``user_data`` (their positions, ``s0``, ``s1``, ...)."""
    shared_data, shared_var_keys = {}, {}
    for var in [v for f in functions for v in f.get_shared()]:
        if var not in shared_var_keys:
            key = f"s{len(shared_var_keys)}"
            value = np.array(var.get_value(), order="C", copy=True)
            value.flags.writeable = False
            shared_data[key], shared_var_keys[var] = value, key
    return shared_data, shared_var_keys


def _graph_key(model, var_names):
    """The graphs nutpie compiles for ``model`` as a value that two equal graphs share
    (:func:`~pymc_tempering.target.graph_key`), with the shared variables by name; ``None``
    where an input or output's shape is not static, or no such value can be formed."""
    from pytensor import config

    value_vars = [model.rvs_to_values[rv] for rv in model.free_RVs]
    joined, names = {v.name for v in value_vars}, set(var_names or ())
    remaining = [
        v for v in model.unobserved_value_vars
        if v.name not in joined and (var_names is None or v.name in names)
    ]
    outputs = [model.logp(), *value_vars, *remaining]
    if any(None in getattr(v.type, "shape", (None,)) for v in outputs[1:]):
        return None
    settings = (
        tuple(var_names) if var_names is not None else None, model.check_bounds,
        config.numba__fastmath, str(config.mode),
    )
    return graph_key(outputs, settings)


def _initial_point_fn(model):
    """nutpie's initial point of ``model`` (its defaults: the support point, jittered)."""
    from nutpie import compile_pymc as cp
    from pymc.initial_point import make_initial_point_fn

    return cp._wrap_with_lock(
        make_initial_point_fn(
            model=model, overrides=None, default_strategy="support_point",
            jitter_rvs=set(model.free_RVs), return_transformed=True,
        )
    )


def _for_model(compiled, model, shared: dict):
    """``compiled`` (another model's, of the same graph) for ``model``: its callbacks and
    layout, with ``model``'s shared variables and their values, its initial point and its
    coordinates. ``None`` where a shared variable of ``compiled`` has no namesake in
    ``model``'s graph."""
    from nutpie import compile_pymc as cp

    keys = {var.name: key for var, key in compiled.shared_var_keys.items()}
    if not set(keys) <= set(shared):
        return None
    shared_data = {}
    for name, key in keys.items():
        shared_data[key] = np.array(shared[name].get_value(), order="C", copy=True)
        shared_data[key].flags.writeable = False
    names, _, shapes = compiled.shape_info
    k = len(model.free_RVs)
    dims, coords = cp._prepare_dims_and_coords(
        model, compiled.shape_info, compiled.reparameterized_names
    )
    return dataclasses.replace(
        compiled,
        shared_var_keys={shared[name]: key for name, key in keys.items()},
        shared_data=shared_data,
        user_data=cp.update_user_data(compiled.user_data.copy(), shared_data),
        initial_point_func=cp._rv_dict_to_flat_array_wrapper(
            _initial_point_fn(model), names=names[:k], shapes=shapes[:k]
        ),
        dims=dims,
        _coords=coords,
    )


def compile_pymc_model(model, *, var_names=None):
    """``nutpie.compile_pymc_model(model, backend="numba", var_names=var_names)`` (its other
    arguments at their defaults), found again by the graph (module docstring): a model of a
    graph this process compiled takes that compilation with its own data, initial point and
    coordinates; another finds the callbacks in the process or on disk."""
    graph = _graph_key(model, var_names)
    if graph is not None:
        found = _MODELS.find(graph[0])
        if found is not None and (reused := _for_model(found, model, graph[1])) is not None:
            with _LOCK:
                _COUNT["reused"] += 2
                _COUNT["graphs_reused"] += 1
            return reused
    compiled = _compile(model, var_names=var_names)
    if graph is not None:
        _MODELS.keep(graph[0], compiled)
    return compiled


def _compile(model, *, var_names=None):
    """:func:`compile_pymc_model` of a graph not yet compiled in the process: PyTensor's
    functions, then the callbacks kept, loaded or compiled by their key. Falls back to
    nutpie's own compilation where PyTensor gives no cache key."""
    import nutpie
    from nutpie import compile_pymc as cp

    n_dim, n_expanded, logp_pt, expand_pt, initial_point_fn, shape_info, reparameterized = (
        cp._make_functions(
            model, mode="NUMBA", compute_grad=True, join_expanded=True,
            pymc_initial_point_fn=_initial_point_fn(model), var_names=var_names,
        )
    )
    logp_key, expand_key = _inner_key(logp_pt), _inner_key(expand_pt)
    if logp_key is None or expand_key is None:
        return nutpie.compile_pymc_model(model, backend="numba", var_names=var_names)
    shared_data, shared_var_keys = _shared_data([logp_pt, expand_pt])
    user_data = cp.make_user_data(shared_var_keys, shared_data)
    layout = tuple((k, v.ndim, v.dtype.str) for k, v in shared_data.items())
    logp_keys = [shared_var_keys[v] for v in logp_pt.get_shared()]
    expand_keys = [shared_var_keys[v] for v in expand_pt.get_shared()]
    logp_sig, expand_sig = _signatures()
    logp_cfunc = _callback(
        "logp", _LOGP_SRC, "pmt_nutpie_logp", logp_sig,
        _key(_LOGP_SRC, logp_key, layout, logp_keys, n_dim),
        lambda: cp.make_extraction_fn(logp_pt.vm.jit_fn, shared_data, logp_keys, user_data.dtype),
        {"n_dim": n_dim},
    )
    expand_cfunc = _callback(
        "expand", _EXPAND_SRC, "pmt_nutpie_expand", expand_sig,
        _key(_EXPAND_SRC, expand_key, layout, expand_keys, n_dim, n_expanded),
        lambda: cp.make_extraction_fn(
            expand_pt.vm.jit_fn, shared_data, expand_keys, user_data.dtype
        ),
        {"n_dim": n_dim, "n_expanded": n_expanded},
    )
    dims, coords = cp._prepare_dims_and_coords(model, shape_info, reparameterized)
    return cp.CompiledPyMCModel(
        _n_dim=n_dim,
        dims=dims,
        _coords=coords,
        _shapes={name: tuple(shape) for name, _, shape in zip(*shape_info, strict=True)},
        compiled_logp_func=logp_cfunc,
        compiled_expand_func=expand_cfunc,
        initial_point_func=initial_point_fn,
        shared_data=shared_data,
        shared_var_keys=shared_var_keys,
        user_data=user_data,
        n_expanded=n_expanded,
        shape_info=shape_info,
        logp_func=logp_pt,
        expand_func=expand_pt,
        reparameterized_names=reparameterized,
    )
