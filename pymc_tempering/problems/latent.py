"""Latent-variable and network models whose modes are images of one another under a symmetry of
the joint density, so that each mode's probability is known exactly without any integral.

``one_factor``
    A one-factor model, ``y_ij ~ N(f_i lambda_j, psi_j^2)`` for 40 rows and 5 features,
    ``lambda_j, f_i ~ N(0, 1)``, ``psi_j ~ HalfNormal(1)``. ``(lambda, f) -> (-lambda, -f)``
    leaves the density unchanged and maps ``lambda_0 < 0`` onto ``lambda_0 > 0``: 1/2 each.
``two_factor``
    A two-factor model, ``y_ij ~ N(sum_k F_ik Lambda_jk, psi_j^2)`` for 50 rows and 6 features,
    with lower-triangular loadings (``Lambda_01 = 0``, the other 11 free ``N(0, 1)``),
    ``F_ik ~ N(0, 1)``, ``psi_j ~ HalfNormal(1)``. Flipping the sign of one column of ``Lambda``
    together with the same column of ``F`` leaves the density unchanged; the first column's
    flip changes the sign of ``Lambda_00`` only, the second's that of ``Lambda_11`` only, so
    the four sign patterns of ``(Lambda_00, Lambda_11)`` are images of one another: 1/4 each.
``tanh_network``
    A network with one input and two tanh hidden units, ``y_i ~ N(v_0 tanh(w_0 x_i + b_0) +
    v_1 tanh(w_1 x_i + b_1) + c, 0.15^2)`` for 30 inputs on ``[-3, 3]``, all seven weights
    ``N(0, 1)``. tanh is odd and the priors symmetric, so ``(w_k, b_k, v_k) -> (-w_k, -b_k,
    -v_k)`` for one unit leaves the density unchanged and flips the sign of ``v_k`` alone: the
    four sign patterns of ``(v_0, v_1)`` have 1/4 each. Swapping the two units is a further
    symmetry (it maps the pattern ``(s_0, s_1)`` to ``(s_1, s_0)``), so the posterior has
    2^2 x 2 = 8 equivalent modes, two in each sign pattern.
``free_variance_mixture``
    A two-component normal mixture with equal fixed weights and free component sds,
    ``y_i ~ 0.5 N(mu_0, sigma_0^2) + 0.5 N(mu_1, sigma_1^2)`` for 60 points from two clusters
    of different spreads, ``mu_k ~ N(0, 5^2)`` with no ordering, ``sigma_k ~ HalfNormal(2)``.
    The likelihood is unbounded (a component that sits on one observation with its sd going to
    zero) though the posterior is proper. Swapping the components leaves the density unchanged
    and maps ``mu_0 < mu_1`` onto ``mu_0 > mu_1``: 1/2 each.

No log Z is known for any of them (the factors, or the network's weights, cannot be
integrated out in closed form jointly with the rest). The data are small and generated here
with fixed seeds (:func:`latent_data`). The model's constants are float64 (PyTensor takes the
log of a Python float it can hold exactly, such as 2.0, in float32).
"""

from __future__ import annotations

import functools

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "FREE_VARIANCE_MIXTURE_TRUE",
    "ONE_FACTOR_TRUE",
    "TANH_NETWORK_NOISE",
    "TANH_NETWORK_TRUE",
    "TWO_FACTOR_FREE",
    "TWO_FACTOR_TRUE",
    "latent_data",
    "problems",
]

