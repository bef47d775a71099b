"""Turn a driver's flat draws into what ``pm.sample`` returns, for :func:`build_result`.

A driver records flat unconstrained draws ``(chain, draw, ndim)``; this maps them (in one
vectorised compiled call) to the model's named constrained variables and deterministics, and
packs them with the value variables and the driver's stats into a ``DataTree`` with
``posterior`` and ``sample_stats`` groups, as PyMC's converter would. The result layout itself
is built by :func:`pymc_tempering.results.build_result` only.
"""

from __future__ import annotations

import numpy as np
import pymc
import pytensor
import pytensor.tensor as pt
from pymc.backends.arviz import coords_and_dims_for_inferencedata, dict_to_dataset
from pytensor.graph.replace import vectorize_graph
from xarray import DataTree

from pymc_tempering.target import Target

__all__ = ["constrained_draws", "draws_to_datatree", "progress_bar"]


def constrained_draws(target: Target, x: np.ndarray) -> dict[str, np.ndarray]:
    """The model's constrained variables and deterministics at flat draws ``(..., ndim)``."""
    x = np.asarray(x, dtype=float)
    lead = x.shape[:-1]
    flat = x.reshape(-1, target.ndim)
    point = pt.vector("x", dtype="float64")
    outputs = target.constrained_graph(target.unravel_graph(point))
    names = list(outputs)
    batch = pt.matrix("xs", dtype="float64")
    try:
        fn = pytensor.function([batch], vectorize_graph(list(outputs.values()), {point: batch}))
        values = fn(flat)
    except Exception:  # an Op without a batched form: fall back to one call per draw
        rows = [target.constrained(row) for row in flat]
        values = [np.stack([r[name] for r in rows]) for name in names]
    return {
        name: np.asarray(v).reshape(lead + np.asarray(v).shape[1:])
        for name, v in zip(names, values, strict=True)
    }


def draws_to_datatree(
    target: Target,
    x: np.ndarray,
    *,
    extra_posterior: dict[str, np.ndarray] | None = None,
    sample_stats: dict[str, np.ndarray] | None = None,
) -> DataTree:
    """Pack flat draws ``x`` of shape ``(chain, draw, ndim)`` like PyMC's converter.

    The ``posterior`` holds the model's variables under their own names and dims, the
    transformed value variables under their value names (``s_log__``) and ``extra_posterior``;
    ``sample_stats`` holds ``sample_stats``, each shaped ``(chain, draw, ...)``.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 3 or x.shape[-1] != target.ndim:
        raise ValueError(f"Expected draws of shape (chain, draw, {target.ndim}), got {x.shape}.")
    coords, dims = coords_and_dims_for_inferencedata(target.model)
    posterior = constrained_draws(target, x)
    values, start = {}, 0
    for name, shape, size in zip(target.names, target.shapes, target.sizes, strict=True):
        values[name] = x[..., start : start + size].reshape(x.shape[:2] + shape)
        start += size
    for name in target.transformed_names:
        posterior[name] = values[name]
    posterior.update(extra_posterior or {})
    post_ds = dict_to_dataset(posterior, inference_library=pymc, coords=coords, dims=dims)
    groups = {"/posterior": post_ds}
    if sample_stats:
        groups["/sample_stats"] = dict_to_dataset(
            sample_stats, inference_library=pymc, coords=coords, dims={}
        )
    return DataTree.from_dict(groups)


class progress_bar:  # noqa: N801 - used as a context manager, like rich's own
    """A rich progress bar over ``total`` iterations; does nothing when ``enabled`` is false.

    Use as ``with progress_bar(total, "AIS", enabled) as advance: ... advance()``.
    """

    def __init__(self, total: int, description: str, enabled: bool = True):
        self.total, self.description, self.enabled = int(total), description, bool(enabled)
        self._progress = None

    def __enter__(self):
        if not self.enabled:
            return lambda n=1: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self._progress.__enter__()
        task = self._progress.add_task(self.description, total=self.total)
        return lambda n=1: self._progress.advance(task, n)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False
