"""Kernels over a discrete ladder of inverse temperatures ``0 = beta_0 < ... < beta_N = 1``.

- :func:`temperature_schedule`: the ladder itself (AIS's schedule, simulated tempering's rungs).
- The *annealing* kernel of AIS (Neal 2001): :func:`anneal_init` / :func:`anneal_step` move a
  batch of runs one rung up, adding the weight increment
  ``(beta_n - beta_{n-1}) [log p(x) - log q(x)]`` (eq. 10 of the CT paper) and making one HMC
  transition leaving ``pi(. | beta_n)`` invariant (:func:`pymc_tempering.kernels.hmc.step`).
- The *ladder draw* of simulated tempering: :func:`ladder_init` / :func:`ladder_step` draw each
  chain's rung given its position from ``P(beta_n | x) ∝ exp(-beta_n Delta(x))``
  (:func:`ladder_log_conditional`, :func:`draw_ladder_index`).

Both kernels' steps are ``step(state, params, rng) -> (state, Info)``, with the parameters in
:class:`AnnealParams` and :class:`LadderParams`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.special import expit, logsumexp

from pymc_tempering.kernels import Info
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels.hmc import TemperedState

__all__ = [
    "temperature_schedule",
    "AnnealingState",
    "AnnealParams",
    "anneal_init",
    "anneal_step",
    "ladder_log_conditional",
    "draw_ladder_index",
    "LadderState",
    "LadderParams",
    "ladder_init",
    "ladder_step",
]


def temperature_schedule(n_temperatures: int, schedule: str = "sigmoid") -> np.ndarray:
    """Inverse temperatures ``0 = beta_0 < ... < beta_N = 1`` (``n_temperatures`` values).

    ``"linear"`` spaces them evenly; ``"sigmoid"`` (Grosse et al. 2015, with ``delta = 4``)
    puts more of them near both ends, where ``log pi`` changes fastest when base and target
    differ; ``"geometric"`` spaces ``log beta`` evenly from ``1e-4`` (plus ``beta = 0``).

    Raises
    ------
    ValueError
        For fewer than 2 temperatures or an unknown schedule.
    """
    n = int(n_temperatures)
    if n < 2:
        raise ValueError(f"n_temperatures must be at least 2, got {n_temperatures}.")
    if schedule == "linear":
        betas = np.linspace(0.0, 1.0, n)
    elif schedule == "sigmoid":
        s = expit(4.0 * np.linspace(-1.0, 1.0, n))
        betas = (s - s[0]) / (s[-1] - s[0])
    elif schedule == "geometric":
        betas = np.concatenate([[0.0], np.geomspace(1e-4, 1.0, n - 1)])
    else:
        raise ValueError(f"Unknown schedule {schedule!r}; use 'sigmoid', 'linear' or 'geometric'.")
    betas[0], betas[-1] = 0.0, 1.0
    return betas


class AnnealingState(NamedTuple):
    """A batch of AIS runs part-way up the schedule.

    Attributes
    ----------
    position : TemperedState
        The runs' current states.
    index : int
        The rung ``n`` the runs have reached (0 at the start: draws of the base).
    log_weight : ndarray, shape (n_runs,)
        The log importance weight accumulated so far.
    acceptance_sum : ndarray, shape (n_runs,)
        Sum of the HMC acceptance probabilities so far.
    diverged : ndarray of bool, shape (n_runs,)
        Whether any transition of the run so far diverged.
    """

    position: TemperedState
    index: int
    log_weight: np.ndarray
    acceptance_sum: np.ndarray
    diverged: np.ndarray

    @property
    def acceptance_rate(self) -> np.ndarray:
        """Mean HMC acceptance probability per run over the transitions so far."""
        return self.acceptance_sum / max(self.index, 1)


def anneal_init(position: TemperedState) -> AnnealingState:
    """Runs at rung 0 (``position`` should hold draws of the base), weight 1."""
    n = position.z.shape[0]
    return AnnealingState(position, 0, np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool))


class AnnealParams(NamedTuple):
    """Parameters of :func:`anneal_step`.

    Attributes
    ----------
    betas : ndarray
        The schedule.
    step_size : float or ndarray, shape (n_runs,)
        Leapfrog step size before its jitter (:func:`pymc_tempering.kernels.hmc.jittered`).
    n_leapfrog : int
        Leapfrog steps of the HMC transition.
    evaluate : callable
        From :func:`pymc_tempering.kernels.hmc.whitened_density`.
    """

    betas: np.ndarray
    step_size: float | np.ndarray
    n_leapfrog: int
    evaluate: Callable[[np.ndarray], TemperedState]


def anneal_step(
    state: AnnealingState, params: AnnealParams, rng: np.random.Generator
) -> tuple[AnnealingState, Info]:
    """Move every run from rung ``n - 1`` to rung ``n``: weight increment, then one HMC step.

    ``params.step_size`` is jittered per run (:func:`pymc_tempering.kernels.hmc.jittered`);
    ``rng`` draws the jitter, then what :func:`pymc_tempering.kernels.hmc.step` draws. Returns
    the new state and the HMC step's :class:`~pymc_tempering.kernels.Info`.
    """
    n = state.index + 1
    pos, betas = state.position, params.betas
    with np.errstate(invalid="ignore"):
        increment = (betas[n] - betas[n - 1]) * (pos.log_target - pos.log_base)
    log_weight = state.log_weight + np.where(np.isnan(increment), -np.inf, increment)
    eps = hmc.jittered(params.step_size, pos.z.shape[0], rng)
    pos, info = hmc.step(pos, hmc.HMCParams(betas[n], eps, params.n_leapfrog, params.evaluate), rng)
    new = AnnealingState(
        pos, n, log_weight, state.acceptance_sum + info.acceptance_rate,
        state.diverged | info.diverging,
    )
    return new, info


def ladder_log_conditional(delta, betas) -> np.ndarray:
    """``log P(beta_n | x)`` for each ``Delta(x)``: shape ``delta.shape + (len(betas),)``.

    ``P(beta_n | x) = exp(-beta_n Delta) / sum_m exp(-beta_m Delta)``, computed with
    ``logsumexp`` (stable for any sign and size of ``Delta``).
    """
    d = np.asarray(delta, dtype=float)[..., None]
    logits = -np.asarray(betas, dtype=float) * d
    return logits - logsumexp(logits, axis=-1, keepdims=True)


def draw_ladder_index(log_prob: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws of a ladder index from rows of ``log_prob`` and uniforms ``u``."""
    cdf = np.cumsum(np.exp(log_prob), axis=-1)
    cdf = cdf / cdf[..., -1:]
    idx = (np.asarray(u)[..., None] > cdf).sum(axis=-1)
    return np.minimum(idx, log_prob.shape[-1] - 1)


