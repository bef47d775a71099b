"""Blow-ups of the ``"auto"`` step size: undone during the warm-up, dropped as divergent
draws after it, and the kick bound that catches them early.

A blow-up (a :class:`~pymc_tempering.contract.DivergenceError` of the thermostat kernel) is
not an error with ``step_size="auto"``: during the warm-up the iteration is repeated with a
preconditioner half as wide (at most :data:`MAX_WARMUP_BLOWUPS` times), after it the
iteration is dropped and its draw marked diverging, as NUTS does with a divergent transition.
A kick beyond :data:`MAX_KICK` thermal sds is undone from the end of the first window to the
end of the warm-up, and tamed after it (:func:`warmup_kick_bound`).

State machine, BlackJAX style: :class:`Recovery` records what was undone; :func:`init` starts
it, :func:`update` undoes one blow-up (returning the new record, the state to repeat from and
the preconditioner), :func:`final` marks the warm-up's end, after which blow-ups are divergent
draws. The record travels in the driver's loop state; :func:`warn_blowups` reports it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_tempering.adaptation.coordinates import rescale, whitened
from pymc_tempering.contract import DivergenceError, NonFiniteGradientError, warn
from pymc_tempering.kernels import Info
from pymc_tempering.kernels.thermostats import (
    KickBeyondBound,
    ThermostatParams,
    TACTState,
    refresh_momenta,
)

__all__ = [
    "MAX_KICK",
    "start_bounds",
    "warmup_kick_bound",
    "MAX_WARMUP_BLOWUPS",
    "Recovery",
    "init",
    "update",
    "final",
    "dropped_info",
    "warn_blowups",
]


#: ``ThermostatParams.max_kick`` of ``step_size="auto"``: ten thermal momentum standard deviations.
#: At equilibrium a kick is about ``eta |force|`` with ``|force|`` of order one in the
#: preconditioner's units (0.1 of a thermal sd at ``eta = 0.01``), and the warm-up's noise cap
#: keeps the minibatch noise's share below 0.5 of one, so the bound acts only far from
#: equilibrium (in the first warm-up windows, and after them rarely, at the hottest replicas
#: of replica exchange).
MAX_KICK = 10.0


def start_bounds(settings: ThermostatParams, tune: int) -> ThermostatParams:
    """The bounds of the ``step_size="auto"`` dynamics at its start: the thermostats at most 1
    (``ThermostatParams.max_friction``) and, without a warm-up, the kicks at ``MAX_KICK`` (tamed);
    with one, no kick bound until the first window's end (:func:`warmup_kick_bound`)."""
    return settings._replace(max_friction=1.0, max_kick=np.inf if tune > 0 else MAX_KICK)


def warmup_kick_bound(settings: ThermostatParams, it: int, first: int, tune: int) -> ThermostatParams:
    """The kick bound of the ``step_size="auto"`` warm-up after its iteration ``it``: none in
    the first window (the transit, ending at ``first``, whose kicks are large by design), then
    ``MAX_KICK`` with ``kick_raises`` (a kick beyond it undone, :func:`update`) to the end of
    the warm-up (``tune``), then ``MAX_KICK`` tamed (see
    :class:`~pymc_tempering.kernels.thermostats.ThermostatParams`)."""
    if it == first:
        settings = settings._replace(max_kick=MAX_KICK, kick_raises=True)
    if it == tune - 1:
        settings = settings._replace(max_kick=MAX_KICK, kick_raises=False)
    return settings


#: Blow-ups during the warm-up that are undone (the iteration repeated with a preconditioner
#: half as wide) before the run gives up.
MAX_WARMUP_BLOWUPS = 12


class Recovery(NamedTuple):
    """What :func:`update` has undone in a run with ``step_size="auto"``.

    Attributes
    ----------
    warm : bool
        The warm-up is on: a blow-up halves the preconditioner. After it (:func:`final`) a
        blow-up is a divergent draw.
    blowups : int
        Blow-ups undone during the warm-up (the result's ``attrs["warmup_blowups"]``).
    kicks : int
        Kicks beyond ``MAX_KICK`` undone during the warm-up (``attrs["warmup_kicks_undone"]``).
    divergences : int
        Iterations dropped after the warm-up.
    last_error, last_divergence : str
        The message of the last blow-up during and after the warm-up.
    """

    warm: bool
    blowups: int = 0
    kicks: int = 0
    divergences: int = 0
    last_error: str = ""
    last_divergence: str = ""


def init(tune: int) -> Recovery:
    """Nothing undone yet; in the warm-up when there is one (``tune > 0``)."""
    return Recovery(warm=tune > 0)