#: ``one_factor``'s data: the loadings and the noise sd they were drawn with (40 rows).
ONE_FACTOR_TRUE = {"lambda": np.array([0.9, 0.8, 0.7, 0.6, 0.5]), "psi": 0.5, "rows": 40}
#: ``two_factor``'s data: the 6 x 2 loadings (``Lambda_01 = 0``), the noise sd, 50 rows.
TWO_FACTOR_TRUE = {
    "lambda": np.array([[0.9, 0.0], [0.2, 0.9], [0.8, 0.3], [0.3, 0.8], [0.6, 0.6], [0.6, -0.5]]),
    "psi": 0.4,
    "rows": 50,
}
#: The free entries of ``two_factor``'s loadings, ``lambda_tril``, in their order: the
#: lower triangle row by row, ``(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), ..., (5, 1)``.
TWO_FACTOR_FREE = np.tril_indices(6, 0, 2)
#: ``tanh_network``'s data: the weights of the function drawn from, and its 30 inputs.
TANH_NETWORK_TRUE = {"w": np.array([2.0, 1.0]), "b": np.array([1.0, -1.0]),
                     "v": np.array([1.5, -1.0]), "c": 0.0, "x": np.linspace(-3.0, 3.0, 30)}
#: ``tanh_network``'s known noise sd.
TANH_NETWORK_NOISE = 0.15
#: ``free_variance_mixture``'s data: (mean, sd, count) of each cluster.
FREE_VARIANCE_MIXTURE_TRUE = ((-2.0, 0.5, 30), (3.0, 1.5, 30))


@functools.cache
def _data(name: str) -> np.ndarray:
    if name == "one_factor":
        rng, true = np.random.default_rng(61), ONE_FACTOR_TRUE
        f = rng.normal(size=true["rows"])
        return f[:, None] * true["lambda"] + rng.normal(0.0, true["psi"], (true["rows"], true["lambda"].size))
    if name == "two_factor":
        rng, true = np.random.default_rng(62), TWO_FACTOR_TRUE
        factors = rng.normal(size=(true["rows"], 2))
        return factors @ true["lambda"].T + rng.normal(0.0, true["psi"], (true["rows"], 6))
    if name == "tanh_network":
        rng, true = np.random.default_rng(63), TANH_NETWORK_TRUE
        mean = np.tanh(np.outer(true["x"], true["w"]) + true["b"]) @ true["v"] + true["c"]
        return mean + rng.normal(0.0, TANH_NETWORK_NOISE, true["x"].size)
    if name == "free_variance_mixture":
        rng = np.random.default_rng(64)
        return np.concatenate([rng.normal(m, s, n) for m, s, n in FREE_VARIANCE_MIXTURE_TRUE])
    raise KeyError(name)


def latent_data(name: str) -> np.ndarray:
    """The observations of the latent-variable problem ``name``.

    Generated with ``numpy.random.default_rng(seed)``, a seed per problem:

    - ``"one_factor"`` (61): ``f_i ~ N(0, 1)``, then ``y_ij = f_i lambda_j + N(0, 0.5^2)`` with
      the loadings of :data:`ONE_FACTOR_TRUE`; shape ``(40, 5)``.
    - ``"two_factor"`` (62): ``F_ik ~ N(0, 1)``, then ``y = F Lambda' + N(0, 0.4^2)`` with the
      loadings of :data:`TWO_FACTOR_TRUE`; shape ``(50, 6)``.
    - ``"tanh_network"`` (63): the network of :data:`TANH_NETWORK_TRUE` at its 30 inputs plus
      ``N(0, 0.15^2)``; shape ``(30,)``.
    - ``"free_variance_mixture"`` (64): 30 draws from ``N(-2, 0.5^2)`` then 30 from
      ``N(3, 1.5^2)``; shape ``(60,)``.

    Parameters
    ----------
    name : {"one_factor", "two_factor", "tanh_network", "free_variance_mixture"}

    Returns
    -------
    numpy.ndarray
        A fresh copy.

    Raises
    ------
    KeyError
        For another name.
    """
    return _data(name).copy()


def _one_factor() -> Problem:
    y = _data("one_factor")
    rows, features = y.shape

    def build():
        with pm.Model() as model:
            lam = pm.Normal("lambda", 0.0, 1.0, shape=features)
            f = pm.Normal("f", 0.0, 1.0, shape=rows)
            psi = pm.HalfNormal("psi", 1.0, shape=features)
            pm.Normal("y", f[:, None] * lam[None, :], psi, observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["lambda"])[..., 0] > 0).astype(int)

    return Problem("one_factor", "latent", build, lambda: Truth(mode_probabilities=np.full(2, 1 / 2)),
                   "one-factor model, 5 features x 40 rows (50 parameters): the sign of the loadings"
                   " and factors is not identified", modes=("lambda0<0", "lambda0>0"), label=label)


