"""A periodic likelihood: the frequency of a sinusoid seen at nearly regular times, whose aliases
make three narrow, well-separated lobes of the posterior over the frequency.

``periodic_frequency`` fits ``y_t = a cos(omega t) + b sin(omega t) + eps`` to twenty
observations taken once per unit of time with a small jitter. At exactly regular times the
frequencies ``omega``, ``2 pi - omega`` and ``2 pi + omega`` would fit the data equally well
(aliasing, Nyquist frequency ``pi``); the jitter breaks the tie partly, so each alias keeps its
own share of the mass. Given ``omega`` the model is linear-Gaussian and ``p(y | omega)`` is
closed form, so the mode probabilities and log Z are 1-D quadratures over ``omega``.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pymc as pm
from scipy import integrate

from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "PERIODIC_BOUNDARIES",
    "PERIODIC_OMEGA",
    "PERIODIC_S",
    "PERIODIC_SIGMA",
    "PERIODIC_T",
    "PERIODIC_Y",
    "periodic_log_marginal",
    "problems",
]

#: Observation times: ``t_i = i + 0.05 u_i``, ``u_i ~ U(-1, 1)``, ``i = 1..20``, rounded to 3
#: decimals (``numpy.random.default_rng(6)``).
PERIODIC_T = np.array([
    1.004, 1.984, 2.987, 3.987, 5.049, 6.013, 7.017, 7.983, 9.018, 9.962,
    10.955, 12.035, 12.951, 14.048, 15.033, 16.029, 16.955, 17.971, 19.035, 19.993,
])
#: Observations: ``cos(t + 0.4) + N(0, 0.5^2)`` at :data:`PERIODIC_T` (the same generator, after
#: the times), rounded to 3 decimals.
PERIODIC_Y = np.array([
    0.153, -0.035, -1.423, -0.728, 0.712, 1.132, -0.376, -1.370, -0.822, -1.023,
    0.956, 1.189, 0.861, -0.202, -0.515, -0.828, 0.619, 0.625, 0.721, -0.313,
])
#: The known noise sd and the prior sd of the two amplitudes.
PERIODIC_SIGMA, PERIODIC_S = 0.5, 1.0
#: The frequency's uniform prior.
PERIODIC_OMEGA = (0.5, 8.0)
#: The boundaries of the three modes' regions of ``omega``: the Nyquist frequency ``pi`` and
#: ``2 pi`` (the lobes are near 1.02, 5.26 and 7.31).
PERIODIC_BOUNDARIES = (math.pi, 2 * math.pi)


def periodic_log_marginal(omega, t=PERIODIC_T, y=PERIODIC_Y, sigma=PERIODIC_SIGMA, s=PERIODIC_S):
    """``log p(y | omega)`` with the amplitudes integrated out, in closed form.

    ``y | omega ~ N(0, sigma^2 I + s^2 X X')`` with ``X = [cos(omega t), sin(omega t)]``; the
    determinant lemma and Woodbury's identity reduce it to 2 x 2 algebra.

    Parameters
    ----------
    omega : array_like
        Frequencies, any shape.
    t, y : numpy.ndarray
        Times and observations (default: the problem's).
    sigma, s : float
        Noise sd and prior sd of ``a`` and ``b``.

    Returns
    -------
    numpy.ndarray
        The shape of ``omega``.
    """
    omega = np.asarray(omega, dtype=float)
    phase = omega[..., None] * t
    c, sn = np.cos(phase), np.sin(phase)
    k = sigma**2 / s**2
    a11, a22, a12 = (c * c).sum(-1) + k, (sn * sn).sum(-1) + k, (c * sn).sum(-1)
    cy, sy = c @ y, sn @ y
    det = a11 * a22 - a12**2  # det(X'X + k I)
    fitted = (a22 * cy**2 - 2 * a12 * cy * sy + a11 * sy**2) / det  # y'X (X'X + k I)^-1 X'y
    n = len(t)
    logdet = n * math.log(sigma**2) + np.log(det / k**2)  # log det(sigma^2 I + s^2 X X')
    return -0.5 * (n * math.log(2 * math.pi) + logdet + (y @ y - fitted) / sigma**2)


def _periodic_frequency() -> Problem:
    lo, hi = PERIODIC_OMEGA

    def build():
        with pm.Model() as model:
            omega = pm.Uniform("omega", lo, hi)
            a = pm.Normal("a", 0.0, PERIODIC_S)
            b = pm.Normal("b", 0.0, PERIODIC_S)
            mean = a * pm.math.cos(omega * PERIODIC_T) + b * pm.math.sin(omega * PERIODIC_T)
            pm.Normal("y", mean, PERIODIC_SIGMA, observed=PERIODIC_Y)
        return model

    def label(draws):
        return np.searchsorted(PERIODIC_BOUNDARIES, np.asarray(draws["omega"]))

    @functools.cache
    def truth():
        # the integrand is scaled by exp(-peak); every local maximum on a grid 50 times finer
        # than the lobes (sd about 0.027; side lobes about 2 pi / 19 apart) is a breakpoint for quad
        grid = np.linspace(lo, hi, 15_001)
        log_f = periodic_log_marginal(grid)
        peak = float(log_f.max())
        inner = np.flatnonzero((log_f[1:-1] > log_f[:-2]) & (log_f[1:-1] >= log_f[2:])) + 1
        edges = (lo, *PERIODIC_BOUNDARIES, hi)
        mass = []
        for left, right in itertools.pairwise(edges):
            points = grid[inner][(grid[inner] > left) & (grid[inner] < right)]
            value, abserr = integrate.quad(lambda w: math.exp(periodic_log_marginal(w) - peak),
                                           left, right, points=points, limit=2000, epsabs=0,
                                           epsrel=1e-11)
            mass.append(value)
            assert abserr < 1e-9 * max(value, 1e-12)
        mass = np.array(mass)
        log_z = peak + math.log(mass.sum()) - math.log(hi - lo)
        return Truth(log_z=float(log_z), mode_probabilities=mass / mass.sum())

    return Problem("periodic_frequency", "periodic", build, truth,
                   "frequency of a sinusoid at jittered unit times: three aliases of omega",
                   modes=("omega<pi", "pi<omega<2pi", "omega>2pi"), label=label)


def problems() -> list[Problem]:
    """``periodic_frequency``, with its mode probabilities (the mass of ``omega`` below
    ``pi``, between ``pi`` and ``2 pi``, above ``2 pi``) and log Z by adaptive quadrature over
    ``omega`` of the closed-form :func:`periodic_log_marginal`."""
    return [_periodic_frequency()]
