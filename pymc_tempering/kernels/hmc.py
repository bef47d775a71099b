"""The tempered HMC kernel: ``init`` / ``step`` over an immutable :class:`TemperedState`.

Everything works on a batch of ``n`` independent chains (or AIS runs) at once, in *whitened*
coordinates ``z`` of the base: ``x = mean + L z`` with ``L`` the base's Cholesky factor
(:attr:`Base.scale_tril <pymc_tempering.Base.scale_tril>`), so the base is ``N(0, I)`` in
``z`` and identity-mass HMC in ``z`` is HMC in ``x`` with the base covariance as inverse mass
matrix. The tempered log density at inverse temperature ``beta`` is the geometric bridge of
eq. (4) of the CT paper::

    log pi(x | beta) = beta log p(x) + (1 - beta) log q(x)

One evaluation costs one vectorised call of the model's log density and gradient on an
``(n, ndim)`` array (:meth:`Target.batched_logp_and_grad
<pymc_tempering.target.Target.batched_logp_and_grad>`); there is no Python-level work per
parameter or per chain. The kernel is :func:`init` and :func:`step` ``(state, params, rng) ->
(state, Info)`` with :class:`HMCParams`; AIS and simulated tempering compose it with the moves
of :mod:`pymc_tempering.kernels.ladder`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pymc_tempering.bases import Base
from pymc_tempering.kernels import Info
from pymc_tempering.target import Target

__all__ = [
    "TemperedState",
    "StepSizeAdaptation",
    "whitened_density",
    "init",
    "tempered_logp",
    "tempered_grad",
    "draw_momentum",
    "jittered",
    "select",
    "metropolis",
    "HMCParams",
    "step",
    "adapt_log_step_size",
    "step_size_adaptation_init",
    "step_size_adaptation_update",
    "check_options",
    "MAX_ENERGY_ERROR",
]

MAX_ENERGY_ERROR = 1000.0
"""An energy error above this flags a divergence (PyMC's NUTS uses the same threshold)."""


@dataclass(frozen=True)
class TemperedState:
    """A batch of positions with the target and base log densities and their gradients.

    Attributes
    ----------
    z : ndarray, shape (n, ndim)
        Whitened positions.
    log_target, log_base : ndarray, shape (n,)
        ``log p(x)`` (the model's unnormalised log density) and ``log q(x)`` (the normalised
        base), both in ``x`` space.
    grad_target, grad_base : ndarray, shape (n, ndim)
        Their gradients with respect to ``z``.
    """

    z: np.ndarray
    log_target: np.ndarray
    grad_target: np.ndarray
    log_base: np.ndarray
    grad_base: np.ndarray

    @property
    def delta_no_zeta(self) -> np.ndarray:
        """``log q(x) - log p(x)``: ``Delta(x)`` of eq. (17) without its ``log zeta``."""
        return self.log_base - self.log_target


def whitened_density(
    target: Target, base: Base, random_seed=None, mode=None
) -> Callable[[np.ndarray], TemperedState]:
    """The function ``z (n, ndim) -> TemperedState`` for a target and a Gaussian base.

    The target's log density and gradient come from :meth:`Target.batched_logp_and_grad
    <pymc_tempering.target.Target.batched_logp_and_grad>` (``random_seed`` seeds its
    minibatches, if any; ``mode`` is its PyTensor mode). Non-finite target log densities
    become ``-inf`` (with zero gradient), so a move into a region where the model is undefined
    is rejected.
    """
    logp_and_grad = target.batched_logp_and_grad(random_seed, mode=mode)
    scale = base.scale_tril
    const = -float(np.sum(np.log(np.diag(scale)))) - 0.5 * base.ndim * np.log(2.0 * np.pi)

    def evaluate(z: np.ndarray) -> TemperedState:
        # Diverging trajectories overflow; they get -inf and are rejected.
        with np.errstate(invalid="ignore", over="ignore"):
            lp, gx = logp_and_grad(base.unwhiten(z))
            bad = ~np.isfinite(lp) | ~np.all(np.isfinite(gx), axis=-1)
            return TemperedState(
                z=z,
                log_target=np.where(bad, -np.inf, lp),
                grad_target=np.where(bad[:, None], 0.0, gx @ scale),  # d/dz = L^T d/dx
                log_base=-0.5 * np.sum(z**2, axis=-1) + const,
                grad_base=-z,
            )

    return evaluate


def init(z, evaluate: Callable[[np.ndarray], TemperedState]) -> TemperedState:
    """The kernel's state at whitened positions ``z`` (n, ndim), e.g. draws of the base."""
    return evaluate(np.asarray(z, dtype=float))


def tempered_logp(state: TemperedState, beta) -> np.ndarray:
    """``beta log p + (1 - beta) log q`` per chain; ``beta`` is a scalar or shape (n,)."""
    beta = np.asarray(beta, dtype=float)
    with np.errstate(invalid="ignore"):
        out = beta * state.log_target + (1.0 - beta) * state.log_base
    return np.where(np.isneginf(state.log_target) & (beta > 0), -np.inf, out)


def tempered_grad(state: TemperedState, beta) -> np.ndarray:
    """Gradient of :func:`tempered_logp` with respect to ``z``, shape (n, ndim)."""
    beta = np.asarray(beta, dtype=float)
    if beta.ndim:
        beta = beta[:, None]
    return beta * state.grad_target + (1.0 - beta) * state.grad_base


def draw_momentum(rng: np.random.Generator, shape) -> np.ndarray:
    """A fresh momentum ``N(0, I)`` (identity mass in whitened coordinates)."""
    return rng.standard_normal(shape)


def jittered(step_size, n: int, rng: np.random.Generator) -> np.ndarray:
    """``step_size`` times an independent uniform factor in ``[0.8, 1.2]`` per chain.

    Jitter keeps a fixed step size from resonating with a period of the dynamics.
    """
    return np.asarray(step_size, dtype=float) * rng.uniform(0.8, 1.2, size=n)


def _leapfrog(state, p, beta, eps, n_leapfrog, evaluate):
    """``n_leapfrog`` leapfrog steps from ``(state, p)``; returns the end state and momentum."""
    p = p + 0.5 * eps * tempered_grad(state, beta)
    for i in range(n_leapfrog):
        state = evaluate(state.z + eps * p)
        p = p + (0.5 if i == n_leapfrog - 1 else 1.0) * eps * tempered_grad(state, beta)
    return state, p


def select(accept: np.ndarray, new: TemperedState, old: TemperedState) -> TemperedState:
    """Per chain, ``new`` where ``accept`` else ``old``."""
    keep = accept[:, None]
    return TemperedState(
        z=np.where(keep, new.z, old.z),
        log_target=np.where(accept, new.log_target, old.log_target),
        grad_target=np.where(keep, new.grad_target, old.grad_target),
        log_base=np.where(accept, new.log_base, old.log_base),
        grad_base=np.where(keep, new.grad_base, old.grad_base),
    )


class HMCParams(NamedTuple):
    """Parameters of one :func:`step`.

    Attributes
    ----------
    beta : float or ndarray, shape (n,)
        Inverse temperature of each chain (fixed during the step).
    step_size : float or ndarray, shape (n,)
        Leapfrog step size in whitened coordinates, per chain.
    n_leapfrog : int
        Leapfrog steps of the trajectory.
    evaluate : callable
        From :func:`whitened_density`.
    """

    beta: float | np.ndarray
    step_size: float | np.ndarray
    n_leapfrog: int
    evaluate: Callable[[np.ndarray], TemperedState]


def step(
    state: TemperedState, params: HMCParams, rng: np.random.Generator
) -> tuple[TemperedState, Info]:
    """One Metropolis-adjusted HMC transition per chain, leaving ``pi(x | beta)`` invariant.

    Parameters
    ----------
    state : TemperedState
    params : HMCParams
        Inverse temperature, step size, leapfrog steps and the density.
    rng : numpy.random.Generator
        Draws the momentum (:func:`draw_momentum`), then the uniforms of the accept test.

    Returns
    -------
    state : TemperedState
        The accepted proposal or the unchanged state, per chain.
    info : pymc_tempering.kernels.Info
        ``acceptance_rate`` (n,): the Metropolis acceptance probability ``min(1, exp(-dH))``;
        ``diverging`` (n,): the proposal's energy is not finite or exceeds the start's by more
        than :data:`MAX_ENERGY_ERROR` (as PyMC's NUTS decides); ``energy`` (n,): the
        *tempered* potential energy of the returned state, ``-log pi(x | beta)`` (for
        ``beta = 1`` the model's ``-log p(x)``).
    """
    beta = params.beta
    n = state.z.shape[0]
    eps = np.broadcast_to(np.asarray(params.step_size, dtype=float), (n,))[:, None]
    p = draw_momentum(rng, state.z.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        h0 = -tempered_logp(state, beta) + 0.5 * np.sum(p**2, axis=-1)
        new, p = _leapfrog(state, p, beta, eps, int(params.n_leapfrog), params.evaluate)
        h1 = -tempered_logp(new, beta) + 0.5 * np.sum(p**2, axis=-1)
    accept, acceptance_rate, diverging = metropolis(h0, h1, rng)
    chosen = select(accept, new, state)
    info = Info(acceptance_rate, diverging, energy=-tempered_logp(chosen, beta))
    return chosen, info


def metropolis(h0, h1, rng: np.random.Generator):
    """The Metropolis test of trajectories from energy ``h0`` to ``h1`` (n,): which are
    accepted, their acceptance probabilities ``min(1, exp(h0 - h1))``, and which diverged (a
    non-finite end, or an energy error above :data:`MAX_ENERGY_ERROR`)."""
    with np.errstate(invalid="ignore", over="ignore"):
        energy_error = np.where(np.isnan(h1 - h0), np.inf, h1 - h0)
        log_accept = np.minimum(0.0, -energy_error)
    accept = np.log(rng.random(len(log_accept))) < log_accept
    return accept, np.exp(log_accept), ~np.isfinite(h1) | (energy_error > MAX_ENERGY_ERROR)


def adapt_log_step_size(log_step_size, acceptance_rate, target_accept: float, gain):
    """One Robbins-Monro update of the log step size towards a mean acceptance rate.

    ``log eps + gain (acceptance_rate - target_accept)``: a step that accepts more often than
    ``target_accept`` lengthens, one that accepts less often shortens.
    """
    return log_step_size + gain * (np.asarray(acceptance_rate) - target_accept)


class StepSizeAdaptation(NamedTuple):
    """Warm-up state of the per-chain step size (see :func:`step_size_adaptation_update`).

    Attributes
    ----------
    log_step_size : ndarray
        The current log step size (used during warm-up).
    log_step_size_avg : ndarray
        The average of ``log_step_size`` over the second half of warm-up (used after it).
    n_averaged : int
        Iterations in that average.
    """

    log_step_size: np.ndarray
    log_step_size_avg: np.ndarray
    n_averaged: int


def step_size_adaptation_init(step_size) -> StepSizeAdaptation:
    """Start adapting from ``step_size`` (per chain)."""
    log_eps = np.log(np.asarray(step_size, dtype=float))
    return StepSizeAdaptation(log_eps, log_eps.copy(), 0)


def step_size_adaptation_update(
    adaptation: StepSizeAdaptation, acceptance_rate, target_accept: float, iteration: int, tune: int
) -> StepSizeAdaptation:
    """One warm-up update: Robbins-Monro with gain ``1 / sqrt(iteration + 1) + 0.05``.

    From ``iteration >= tune // 2`` on, the log step size is also averaged; after warm-up the
    kernel uses ``exp(log_step_size_avg)`` (the initial step size when ``tune`` is 0).
    """
    log_eps = adapt_log_step_size(
        adaptation.log_step_size, acceptance_rate, target_accept,
        gain=1.0 / np.sqrt(iteration + 1.0) + 0.05,
    )
    if iteration < tune // 2:
        return adaptation._replace(log_step_size=log_eps)
    n = adaptation.n_averaged + 1
    avg = adaptation.log_step_size_avg
    avg = log_eps if n == 1 else avg + (log_eps - avg) / n
    return StepSizeAdaptation(log_eps, avg, n)


def check_options(n_leapfrog, step_size, target_accept) -> int:
    """Validate the options of a sampler built on this kernel; return ``n_leapfrog`` as an int.

    Raises
    ------
    ValueError
        For ``n_leapfrog < 1``, a ``step_size`` that is given but not a positive number, or a
        ``target_accept`` outside ``(0, 1)``.
    """
    if int(n_leapfrog) < 1:
        raise ValueError(f"n_leapfrog must be positive, got {n_leapfrog}.")
    if step_size is not None and not (np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a positive number, got {step_size}.")
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}.")
    return int(n_leapfrog)
