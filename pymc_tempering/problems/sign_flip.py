"""Sign-flip posteriors: ``y_i ~ N(a theta^2, s^2)`` puts one mode at each sign of ``theta``.

The problems, all with the prior ``theta ~ N(0.5, 1.5^2)`` (:data:`SIGN_FLIP_PRIOR`), whose
asymmetry weights the two modes apart:

``quickstart``
    The quickstart's: 10 observations with mean near ``1.5^2``, ``a = s = 1``; broad modes.
``sign_flip_2000``
    2000 observations from ``theta = 1.1`` in the same units (``a = s = 1``): two narrow modes
    near ``+-1.1`` (sd about 0.01).
``sign_flip_narrow``
    1000 observations ``y_i ~ N(100 theta^2, 100^2)`` from ``theta = 1.1``: the same kind of
    narrow modes (sd about 0.014) with the data in other units, a log likelihood near -6000
    at the modes, and the evidence its quadrature gives for a method to match.

The truths of all three come from one helper, :func:`sign_flip_quadrature`: the mean and the sum
of squares about it are sufficient for ``theta``, so the log likelihood costs the same at any
number of observations (:func:`sign_flip_log_likelihood`); each half line is integrated by
adaptive quadrature with a breakpoint at its mode, in log space relative to the peak, and the
error estimates are checked. ``sign_flip_2000`` and ``sign_flip_narrow`` also have their
nested-sampling form.

Also here, apart from the problems: :func:`sign_flip`, the minibatched model of the thermostat
tests (a prior ``N(0, 3 s)`` centred on zero, data with mean ``1.5^2``), and
:func:`sign_flip_laplace`, its Laplace approximation.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import pymc as pm
from scipy import integrate, optimize, stats

from pymc_tempering.problems.nested import prior_monte_carlo
from pymc_tempering.problems.record import Nested, Problem, Truth

__all__ = [
    "SIGN_FLIP_PRIOR",
    "SignFlipQuadrature",
    "problems",
    "sign_flip",
    "sign_flip_data",
    "sign_flip_laplace",
    "sign_flip_log_likelihood",
    "sign_flip_quadrature",
]

#: The prior of ``theta`` (mean, sd) in the quickstart, ``sign_flip_2000`` and ``sign_flip_narrow``.
SIGN_FLIP_PRIOR = (0.5, 1.5)
#: Each problem's data: (seed, number of observations, theta, a, s) for ``y_i ~ N(a theta^2, s^2)``.
#: The quickstart's are ``examples/quickstart.py``'s (drawn with mean ``1.5^2``).
_DATA = {
    "quickstart": (42, 10, 1.5, 1.0, 1.0),
    "sign_flip_2000": (65, 2000, 1.1, 1.0, 1.0),
    "sign_flip_narrow": (66, 1000, 1.1, 100.0, 100.0),
}
#: The quadrature's half lines reach this many prior sds from zero (the prior alone is 400
#: nats below its peak there).
_REACH = 30.0


@functools.cache
def _data(name: str) -> np.ndarray:
    seed, n, theta, a, s = _DATA[name]
    return np.random.default_rng(seed).normal(a * theta**2, s, size=n)


def sign_flip_data(name: str) -> tuple[np.ndarray, float, float]:
    """The observations of the sign-flip problem ``name`` and their units.

    Generated with ``numpy.random.default_rng(seed)``: ``y_i ~ N(a theta^2, s^2)`` with ``(seed,
    n, theta, a, s)`` = (42, 10, 1.5, 1, 1) for ``"quickstart"`` (as ``examples/quickstart.py``),
    (65, 2000, 1.1, 1, 1) for ``"sign_flip_2000"`` and (66, 1000, 1.1, 100, 100) for
    ``"sign_flip_narrow"``.

    Parameters
    ----------
    name : {"quickstart", "sign_flip_2000", "sign_flip_narrow"}

    Returns
    -------
    y : numpy.ndarray
        A fresh copy, shape ``(n,)``.
    a, s : float
        The scale of the mean and the noise sd: ``y_i ~ N(a theta^2, s^2)``.
    """
    _, _, _, a, s = _DATA[name]
    return _data(name).copy(), a, s


def sign_flip_log_likelihood(y, a: float = 1.0, s: float = 1.0):
    """``theta -> log p(y | theta)`` for ``y_i ~ N(a theta^2, s^2)``, from sufficient statistics.

    ``sum_i (y_i - m)^2 = S + n (ybar - m)^2`` with ``S = sum_i (y_i - ybar)^2``, so the returned
    function costs the same for any number of observations and is exact (no cancellation of the
    large sum of squares).

    Parameters
    ----------
    y : array_like
        The observations.
    a, s : float
        The scale of the mean and the noise sd.

    Returns
    -------
    callable
        ``log_likelihood(theta)`` for ``theta`` of any shape, returning that shape.
    """
    y = np.asarray(y, dtype=float)
    n, ybar = y.size, float(y.mean())
    constant = -0.5 * n * math.log(2 * math.pi * s**2) - float(((y - ybar) ** 2).sum()) / (2 * s**2)

    def log_likelihood(theta):
        return constant - n * (ybar - a * np.asarray(theta, dtype=float) ** 2) ** 2 / (2 * s**2)

    return log_likelihood


class SignFlipQuadrature(NamedTuple):
    """What :func:`sign_flip_quadrature` computes.

    Attributes
    ----------
    log_z : float
    mode_probabilities : numpy.ndarray
        ``P(theta < 0)``, ``P(theta > 0)``.
    modes : tuple of float
        The log joint's maximum on each half line (negative, positive).
    relative_errors : tuple of float
        The quadrature's error estimate of each half's integral over that integral.
    """

    log_z: float
    mode_probabilities: np.ndarray
    modes: tuple[float, float]
    relative_errors: tuple[float, float]


def sign_flip_quadrature(y, a: float = 1.0, s: float = 1.0) -> SignFlipQuadrature:
    """log Z and the probabilities of ``theta < 0`` and ``theta > 0`` by adaptive quadrature.

    The model is ``theta ~ N(0.5, 1.5^2)`` (:data:`SIGN_FLIP_PRIOR`), ``y_i ~ N(a theta^2, s^2)``.
    Each half line's mode is found by bounded Brent minimisation between ``0.5`` and ``1.5``
    times ``+-sqrt(ybar / a)``; each half, cut at 30 prior sds from zero, is integrated with
    ``scipy.integrate.quad`` of ``exp(log joint - peak)`` with a breakpoint at its mode (the
    modes can be far narrower than the interval) and a relative tolerance of ``1e-11``.

    Parameters
    ----------
    y : array_like
        The observations (their mean must be positive: two modes).
    a, s : float
        The scale of the mean and the noise sd.

    Returns
    -------
    SignFlipQuadrature

    Raises
    ------
    RuntimeError
        Where a half's error estimate exceeds ``1e-9`` of its integral, or the integrand at the
        cut is not negligible (above ``exp(-100)`` of the peak).
    """
    y = np.asarray(y, dtype=float)
    log_likelihood = sign_flip_log_likelihood(y, a, s)
    prior_mu, prior_sd = SIGN_FLIP_PRIOR

    def log_joint(theta):
        return stats.norm.logpdf(theta, prior_mu, prior_sd) + log_likelihood(theta)

    root = math.sqrt(y.mean() / a)
    modes = []
    for bounds in ((-1.5 * root, -0.5 * root), (0.5 * root, 1.5 * root)):
        found = optimize.minimize_scalar(lambda t: -log_joint(t), bounds=bounds, method="bounded",
                                         options={"xatol": 1e-12 * root})
        if not bounds[0] + 1e-6 * root < found.x < bounds[1] - 1e-6 * root:
            raise RuntimeError(f"No sign-flip mode inside {bounds}.")
        modes.append(float(found.x))
    peak = float(max(log_joint(m) for m in modes))
    reach = _REACH * prior_sd
    if max(log_joint(-reach), log_joint(reach)) > peak - 100:
        raise RuntimeError("The sign-flip integrand is not negligible at the cut.")

    def f(theta):
        return math.exp(log_joint(theta) - peak)

    halves = [integrate.quad(f, lo, hi, points=[mode], limit=400, epsabs=0, epsrel=1e-11)
              for (lo, hi), mode in zip(((-reach, 0.0), (0.0, reach)), modes, strict=True)]
    errors = tuple(float(err / value) for value, err in halves)
    if not max(errors) < 1e-9:
        raise RuntimeError(f"The sign-flip quadrature did not converge (relative errors {errors}).")
    z = halves[0][0] + halves[1][0]
    return SignFlipQuadrature(float(peak + math.log(z)), np.array([halves[0][0] / z, halves[1][0] / z]),
                              tuple(modes), errors)


def _nested(y, a: float, s: float) -> Nested:
    """``theta`` in constrained space: the prior's quantile transform and the likelihood."""
    log_likelihood = sign_flip_log_likelihood(y, a, s)
    prior_mu, prior_sd = SIGN_FLIP_PRIOR

    def loglike(theta):
        return log_likelihood(np.asarray(theta, dtype=float)[..., 0])

    def prior_transform(u):
        return prior_mu + prior_sd * stats.norm.ppf(np.asarray(u, dtype=float))

    def log_prior(theta):
        return stats.norm.logpdf(np.asarray(theta, dtype=float)[..., 0], prior_mu, prior_sd)

    def cross_check():
        """Laplace's approximation at each mode (second derivative by central differences)."""
        quad = sign_flip_quadrature(y, a, s)
        terms = []
        for mode in quad.modes:
            h = 1e-4 * abs(mode)
            values = [float(log_prior([t]) + loglike([t])) for t in (mode - h, mode, mode + h)]
            curvature = -(values[0] - 2 * values[1] + values[2]) / h**2
            terms.append(values[1] + 0.5 * math.log(2 * math.pi / curvature))
        laplace = float(np.logaddexp(*terms))
        return [f"Laplace at the modes {quad.modes[0]:.6f}, {quad.modes[1]:.6f}: log Z = {laplace:.6f}"
                f" (quadrature {quad.log_z:.6f}, relative errors {quad.relative_errors[0]:.1e},"
                f" {quad.relative_errors[1]:.1e})"]

    nested = Nested((("theta", ()),), loglike, prior_transform, log_prior,
                    mc_check=lambda rng, n: prior_monte_carlo(nested, rng, n), cross_check=cross_check)
    return nested


