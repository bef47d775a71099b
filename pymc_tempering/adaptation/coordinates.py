"""The coordinates the thermostat dynamics run in, and moving chains between them.

The ``step_size="auto"`` warm-up preconditions the dynamics: they run on ``u``, with the
model's flat positions ``theta = (u * scale) @ B.T`` (:func:`in_model_units`), a diagonal
``scale`` and, for a dense preconditioner, a :class:`Basis` ``B``. Running on ``u`` is running
on ``theta`` with the mass matrix ``(B diag(scale)^2 B^T)^-1`` (:func:`whitened`). When a
warm-up window changes the preconditioner, :func:`rescale` moves the chains to the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pymc_tempering.kernels.thermostats import (
    ThermostatParams,
    TACTState,
    refresh_momenta,
    thermostat_start,
)

__all__ = [
    "Basis",
    "in_model_units",
    "in_dynamics_units",
    "whitened",
    "compose",
    "rescale",
]


class Basis(NamedTuple):
    """A linear change of the dynamics' coordinates: ``theta = v @ to_model.T`` and
    ``v = theta @ from_model.T`` (``from_model`` the inverse of ``to_model``), both ``(D, D)``.

    The dense part of the ``"auto"`` preconditioner
    (:func:`~pymc_tempering.adaptation.windows.decorrelating_basis`): the diagonal ``scale``
    then acts on ``v``, so the dynamics run on ``u = v / scale``. The map is linear,
    so its Jacobian is a constant and the density of ``u`` is the model's up to that constant.
    """

    to_model: np.ndarray
    from_model: np.ndarray


def in_model_units(u: np.ndarray, scale: np.ndarray, basis: Basis | None = None) -> np.ndarray:
    """The positions ``theta`` of the dynamics' coordinates ``u (n, D)``: ``(u * scale)``
    mapped by ``basis`` (the identity when None)."""
    v = u * scale
    return v if basis is None else v @ basis.to_model.T


def in_dynamics_units(theta: np.ndarray, scale: np.ndarray, basis: Basis | None = None):
    """The inverse of :func:`in_model_units`: ``u`` of the positions ``theta (n, D)``."""
    v = theta if basis is None else theta @ basis.from_model.T
    return v / scale


def whitened(
    logp_and_grad: Callable, scale: np.ndarray | float, basis: Basis | None = None
) -> Callable:
    """``logp_and_grad`` in the preconditioned coordinates ``u``, ``theta = in_model_units(u)``.

    Running the dynamics on ``u`` is running them on ``theta`` with the mass matrix
    ``(B diag(scale)^2 B^T)^-1`` (``B = basis.to_model``, the identity without a basis):
    ``log p`` is unchanged and the force is ``scale * (grad log p @ B)``.
    """
    if basis is None and np.all(scale == 1.0):
        return logp_and_grad
    if basis is None:

        def in_u(u):
            lp, g = logp_and_grad(u * scale)
            return lp, np.asarray(g) * scale

        return in_u

    def in_rotated_u(u):
        lp, g = logp_and_grad((u * scale) @ basis.to_model.T)
        return lp, (np.asarray(g) @ basis.to_model) * scale

    return in_rotated_u


def compose(basis: Basis | None, w: np.ndarray, w_inv: np.ndarray) -> Basis:
    """The basis after a further change ``v = v' @ w.T``
    (:func:`~pymc_tempering.adaptation.windows.decorrelating_basis`)."""
    if basis is None:
        return Basis(w, w_inv)
    return Basis(basis.to_model @ w, w_inv @ basis.from_model)


def rescale(
    state: TACTState,
    settings: ThermostatParams,
    old_scale: np.ndarray,
    new_scale: np.ndarray,
    rng: np.random.Generator,
    *,
    tempering: bool = True,
    w_inv: np.ndarray | None = None,
) -> TACTState:
    """Move the chains to a new preconditioner: the same ``theta``, ``u = v / new_scale``.

    ``v = u * old_scale``, mapped to new coordinates ``v @ w_inv.T`` when ``w_inv`` is given
    (a new :class:`Basis`). The momenta are redrawn (exact) and the thermostats restarted at
    ``c`` (their equilibrium without gradient noise), since both were in the old units; ``xi``
    and the ABF bins (energies, which do not depend on the coordinates) are kept.
    """
    n = state.theta.shape[0]
    if w_inv is None:
        theta = state.theta * (old_scale / new_scale)
    else:
        theta = ((state.theta * old_scale) @ w_inv.T) / new_scale
    state = state._replace(
        theta=theta,
        z_theta=thermostat_start(state.theta.shape, settings),
        z_xi=np.full(n, float(settings.tempering.c_xi)) if tempering else state.z_xi,
    )
    return refresh_momenta(state, settings, rng, tempering=tempering)
