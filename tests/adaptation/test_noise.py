"""The minibatch gradient noise the warm-up measures (:mod:`pymc_tempering.adaptation.noise`):
the turn of the coordinates to the noise's own axes."""

from __future__ import annotations

import numpy as np
from pymc_tempering.problems.minibatch import shared_noise_model

from pymc_tempering import adaptation
from pymc_tempering.target import Target


def test_noise_rotation_turns_to_the_direction_of_the_noise(seed):
    """``adaptation.noise_rotation``, the mechanism of the slow test of shared noise in
    ``tests/dynamics/test_tact_minibatch.py``: on
    the model whose minibatch gradient noise lies along ``t_1 + t_2`` (a covariance of rank
    one, whatever the minibatches drawn), the turn's last column (the largest eigenvalue) is
    that direction to rounding, and in the turned coordinates the noise of a fresh measurement
    is uncorrelated; an exact density gets no turn."""
    noisy = Target(shared_noise_model(batch_size=100)).batched_logp_and_grad(
        random_seed=seed(7)
    )
    x = np.zeros((4, 2))
    q = adaptation.noise_rotation(noisy, x)
    assert q is not None and np.allclose(q.T @ q, np.eye(2))
    assert abs(q[:, -1] @ np.array([1.0, 1.0]) / np.sqrt(2)) > 1 - 1e-9
    cov, _ = adaptation.gradient_noise(noisy, x, n_pairs=50, covariance=True)
    turned = q.T @ cov @ q
    assert abs(turned[0, 1]) <= 1e-9 * turned[1, 1] and turned[1, 1] > 0
    exact = Target(shared_noise_model()).batched_logp_and_grad()
    assert adaptation.noise_rotation(exact, x) is None
