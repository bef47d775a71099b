"""Continuous tempering kernels on a batch of chains: Gibbs and joint (Graham & Storkey 2017).

Both leave the joint density of eq. (16) of the CT paper invariant, on the whitened target
state ``z`` of :mod:`pymc_tempering.kernels.hmc` and an inverse temperature ``beta`` in
``[0, 1]``::

    log p(z, beta) = beta [log p(x) - log zeta] + (1 - beta) log q(x) + const
                   = log q(x) - beta Delta(x),     Delta(x) = log zeta + log q(x) - log p(x)

- :func:`gibbs_step`: one HMC transition of ``z`` given each chain's ``beta``
  (:func:`pymc_tempering.kernels.hmc.step`), then an exact draw of ``beta`` given ``z``, the
  exponential of rate ``Delta(x)`` truncated to ``[0, 1]`` (eq. 17,
  :func:`truncated_exponential_inverse_cdf`).
- :func:`joint_step`: one HMC transition of ``(z, u)`` together, ``beta = sigmoid(u)`` with the
  log Jacobian ``log sigmoid'(u)`` (the temperature control of joint continuous tempering).

A step makes one vectorised call of the model's log density and gradient per leapfrog step for
every chain at once, as AIS's annealing kernel does; the steps keep the kernel signature
``step(state, params, rng) -> (state, Info)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.special import expit

from pymc_tempering.kernels import Info
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels.hmc import TemperedState

__all__ = [
    "truncated_exponential_inverse_cdf",
    "TemperingParams",
    "GibbsState",
    "gibbs_init",
    "gibbs_step",
    "JointState",
    "joint_init",
    "joint_step",
]

_SERIES_BELOW = 1e-10  # |Delta| below which the inverse CDF is the first-order series in Delta


def truncated_exponential_inverse_cdf(delta, u) -> np.ndarray:
    """Inverse CDF of the density ``Delta exp(-beta Delta) / (1 - exp(-Delta))`` on ``[0, 1]``.

    This is eq. (17) of the CT paper, the conditional of the inverse temperature given ``x``.
    With ``a = |Delta|`` and ``t`` the truncated exponential of rate ``a``,
    ``t(u) = -log1p(u expm1(-a)) / a`` and ``beta = t(u)`` for ``Delta > 0``,
    ``beta = 1 - t(1 - u)`` for ``Delta < 0`` (the density is mirrored), so nothing overflows for
    any size of ``Delta`` and ``beta`` increases with ``u``. For
    ``a < 1e-10`` the first-order series ``t = u - a u (1 - u) / 2`` keeps full accuracy
    (``Delta = 0`` gives the uniform distribution). ``Delta = +inf`` gives 0, ``-inf`` gives 1.

    Parameters
    ----------
    delta : array_like
        ``Delta(x) = log zeta + log q(x) - log p(x)``.
    u : array_like
        Uniform variates in ``[0, 1)``, broadcast against ``delta``.

    Returns
    -------
    ndarray
        Draws of ``beta`` in ``[0, 1]``.
    """
    d = np.asarray(delta, dtype=float)
    u = np.asarray(u, dtype=float)
    d, u = np.broadcast_arrays(d, u)
    a = np.abs(d)
    u = np.where(d < 0, 1.0 - u, u)  # mirrored: beta = 1 - t(1 - u) keeps beta increasing in u
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        general = -np.log1p(u * np.expm1(-a)) / a
        series = u - a * u * (1.0 - u) / 2.0
    t = np.where(a < _SERIES_BELOW, series, general)
    t = np.where(np.isinf(a), 0.0, t)
    t = np.clip(t, 0.0, 1.0)
    beta = np.where(d < 0, 1.0 - t, t)
    return np.where(np.isnan(d), np.nan, beta)


class TemperingParams(NamedTuple):
    """Parameters of both kernels.

    Attributes
    ----------
    log_zeta : float
        The approximation of log Z in eq. (16).
    step_size : float or ndarray
        Leapfrog step size (per chain, or one for all).
    n_leapfrog : int
    evaluate : callable
        From :func:`pymc_tempering.kernels.hmc.whitened_density`.
    """

    log_zeta: float
    step_size: float | np.ndarray
    n_leapfrog: int
    evaluate: Callable[[np.ndarray], TemperedState]


def _delta(position: TemperedState, log_zeta: float) -> np.ndarray:
    """``Delta(x) = log zeta + log q(x) - log p(x)`` per chain (``+inf`` where ``p`` is 0)."""
    with np.errstate(invalid="ignore"):
        return log_zeta + position.delta_no_zeta


# ------------------------------------------------------------------------------ Gibbs CT
class GibbsState(NamedTuple):
    """A batch of chains of Gibbs continuous tempering: positions and inverse temperatures."""

    position: TemperedState
    beta: np.ndarray


def gibbs_init(position: TemperedState, params: TemperingParams, rng) -> GibbsState:
    """Chains at ``position`` with ``beta`` drawn from its conditional given each."""
    beta = truncated_exponential_inverse_cdf(
        _delta(position, params.log_zeta), rng.random(position.z.shape[0]))
    return GibbsState(position, beta)


def gibbs_step(state: GibbsState, params: TemperingParams, rng) -> tuple[GibbsState, Info]:
    """HMC on ``z`` given each chain's ``beta``, then the exact draw of ``beta`` given ``z``.

    Returns the HMC transition's :class:`~pymc_tempering.kernels.Info` (the draw of ``beta``
    always accepts).
    """
    move = hmc.HMCParams(state.beta, params.step_size, params.n_leapfrog, params.evaluate)
    position, info = hmc.step(state.position, move, rng)
    beta = truncated_exponential_inverse_cdf(
        _delta(position, params.log_zeta), rng.random(position.z.shape[0]))
    return GibbsState(position, beta), info


# ------------------------------------------------------------------------------ joint CT
class JointState(NamedTuple):
    """A batch of chains of joint continuous tempering: positions and temperature controls
    ``u`` (``beta = sigmoid(u)``)."""

    position: TemperedState
    u: np.ndarray

    @property
    def beta(self) -> np.ndarray:
        return expit(self.u)


def _log_sigmoid(u):
    return -np.logaddexp(0.0, -u)


def _joint_logp(position: TemperedState, u, log_zeta: float) -> np.ndarray:
    """``log p(z, u)``: eq. (16) at ``beta = sigmoid(u)`` plus ``log sigmoid'(u)``."""
    beta = expit(u)
    with np.errstate(invalid="ignore"):
        out = hmc.tempered_logp(position, beta) - beta * log_zeta
    return out + _log_sigmoid(u) + _log_sigmoid(-u)


