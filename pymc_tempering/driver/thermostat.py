"""The thermostat driver: the one loop of TACT-HMC and replica exchange.

Both methods run the Nosé-Hoover dynamics of :mod:`pymc_tempering.kernels.thermostats` on
``chains * R`` rows: TACT-HMC is one replica (``R = 1``) whose temperature moves with its
tempering variable, replica exchange ``R`` replicas at fixed temperatures that swap positions
(:mod:`pymc_tempering.kernels.exchange`). This module holds what they share, written once:

- the loop's state (:class:`ThermostatLoop`): the dynamics, the steps so far, the
  preconditioner (the dynamics run on ``u``, ``theta = in_model_units(u, scale, basis)``) and,
  with ``step_size="auto"``, the warm-up's records (:mod:`pymc_tempering.adaptation`);
- one iteration: ``steps_per_sample`` kernel steps, an exchange round every
  ``exchange_every`` steps where the method has one, then the momentum refresh; with the
  ``"auto"`` warm-up a blow-up is undone (:func:`~pymc_tempering.adaptation.blowup.update`):
  the iteration's start is kept, during the warm-up with the preconditioner halved, after it as
  a divergent draw;
- the ``"auto"`` warm-up: every replica's positions summed over windows, and at a window's end
  the change of coordinates, the new preconditioner (the method's rule) and the chains moved to
  it;
- the start (:func:`starting_points`) and the record of an iteration
  (:func:`run_thermostats` records ``x``, ``potential_energy``, ``diverging`` per replica and
  ``step``, plus what the method adds).

What differs between the methods is in :class:`Replicas`, which each method's sampler fills:
its densities, its exchange round, which chains' positions a window counts and how a window's
end sets the preconditioner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from pymc_tempering import adaptation
from pymc_tempering.adaptation import blowup, windows
from pymc_tempering.contract import DivergenceError
from pymc_tempering.driver.loop import Trace, run_kernel
from pymc_tempering.kernels import thermostats
from pymc_tempering.kernels.thermostats import StepParams, ThermostatParams, TACTState
from pymc_tempering.target import Target
from pymc_tempering.timing import phase

__all__ = [
    "ThermostatLoop",
    "ThermostatInfo",
    "Replicas",
    "starting_points",
    "run_thermostats",
]


class ThermostatLoop(NamedTuple):
    """The driver's state.

    Attributes
    ----------
    dynamics : TACTState
        Every replica's dynamics, ``chains * R`` rows (ladder after ladder).
    n_steps : int
        Kernel steps so far, warm-up included.
    scale : ndarray
        The preconditioner's widths: ``(D,)`` shared by the rows, or one row per row; ones
        for an explicit step size.
    basis : Basis, optional
        The dense part of the preconditioner (None: diagonal).
    window : Windows, optional
        The ``"auto"`` warm-up's current window (None otherwise).
    recovery : Recovery, optional
        What the ``"auto"`` warm-up undid (None otherwise: a blow-up raises).
    exchange : optional
        The method's exchange record (replica exchange), None for one replica.
    """

    dynamics: TACTState
    n_steps: int
    scale: np.ndarray
    basis: adaptation.Basis | None = None
    window: windows.Windows | None = None
    recovery: blowup.Recovery | None = None
    exchange: Any = None


class ThermostatInfo(NamedTuple):
    """One iteration's report per row: the last step's
    :class:`~pymc_tempering.kernels.Info` fields (``diverging``: any step of the iteration
    tamed a kick, or the iteration was dropped) and the kinetic temperature before the momenta
    were refreshed."""

    acceptance_rate: np.ndarray
    diverging: np.ndarray
    energy: np.ndarray
    kinetic_temperature: np.ndarray


class Replicas(NamedTuple):
    """What a thermostat method gives the driver.

    Attributes
    ----------
    name : str
        The method's name in messages: ``"<name> diverged at step <n>"`` and the blow-up
        warnings.
    remedy : str
        What a blow-up's message tells the user to change.
    logp_and_grad : callable
        The dynamics' log density and gradient, one row per replica (each row's own
        temperature where the density is tempered), in the model's units.
    density : callable
        The ``T = 1`` density in the model's units: the gradient noise a window's end turns
        the coordinates by is measured on it.
    chains, n_replicas, steps_per_sample : int
        Chains (ladders), replicas per chain (1 for TACT-HMC) and kernel steps per iteration.
    resample_momenta : bool
        Redraw the momenta after every iteration (and kick by half a step first).
    window_mask : callable
        ``(loop, settings) -> (chains,) bool``: the chains whose positions a warm-up window
        counts.
    window_scale : callable
        ``(v, sds, olds, basis, settings) -> (scale, settings)``: the preconditioner after a
        window, from every replica's positions ``v (chains, R, D)`` in the new coordinates,
        their spreads ``sds[j]`` and old widths ``olds[j]`` there; the settings may change too.
    exchange : callable, optional
        ``(record, theta (chains, R, D)) -> (record, theta)``: one exchange round on the
        positions in the model's units, every ``exchange_every`` steps (counted from the
        start); the positions returned are ``theta`` itself when none swapped.
    exchange_every : int
    after_window : callable, optional
        ``loop -> loop`` after a window's end (replica exchange re-sizes its test there).
    """

    name: str
    remedy: str
    logp_and_grad: Callable
    density: Callable
    chains: int
    n_replicas: int
    steps_per_sample: int
    resample_momenta: bool
    window_mask: Callable
    window_scale: Callable
    exchange: Callable | None = None
    exchange_every: int = 1
    after_window: Callable | None = None


def _exchange(plan: Replicas, state: TACTState, record, scale, basis):
    """One exchange round on the positions in the model's units; the swapped positions go back
    into each row's own units."""
    theta = adaptation.in_model_units(state.theta, scale, basis).reshape(
        plan.chains, plan.n_replicas, -1
    )
    record, swapped = plan.exchange(record, theta)
    if swapped is not theta:  # positions swap; each keeps its replica's units
        state = state._replace(theta=adaptation.in_dynamics_units(
            swapped.reshape(state.theta.shape), scale, basis
        ))
    return state, record


