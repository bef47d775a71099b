"""Kernels: each method's numerics as ``init`` / ``step`` over small immutable records.

Every kernel's move, what a driver calls once per iteration, has one signature, BlackJAX
style::

    state = init(...)
    state, info = step(state, params, rng)

``state`` is an immutable record (a ``NamedTuple`` or frozen dataclass), ``params`` a small
``NamedTuple`` of the kernel's parameters (step size, leapfrog steps, the density, the ladder,
...), ``rng`` a :class:`numpy.random.Generator`, the step's only source of randomness, and
``info`` an :class:`Info`, or a ``NamedTuple`` of the kernel's own, documented in its module,
that has the :class:`Info` fields too. The driver loop
(:func:`pymc_tempering.driver.run_kernel`) runs kernels and records what they report. Pure
helpers (a leapfrog trajectory, a log conditional, the draw of an index) keep signatures of
their own.

Modules: ``hmc`` (tempered HMC: :func:`~pymc_tempering.kernels.hmc.step` with
:class:`~pymc_tempering.kernels.hmc.HMCParams`), ``ladder`` (temperature schedules; AIS's
annealing step and simulated tempering's ladder draw), ``thermostats`` (TACT-HMC / SGNHT
Nosé-Hoover dynamics), ``exchange`` (the replica-exchange move) and ``ergodic`` (the
ergodic-inference chain and its fit). The ergodic transition
(:func:`~pymc_tempering.kernels.ergodic.step`) is the one symbolic kernel: it builds a PyTensor
graph that is differentiated through its noise, so its ``rng`` is that noise, a
:class:`~pymc_tempering.kernels.ergodic.TransitionNoise` of symbolic draws, and its state,
parameters and info are symbolic variables; its fit's Adam iteration
(:func:`~pymc_tempering.kernels.ergodic.fit_step`) is a NumPy kernel like the others.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_tempering.contract import DivergenceError

__all__ = ["Info", "check_finite"]


class Info(NamedTuple):
    """What one kernel step reports per chain (arrays with a leading chain axis).

    Attributes
    ----------
    acceptance_rate : ndarray
        Metropolis acceptance probability of the step (1 for dynamics without a test).
    diverging : ndarray of bool
        Whether the step's trajectory diverged (a non-finite energy or one that exploded).
    energy : ndarray
        The potential energy ``-log p`` at the state the step returns (or at the state its
        gradient was taken, for the Euler-discretised thermostat dynamics).
    """

    acceptance_rate: np.ndarray
    diverging: np.ndarray
    energy: np.ndarray


def check_finite(values, where: str, remedy: str) -> None:
    """Raise :class:`~pymc_tempering.contract.DivergenceError` unless every value is finite."""
    if not all(np.all(np.isfinite(v)) for v in values):
        raise DivergenceError(f"{where} (non-finite position or energy); {remedy}.")
