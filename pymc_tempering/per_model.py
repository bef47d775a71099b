"""What the library builds from a user's model, kept while the model is unchanged.

A model's :class:`~pymc_tempering.Target` (its compiled log density) and its extended models
(their compilations) cost seconds to build and serve every later call on the same model: a
second ``sample_ct`` with another seed, a bootstrap round, a data set given by ``pm.set_data``.
:class:`PerModel` keeps them by model object. Written here because the store must recognise the
model itself, not an equal one (a ``pymc.Model`` is not hashable by content), and must notice a
variable added since; ``functools.lru_cache`` does neither.

What does not depend on the model object is kept by its graph instead (:func:`graph_key`,
:class:`PerGraph`): a model's compiled point functions (:class:`~pymc_tempering.Target`) and
nutpie's compilation of an extended model (:mod:`pymc_tempering.extended.nutpie_cache`), which a
new model object of the same graph finds again (and, for nutpie's, a new process).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import pymc as pm
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import toposort

__all__ = ["PerGraph", "PerModel", "graph_key"]


class PerModel:
    """A small store of what was built from a model, found again while the model is unchanged.

    Kept for the ``size`` most recently used ``(model, key)`` pairs. An entry is found again
    only for the same model object with the same variables (a variable added to the model
    since, or a new model, builds anew); it holds the model, so an id is never reused while
    stored. Thread-safe.
    """

    def __init__(self, size: int = 32):
        self.size = int(size)
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _fingerprint(model: pm.Model) -> tuple:
        return tuple((name, id(var)) for name, var in model.named_vars.items())

    def get(self, model: pm.Model, key: Hashable, build: Callable):
        """The object stored for ``(model, key)``, or ``build()``'s, stored."""
        token, fingerprint = (id(model), key), self._fingerprint(model)
        with self._lock:
            entry = self._entries.get(token)
            if entry is not None and entry[0] is model and entry[1] == fingerprint:
                self._entries.move_to_end(token)
                return entry[2]
        value = build()
        with self._lock:
            self._entries[token] = (model, fingerprint, value)
            self._entries.move_to_end(token)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _leaf(var) -> tuple:
    """What names an input of a graph in :func:`graph_key`: a constant by its value, a shared
    variable or any other input by its name and type (their values are given at run time)."""
    if isinstance(var, Constant):
        return ("constant", var.signature())
    return ("shared" if isinstance(var, SharedVariable) else "input", var.name, var.type)


def graph_key(outputs, settings=()) -> tuple | None:
    """The graphs ``outputs`` as a value that two equal graphs share (the same operations,
    equal by PyTensor's own equality, on the same constants and on inputs of the same names and
    types), and their shared variables by name: ``(key, {name: shared variable})``. ``None``
    where no such value can be formed (a shared variable without a unique name, something
    unhashable). ``settings`` join the key. Meaningful in this process only: what is kept by it
    (a model's compiled functions here, nutpie's compilation in
    :mod:`pymc_tempering.extended.nutpie_cache`) serves a new model object of the same graph
    (a rebuilt model, a re-run notebook cell, a test's fixture)."""
    nodes, refs, shared = [], {}, {}
    for node in toposort(outputs):
        inputs = []
        for var in node.inputs:
            if var.owner is not None:
                inputs.append(refs[var])
                continue
            inputs.append(_leaf(var))
            if inputs[-1][0] == "shared" and shared.setdefault(var.name, var) is not var:
                return None  # two shared variables of one name
        refs.update({out: (len(nodes), i) for i, out in enumerate(node.outputs)})
        nodes.append((node.op, tuple(inputs)))
    if None in shared:
        return None
    key = (tuple(nodes), tuple(refs[o] if o in refs else _leaf(o) for o in outputs),
           tuple(settings))
    try:
        hash(key)
    except TypeError:
        return None
    return key, shared


class PerGraph:
    """A small store of what was built for a graph, by its :func:`graph_key` (or any other
    hashable key): the ``size`` most recently used entries. Thread-safe."""

    def __init__(self, size: int = 16):
        self.size = int(size)
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def find(self, key: Hashable):
        """The entry of ``key``, or None."""
        with self._lock:
            if key not in self._entries:
                return None
            self._entries.move_to_end(key)
            return self._entries[key]

    def keep(self, key: Hashable, value) -> None:
        """Store ``value`` under ``key`` (the least recently used entry goes beyond ``size``)."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def get(self, key: Hashable | None, build: Callable):
        """The entry of ``key``, built by ``build()`` and kept when absent (built each time
        where ``key`` is None: a graph without a key is never shared)."""
        if key is None:
            return build()
        found = self.find(key)
        if found is None:
            found = build()
            self.keep(key, found)
        return found

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