def _iteration(plan: Replicas, before_step: Callable[[int], None] | None):
    """One loop iteration: ``steps_per_sample`` kernel steps (with the exchange rounds), then
    the momentum refresh; a blow-up of the ``"auto"`` step size undone."""

    def iterate(loop: ThermostatLoop, settings: ThermostatParams, rng: np.random.Generator):
        state, record, n_steps = loop.dynamics, loop.exchange, loop.n_steps
        scale, basis = loop.scale, loop.basis
        evaluate = adaptation.whitened(plan.logp_and_grad, scale, basis)
        tamed = np.zeros(state.theta.shape[0], dtype=bool)
        try:
            for k in range(plan.steps_per_sample):
                if before_step is not None:
                    before_step(n_steps)
                n_steps += 1
                params = StepParams(
                    settings, evaluate, half_kick=k == 0 and plan.resample_momenta,
                    where=f"{plan.name} diverged at step {n_steps}", remedy=plan.remedy,
                )
                state, info = thermostats.step(state, params, rng)
                tamed |= info.diverging
                if plan.exchange is not None and n_steps % plan.exchange_every == 0:
                    state, record = _exchange(plan, state, record, scale, basis)
        except DivergenceError as err:
            recovery, state, scale = blowup.update(
                loop.recovery, err, loop.dynamics, settings, scale, rng,
                tempering=settings.moves_xi,
            )
            info = blowup.dropped_info(plan.logp_and_grad, state, scale, basis)
            kinetic = thermostats.kinetic_temperature(state, settings)
            loop = loop._replace(dynamics=state, n_steps=n_steps, scale=scale, recovery=recovery)
            return loop, ThermostatInfo(*info, kinetic)
        kinetic = thermostats.kinetic_temperature(state, settings)
        if plan.resample_momenta:
            state = thermostats.refresh_momenta(
                state, settings, rng, tempering=settings.tempering is not None
            )
        loop = loop._replace(dynamics=state, exchange=record, n_steps=n_steps)
        return loop, ThermostatInfo(*info._replace(diverging=tamed), kinetic)

    return iterate


