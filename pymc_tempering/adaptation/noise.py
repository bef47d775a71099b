"""The minibatch noise the warm-up measures: its variance per coordinate, and the turn of the
coordinates that makes it uncorrelated between them.

Theorem 1 of Luo et al. (2018): a thermostat settles at ``c + eta sigma_f^2 / 2`` under
gradient noise of variance ``sigma_f^2``. The warm-up measures that noise where the chains
are (:func:`gradient_noise`) to cap the preconditioner and the tempering step (see
:mod:`pymc_tempering.adaptation.step_size`), and to turn a dense preconditioner's basis to
the noise's own axes (:func:`noise_rotation`). An exact (full-batch) density has no noise and
costs one pair of calls.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["gradient_noise", "NOISE_PAIRS_PER_DIM", "noise_rotation"]


def gradient_noise(
    logp_and_grad: Callable, x: np.ndarray, n_pairs: int = 50, covariance: bool = False
) -> tuple[np.ndarray, float]:
    """The minibatch noise at the points ``x (n, D)``: ``n_pairs`` pairs of calls there.

    Returns the variance of one gradient evaluation per coordinate and of one log density
    evaluation (means over the rows and pairs), both zero for an exact (full-batch) model:
    ``Var = E[(a - b)^2] / 2`` for two independent evaluations ``a``, ``b``. The rows of one
    call share a minibatch, so the pairs, not the rows, are the independent replicates.
    Fifty pairs by default: the estimate caps the preconditioner
    (:func:`~pymc_tempering.adaptation.step_size.stability_cap`), and ten (a chi-square of 10
    degrees of freedom, below a third of the truth 2.5% of the time) left a noisy
    coordinate's thermostat far above its budget and its posterior sd narrow. An exact model
    stops after the first pair (no difference). With ``covariance``, the first result is the
    gradient noise's ``(D, D)`` covariance (mean over the rows and pairs of
    ``(a - b)(a - b)^T / 2``), whose diagonal is the variance.
    """
    grad_var, energy_var = 0.0, 0.0
    for k in range(n_pairs):
        lp1, g1 = logp_and_grad(x)
        lp2, g2 = logp_and_grad(x)
        with np.errstate(all="ignore"):
            diff = np.asarray(g1) - np.asarray(g2)
            if covariance:
                grad_var = grad_var + 0.5 * diff.T @ diff / diff.shape[0]
            else:
                grad_var = grad_var + 0.5 * np.mean(diff**2, axis=0)
            energy_var += 0.5 * float(np.mean((np.asarray(lp1) - np.asarray(lp2)) ** 2))
        if k == 0 and energy_var == 0 and not np.any(grad_var):
            d = np.shape(x)[-1]  # deterministic: a full-batch density
            return (np.zeros((d, d)) if covariance else np.zeros(d)), 0.0
    return grad_var / n_pairs, energy_var / n_pairs


#: Pairs of minibatch calls per coordinate for the noise covariance of :func:`noise_rotation`
#: (at least 50): the rows of a call share a minibatch, so the pairs are its samples. With a
#: fixed 50 the covariance has rank 50 at most and the turn is arbitrary in the rest.
NOISE_PAIRS_PER_DIM = 4


def noise_rotation(logp_and_grad: Callable, x: np.ndarray) -> np.ndarray | None:
    """The rotation of the coordinates that makes the minibatch gradient noise uncorrelated
    between them, or None for an exact density.

    ``logp_and_grad`` in coordinates where the positions are decorrelated
    (:func:`~pymc_tempering.adaptation.windows.decorrelating_basis`), ``x (n, D)`` the chains
    there. Returns the orthogonal ``Q`` of the eigenvectors of the noise covariance ``S``
    measured there (:func:`gradient_noise`, :data:`NOISE_PAIRS_PER_DIM` pairs of calls per
    coordinate), ``S = Q diag(s) Q^T``: in the coordinates ``v' = v @ Q`` each coordinate's
    noise is its own, so one thermostat per coordinate absorbs all of it (Theorem 1 holds
    coordinate by coordinate), and the positions, whose covariance is near the identity, stay
    decorrelated under the turn. Without it, the noise of a sum of coordinates is not the sum
    of their noises: in a minibatched hierarchical model the group mean's gradient is the sum
    of the group members' (the same residuals), while along the posterior's long direction
    (the mean up, the members' offsets down) the noises cancel. Each thermostat would then set
    its friction to its own coordinate's noise, too much along that direction, and the draws
    would come out cold there.
    """
    d = np.shape(x)[-1]
    pairs = max(50, NOISE_PAIRS_PER_DIM * d)
    cov, _ = gradient_noise(logp_and_grad, x, n_pairs=pairs, covariance=True)
    if not np.any(cov) or not np.all(np.isfinite(cov)):
        return None
    return np.linalg.eigh(0.5 * (cov + cov.T))[1]
