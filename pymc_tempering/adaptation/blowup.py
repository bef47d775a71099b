"""Blow-ups of the ``"auto"`` step size: undone during the warm-up, dropped as divergent
draws after it, and the kick bound that catches them early.

A blow-up (a :class:`~pymc_tempering.contract.DivergenceError` of the thermostat kernel) is
not an error with ``step_size="auto"``: during the warm-up the iteration is repeated with a
preconditioner half as wide (:func:`recover_blowup`; at most :data:`MAX_WARMUP_BLOWUPS`
times), after it the iteration is dropped and its draw marked diverging, as NUTS does with a
divergent transition. A kick beyond :data:`MAX_KICK` thermal sds is undone from the end of
the first window to the end of the warm-up, and tamed after it (:func:`warmup_kick_bound`).
:func:`warn_blowups` says what was undone.
"""

from __future__ import annotations

import numpy as np

from pymc_tempering.adaptation.coordinates import rescale, whitened
from pymc_tempering.contract import DivergenceError, NonFiniteGradientError, warn
from pymc_tempering.kernels import Info
from pymc_tempering.kernels.thermostats import (
    KickBeyondBound,
    TACTSettings,
    TACTState,
    refresh_momenta,
)

__all__ = [
    "MAX_KICK",
    "warmup_kick_bound",
    "MAX_WARMUP_BLOWUPS",
    "recover_blowup",
    "dropped_info",
    "warn_blowups",
]


#: ``TACTSettings.max_kick`` of ``step_size="auto"``: ten thermal momentum standard deviations.
#: At equilibrium a kick is about ``eta |force|`` with ``|force|`` of order one in the
#: preconditioner's units (0.1 of a thermal sd at ``eta = 0.01``), and the warm-up's noise cap
#: keeps the minibatch noise's share below 0.5 of one, so the bound acts only far from
#: equilibrium (in the first warm-up windows, and after them rarely, at the hottest replicas
#: of replica exchange).
MAX_KICK = 10.0


def warmup_kick_bound(settings: TACTSettings, it: int, first: int, tune: int) -> TACTSettings:
    """The kick bound of the ``step_size="auto"`` warm-up after its iteration ``it``: none in
    the first window (the transit, ending at ``first``, whose kicks are large by design), then
    ``MAX_KICK`` with ``kick_raises`` (a kick beyond it undone, :func:`recover_blowup`) to the
    end of the warm-up (``tune``), then ``MAX_KICK`` tamed (see
    :class:`~pymc_tempering.kernels.thermostats.TACTSettings`)."""
    if it == first:
        settings = settings._replace(max_kick=MAX_KICK, kick_raises=True)
    if it == tune - 1:
        settings = settings._replace(max_kick=MAX_KICK, kick_raises=False)
    return settings


#: Blow-ups during the warm-up that are undone (the iteration repeated with a preconditioner
#: half as wide) before the run gives up.
MAX_WARMUP_BLOWUPS = 12


def recover_blowup(
    err: Exception,
    phase: dict | None,
    state: TACTState,
    settings: TACTSettings,
    scale: np.ndarray,
    rng: np.random.Generator,
    *,
    tempering: bool,
) -> tuple[TACTState, np.ndarray]:
    """Undo a blow-up of the ``"auto"`` step size: ``(state, scale)`` to repeat from.

    ``state`` is the iteration's start. During the warm-up the chains move to a preconditioner
    half as wide (:func:`rescale`), and the blow-up is counted in ``phase["blowups"]``; more
    than ``MAX_WARMUP_BLOWUPS`` raise a :class:`DivergenceError`. After the warm-up the
    iteration is dropped as a divergent transition is in NUTS: the chains stay where it began,
    with fresh momenta and the same preconditioner, and ``phase["divergences"]`` counts it
    (the driver marks the draw ``diverging``, and the run's checks report it), a non-finite
    gradient (:class:`NonFiniteGradientError`) too: a chain thrown far out by a stiff wall (a
    hot replica of a half-normal scale reached ``log s = -300`` on a regression) meets one.
    Re-raises ``err`` with an explicit step size (``phase`` None), and a non-finite gradient
    during the warm-up, where it names the model's arithmetic as the cause (``1 - w == 0``):
    no step size cures that. A :class:`KickBeyondBound` during the warm-up halves the
    preconditioner of the chains it names only (every chain's when ``scale`` is shared), is
    counted in ``phase["kicks"]`` (the result's ``attrs["warmup_kicks_undone"]``) and not
    against ``MAX_WARMUP_BLOWUPS``, and is not warned about: the warm-up's window ends
    re-estimate those preconditioners, and at the hottest replicas of replica exchange such
    kicks are routine.
    """
    if phase is None or (phase["warm"] and isinstance(err, NonFiniteGradientError)):
        raise err
    if not phase["warm"]:
        phase["divergences"] = phase.get("divergences", 0) + 1
        phase["last_divergence"] = str(err)
        return refresh_momenta(state, settings, rng, tempering=tempering), scale
    if isinstance(err, KickBeyondBound):
        # one chain's preconditioner, not everyone's: the next window's end re-estimates them
        phase["kicks"] = phase.get("kicks", 0) + 1
        per_row = np.ndim(scale) == 2 and len(scale) == err.rows.size
        new_scale = np.where(err.rows[:, None], 0.5 * scale, scale) if per_row else 0.5 * scale
        return rescale(state, settings, scale, new_scale, rng, tempering=tempering), new_scale
    phase["blowups"] += 1
    if phase["blowups"] > MAX_WARMUP_BLOWUPS:
        raise DivergenceError(
            f"{err} The warm-up halved the step {MAX_WARMUP_BLOWUPS} times "
            "after blow-ups and still diverges: check the model for regions where its "
            "log density is not finite, or pass a smaller step_size."
        ) from err
    phase["last_error"] = str(err)
    return rescale(state, settings, scale, 0.5 * scale, rng, tempering=tempering), 0.5 * scale


def dropped_info(logp_and_grad, state: TACTState, scale, basis) -> Info:
    """The report of an iteration :func:`recover_blowup` undid: every chain marked diverging,
    acceptance 1 (the dynamics has no test) and the potential energy where the chains stay
    (``state``, the iteration's start), non-finite values left as they are."""
    n = state.theta.shape[0]
    with np.errstate(all="ignore"):
        energy = -whitened(logp_and_grad, scale, basis)(state.theta)[0]
    return Info(np.ones(n), np.ones(n, bool), energy)


def warn_blowups(method: str, phase: dict | None) -> None:
    """Warn about what :func:`recover_blowup` undid in a run of ``method`` (its name)."""
    if phase is None:
        return
    if phase["blowups"]:
        warn(
            f"{method} blew up {phase['blowups']} times during the warm-up (last: "
            f"{phase['last_error']}); each time the warm-up repeated the iteration with a "
            "preconditioner (so a step) half as wide. The draws come after the warm-up."
        )
    if phase.get("divergences"):
        warn(
            f"{method} blew up {phase['divergences']} times after the warm-up (last: "
            f"{phase['last_divergence']}); each time the iteration was dropped and its draw "
            "marked diverging (sample_stats['diverging']): the chains reached a region stiffer "
            "than their step, and the draws miss what lies there. A longer tune, or a lower "
            "max_temperature for replica exchange, may avoid it."
        )