def _warmup(plan: Replicas, tune: int, rng: np.random.Generator):
    """The ``step_size="auto"`` warm-up: every replica's preconditioner re-estimated per window.

    After every warm-up iteration each replica's positions (of the chains
    ``plan.window_mask`` selects) are added to the window's sums
    (:func:`~pymc_tempering.adaptation.windows.update`). At a window's end
    (:func:`~pymc_tempering.adaptation.windows.final`: from the second window on, a model of at
    most :data:`~pymc_tempering.adaptation.windows.DENSE_MAX_DIM` coordinates changes to
    coordinates that decorrelate the ``T = 1`` replica's positions, turned so that the
    gradient noise measured there is uncorrelated) the method sets the new preconditioner
    (``plan.window_scale``) and the chains move to it
    (:func:`~pymc_tempering.adaptation.coordinates.rescale`). The first window is a transit,
    whose spread is the chains' drift. After the last warm-up iteration blow-ups become
    divergent draws (:func:`~pymc_tempering.adaptation.blowup.final`); the kick bound follows
    :func:`~pymc_tempering.adaptation.blowup.warmup_kick_bound`.
    """
    n_rep = plan.n_replicas

    def window_end(loop: ThermostatLoop, v, settings: ThermostatParams, it: int):
        olds = list(np.reshape(loop.scale, (-1, n_rep, v.shape[-1]))[0])
        window, sds, olds, basis, w_inv = windows.final(
            loop.window, it, olds, loop.basis, (plan.density, v[:, 0])
        )
        if w_inv is not None:
            v = v @ w_inv.T
        new_scale, settings = plan.window_scale(v, sds, olds, basis, settings)
        state = adaptation.rescale(
            loop.dynamics, settings, loop.scale, new_scale, rng, tempering=settings.moves_xi,
            w_inv=w_inv,
        )
        loop = loop._replace(dynamics=state, scale=new_scale, basis=basis, window=window)
        if plan.after_window is not None:
            loop = plan.after_window(loop)
        return loop, settings

    def warmup(loop: ThermostatLoop, info, settings: ThermostatParams, it: int):
        v = (loop.dynamics.theta * loop.scale).reshape(plan.chains, n_rep, -1)
        window = windows.update(
            loop.window, [v[:, j] for j in range(n_rep)], plan.window_mask(loop, settings)
        )
        loop = loop._replace(window=window)
        if it in window.ends:
            loop, settings = window_end(loop, v, settings, it)
        if it == tune - 1:
            loop = loop._replace(recovery=blowup.final(loop.recovery))
        return loop, blowup.warmup_kick_bound(settings, it, window.first, tune)

    return warmup


def _checked_points(target: Target, initial_points, jitter, shape, seed) -> np.ndarray:
    """The starting points ``(chains * R, D)``: ``initial_points`` ``(chains, R, D)``, or
    ``(chains, D)`` for every replica; default the model's initial point plus uniform
    ``jitter`` (half-width)."""
    chains, n_rep, ndim = shape
    if initial_points is None:
        start = target.ravel(target.model.initial_point())
        initial_points = thermostats.jittered_positions(
            start, jitter, shape, np.random.default_rng(seed)
        )
    initial_points = np.asarray(initial_points, dtype=float)
    if initial_points.shape == (chains, ndim):
        initial_points = np.repeat(initial_points[:, None, :], n_rep, axis=1)
    if initial_points.shape != shape:
        shapes = f"{(chains, ndim)}" if n_rep == 1 else f"{shape} or {(chains, ndim)}"
        raise ValueError(
            f"initial_points must have shape {shapes}, got {np.shape(initial_points)}."
        )
    return initial_points.reshape(chains * n_rep, ndim)


