"""A hierarchical model with two separated solutions: a bilinear group effect ``a b_j`` whose
sign is not identified, and whose scale the known spread ``tau`` of the ``b_j`` fixes.

``hierarchical_bilinear`` has ``y_ij ~ N(a b_j, sigma^2)`` for 8 groups of 10 observations,
``b_j ~ N(mu_b, tau^2)``, ``mu_b ~ N(0, 1)``, ``a ~ N(0.3, 1)``, with ``sigma`` and ``tau`` known.
Flipping the signs of ``a``, ``mu_b`` and every ``b_j`` leaves the likelihood and the priors of
``mu_b`` and ``b`` unchanged, so the posterior has one solution with ``a > 0`` and its mirror
image with ``a < 0``, weighted apart only by the prior of ``a``. Given ``a`` everything is
Gaussian, so ``p(y | a)`` is closed form and the mode probabilities and log Z are 1-D
quadratures over ``a``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pymc as pm
from scipy import integrate, stats

from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "HIERARCHICAL_A_PRIOR",
    "HIERARCHICAL_MU_B_SD",
    "HIERARCHICAL_SIGMA",
    "HIERARCHICAL_TAU",
    "hierarchical_bilinear_data",
    "hierarchical_bilinear_log_marginal",
    "problems",
]

#: The known noise sd and group sd.
HIERARCHICAL_SIGMA, HIERARCHICAL_TAU = 1.0, 1.0
#: The prior of ``a`` (mean, sd) and the prior sd of ``mu_b`` (mean 0).
HIERARCHICAL_A_PRIOR, HIERARCHICAL_MU_B_SD = (0.3, 1.0), 1.0
_GROUPS, _PER_GROUP = 8, 10


@functools.cache
def _data() -> np.ndarray:
    rng = np.random.default_rng(6)
    b = rng.normal(0.5, HIERARCHICAL_TAU, _GROUPS)
    return 1.5 * b[:, None] + rng.normal(0.0, HIERARCHICAL_SIGMA, (_GROUPS, _PER_GROUP))


def hierarchical_bilinear_data() -> np.ndarray:
    """The observations, shape ``(8, 10)`` (group, observation).

    Generated with ``numpy.random.default_rng(6)``: ``b_j ~ N(0.5, 1)``, then
    ``y_ij = 1.5 b_j + N(0, 1)``.

    Returns
    -------
    numpy.ndarray
        A fresh copy.
    """
    return _data().copy()


def hierarchical_bilinear_log_marginal(a, y=None):
    """``log p(y | a)`` with ``mu_b`` and ``b`` integrated out, in closed form.

    The group means are sufficient for ``b``: ``ybar | a ~ N(0, c I + d 1 1')`` with
    ``c = a^2 tau^2 + sigma^2 / n`` and ``d = a^2 sd(mu_b)^2``, whose eigenvalues are ``c + J d``
    (along ``1``) and ``c``; the deviations within the groups add a term free of ``a``.

    Parameters
    ----------
    a : array_like
        Values of ``a``, any shape.
    y : numpy.ndarray, optional
        Observations ``(J, n)``; default :func:`hierarchical_bilinear_data`.

    Returns
    -------
    numpy.ndarray
        The shape of ``a``.
    """
    y = _data() if y is None else np.asarray(y, dtype=float)
    n_groups, n = y.shape
    sigma2 = HIERARCHICAL_SIGMA**2
    ybar = y.mean(axis=1)
    within = ((y - ybar[:, None]) ** 2).sum()
    # p(y | b) = N(ybar; a b, sigma^2 / n I) (2 pi sigma^2)^(-J(n-1)/2) n^(-J/2) exp(-within / 2 sigma^2)
    log_within = -0.5 * (n_groups * (n - 1) * math.log(2 * math.pi * sigma2) + within / sigma2
                         + n_groups * math.log(n))
    a2 = np.asarray(a, dtype=float) ** 2
    c = a2 * HIERARCHICAL_TAU**2 + sigma2 / n
    d = a2 * HIERARCHICAL_MU_B_SD**2
    along = n_groups * ybar.mean() ** 2  # squared length of ybar's projection on 1
    quad = (ybar @ ybar - along) / c + along / (c + n_groups * d)
    logdet = (n_groups - 1) * np.log(c) + np.log(c + n_groups * d)
    return log_within - 0.5 * (n_groups * math.log(2 * math.pi) + logdet + quad)


def _hierarchical_bilinear() -> Problem:
    y = _data()
    a_mu, a_sd = HIERARCHICAL_A_PRIOR

    def build():
        with pm.Model() as model:
            a = pm.Normal("a", a_mu, a_sd)
            mu_b = pm.Normal("mu_b", 0.0, HIERARCHICAL_MU_B_SD)
            b = pm.Normal("b", mu_b, HIERARCHICAL_TAU, shape=_GROUPS)
            pm.Normal("y", a * b[:, None], HIERARCHICAL_SIGMA, observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["a"]) > 0).astype(int)

    def log_joint_a(a):
        return stats.norm.logpdf(a, a_mu, a_sd) + hierarchical_bilinear_log_marginal(a)

    @functools.cache
    def truth():
        # the posterior of a: two lobes near -1.65 and 1.65 (sd about 0.37), its log density at
        # a = 0 about 218 below the peak; beyond |a| = 12 below e^-70 of it
        grid = np.linspace(-12, 12, 4801)
        log_f = log_joint_a(grid)
        peak = float(log_f.max())
        a_star = abs(float(grid[np.argmax(log_f)]))

        def f(a):
            return math.exp(log_joint_a(a) - peak)

        z_neg, err_neg = integrate.quad(f, -12, 0, points=[-a_star], limit=400, epsabs=0, epsrel=1e-11)
        z_pos, err_pos = integrate.quad(f, 0, 12, points=[a_star], limit=400, epsabs=0, epsrel=1e-11)
        assert err_neg < 1e-9 * z_neg and err_pos < 1e-9 * z_pos
        z = z_neg + z_pos
        return Truth(log_z=float(peak + math.log(z)), mode_probabilities=np.array([z_neg / z, z_pos / z]))

    return Problem("hierarchical_bilinear", "hierarchical", build, truth,
                   "y_ij ~ N(a b_j, 1), b_j ~ N(mu_b, 1): the sign of a is not identified",
                   modes=("a<0", "a>0"), label=label)


def problems() -> list[Problem]:
    """``hierarchical_bilinear``, with its mode probabilities (``a < 0`` / ``a > 0``) and log Z
    by adaptive quadrature over ``a`` of the closed-form
    :func:`hierarchical_bilinear_log_marginal`."""
    return [_hierarchical_bilinear()]
