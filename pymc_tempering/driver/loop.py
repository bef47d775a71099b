"""The one driver loop: warm-up, recording, progress bar and result for every driver method.

A driver method (AIS, simulated tempering, TACT-HMC, replica exchange, ergodic inference) is a
kernel, ``step(state, params, rng) -> (state, info)`` over small immutable records (see
:mod:`pymc_tempering.kernels`), plus what to record. :func:`run_kernel` runs it: ``tune``
warm-up iterations that may adapt ``params`` and are discarded, then iterations until every
chain has kept ``draws`` records, with one progress bar. :func:`driver_result` turns the kept
flat draws into the library's result (through :func:`~pymc_tempering.results.build_result`,
the only builder of the layout), records the seed and warns from
:func:`~pymc_tempering.diagnose`; what the result stores is computed before it is built (an
improper prior's flat directions and, for unweighted chains, the mode search of
:func:`missed_modes_of_draws`).

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

from pymc_tempering.bases import find_modes
from pymc_tempering.contract import seed_attrs, split_seed
from pymc_tempering.checks import missed_optima
from pymc_tempering.progress import progress_bar
from pymc_tempering.report import (
    MissedModes,
    warn_convergence,
    warn_missed_modes,
    warn_problems,
    warn_weighted,
)
from pymc_tempering.results import build_result, draws_to_datatree, flat_direction_count
from pymc_tempering.target import Target, full_data_energies
from pymc_tempering.timing import phase

__all__ = [
    "Trace",
    "run_kernel",
    "driver_result",
    "missed_modes_of_draws",
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


@phase("sampling")
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
    PyMC's convergence checks (:func:`warn_convergence`) and the optima of a mode search that
    the draws never came near (:func:`missed_modes_of_draws`, whose Laplace share is
    ``attrs["missed_mode_mass"]``; :func:`warn_missed_modes`); without it (weighted draws) the
    posterior's verdict (:func:`~pymc_tempering.report.judge_posterior`). Everything the
    result stores is computed before it is built: with an improper prior, its flat directions
    (:func:`~pymc_tempering.results.flat_direction_count`), and the mode search.
    """
    extra_posterior = build_kwargs.pop("extra_posterior", None)
    sampled = draws_to_datatree(
        target, x, extra_posterior=extra_posterior, sample_stats=sample_stats
    )
    missed = missed_modes_of_draws(target, x, random_seed) if warn and convergence else None
    attrs = {**seed_attrs(random_seed), **(attrs or {})}
    if missed is not None:
        attrs["missed_mode_mass"] = missed.mass
    flat = flat_direction_count(target, x, build_kwargs.get("log_weight"))
    result = build_result(
        sampled, target, method=method, attrs=attrs, flat_directions=flat, **build_kwargs
    )
    if warn and convergence:
        warn_problems(result)
        warn_convergence(result, target.model, method)
        if missed is not None:
            warn_missed_modes(missed, method)
    elif warn:
        warn_weighted(result)
    return result


MODE_CHECK_MAX_DIM = 100  # parameters above which missed_modes_of_draws skips its mode search
MODE_CHECK_MAX_DATA = 500_000  # pm.Minibatch data above which it skips it too


class _FullData:
    """A minibatched model's :class:`Target` as the mode search sees it: the log density and
    gradient are the exact full-data ones (:func:`~pymc_tempering.target.full_data_energies`),
    everything else is the target's."""

    def __init__(self, target: Target, energy):
        self._target, self._energy = target, energy

    def __getattr__(self, name):
        return getattr(self._target, name)

    def logp_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        energy, gradient = self._energy(np.asarray(x, dtype=float)[None])
        return -float(energy[0]), -gradient[0]


def missed_modes_of_draws(target: Target, x: np.ndarray, seed) -> MissedModes | None:
    """The optima of the library's mode search that the draws ``x (chain, draw, ndim)`` never
    came near; None where the search is not run or finds fewer than two optima.

    :func:`~pymc_tempering.find_modes` (L-BFGS from 32 prior draws) on the model's exact log
    density (for a ``pm.Minibatch`` model, the full data's, one pass over them per evaluation:
    :func:`~pymc_tempering.target.full_data_energies`), when the prior is proper; the draws are
    matched to their nearest optimum in units of the optima's Laplace standard deviations
    (:func:`~pymc_tempering.checks.missed_optima`). Chains that all miss the same mode
    agree with each other, so R-hat does not see it: on a mixture of three normals with weights
    0.2, 0.3 and 0.5, TACT-HMC at its defaults never visited the 0.5 mode (450 nats of barrier;
    R-hat 1.04), and on issue 16's sign-flip posterior (20,000 data in minibatches of 200) its
    four chains at seed 2 all stayed in one of the two modes. Models with more than
    ``MODE_CHECK_MAX_DIM`` parameters are not searched (each optimum's Hessian costs ``2 ndim``
    gradients; the search takes 1.5 to 2.7 s on the 92-parameter radon models), nor
    minibatched models with more than ``MODE_CHECK_MAX_DATA`` data, or whose full-data density
    cannot be formed (several ``pm.Minibatch`` calls).
    """
    if target.improper_variables or target.ndim > MODE_CHECK_MAX_DIM:
        return None
    search = target
    if target.minibatched_observed:
        full = full_data_energies(target, gradient=True, max_length=MODE_CHECK_MAX_DATA)
        if full is None:
            return None
        search = _FullData(target, full[0])
    try:
        modes = find_modes(search, random_seed=split_seed(seed, 2)[1])
    except (ValueError, FloatingPointError):  # a prior that cannot be drawn from
        return None
    if modes is None or len(modes) < 2:
        return None
    scale = np.sqrt(np.mean([np.diag(c) for c in modes.cov], axis=0))
    missed, mass = missed_optima(modes.points, modes.log_mass, x.reshape(-1, target.ndim), scale)
    return MissedModes(int(missed.sum()), len(modes), mass, full_data=search is not target)