def starting_points(
    target: Target, logp_and_grad: Callable, auto: bool, initial_points, jitter: float,
    shape: tuple[int, int, int], seed,
) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, start)``: the ``T = 1`` density's first preconditioner ``(D,)`` (ones for an
    explicit step size) and the starting points ``(chains * R, D)`` in the model's units.

    ``shape`` is ``(chains, R, D)``; ``initial_points`` ``(chains, R, D)`` or ``(chains, D)``
    (used for every replica). With ``"auto"`` the scale is the curvature's at the model's
    initial point and the jitter in its units
    (:func:`~pymc_tempering.adaptation.step_size.start_preconditioner` without the noise cap):
    the first window is a transit, capped by the curvature alone, not by the gradient noise,
    which only the stationary draws must absorb (the window's end caps by both, where the
    chains are); with the noise cap a chain started far from the posterior moves too slowly
    (its velocity goes as ``scale^2``) to reach it in the warm-up.
    """
    if not auto:
        return np.ones(shape[-1]), _checked_points(target, initial_points, jitter, shape, seed)
    scale, start = adaptation.start_preconditioner(
        logp_and_grad, target.ravel(target.model.initial_point()), jitter, shape,
        np.random.default_rng(seed), initial_points, noise_cap=False,
    )
    return scale, _checked_points(target, start, jitter, shape, seed)


def _record(plan: Replicas, extra: Callable | None):
    def record(loop: ThermostatLoop, info: ThermostatInfo) -> dict:
        chains, n_rep = plan.chains, plan.n_replicas
        theta = adaptation.in_model_units(loop.dynamics.theta, loop.scale, loop.basis)
        out = {
            "x": theta.reshape(chains, n_rep, theta.shape[-1]),
            "potential_energy": info.energy.reshape(chains, n_rep),
            # a replica's iteration with a tamed kick (ThermostatParams.max_kick) or dropped
            # after a blow-up
            "diverging": np.asarray(info.diverging, dtype=bool).reshape(chains, n_rep),
            "step": np.full(chains, float(loop.n_steps)),
        }
        return out if extra is None else {**out, **extra(loop, info)}

    return record


@phase("sampling")
def run_thermostats(
    plan: Replicas,
    settings: ThermostatParams,
    *,
    scale: np.ndarray,
    start: np.ndarray,
    draws: int,
    tune: int,
    rng: np.random.Generator,
    auto: bool,
    exchange=None,
    record: Callable | None = None,
    keep: Callable | None = None,
    description: str = "Sampling",
    progressbar: bool = True,
    max_iterations: int | None = None,
    trajectory: bool | tuple[str, ...] = False,
    _before_step: Callable[[int], None] | None = None,
) -> Trace:
    """Run a thermostat method through the one driver loop
    (:func:`~pymc_tempering.driver.run_kernel`).

    Parameters
    ----------
    plan : Replicas
        The method's side.
    settings : ThermostatParams
        The kernel's settings at the start (with ``"auto"`` the warm-up bounds the friction and
        the kicks, :func:`~pymc_tempering.adaptation.blowup.start_bounds`, and may adapt them).
    scale, start : ndarray
        The preconditioner and the starting points ``(chains * R, D)`` in the model's units.
    draws, tune : int
    rng : numpy.random.Generator
        The dynamics' randomness (and the seed of the warm-up's own generator).
    auto : bool
        ``step_size="auto"``: the windowed warm-up and the blow-up recovery.
    exchange : optional
        The method's initial exchange record (see :attr:`Replicas.exchange`).
    record : callable, optional
        ``(loop, info) -> dict`` of the method's own stats, beside ``x`` ``(chains, R, D)``,
        ``potential_energy`` and ``diverging`` ``(chains, R)`` and ``step`` ``(chains,)``.
    keep, description, progressbar, max_iterations, trajectory
        As :func:`~pymc_tempering.driver.run_kernel`.
    _before_step : callable, optional
        Testing hook: ``_before_step(n)`` before the kernel step ``n + 1`` (from
        :mod:`pymc_tempering.methods.tact.testing`).

    Returns
    -------
    Trace
        The loop's trace; its ``state`` is the final :class:`ThermostatLoop` and ``params`` the
        settings as the warm-up left them. What the ``"auto"`` warm-up undid is warned about
        (:func:`~pymc_tempering.adaptation.blowup.warn_blowups`).
    """
    if auto:  # see ThermostatParams.max_friction and max_kick (from the end of the warm-up)
        settings = blowup.start_bounds(settings, tune)
    warmup_rng = np.random.default_rng(rng.integers(2**63)) if auto else None
    loop = ThermostatLoop(
        thermostats.init(start / scale, settings, rng), 0, scale,
        window=windows.init(tune, start.shape[-1]) if auto else None,
        recovery=blowup.init(tune) if auto else None, exchange=exchange,
    )
    trace = run_kernel(
        _iteration(plan, _before_step), loop, settings, draws=draws, tune=tune,
        chains=plan.chains, rng=rng, record=_record(plan, record), keep=keep,
        warmup=_warmup(plan, tune, warmup_rng) if auto else None, description=description,
        progressbar=progressbar, max_iterations=max_iterations, trajectory=trajectory,
    )
    blowup.warn_blowups(plan.name, trace.state.recovery)
    return trace
