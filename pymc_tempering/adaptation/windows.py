"""The warm-up's windows: where they end, the positions' running sums over each, and the
change of coordinates at a window's end.

The ``"auto"`` warm-up of TACT-HMC and replica exchange re-estimates the preconditioner at
the ends of windows (:data:`WINDOW_ENDS` of ``tune``), as Stan's windowed adaptation does;
the first window is a transit whose spread is the chains' drift. Over a window the positions
are summed per chain (:class:`Spread`), for their pooled within-chain spread
(:func:`spread_sd`) and, for a dense preconditioner (at most :data:`DENSE_MAX_DIM`
coordinates), their covariance (:func:`spread_cov`), from which the coordinates change to
decorrelated ones (:func:`decorrelating_basis`, :func:`window_basis`).

State machine, as BlackJAX's windowed mass-matrix adaptation: :class:`Windows` holds the
schedule and the current window's sums; :func:`init` starts it, :func:`update` adds an
iteration's positions, :func:`final` closes a window (the change of coordinates and each
spread's standard deviations in the new ones) and starts the next. The record travels in the
driver's loop state; what a window's end does with the spreads is the sampler's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import scipy.linalg

from pymc_tempering.adaptation.coordinates import Basis, compose, whitened
from pymc_tempering.adaptation.noise import noise_rotation

__all__ = [
    "Windows",
    "init",
    "update",
    "final",
    "WINDOW_ENDS",
    "window_ends",
    "Spread",
    "spread_empty",
    "spread_add",
    "spread_sd",
    "spread_cov",
    "DENSE_MAX_DIM",
    "DENSE_SHRINKAGE",
    "decorrelating_basis",
    "in_new_coordinates",
    "window_basis",
]


#: The warm-up's adaptation windows end at these fractions of ``tune``; the last quarter runs
#: with the final settings.
WINDOW_ENDS = (0.15, 0.3, 0.5, 0.75)


def window_ends(tune: int) -> set[int]:
    """The warm-up iterations (0-based) after which the preconditioner is re-estimated."""
    return {int(np.ceil(f * tune)) - 1 for f in WINDOW_ENDS if np.ceil(f * tune) >= 1}


class Spread(NamedTuple):
    """Running sums of the positions of each chain, for the within-chain spread; ``outer``
    (the sum of their outer products over the chains, ``(D, D)``) only for a dense
    preconditioner."""

    total: np.ndarray
    total_sq: np.ndarray
    count: np.ndarray
    outer: np.ndarray | None = None


def spread_empty(n: int, d: int, dense: bool = False) -> Spread:
    """No positions yet for ``n`` chains of ``d`` coordinates (with ``outer`` when ``dense``)."""
    return Spread(np.zeros((n, d)), np.zeros((n, d)), np.zeros(n),
                  np.zeros((d, d)) if dense else None)


def spread_add(spread: Spread, theta: np.ndarray, mask: np.ndarray) -> Spread:
    """Add the positions ``theta (n, D)`` of the chains where ``mask (n,)`` holds."""
    m = np.asarray(mask, dtype=float)[:, None]
    outer = None if spread.outer is None else spread.outer + (m * theta).T @ theta
    return Spread(
        spread.total + m * theta, spread.total_sq + m * theta**2, spread.count + m[:, 0], outer
    )


def spread_sd(spread: Spread, min_count: int = 5) -> np.ndarray | None:
    """The pooled within-chain standard deviation per coordinate (chains with at least
    ``min_count`` positions), or None when no chain has that many."""
    ok = spread.count >= min_count
    if not ok.any():
        return None
    c = spread.count[ok][:, None]
    mean = spread.total[ok] / c
    var = (spread.total_sq[ok] / c - mean**2) * c / (c - 1)
    return np.sqrt(np.maximum(np.mean(var, axis=0), 0.0))


def spread_cov(spread: Spread, min_count: int = 5) -> tuple[np.ndarray, float] | None:
    """The pooled within-chain covariance ``(D, D)``, each chain's positions about their own
    mean, and the number of positions it pools; None without ``outer`` sums or when no chain
    has ``min_count`` positions."""
    if spread.outer is None or not (spread.count >= min_count).any():
        return None
    seen = spread.count > 0
    c = spread.count[seen]
    mean = spread.total[seen] / c[:, None]
    scatter = spread.outer - (mean.T * c) @ mean
    return scatter / (c.sum() - c.size), float(c.sum())


#: ``step_size="auto"`` preconditions models of at most this many flat coordinates with a
#: dense matrix (:func:`decorrelating_basis`); larger ones keep the diagonal one.
DENSE_MAX_DIM = 100
#: The correlation matrix of the warm-up's positions is shrunk towards the identity with the
#: weight of this many positions per coordinate (as Stan shrinks its dense metric).
DENSE_SHRINKAGE = 5.0


def decorrelating_basis(spread: Spread) -> tuple[np.ndarray, np.ndarray] | None:
    """A change of coordinates that decorrelates the window's positions, or None.

    With ``C`` the pooled within-chain covariance of the positions ``v`` (:func:`spread_cov`),
    ``D`` its standard deviations and ``R = D^-1 C D^-1 = L L^T`` the Cholesky factorisation of
    its correlation matrix (shrunk towards the identity by :data:`DENSE_SHRINKAGE` positions per
    coordinate), the new coordinates are ``v' = v @ W_inv.T`` with ``W = D L``,
    ``W_inv = L^-1 D^-1``: uncorrelated, with unit variances. The correlation matrix keeps the
    factor independent of the coordinates' units, and the triangular factor, unlike an
    eigenbasis, stays near the identity where the correlations are small: the eigenvectors of a
    correlation matrix near the identity are arbitrary, and a turn that mixes a prior-only
    coordinate with a minibatch-noisy one leaves their thermostats unable to absorb each its
    own noise. Returns ``(W, W_inv)``; None when there are fewer than two coordinates, no
    ``outer`` sums, fewer positions than coordinates, or a degenerate spread.
    """
    found = spread_cov(spread)
    d = spread.total.shape[-1]
    if found is None or d < 2:
        return None
    cov, n = found
    sd = np.sqrt(np.diag(cov))
    if n < d or not np.all(np.isfinite(cov)) or not np.all(sd > 0):
        return None
    corr = cov / np.outer(sd, sd)
    w = n / (n + DENSE_SHRINKAGE * d)
    corr = w * corr + (1.0 - w) * np.eye(d)
    try:
        chol = np.linalg.cholesky(corr)
    except np.linalg.LinAlgError:
        return None
    chol_inv = scipy.linalg.solve_triangular(chol, np.eye(d), lower=True)
    return sd[:, None] * chol, chol_inv / sd[None, :]


def window_basis(
    spreads: list[Spread], olds: list[np.ndarray], basis: Basis | None, allowed: bool,
    noise: tuple[Callable, np.ndarray] | None = None,
) -> tuple[list, list, Basis | None, np.ndarray | None]:
    """The change of coordinates at a warm-up window's end, and the spreads in the coordinates
    after it.

    With ``allowed`` (from the second window on) and the ``outer`` sums of a dense warm-up, the
    coordinates change to those that decorrelate ``spreads[0]``'s positions (the chains' or the
    ``T = 1`` replica's; :func:`decorrelating_basis`). Returns ``(sds, olds, basis, w_inv)``:
    each spread's standard deviations and each old scale in the coordinates after the window
    (:func:`in_new_coordinates`), the basis after it
    (:func:`~pymc_tempering.adaptation.coordinates.compose`), and the change ``v' = v @
    w_inv.T`` (None where the coordinates stay). With ``noise = (logp_and_grad, x)``, the
    model's density (in its own units) and positions ``x (n, D)`` in the coordinates ``v``, the
    change also turns the decorrelated coordinates to those in which the gradient noise
    measured at ``x`` is uncorrelated (:func:`~pymc_tempering.adaptation.noise.noise_rotation`).
    """
    found = decorrelating_basis(spreads[0]) if allowed else None
    if found is None:
        return [spread_sd(sp) for sp in spreads], list(olds), basis, None
    w, w_inv = found
    q = None
    if noise is not None:
        density, x = noise
        q = noise_rotation(whitened(density, 1.0, compose(basis, w, w_inv)), x @ w_inv.T)
    if q is not None:
        w, w_inv = w @ q, q.T @ w_inv
    moved = [in_new_coordinates(sp, old, w_inv) for sp, old in zip(spreads, olds)]
    return [m[0] for m in moved], [m[1] for m in moved], compose(basis, w, w_inv), w_inv


def in_new_coordinates(spread: Spread, old_scale: np.ndarray, w_inv: np.ndarray):
    """The window's spread and the old preconditioner's widths in the coordinates
    ``v' = v @ w_inv.T`` (:func:`decorrelating_basis`): ``(sd', old_scale')``, the square roots
    of the diagonals of ``w_inv C w_inv^T`` and ``w_inv diag(old_scale^2) w_inv^T``; ``sd'`` None
    without enough positions (:func:`spread_cov`)."""
    found = spread_cov(spread)
    old = np.sqrt(old_scale**2 @ (w_inv**2).T)
    if found is None:
        return None, old
    cov = w_inv @ found[0] @ w_inv.T
    return np.sqrt(np.maximum(np.diag(cov), 0.0)), old


class Windows(NamedTuple):
    """The warm-up's window schedule and the positions summed over the current window.

    Attributes
    ----------
    ends : frozenset of int
        The warm-up iterations (0-based) after which a window ends (:func:`window_ends`).
    first : int
        The first window's end (the transit), -1 without windows.
    dense : bool
        Whether the positions' outer products are summed, for a dense preconditioner from the
        second window on (models of 2 to :data:`DENSE_MAX_DIM` coordinates).
    spreads : tuple of Spread, optional
        The current window's sums, one per group of positions (TACT-HMC: the chains at unit
        temperature; replica exchange: each replica, the ``T = 1`` one first); None before the
        window's first iteration.
    """

    ends: frozenset
    first: int
    dense: bool
    spreads: tuple | None = None


def init(tune: int, ndim: int) -> Windows:
    """The windows of a warm-up of ``tune`` iterations on a model of ``ndim`` coordinates."""
    ends = frozenset(window_ends(tune))
    return Windows(ends, min(ends, default=-1), 2 <= ndim <= DENSE_MAX_DIM)


def update(windows: Windows, positions, mask: np.ndarray) -> Windows:
    """Add one iteration's positions: ``positions[k] (n, D)`` to spread ``k``, for the chains
    where ``mask (n,)`` holds."""
    spreads = windows.spreads
    if spreads is None:
        spreads = (spread_empty(*positions[0].shape, dense=windows.dense),) * len(positions)
    spreads = tuple(spread_add(sp, v, mask) for sp, v in zip(spreads, positions, strict=True))
    return windows._replace(spreads=spreads)


def final(
    windows: Windows, it: int, olds: list[np.ndarray], basis: Basis | None,
    noise: tuple[Callable, np.ndarray] | None = None,
) -> tuple[Windows, list, list, Basis | None, np.ndarray | None]:
    """Close the window that ends at iteration ``it``: ``(windows, sds, olds, basis, w_inv)``.

    The change of coordinates (from the second window on) and each spread's standard
    deviations and old scale ``olds[k]`` in the new coordinates (:func:`window_basis`), and
    the record with empty sums for the next window.
    """
    sds, olds, basis, w_inv = window_basis(
        list(windows.spreads), olds, basis, it != windows.first, noise
    )
    return windows._replace(spreads=None), sds, olds, basis, w_inv
