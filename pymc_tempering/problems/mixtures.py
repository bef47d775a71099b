"""Gaussian mixtures with exact mode probabilities: Kou's 20 components, three-component mixtures
in 2 to 10 dimensions, label switching with two and three components, and the tests' small
mixtures (log Z = 0)."""

from __future__ import annotations

import itertools
import json
import math
from importlib.resources import files

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
from scipy.special import logsumexp

from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "KOU_MOMENTS",
    "N_EXACT_MC",
    "ORDERINGS_3",
    "TWO_MODES_SEP",
    "bimodal_mixture",
    "four_mode_mixture",
    "kou_mixture_model",
    "kou_mixture_moments",
    "problems",
    "two_modes",
]

#: The names of :func:`kou_mixture_moments`, in its order.
KOU_MOMENTS = ("E_x1", "E_x2", "E_x1sq", "E_x2sq")
#: Draws from the exact mixture behind the region probabilities of a mixture's modes.
N_EXACT_MC = 1_000_000


def _check_kou_scenario(scenario: str) -> None:
    if scenario not in ("a", "b"):
        raise ValueError(f"scenario must be 'a' or 'b', got {scenario!r}.")


def kou_mixture_model(scenario: str) -> pm.Model:
    """The 20-component bivariate Gaussian mixture of Kou, Zhou and Wong (2006), normalised.

    Section 4.1 of the pseudo-extended paper: scenario ``"a"`` (equal weights, component sd
    0.1, well separated) or ``"b"`` (weights and variances growing with the distance to
    (5, 5)); component table and sources in ``pymc_tempering/data/README.md``. The model is
    ``x`` (``pm.Flat``, 2-vector, initial value (0.5, 0.5)) with the mixture's log density as a
    ``pm.Potential``, so ``log Z = 0``.

    Parameters
    ----------
    scenario : {"a", "b"}

    Returns
    -------
    pymc.Model

    Raises
    ------
    ValueError
        For another scenario.
    """
    _check_kou_scenario(scenario)
    comp = pd.read_csv(files("pymc_tempering").joinpath("data/kou_mixture_components.csv"))
    mu = comp[["mu1", "mu2"]].to_numpy()
    w = comp["w_a" if scenario == "a" else "w_b_normalised"].to_numpy()
    var = comp["var_a" if scenario == "a" else "var_b"].to_numpy()
    with pm.Model() as model:
        x = pm.Flat("x", shape=2, initval=np.array([0.5, 0.5]))
        d2 = pt.sum((x[None, :] - mu) ** 2, axis=1)
        pm.Potential("mixture", pt.logsumexp(np.log(w) - np.log(2 * np.pi * var) - d2 / (2 * var)))
    return model


def kou_mixture_moments(scenario: str) -> np.ndarray:
    """The exact ``E x1, E x2, E x1^2, E x2^2`` of :func:`kou_mixture_model` (Table 1's truth).

    Parameters
    ----------
    scenario : {"a", "b"}

    Returns
    -------
    numpy.ndarray
        Shape ``(4,)``.
    """
    _check_kou_scenario(scenario)
    with files("pymc_tempering").joinpath("data/kou_mixture_exact_moments.json").open() as fh:
        exact = json.load(fh)[scenario]
    return np.array([exact[k] for k in KOU_MOMENTS])


# ---------------------------------------------------------- the posterior suite's mixtures
def _mvn_diag_logpdf(x, mean, var):
    """log N(x; mean, diag(var)) over the last axis, broadcasting."""
    return -0.5 * np.sum(np.log(2 * np.pi * var) + (x - mean) ** 2 / var, axis=-1)


def _nearest_mahalanobis(x, means, variances):
    """Index of the component mean nearest to each ``x`` (..., d) in Mahalanobis distance."""
    d2 = np.sum((x[..., None, :] - means) ** 2 / variances, axis=-1)
    return np.argmin(d2, axis=-1)