class LadderState(NamedTuple):
    """Simulated-tempering chains: positions, their rungs and the ladder conditional.

    Attributes
    ----------
    position : TemperedState
        The chains' states.
    level : ndarray of int, shape (n,)
        Each chain's rung.
    log_conditional : ndarray, shape (n, len(betas))
        ``log P(beta_m | x)`` at ``position`` for every rung (the Rao-Blackwellised weights).
    """

    position: TemperedState
    level: np.ndarray
    log_conditional: np.ndarray


class LadderParams(NamedTuple):
    """Parameters of :func:`ladder_step`: the ladder ``betas`` and ``log zeta`` of
    ``Delta(x) = log zeta + log q(x) - log p(x)``."""

    betas: np.ndarray
    log_zeta: float


def ladder_init(position: TemperedState, level, params: LadderParams) -> LadderState:
    """Chains at ``position`` on rungs ``level``, with the ladder conditional at ``position``."""
    delta = params.log_zeta + position.delta_no_zeta
    return LadderState(position, level, ladder_log_conditional(delta, params.betas))


def ladder_step(
    state: LadderState, params: LadderParams, rng: np.random.Generator
) -> tuple[LadderState, Info]:
    """The ladder move of simulated tempering: an independent draw of each chain's rung.

    Draws each chain's rung from ``P(beta_n | x) ∝ exp(-beta_n Delta(x))`` at its position,
    whatever its current rung (a Gibbs draw).

    Parameters
    ----------
    state : LadderState
        Only ``position`` is read: the conditional is computed at it.
    params : LadderParams
    rng : numpy.random.Generator
        Draws one uniform per chain.

    Returns
    -------
    state : LadderState
        The same positions, the new rungs and ``log P(beta_m | x)`` for every rung.
    info : pymc_tempering.kernels.Info
        ``acceptance_rate`` 1 and ``diverging`` False for every chain (an exact draw);
        ``energy`` the tempered potential energy ``-log pi(x | beta)`` at the new rung.
    """
    position = state.position
    log_cond = ladder_log_conditional(params.log_zeta + position.delta_no_zeta, params.betas)
    level = draw_ladder_index(log_cond, rng.random(log_cond.shape[0]))
    n = level.shape[0]
    info = Info(
        acceptance_rate=np.ones(n),
        diverging=np.zeros(n, dtype=bool),
        energy=-hmc.tempered_logp(position, params.betas[level]),
    )
    return LadderState(position, level, log_cond), info
