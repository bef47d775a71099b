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
import pymc
from pymc.backends.arviz import coords_and_dims_for_inferencedata, dict_to_dataset
from pymc.stats.convergence import WarningType, run_convergence_checks
from xarray import DataTree

from pymc_tempering.base import find_modes
from pymc_tempering.diagnostics import MISSED_MASS_LIMIT, missed_optima
from pymc_tempering.results import build_result
from pymc_tempering.sampling import (
    seed_attrs,
    split_seed,
    warn,
    warn_problems,
    warn_weighted_ess,
)
from pymc_tempering.target import Target, full_data_energies

__all__ = [
    "Trace",
    "run_kernel",
    "driver_result",
    "constrained_draws",
    "draws_to_datatree",
    "progress_bar",
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
    (:func:`warn_missed_modes`); without it (weighted draws) the weighted draws' effective
    sample size (:func:`~pymc_tempering.sampling.warn_weighted_ess`).
    """
    extra_posterior = build_kwargs.pop("extra_posterior", None)
    sampled = draws_to_datatree(
        target, x, extra_posterior=extra_posterior, sample_stats=sample_stats
    )
    result = build_result(
        sampled, target, method=method, attrs={**seed_attrs(random_seed), **(attrs or {})},
        **build_kwargs,
    )
    if warn:
        warn_problems(result)
        if convergence:
            warn_convergence(result, target.model, method)
            warn_missed_modes(result, target, x, method, random_seed)
        else:
            warn_weighted_ess(result, method)
    return result


def warn_convergence(result: DataTree, model, method: str) -> None:
    """Warn as ``pm.sample`` does when the chains have not converged.

    PyMC's own checks (:func:`pymc.stats.convergence.run_convergence_checks`: rank-normalised
    R-hat above 1.01, bulk or tail ESS below 100 per chain, from arviz-stats), raised as
    warnings naming the method and the worst value (largest R-hat, smallest ESS). Chains that
    each stay in the mode they started in, as TACT-HMC's do on barriers beyond what its
    temperature flattens, show here; chains that all miss the same mode do not
    (:func:`warn_missed_modes`).
    """
    for problem in run_convergence_checks(result, model):
        if problem.kind != WarningType.CONVERGENCE or problem.extra is None:
            continue
        values = [np.asarray(v.values, dtype=float) for v in problem.extra.data_vars.values()]
        if problem.message.startswith("The rhat"):
            what = f"R-hat above 1.01 (largest {max(np.nanmax(v) for v in values):.3g})"
        else:
            chains = result["posterior"].sizes["chain"]
            what = (f"effective sample size below 100 per chain (smallest "
                    f"{min(np.nanmin(v) for v in values):.0f} for {chains} chains)")
        warn(f"{method}: {what}: the chains disagree or mix slowly, so the draws may not "
             "represent the posterior (for example, chains in different modes). Run longer "
             "(tune, draws), look at the chains (arviz_plots.plot_trace_dist), or temper more.")


MODE_CHECK_MAX_DIM = 100  # parameters above which warn_missed_modes skips its mode search
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


def warn_missed_modes(result: DataTree, target: Target, x: np.ndarray, method: str, seed) -> None:
    """Warn when the draws never came near optima of the library's mode search.

    :func:`~pymc_tempering.find_modes` (L-BFGS from 32 prior draws) on the model's exact log
    density (for a ``pm.Minibatch`` model, the full data's, one pass over them per evaluation:
    :func:`~pymc_tempering.target.full_data_energies`), when the prior is proper; the draws
    ``x (chain, draw, ndim)`` are matched to their nearest optimum in units of the optima's
    Laplace standard deviations (:func:`~pymc_tempering.diagnostics.missed_optima`). Chains
    that all miss the same mode agree with each other, so R-hat does not see it: on a mixture
    of three normals with weights 0.2, 0.3 and 0.5, TACT-HMC at its defaults never visited the
    0.5 mode (450 nats of barrier; R-hat 1.04), and on issue 16's sign-flip posterior (20,000
    data in minibatches of 200) its four chains at seed 2 all stayed in one of the two modes.
    The Laplace share of the missed optima is ``attrs["missed_mode_mass"]``. Models with more
    than ``MODE_CHECK_MAX_DIM`` parameters are not searched (each optimum's Hessian costs
    ``2 ndim`` gradients; the search takes 1.5 to 2.7 s on the 92-parameter radon models), nor
    minibatched models with more than ``MODE_CHECK_MAX_DATA`` data, or whose full-data density
    cannot be formed (several ``pm.Minibatch`` calls).
    """
    if target.improper_variables or target.ndim > MODE_CHECK_MAX_DIM:
        return
    search = target
    if target.minibatched_observed:
        full = full_data_energies(target, gradient=True, max_length=MODE_CHECK_MAX_DATA)
        if full is None:
            return
        search = _FullData(target, full[0])
    try:
        modes = find_modes(search, random_seed=split_seed(seed, 2)[1])
    except (ValueError, FloatingPointError):  # a prior that cannot be drawn from
        return
    if modes is None or len(modes) < 2:
        return
    scale = np.sqrt(np.mean([np.diag(c) for c in modes.cov], axis=0))
    missed, mass = missed_optima(modes.points, modes.log_mass, x.reshape(-1, target.ndim), scale)
    result.attrs["missed_mode_mass"] = mass
    if mass >= MISSED_MASS_LIMIT:
        remedy = (
            "use pmt.sample_ct, whose base covers the modes found"
            if search is target
            else "use pmt.sample_replica_exchange, whose ladder reaches T = N"
            if method != "replica_exchange"
            else "raise tune"
        )
        warn(
            f"{method}: the draws never came near {int(missed.sum())} of the {len(modes)} local "
            "maxima that a mode search found (L-BFGS from prior draws), which hold about "
            f"{mass:.0%} of their Laplace mass: the chains probably missed a mode, and agree "
            "with each other, so R-hat does not show it. Raise max_temperature, start chains "
            f"there (initial_points), or {remedy}."
        )


def constrained_draws(target: Target, x: np.ndarray) -> dict[str, np.ndarray]:
    """The model's constrained variables and deterministics at flat draws ``(..., ndim)``.

    One call per draw of the function the :class:`Target` compiled with its log density. A
    batched function (the graph vectorised over draws) took 3.5 s to compile on the
    92-parameter radon model, where the 4000 calls take 0.09 s.
    """
    x = np.asarray(x, dtype=float)
    lead = x.shape[:-1]
    rows = [target.constrained(row) for row in x.reshape(-1, target.ndim)]
    # each variable's shape from the first draw; without draws, from one call at the origin
    first = rows[0] if rows else target.constrained(np.zeros(target.ndim))
    return {
        name: np.reshape([row[name] for row in rows], lead + np.shape(first[name]))
        for name in target.constrained_names
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