def _two_factor() -> Problem:
    y = _data("two_factor")
    rows, features = y.shape

    def build():
        with pm.Model() as model:
            free = pm.Normal("lambda_tril", 0.0, 1.0, shape=len(TWO_FACTOR_FREE[0]))
            lam = pm.Deterministic("lambda", pt.set_subtensor(pt.zeros((features, 2))[TWO_FACTOR_FREE], free))
            factors = pm.Normal("F", 0.0, 1.0, shape=(rows, 2))
            psi = pm.HalfNormal("psi", 1.0, shape=features)
            pm.Normal("y", factors @ lam.T, psi, observed=y)
        return model

    def label(draws):  # Lambda_00 is lambda_tril[0], Lambda_11 is lambda_tril[2]
        free = np.asarray(draws["lambda_tril"])
        return 2 * (free[..., 0] > 0) + (free[..., 2] > 0)

    return Problem("two_factor", "latent", build, lambda: Truth(mode_probabilities=np.full(4, 1 / 4)),
                   "two-factor model with lower-triangular loadings, 6 features x 50 rows (117"
                   " parameters): the sign of each factor is not identified",
                   modes=("--", "-+", "+-", "++"), label=label)


def _tanh_network() -> Problem:
    y, x = _data("tanh_network"), TANH_NETWORK_TRUE["x"]

    def build():
        with pm.Model() as model:
            w = pm.Normal("w", 0.0, 1.0, shape=2)
            b = pm.Normal("b", 0.0, 1.0, shape=2)
            v = pm.Normal("v", 0.0, 1.0, shape=2)
            c = pm.Normal("c", 0.0, 1.0)
            mean = pt.sum(v * pt.tanh(w * x[:, None] + b), axis=1) + c
            pm.Normal("y", mean, np.float64(TANH_NETWORK_NOISE), observed=y)
        return model

    def label(draws):
        v = np.asarray(draws["v"])
        return 2 * (v[..., 0] > 0) + (v[..., 1] > 0)

    return Problem("tanh_network", "latent", build, lambda: Truth(mode_probabilities=np.full(4, 1 / 4)),
                   "two tanh hidden units fitted to 30 points (7 parameters): the sign of each unit"
                   " is not identified", modes=("--", "-+", "+-", "++"), label=label)


def _free_variance_mixture() -> Problem:
    y = _data("free_variance_mixture")

    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, np.float64(5.0), shape=2)
            sigma = pm.HalfNormal("sigma", np.float64(2.0), shape=2)
            pm.NormalMixture("y", w=np.array([0.5, 0.5]), mu=mu, sigma=sigma, observed=y)
        return model

    def label(draws):
        mu = np.asarray(draws["mu"])
        return (mu[..., 0] > mu[..., 1]).astype(int)

    return Problem("free_variance_mixture", "latent", build,
                   lambda: Truth(mode_probabilities=np.full(2, 1 / 2)),
                   "two-component normal mixture with free sds (unbounded likelihood), 60 points"
                   " (4 parameters)", modes=("mu0<mu1", "mu0>mu1"), label=label)


def problems() -> list[Problem]:
    """``one_factor``, ``two_factor``, ``tanh_network`` and ``free_variance_mixture``, with their
    mode probabilities by symmetry (1/2 each for the signs of ``lambda_0`` and for the order of
    the mixture's means; 1/4 each for the sign patterns of ``(Lambda_00, Lambda_11)`` and of
    ``(v_0, v_1)``, in the order ``--, -+, +-, ++``); no log Z."""
    return [_one_factor(), _two_factor(), _tanh_network(), _free_variance_mixture()]