def _region_probabilities(weights, means, variances, label_means, label_vars, seed):
    """P(nearest-Mahalanobis region k) under the exact diagonal Gaussian mixture, by Monte Carlo."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(label_means))
    remaining = N_EXACT_MC
    while remaining:
        n = min(remaining, 200_000)
        comp = rng.choice(len(weights), size=n, p=weights)
        x = means[comp] + np.sqrt(variances[comp]) * rng.standard_normal((n, means.shape[1]))
        counts += np.bincount(_nearest_mahalanobis(x, label_means, label_vars), minlength=len(label_means))
        remaining -= n
    return counts / N_EXACT_MC


def _posterior_mixture(weights, means, variances, prior_sd):
    """The posterior of ``x ~ N(0, prior_sd^2 I)`` times a diagonal Gaussian mixture density."""
    log_w = np.log(weights) + _mvn_diag_logpdf(means, 0.0, variances + prior_sd**2)
    post_var = 1.0 / (1.0 / variances + 1.0 / prior_sd**2)
    post_mean = post_var * means / variances
    log_z = float(logsumexp(log_w))
    return np.exp(log_w - log_z), post_mean, post_var, log_z


def _gaussian_mixture(d: int) -> Problem:
    rng = np.random.default_rng(100 + d)
    weights = np.array([0.6, 0.3, 0.1])
    means = np.zeros((3, d))
    means[0, 0], means[1, 0] = -4.0, 4.0
    means[2, 1] = 4.0 * math.sqrt(3.0)  # the three means pairwise 8 apart
    sds = rng.uniform(0.5, 1.2, size=(3, d))
    variances = sds**2
    prior_sd = 10.0
    post_w, post_mean, post_var, log_z = _posterior_mixture(weights, means, variances, prior_sd)

    def build():
        with pm.Model() as model:
            x = pm.Normal("x", 0.0, prior_sd, shape=d)
            comp = pt.stack([
                -0.5 * pt.sum(np.log(2 * np.pi * variances[k]) + (x - means[k]) ** 2 / variances[k])
                for k in range(3)
            ])
            pm.Potential("mixture", pt.logsumexp(np.log(weights) + comp))
        return model

    def label(draws):
        return _nearest_mahalanobis(np.asarray(draws["x"]), post_mean, post_var)

    def truth():
        p = _region_probabilities(post_w, post_mean, post_var, post_mean, post_var, seed=d)
        return Truth(log_z=log_z, mode_probabilities=p)

    return Problem(f"mixture_{d}d", "mixtures", build, truth,
                   f"three-component Gaussian mixture potential in {d}-D, N(0, 10^2) prior",
                   modes=("w0.6", "w0.3", "w0.1"), label=label)


def _kou(scenario: str) -> Problem:
    comp = pd.read_csv(files("pymc_tempering").joinpath("data/kou_mixture_components.csv"))
    means = comp[["mu1", "mu2"]].to_numpy()
    weights = comp["w_a" if scenario == "a" else "w_b_normalised"].to_numpy()
    weights = weights / weights.sum()
    var = comp["var_a" if scenario == "a" else "var_b"].to_numpy()
    variances = np.repeat(var[:, None], 2, axis=1)
    prior_mu, prior_sd = 5.0, 5.0

    def build():
        with pm.Model() as model:
            x = pm.Normal("x", prior_mu, prior_sd, shape=2)
            d2 = pt.sum((x[None, :] - means) ** 2, axis=1)
            log_mix = pt.logsumexp(np.log(weights) - np.log(2 * np.pi * var) - d2 / (2 * var))
            log_prior = pt.sum(-0.5 * np.log(2 * np.pi * prior_sd**2) - (x - prior_mu) ** 2 / (2 * prior_sd**2))
            pm.Potential("mixture_over_prior", log_mix - log_prior)
        return model

    def label(draws):
        return _nearest_mahalanobis(np.asarray(draws["x"]), means, variances)

    def truth():
        p = _region_probabilities(weights, means, variances, means, variances, seed=7)
        return Truth(log_z=0.0, mode_probabilities=p,
                     moments=dict(zip(KOU_MOMENTS, kou_mixture_moments(scenario), strict=True)))

    return Problem(f"kou_{scenario}", "mixtures", build, truth,
                   f"Kou's 20-component mixture ({scenario}) over a N(5, 5^2) prior",
                   modes=tuple(f"c{j}" for j in comp["j"]), label=label)


def _label_switching() -> Problem:
    rng = np.random.default_rng(11)
    y = np.concatenate([rng.normal(-2.5, 1.0, 30), rng.normal(2.5, 1.0, 30)])

    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 5.0, shape=2)
            pm.NormalMixture("y", w=np.array([0.5, 0.5]), mu=mu, sigma=1.0, observed=y)
        return model

    def label(draws):
        mu = np.asarray(draws["mu"])
        return (mu[..., 0] > mu[..., 1]).astype(int)

    def truth():
        return Truth(mode_probabilities=np.array([0.5, 0.5]))

    return Problem("label_switching", "mixtures", build, truth,
                   "two-component normal mixture likelihood, exchangeable means",
                   modes=("mu1<mu2", "mu1>mu2"), label=label)


#: The orderings of the three means of ``label_switching_3``, in its modes' order: ``(i, j, k)``
#: (indices from 0) is the mode ``mu[i] < mu[j] < mu[k]``, named ``"mu{i+1}<mu{j+1}<mu{k+1}"``.
ORDERINGS_3 = tuple(itertools.permutations(range(3)))


def _label_switching_3() -> Problem:
    rng = np.random.default_rng(12)
    y = np.concatenate([rng.normal(m, 1.0, 40) for m in (-4.0, 0.0, 4.0)])
    code = np.zeros((3, 3, 3), dtype=int)  # code[i, j, k]: the mode mu[i] < mu[j] < mu[k]
    for k, perm in enumerate(ORDERINGS_3):
        code[perm] = k

    def build():
        with pm.Model() as model:
            w = pm.Dirichlet("w", np.ones(3))
            mu = pm.Normal("mu", 0.0, 10.0, shape=3)
            sigma = pm.HalfNormal("sigma", 2.0)
            pm.NormalMixture("y", w=w, mu=mu, sigma=sigma, observed=y)
        return model

    def label(draws):
        order = np.argsort(np.asarray(draws["mu"]), axis=-1)
        return code[order[..., 0], order[..., 1], order[..., 2]]

    def truth():
        return Truth(mode_probabilities=np.full(6, 1 / 6))

    return Problem("label_switching_3", "mixtures", build, truth,
                   "three-component normal mixture fitted to 120 points, exchangeable labels",
                   modes=tuple("<".join(f"mu{i + 1}" for i in perm) for perm in ORDERINGS_3), label=label)


# ---------------------------------------------------------- the tests' mixtures
def four_mode_mixture():
    """A normalised 2-D mixture of four well-separated Gaussians, weights 0.1/0.2/0.3/0.4.

    Returns ``(model, mean)``; log Z = 0.
    """
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    mus = np.array([[-4.0, -4.0], [-4.0, 4.0], [4.0, -4.0], [4.0, 4.0]])
    sd = 0.6
    with pm.Model() as model:
        comps = [pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(2)) for m in mus]
        pm.Mixture("x", w=weights, comp_dists=comps)
    return model, weights @ mus


TWO_MODES_SEP = 8.0  # two_modes: at -8 and +8, unit sd, a valley of 32 nats between them


def two_modes(weight_right: float = 0.5) -> pm.Model:
    """A normalised 1-D mixture of N(-8, 1) and N(8, 1): log Z = 0 exactly."""
    with pm.Model() as model:
        pm.Mixture(
            "x",
            w=np.array([1 - weight_right, weight_right]),
            comp_dists=[pm.Normal.dist(-TWO_MODES_SEP, 1.0), pm.Normal.dist(TWO_MODES_SEP, 1.0)],
        )
    return model


def bimodal_mixture(weights=(0.3, 0.7), mus=(-3.0, 3.0), sigma=0.5):
    """A 1-D two-component Gaussian mixture as a PyMC model with no data: ``log Z = 0``.

    Returns ``(model, weights, mean, variance)`` of the mixture.
    """
    w, m = np.asarray(weights), np.asarray(mus)
    with pm.Model() as model:
        pm.NormalMixture("x", w=w, mu=m, sigma=sigma)
    mean = float(w @ m)
    var = float(w @ (m**2 + sigma**2) - mean**2)
    return model, w, mean, var


def problems() -> list[Problem]:
    """``mixture_2d``, ``mixture_5d``, ``mixture_10d``, ``kou_a``, ``kou_b``,
    ``label_switching`` and ``label_switching_3``, with their mode probabilities (regions of the
    nearest component mean in Mahalanobis distance, by Monte Carlo from the exact mixture with
    :data:`N_EXACT_MC` draws, for the mixtures; 1/2 and 1/6 each (the orderings of the means,
    :data:`ORDERINGS_3`) by exchangeability for label switching)."""
    return [_gaussian_mixture(2), _gaussian_mixture(5), _gaussian_mixture(10), _label_switching(),
            _label_switching_3(), _kou("a"), _kou("b"), *_test_mixtures()]


def _test_mixtures() -> list[Problem]:
    """The tests' mixtures as problems: ``two_modes``, ``four_mode_mixture`` and
    ``bimodal_mixture`` (``log Z = 0``, their weights as mode probabilities)."""

    def sign(name, axis=None):
        def label(draws):
            x = np.asarray(draws[name])
            return (x > 0).astype(int) if axis is None else (x[..., axis] > 0).astype(int)

        return label

    def quadrant(draws):  # the means' order: (-, -), (-, +), (+, -), (+, +)
        x = np.asarray(draws["x"])
        return 2 * (x[..., 0] > 0) + (x[..., 1] > 0)

    return [
        Problem("two_modes", "mixtures", two_modes,
                lambda: Truth(log_z=0.0, mode_probabilities=np.array([0.5, 0.5])),
                "N(-8, 1) and N(8, 1), equal weights", modes=("x<0", "x>0"), label=sign("x")),
        Problem("four_mode_mixture", "mixtures", lambda: four_mode_mixture()[0],
                lambda: Truth(log_z=0.0, mode_probabilities=np.array([0.1, 0.2, 0.3, 0.4]),
                              moments={"mean": four_mode_mixture()[1]}),
                "four 2-D Gaussians at (+-4, +-4)", modes=("--", "-+", "+-", "++"),
                label=quadrant),
        Problem("bimodal_mixture", "mixtures", lambda: bimodal_mixture()[0],
                lambda: Truth(log_z=0.0, mode_probabilities=np.array([0.3, 0.7]),
                              moments=dict(zip(("mean", "var"), bimodal_mixture()[2:], strict=True))),
                "N(-3, 0.5) and N(3, 0.5), weights 0.3 / 0.7", modes=("x<0", "x>0"),
                label=sign("x")),
    ]