def _problem(name: str, description: str, with_nested: bool) -> Problem:
    y, a, s = sign_flip_data(name)
    prior_mu, prior_sd = SIGN_FLIP_PRIOR

    def build():
        # float64 constants: PyTensor would make 1.5 and 100.0 float32 (exactly representable)
        # and take their logs in float32, an error of 1e-8 nats per observation
        with pm.Model() as model:
            theta = pm.Normal("theta", np.float64(prior_mu), np.float64(prior_sd))
            pm.Normal("y", np.float64(a) * theta**2, np.float64(s), observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["theta"]) > 0).astype(int)

    def truth():
        quad = sign_flip_quadrature(y, a, s)
        return Truth(log_z=quad.log_z, mode_probabilities=quad.mode_probabilities)

    return Problem(name, "sign_flip", build, truth, description, modes=("theta<0", "theta>0"),
                   label=label, nested=_nested(y, a, s) if with_nested else None)


def sign_flip(n: int, s: float, batch_size: int = 200):
    """The sign-flip posterior: ``theta ~ N(0, 3 s)``, ``y_i ~ N((theta / s)^2, 1)`` for ``n``
    data drawn with mean ``1.5^2``, in minibatches of ``batch_size`` when ``n`` exceeds it; the
    parameter in units of ``s``. Two modes at ``theta = +-s u0`` with a barrier of
    ``n ybar^2 / 2`` nats between them (:func:`sign_flip_laplace`). Returns ``(model, y)``."""
    y = np.random.default_rng(5).normal(1.5**2, 1.0, size=n)
    with pm.Model() as model:
        data = pm.Minibatch(y, batch_size=batch_size) if n > batch_size else y
        theta = pm.Normal("theta", 0, 3 * s)
        pm.Normal("y", (theta / s) ** 2, 1.0, observed=data, total_size=n)
    return model, y


def sign_flip_laplace(y, s: float) -> tuple[float, float]:
    """The sign-flip modes' position ``s u0`` (``u0^2 = ybar - 1 / (18 n)``) and Laplace standard
    deviation ``s / sqrt(4 n u0^2 + 1/9)`` in ``theta``."""
    n = y.size
    u0 = np.sqrt(y.mean() - 1.0 / (18 * n))
    return s * u0, s / np.sqrt(4 * n * u0**2 + 1.0 / 9.0)


def problems() -> list[Problem]:
    """``quickstart``, ``sign_flip_2000`` and ``sign_flip_narrow`` (the last two with their
    nested-sampling form): mode probabilities (``theta < 0`` / ``theta > 0``) and log Z by
    :func:`sign_flip_quadrature`."""
    return [
        _problem("quickstart", "y_i ~ N(theta^2, 1), 10 observations (examples/quickstart.py)", False),
        _problem("sign_flip_2000", "y_i ~ N(theta^2, 1), 2000 observations from theta = 1.1: two narrow modes",
                 True),
        _problem("sign_flip_narrow", "y_i ~ N(100 theta^2, 100^2), 1000 observations from theta = 1.1: two"
                 " narrow modes, data in other units", True),
    ]
