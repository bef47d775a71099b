"""The one driver loop: warm-up, recording, progress bar and result for every driver method.

A driver method (AIS, simulated tempering, TACT-HMC, replica exchange, ergodic inference) is a
kernel, ``step(state, params, rng) -> (state, info)`` over small immutable records (see
:mod:`pymc_tempering.kernels`), plus what to record. :func:`run_kernel` runs it: ``tune``
warm-up iterations that may adapt ``params`` and are discarded, then iterations until every
chain has kept ``draws`` records, with one progress bar. :func:`driver_result` turns the kept
flat draws into the library's result (through :func:`~pymc_tempering.results.build_result`,
the only builder of the layout), records the seed and warns from
:func:`~pymc_tempering.diagnose`.

The flat draws ``(chain, draw, ndim)`` are mapped (by the :class:`Target`'s compiled point
function, once per draw) to the model's named constrained variables and deterministics, and
packed with the value variables and the driver's stats into a ``DataTree`` with ``posterior``
and ``sample_stats`` groups, as PyMC's converter would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xarray import DataTree

from pymc_tempering.contract import seed_attrs
from pymc_tempering.progress import progress_bar
from pymc_tempering.report import (
    warn_convergence,
    warn_missed_modes,
    warn_problems,
    warn_weighted,
)
from pymc_tempering.results import build_result, draws_to_datatree
from pymc_tempering.target import Target

__all__ = [
    "Trace",
    "run_kernel",
    "driver_result",
]


@dataclass(frozen=True)
class Trace:
    """What :func:`run_kernel` returns.

    Attributes
    ----------
    draws : dict of str to ndarray
        Each recorded quantity at the kept draws, shape ``(chains, draws, ...)``.
    state, params
        The kernel's state and parameters at the end (``params`` as warm-up left them).
    n_iterations : int
        Iterations after warm-up (more than ``draws`` when ``keep`` skipped some).
    trajectory : dict of str to ndarray or None
        With ``trajectory=True``: every post-warm-up iteration's record, shape
        ``(chains, iteration, ...)``, and ``kept`` (bool) saying which were draws.
    """

    draws: dict
    state: Any
    params: Any
    n_iterations: int
    trajectory: dict | None = None


def _record_kept(out, record, keep, n_kept, draws):
    """Copy the chains marked by ``keep`` into their next slot of ``out``; return new counts."""
    keep = keep & (n_kept < draws)
    if keep.any():
        rows, slots = np.nonzero(keep)[0], n_kept[keep]
        for name, value in record.items():
            if name not in out:
                value0 = np.asarray(value)
                out[name] = np.empty((n_kept.size, draws, *value0.shape[1:]), dtype=value0.dtype)
            out[name][rows, slots] = np.asarray(value)[keep]
    return n_kept + keep


def run_kernel(
    step: Callable,
    state,
    params,
    *,
    draws: int,
    tune: int,
    chains: int,
    rng: np.random.Generator,
    record: Callable,
    keep: Callable | None = None,
    warmup: Callable | None = None,
    description: str = "Sampling",
    progressbar: bool = True,
    max_iterations: int | None = None,
    trajectory: bool | tuple[str, ...] = False,
) -> Trace:
    """The one driver loop: ``tune`` warm-up iterations, then iterations until ``draws`` are kept.

    Parameters
    ----------
    step : callable
        ``step(state, params, rng) -> (state, info)``: one iteration of the method (a kernel, or
        several kernels composed). ``info`` is an :class:`Info` or anything ``record`` reads.
    state, params
        The initial state and the kernel's parameters (step sizes, masses, ...).
    draws, tune, chains : int
        Draws to keep per chain, warm-up iterations (discarded), and chains (the leading axis
        of every record).
    rng : numpy.random.Generator
        The only source of randomness of the loop (seeded by the caller).
    record : callable
        ``record(state, info) -> dict`` of arrays with a leading chain axis: what one draw holds.
    keep : callable, optional
        ``keep(state, info) -> bool array (chains,)``: which chains' current record is a draw
        (TACT-HMC keeps only unit-temperature states). Default: every chain, every iteration.
    warmup : callable, optional
        ``warmup(state, info, params, iteration) -> (state, params)``, called after each warm-up
        iteration to adapt ``params`` (and, say, reset momenta).
    description, progressbar
        The progress bar's label, and whether to show it.
    max_iterations : int, optional
        After warm-up, give up (``RuntimeError``) when a chain has not kept ``draws`` by then.
        Default ``100 * draws``.
    trajectory : bool or tuple of str
        Also return every post-warm-up record (see :class:`Trace`): all of it with ``True``, or
        only the named quantities (positions of a large model need not be kept twice).
    """
    max_iterations = 100 * draws if max_iterations is None else int(max_iterations)
    out: dict[str, np.ndarray] = {}
    every: dict[str, list] | None = {} if trajectory else None
    n_kept = np.zeros(chains, dtype=int)
    iteration = 0
    with progress_bar(tune + draws, description, progressbar) as advance:
        for it in range(tune):
            state, info = step(state, params, rng)
            if warmup is not None:
                state, params = warmup(state, info, params, it)
            advance()
        while n_kept.min() < draws:
            if iteration >= max_iterations:
                raise RuntimeError(
                    f"After {iteration} iterations a chain has only {n_kept.min()} of {draws} "
                    "draws; see the method's options that control which states are kept."
                )
            iteration += 1
            state, info = step(state, params, rng)
            values = record(state, info)
            kept = np.ones(chains, dtype=bool) if keep is None else np.asarray(keep(state, info))
            if every is not None:
                for name, value in {**values, "kept": kept & (n_kept < draws)}.items():
                    if trajectory is True or name in trajectory or name == "kept":
                        every.setdefault(name, []).append(np.array(value))
            before = n_kept.min()
            n_kept = _record_kept(out, values, kept, n_kept, draws)
            advance(int(n_kept.min() - before))
    if every is not None:
        every = {name: np.stack(v, axis=1) for name, v in every.items()}
    return Trace(out, state, params, iteration, every)


def driver_result(
    target: Target,
    x: np.ndarray,
    *,
    method: str,
    sample_stats: dict,
    random_seed,
    attrs: dict | None = None,
    warn: bool = True,
    convergence: bool = False,
    **build_kwargs,
) -> DataTree:
    """The result of a driver method, from flat draws ``x`` (chain, draw, ndim).

    ``sample_stats`` must hold ``diverging``, ``acceptance_rate`` and ``lp`` (chain, draw)
    beside the method's own stats; ``build_kwargs`` go to
    :func:`~pymc_tempering.results.build_result` (``log_weight``,
    ``log_marginal_likelihood``, ``extra_posterior``, ``extra_groups``, ...). The seed goes
    into attrs, and with ``warn`` every problem :func:`~pymc_tempering.diagnose` finds is
    warned about; with ``convergence`` (methods whose draws are unweighted Markov chains) also
    PyMC's convergence checks (:func:`warn_convergence`) and, for a model without
    minibatches, a mode search's optima that the draws never came near
    (:func:`warn_missed_modes`); without it (weighted draws) the posterior's verdict
    (:func:`~pymc_tempering.report.judge_posterior`).
    """
    extra_posterior = build_kwargs.pop("extra_posterior", None)
    sampled = draws_to_datatree(
        target, x, extra_posterior=extra_posterior, sample_stats=sample_stats
    )
    result = build_result(
        sampled, target, method=method, attrs={**seed_attrs(random_seed), **(attrs or {})},
        **build_kwargs,
    )
    if warn and convergence:
        warn_problems(result)
        warn_convergence(result, target.model, method)
        warn_missed_modes(result, target, x, method, random_seed)
    elif warn:
        warn_weighted(result)
    return result
