"""Kernels: each method's numerics as ``init`` / ``step`` over small immutable records.

A kernel's ``step`` returns the new state and an :class:`Info` record, BlackJAX style; the
driver loop (:func:`pymc_tempering.driver.run_kernel`) runs kernels and records what they report.
Modules: ``hmc`` (tempered HMC), ``ladder`` (temperature schedules, the AIS annealing step, the
simulated-tempering ladder draw), ``thermostats`` (TACT-HMC / SGNHT Nosé-Hoover dynamics),
``exchange`` (the replica-exchange move), ``ergodic`` (the ergodic-inference chain graph) and
``ergodic_initial`` (its initial distribution ``P_0`` and entropy bound).
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