def _joint_grads(position: TemperedState, u, log_zeta: float):
    """The gradients of :func:`_joint_logp` in ``z`` (n, ndim) and in ``u`` (n,)."""
    beta = expit(u)
    with np.errstate(invalid="ignore"):
        gu = -beta * (1.0 - beta) * _delta(position, log_zeta) + 1.0 - 2.0 * beta
    return hmc.tempered_grad(position, beta), np.where(np.isfinite(gu), gu, 0.0)


def joint_init(position: TemperedState, rng) -> JointState:
    """Chains at ``position`` with ``beta`` uniform on ``(0, 1)`` (``u`` logistic)."""
    return JointState(position, rng.logistic(size=position.z.shape[0]))


def joint_step(state: JointState, params: TemperingParams, rng) -> tuple[JointState, Info]:
    """One Metropolis-adjusted HMC transition of ``(z, u)`` per chain (identity mass).

    Returns an :class:`~pymc_tempering.kernels.Info` whose ``energy`` is ``-log p(z, u)``.
    """
    n = state.u.size
    eps = np.broadcast_to(np.asarray(params.step_size, dtype=float), (n,))
    p, v = hmc.draw_momentum(rng, state.position.z.shape), rng.standard_normal(n)
    position, u = state.position, state.u
    with np.errstate(invalid="ignore", over="ignore"):
        h0 = -_joint_logp(position, u, params.log_zeta) + 0.5 * (np.sum(p**2, axis=-1) + v**2)
        gz, gu = _joint_grads(position, u, params.log_zeta)
        p, v = p + 0.5 * eps[:, None] * gz, v + 0.5 * eps * gu
        for i in range(int(params.n_leapfrog)):
            position = params.evaluate(position.z + eps[:, None] * p)
            u = u + eps * v
            gz, gu = _joint_grads(position, u, params.log_zeta)
            half = 0.5 if i == params.n_leapfrog - 1 else 1.0
            p, v = p + half * eps[:, None] * gz, v + half * eps * gu
        h1 = -_joint_logp(position, u, params.log_zeta) + 0.5 * (np.sum(p**2, axis=-1) + v**2)
    accept, acceptance_rate, diverging = hmc.metropolis(h0, h1, rng)
    chosen = JointState(hmc.select(accept, position, state.position),
                        np.where(accept, u, state.u))
    energy = -_joint_logp(chosen.position, chosen.u, params.log_zeta)
    return chosen, Info(acceptance_rate, diverging, energy)
