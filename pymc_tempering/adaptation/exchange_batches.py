"""How many minibatches replica exchange's corrected test averages per pair of neighbours,
set from the noise measured over each warm-up window.

The noise-corrected swap test (Seita et al. 2017; :mod:`pymc_tempering.kernels.exchange`)
skips a swap whose estimated noise ``sigma`` exceeds the correction's, and near ``T = 1`` one
minibatch's noise is often that large. At each window's end the minibatches averaged per pair
become what brings the window's mean noise to
:data:`~pymc_tempering.kernels.exchange.TARGET_NOISE_SD`
(:func:`~pymc_tempering.kernels.exchange.batches_for_noise`), at most
:data:`MAX_BATCH_PASSES` passes over the data (:func:`max_batches`); a pair that would need
minibatches covering :data:`FULL_PASS_FRACTION` of the data or more takes exact energies from
one pass over it instead (:func:`exact_from`), with the Metropolis test.

State machine: :class:`ExchangeNoise` holds the exchange counts at the window's start;
:func:`init` starts it, :func:`final` closes a window (the new counts per pair). The exchange
kernel's own state sums the noise between them, so there is no ``update``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pymc_tempering.kernels.exchange import ExchangeState, batches_for_noise

__all__ = [
    "MAX_BATCH_PASSES",
    "FULL_PASS_FRACTION",
    "max_batches",
    "exact_from",
    "ExchangeNoise",
    "init",
    "final",
]

#: The corrected test averages at most ``MAX_BATCH_PASSES`` passes over the data set
#: (``MAX_BATCH_PASSES * N / m`` minibatches of ``m`` terms) per exchange.
MAX_BATCH_PASSES = 4
#: A pair whose test would average minibatches covering this fraction of the data set or more
#: takes exact energies from one pass over it instead
#: (:func:`~pymc_tempering.target.full_data_energies`), with the Metropolis test, which has no
#: noise and skips no swap. What a pass costs in minibatch calls depends on the model (a call's
#: overhead against its per-datum work), so a pair switched at this threshold costs at most
#: about ``1 / FULL_PASS_FRACTION`` times what averaging would, and pairs needing more than one
#: pass cost less. The rule depends on sizes only, never on timings, so that the same seed
#: gives the same draws on any machine.
FULL_PASS_FRACTION = 1 / 8


def max_batches(energies: Callable, start: np.ndarray, n_data: int) -> int:
    """The most minibatches the corrected test averages per pair (see ``MAX_BATCH_PASSES``):
    ``energies`` is the exchange energies' function (one call on ``start[:1]`` gives the
    minibatch size ``m``), ``n_data`` the observations ``N``."""
    _, terms = energies(start[:1])
    m = max(1, terms.shape[-1])
    return max(1, int(np.ceil(MAX_BATCH_PASSES * n_data / m)))


def exact_from(length: int, batch: int) -> int:
    """The number of minibatches of ``batch`` terms (out of ``length`` data) from which a pair
    takes exact energies instead (:data:`FULL_PASS_FRACTION`; at least 2)."""
    return max(2, int(np.ceil(FULL_PASS_FRACTION * length / batch)))


class ExchangeNoise(NamedTuple):
    """The exchange kernel's counts at the current window's start (zero before the first).

    Attributes
    ----------
    attempted : ndarray of int, shape (chains, R - 1), or 0
        Swaps proposed (``ExchangeState.attempted``).
    noise_sq : ndarray, shape (chains, R - 1), or 0.0
        Sum of one minibatch's noise variance over them (``ExchangeState.single_noise_sq``).
    """

    attempted: np.ndarray | int = 0
    noise_sq: np.ndarray | float = 0.0


def init() -> ExchangeNoise:
    """No window closed yet."""
    return ExchangeNoise()


def final(
    noise: ExchangeNoise, ex: ExchangeState, most: int, exact: int | None
) -> tuple[ExchangeNoise, np.ndarray]:
    """Close a window: ``(noise, n_batches)``, the counts at the next window's start and the
    minibatches to average per pair, from the mean noise of one minibatch over the window's
    swaps (at most ``most``; 0, exact energies, from ``exact`` on when given)."""
    tested = ex.attempted - noise.attempted
    mean = (ex.single_noise_sq - noise.noise_sq).sum(0) / np.maximum(tested.sum(0), 1)
    return ExchangeNoise(ex.attempted, ex.single_noise_sq), batches_for_noise(mean, most, exact)
