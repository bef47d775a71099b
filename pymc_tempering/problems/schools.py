"""The eight schools (Rubin 1981): the SAT coaching effects, centred and non-centred, with the
exact log marginal likelihood and posterior means by quadrature over ``tau``."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy import integrate, stats

from pymc_tempering.problems.nested import prior_monte_carlo
from pymc_tempering.problems.record import Nested, Problem, Truth

__all__ = [
    "EIGHT_SCHOOLS_MU_SD",
    "EIGHT_SCHOOLS_SIGMA",
    "EIGHT_SCHOOLS_TAU_SCALE",
    "EIGHT_SCHOOLS_Y",
    "eight_schools_log_given_tau",
    "eight_schools_log_marginal_likelihood",
    "eight_schools_model",
    "eight_schools_posterior_means",
    "problems",
]

# Rubin (1981), "Estimation in parallel randomized experiments", J. Educ. Stat. 6(4): the SAT
# coaching effects of eight schools and their standard errors, as printed in Gelman et al.,
# Bayesian Data Analysis, table 5.2 (eight numbers each, in the code here).
EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
#: The prior scales: ``mu ~ N(0, 5)``, ``tau ~ HalfCauchy(5)``.
EIGHT_SCHOOLS_MU_SD, EIGHT_SCHOOLS_TAU_SCALE = 5.0, 5.0


def eight_schools_model(non_centered: bool = True) -> pm.Model:
    """The eight schools: ``mu ~ N(0, 5)``, ``tau ~ HalfCauchy(5)``, ``theta_j ~ N(mu, tau)``,
    ``y_j ~ N(theta_j, sigma_j)`` (:data:`EIGHT_SCHOOLS_Y`, :data:`EIGHT_SCHOOLS_SIGMA`).

    Parameters
    ----------
    non_centered : bool
        True (default): ``theta = mu + tau * theta_tilde`` with ``theta_tilde ~ N(0, 1)``, a
        deterministic; False: ``theta`` itself, whose funnel towards ``tau -> 0`` NUTS does not
        enter. The same marginal likelihood either way
        (:func:`eight_schools_log_marginal_likelihood`).
    """
    with pm.Model(coords={"school": np.arange(EIGHT_SCHOOLS_Y.size)}) as model:
        mu = pm.Normal("mu", 0, EIGHT_SCHOOLS_MU_SD)
        tau = pm.HalfCauchy("tau", EIGHT_SCHOOLS_TAU_SCALE)
        if non_centered:
            theta_tilde = pm.Normal("theta_tilde", 0, 1, dims="school")
            theta = pm.Deterministic("theta", mu + tau * theta_tilde, dims="school")
        else:
            theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Normal("y", mu=theta, sigma=EIGHT_SCHOOLS_SIGMA, observed=EIGHT_SCHOOLS_Y, dims="school")
    return model


def eight_schools_log_given_tau(tau: float) -> float:
    """``log p(y | tau)``: ``y ~ N(0, diag(sigma^2 + tau^2) + 25 * 1 1^T)`` (``theta`` and ``mu``
    integrated out)."""
    cov = np.diag(EIGHT_SCHOOLS_SIGMA**2 + tau**2) + EIGHT_SCHOOLS_MU_SD**2
    normal = stats.multivariate_normal(np.zeros(EIGHT_SCHOOLS_Y.size), cov)
    return float(normal.logpdf(EIGHT_SCHOOLS_Y))


def eight_schools_log_marginal_likelihood() -> float:
    """The exact log marginal likelihood of :func:`eight_schools_model` (either form):
    ``log int_0^1 p(y | tau(v)) dv`` with ``tau(v) = 5 tan(pi v / 2)``, the half-Cauchy(5)
    quantile, by adaptive quadrature (relative error below ``1e-9``): -31.3113."""
    shift = -eight_schools_log_given_tau(5.0)
    value, abserr = integrate.quad(
        lambda v: np.exp(
            eight_schools_log_given_tau(EIGHT_SCHOOLS_TAU_SCALE * np.tan(0.5 * np.pi * v)) + shift
        ),
        0, 1, epsabs=0, epsrel=1e-12, limit=200,
    )
    if not abserr < 1e-9 * value:
        raise RuntimeError(f"The quadrature did not converge (error {abserr} of {value}).")
    return float(np.log(value) - shift)


def eight_schools_posterior_means() -> dict:
    """``E[mu | y]`` and ``E[tau | y]`` of the eight schools by quadrature over ``tau``, with
    ``mu`` and the school effects integrated out in closed form (``mu | tau, y`` is normal:
    prior ``N(0, 25)``, ``y_j ~ N(mu, sigma_j^2 + tau^2)``)."""
    def mu_given_tau(tau):
        w = 1 / (EIGHT_SCHOOLS_SIGMA**2 + tau**2)
        return np.sum(w * EIGHT_SCHOOLS_Y) / (1 / 25 + np.sum(w))

    shift = -eight_schools_log_given_tau(5.0)

    def integral(f):  # over v uniform on (0, 1), tau = 5 tan(pi v / 2), the prior's quantile
        def g(v):
            tau = 5 * np.tan(0.5 * np.pi * v)
            return f(tau) * np.exp(eight_schools_log_given_tau(tau) + shift)

        return integrate.quad(g, 0, 1, epsabs=0, epsrel=1e-10, limit=200)[0]

    z = integral(lambda tau: 1.0)
    return {"mu": integral(mu_given_tau) / z, "tau": integral(lambda tau: tau) / z}


def _schools_log_marginal(mu, tau):
    """``log p(y | mu, tau)`` with ``theta`` integrated out: ``y_j ~ N(mu, sigma_j^2 + tau^2)``."""
    return stats.norm.logpdf(EIGHT_SCHOOLS_Y, mu, np.sqrt(EIGHT_SCHOOLS_SIGMA**2 + tau**2)).sum()


def _nested() -> Nested:
    """The non-centred eight schools in constrained space (``mu``, ``tau``, ``theta_tilde``)."""
    j = len(EIGHT_SCHOOLS_Y)

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        means = theta[..., 0, None] + theta[..., 1, None] * theta[..., 2:]
        return stats.norm.logpdf(EIGHT_SCHOOLS_Y, means, EIGHT_SCHOOLS_SIGMA).sum(-1)

    def prior_transform(u):
        u = np.asarray(u, dtype=float)
        mu = EIGHT_SCHOOLS_MU_SD * stats.norm.ppf(u[..., :1])
        tau = EIGHT_SCHOOLS_TAU_SCALE * np.tan(0.5 * np.pi * u[..., 1:2])
        return np.concatenate([mu, tau, stats.norm.ppf(u[..., 2:])], axis=-1)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        return (
            stats.norm.logpdf(theta[..., 0], 0, EIGHT_SCHOOLS_MU_SD)
            + stats.halfcauchy.logpdf(theta[..., 1], scale=EIGHT_SCHOOLS_TAU_SCALE)
            + stats.norm.logpdf(theta[..., 2:]).sum(-1)
        )

    def cross_check():
        shift = -_schools_log_marginal(5.0, 5.0)

        def f(mu, v):
            tau = EIGHT_SCHOOLS_TAU_SCALE * np.tan(0.5 * np.pi * v)
            return np.exp(stats.norm.logpdf(mu, 0, EIGHT_SCHOOLS_MU_SD) + _schools_log_marginal(mu, tau) + shift)

        value, _ = integrate.dblquad(f, 0, 1, -50, 50, epsabs=0, epsrel=1e-9)
        return [f"2-D quadrature over (mu, tau), theta integrated analytically: "
                f"log Z = {np.log(value) - shift:.6f}"]

    nested = Nested(
        (("mu", ()), ("tau", ()), ("theta_tilde", (j,))), loglike, prior_transform, log_prior,
        mc_check=lambda rng, n: prior_monte_carlo(nested, rng, n), cross_check=cross_check,
    )
    return nested


def problems() -> list[Problem]:
    """``eight_schools`` (non-centred, with its nested-sampling form) and
    ``eight_schools_centred``: the same log Z and posterior means of ``mu`` and ``tau``."""

    def truth():
        return Truth(log_z=eight_schools_log_marginal_likelihood(),
                     moments=eight_schools_posterior_means())

    return [
        Problem("eight_schools", "schools", eight_schools_model, truth,
                "eight schools, non-centred (10 parameters)", nested=_nested()),
        Problem("eight_schools_centred", "schools", lambda: eight_schools_model(non_centered=False),
                truth, "eight schools, centred (10 parameters, a funnel)"),
    ]
