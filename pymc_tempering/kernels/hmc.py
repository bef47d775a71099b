"""HMC numerics shared by the drivers: pure functions over small immutable state records.

Everything works on a batch of ``n`` independent chains (or AIS runs) at once, in *whitened*
coordinates ``z`` of the base: ``x = mean + L z`` with ``L`` the base's Cholesky factor, so the
base is ``N(0, I)`` in ``z`` and identity-mass HMC in ``z`` is HMC in ``x`` with the base
covariance as inverse mass matrix. The tempered log density at inverse temperature ``beta`` is
the geometric bridge of eq. (4) of the CT paper::

    log pi(x | beta) = beta log p(x) + (1 - beta) log q(x)

One call of the batched log density costs one vectorised evaluation of the model's log density
and gradient on an ``(n, ndim)`` array (a compiled PyTensor function); there is no Python-level
work per parameter or per chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import vectorize_graph

from pymc_tempering.base import Base
from pymc_tempering.target import Target

__all__ = [
    "TemperedState",
    "batched_logp_and_grad",
    "whitened_density",
    "initial_state",
    "tempered_logp",
    "tempered_grad",
    "hmc_step",
    "adapt_log_step_size",
]


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


def batched_logp_and_grad(target: Target) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Compile the model's log density and gradient over a batch of flat points.

    The one-point graph of :meth:`Target.logp_graph` is vectorised with
    :func:`pytensor.graph.replace.vectorize_graph`, so the returned function maps an array
    ``(n, ndim)`` to ``(logp (n,), grad (n, ndim))`` in one compiled call.
    """
    x = pt.vector("x", dtype="float64")
    logp = target.logp_graph(target.unravel_graph(x))
    grad = pytensor.grad(logp, x)
    xs = pt.matrix("xs", dtype="float64")
    logp_b, grad_b = vectorize_graph([logp, grad], replace={x: xs})
    # pm.compile turns parameter checks (sigma > 0) into -inf instead of raising
    fn = pm.compile([xs], [logp_b, grad_b])

    def logp_and_grad(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lp, g = fn(np.ascontiguousarray(points, dtype=float))
        return np.asarray(lp, dtype=float), np.asarray(g, dtype=float)

    return logp_and_grad


def whitened_density(target: Target, base: Base) -> Callable[[np.ndarray], TemperedState]:
    """The function ``z -> TemperedState`` for a target and a Gaussian base.

    Non-finite target log densities become ``-inf`` (with zero gradient), so a move into a region
    where the model is undefined is rejected.
    """
    logp_and_grad = batched_logp_and_grad(target)
    mean, scale = base.mean, base.scale_tril
    log_det = float(np.sum(np.log(np.diag(scale))))
    const = -log_det - 0.5 * base.ndim * np.log(2.0 * np.pi)

    def evaluate(z: np.ndarray) -> TemperedState:
        # Diverging trajectories overflow; they get -inf and are rejected.
        with np.errstate(invalid="ignore", over="ignore"):
            x = mean + z @ scale.T
            lp, gx = logp_and_grad(x)
            bad = ~np.isfinite(lp) | ~np.all(np.isfinite(gx), axis=-1)
            lp = np.where(bad, -np.inf, lp)
            gz = np.where(bad[:, None], 0.0, gx @ scale)  # d/dz = L^T d/dx, row-wise
            return TemperedState(
                z=z,
                log_target=lp,
                grad_target=gz,
                log_base=-0.5 * np.sum(z**2, axis=-1) + const,
                grad_base=-z,
            )

    return evaluate


def initial_state(evaluate, n: int, ndim: int, rng: np.random.Generator) -> TemperedState:
    """``n`` independent draws from the base, evaluated."""
    return evaluate(rng.standard_normal((n, ndim)))


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


def hmc_step(
    state: TemperedState,
    beta,
    step_size,
    n_leapfrog: int,
    evaluate: Callable[[np.ndarray], TemperedState],
    rng: np.random.Generator,
) -> tuple[TemperedState, np.ndarray]:
    """One Metropolis-adjusted HMC transition per chain, leaving ``pi(x | beta)`` invariant.

    Parameters
    ----------
    state : TemperedState
    beta : float or ndarray, shape (n,)
        Inverse temperature of each chain (fixed during the step).
    step_size : float or ndarray, shape (n,)
        Leapfrog step size in whitened coordinates, per chain.
    n_leapfrog : int
    evaluate : callable
        From :func:`whitened_density`.
    rng : numpy.random.Generator

    Returns
    -------
    new_state : TemperedState
    accept_prob : ndarray, shape (n,)
    """
    with np.errstate(invalid="ignore", over="ignore"):
        n = state.z.shape[0]
        eps = np.broadcast_to(np.asarray(step_size, dtype=float), (n,))[:, None]
        p = rng.standard_normal(state.z.shape)
        h0 = -tempered_logp(state, beta) + 0.5 * np.sum(p**2, axis=-1)
        new = state
        p = p + 0.5 * eps * tempered_grad(new, beta)
        for i in range(int(n_leapfrog)):
            new = evaluate(new.z + eps * p)
            scale = 0.5 if i == n_leapfrog - 1 else 1.0
            p = p + scale * eps * tempered_grad(new, beta)
        h1 = -tempered_logp(new, beta) + 0.5 * np.sum(p**2, axis=-1)
        log_accept = np.minimum(0.0, h0 - h1)
        log_accept = np.where(np.isnan(log_accept), -np.inf, log_accept)
    accept = np.log(rng.random(n)) < log_accept
    keep = accept[:, None]
    chosen = TemperedState(
        z=np.where(keep, new.z, state.z),
        log_target=np.where(accept, new.log_target, state.log_target),
        grad_target=np.where(keep, new.grad_target, state.grad_target),
        log_base=np.where(accept, new.log_base, state.log_base),
        grad_base=np.where(keep, new.grad_base, state.grad_base),
    )
    return chosen, np.exp(log_accept)


def adapt_log_step_size(log_step_size, accept_prob, target_accept: float, gain: float):
    """One Robbins-Monro update of the log step size towards a mean acceptance rate."""
    return log_step_size + gain * (np.asarray(accept_prob) - target_accept)