def final(recovery: Recovery) -> Recovery:
    """The record after the warm-up's last iteration: later blow-ups are divergent draws."""
    return recovery._replace(warm=False)


def update(
    recovery: Recovery | None,
    err: Exception,
    state: TACTState,
    settings: ThermostatParams,
    scale: np.ndarray,
    rng: np.random.Generator,
    *,
    tempering: bool,
) -> tuple[Recovery, TACTState, np.ndarray]:
    """Undo a blow-up of the ``"auto"`` step size: ``(recovery, state, scale)`` to repeat from.

    ``state`` is the iteration's start. During the warm-up the chains move to a preconditioner
    half as wide (:func:`~pymc_tempering.adaptation.coordinates.rescale`), and the blow-up is
    counted in ``blowups``; more than ``MAX_WARMUP_BLOWUPS`` raise a :class:`DivergenceError`.
    After the warm-up the iteration is dropped as a divergent transition is in NUTS: the
    chains stay where it began, with fresh momenta and the same preconditioner, and
    ``divergences`` counts it (the driver marks the draw ``diverging``, and the run's checks
    report it), a non-finite gradient (:class:`NonFiniteGradientError`) too: a chain thrown far
    out by a stiff wall (a hot replica of a half-normal scale) meets one. Re-raises ``err``
    with an explicit step size (``recovery`` None), and a non-finite gradient during the
    warm-up, where it names the model's arithmetic as the cause (``1 - w == 0``): no step size
    cures that. A :class:`KickBeyondBound` during the warm-up halves the preconditioner of the
    chains it names only (every chain's when ``scale`` is shared), is counted in ``kicks`` and
    not against ``MAX_WARMUP_BLOWUPS``, and is not warned about: the warm-up's window ends
    re-estimate those preconditioners, and at the hottest replicas of replica exchange such
    kicks are routine.
    """
    if recovery is None or (recovery.warm and isinstance(err, NonFiniteGradientError)):
        raise err
    if not recovery.warm:
        recovery = recovery._replace(
            divergences=recovery.divergences + 1, last_divergence=str(err)
        )
        return recovery, refresh_momenta(state, settings, rng, tempering=tempering), scale
    if isinstance(err, KickBeyondBound):
        # one chain's preconditioner, not everyone's: the next window's end re-estimates them
        per_row = np.ndim(scale) == 2 and len(scale) == err.rows.size
        new_scale = np.where(err.rows[:, None], 0.5 * scale, scale) if per_row else 0.5 * scale
        state = rescale(state, settings, scale, new_scale, rng, tempering=tempering)
        return recovery._replace(kicks=recovery.kicks + 1), state, new_scale
    if recovery.blowups + 1 > MAX_WARMUP_BLOWUPS:
        raise DivergenceError(
            f"{err} The warm-up halved the step {MAX_WARMUP_BLOWUPS} times "
            "after blow-ups and still diverges: check the model for regions where its "
            "log density is not finite, or pass a smaller step_size."
        ) from err
    recovery = recovery._replace(blowups=recovery.blowups + 1, last_error=str(err))
    state = rescale(state, settings, scale, 0.5 * scale, rng, tempering=tempering)
    return recovery, state, 0.5 * scale


def dropped_info(logp_and_grad, state: TACTState, scale, basis) -> Info:
    """The report of an iteration :func:`update` undid: every chain marked diverging,
    acceptance 1 (the dynamics has no test) and the potential energy where the chains stay
    (``state``, the iteration's start), non-finite values left as they are."""
    n = state.theta.shape[0]
    with np.errstate(all="ignore"):
        energy = -whitened(logp_and_grad, scale, basis)(state.theta)[0]
    return Info(np.ones(n), np.ones(n, bool), energy)


def warn_blowups(method: str, recovery: Recovery | None) -> None:
    """Warn about what :func:`update` undid in a run of ``method`` (its name); nothing for
    an explicit step size (``recovery`` None) or a kick undone in the warm-up."""
    if recovery is None:
        return
    if recovery.blowups:
        warn(
            f"{method} blew up {recovery.blowups} times during the warm-up (last: "
            f"{recovery.last_error}); each time the warm-up repeated the iteration with a "
            "preconditioner (so a step) half as wide. The draws come after the warm-up."
        )
    if recovery.divergences:
        warn(
            f"{method} blew up {recovery.divergences} times after the warm-up (last: "
            f"{recovery.last_divergence}); each time the iteration was dropped and its draw "
            "marked diverging (sample_stats['diverging']): the chains reached a region stiffer "
            "than their step, and the draws miss what lies there. A longer tune, or a lower "
            "max_temperature for replica exchange, may avoid it."
        )
