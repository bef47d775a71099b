"""What the library builds from a user's model, kept while the model is unchanged.

A model's :class:`~pymc_tempering.Target` (its compiled log density) and its extended models
(their compilations) cost seconds to build and serve every later call on the same model: a
second ``sample_ct`` with another seed, a bootstrap round, a data set given by ``pm.set_data``.
:class:`PerModel` keeps them by model object. Written here because the store must recognise the
model itself, not an equal one (a ``pymc.Model`` is not hashable by content), and must notice a
variable added since; ``functools.lru_cache`` does neither.

What does not depend on the model object is kept by its graph instead, one level up: nutpie's
compilation of an extended model, which a new model object of the same graph and a new process
find again (:mod:`pymc_tempering.extended.nutpie_cache`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import pymc as pm

__all__ = ["PerModel"]


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
