"""The periodic likelihood: the model is the density the truth integrates, its closed-form
marginal is the Gaussian one, and a second quadrature gives the same mode probabilities and
log Z."""

import numpy as np
import pytest
from checks import seed
from scipy import integrate, stats

from pymc_tempering.problems import get
from pymc_tempering.problems.periodic import (
    PERIODIC_BOUNDARIES,
    PERIODIC_OMEGA,
    PERIODIC_S,
    PERIODIC_SIGMA,
    PERIODIC_T,
    PERIODIC_Y,
    periodic_log_marginal,
)

LO, HI = PERIODIC_OMEGA


def _design(omega):
    phase = np.asarray(omega, dtype=float)[..., None] * PERIODIC_T
    return np.stack([np.cos(phase), np.sin(phase)], axis=-1)  # (..., n, 2)


def test_the_model_is_the_density_the_truth_integrates():
    """PyMC's log density without the transforms' Jacobians is ``log U(omega) + log N(a) +
    log N(b) + sum log N(y_t)`` written out, at random points."""
    from pymc.model.transform.conditioning import remove_value_transforms

    logp = remove_value_transforms(get("periodic_frequency").build()).compile_logp(jacobian=False)
    rng = np.random.default_rng(seed(20))
    for _ in range(3):
        omega, a, b = rng.uniform(LO, HI), rng.normal(), rng.normal()
        mean = a * np.cos(omega * PERIODIC_T) + b * np.sin(omega * PERIODIC_T)
        expected = (-np.log(HI - LO) + stats.norm.logpdf([a, b], 0, PERIODIC_S).sum()
                    + stats.norm.logpdf(PERIODIC_Y, mean, PERIODIC_SIGMA).sum())
        np.testing.assert_allclose(logp({"omega": omega, "a": a, "b": b}), expected, rtol=1e-9)


def test_the_closed_form_marginal_is_the_full_gaussian():
    """``periodic_log_marginal`` against ``N(y; 0, sigma^2 I + s^2 X X')`` with the full 20 x 20
    covariance, at the three lobes and between them."""
    for omega in (0.7, 1.023, 2.5, 5.263, 7.305, 7.9):
        x = _design(omega)
        cov = PERIODIC_SIGMA**2 * np.eye(len(PERIODIC_T)) + PERIODIC_S**2 * x @ x.T
        full = stats.multivariate_normal(np.zeros(len(PERIODIC_T)), cov).logpdf(PERIODIC_Y)
        np.testing.assert_allclose(periodic_log_marginal(omega), full, rtol=1e-11)


def _log_marginal_by_the_posterior_of_the_amplitudes(omega):
    """``log p(y | omega) = log p(y | m) + log p(m) - log p(m | y)`` at the amplitudes' posterior
    mean ``m``: the Gaussian identity, another route than the module's determinant lemma."""
    x = _design(omega)
    precision = x.transpose(0, 2, 1) @ x / PERIODIC_SIGMA**2 + np.eye(2) / PERIODIC_S**2
    m = np.linalg.solve(precision, (x.transpose(0, 2, 1) @ PERIODIC_Y / PERIODIC_SIGMA**2)[..., None])
    resid = PERIODIC_Y - (x @ m)[..., 0]
    log_lik = stats.norm.logpdf(resid, 0, PERIODIC_SIGMA).sum(-1)
    log_prior = stats.norm.logpdf(m[..., 0], 0, PERIODIC_S).sum(-1)
    log_post = -np.log(2 * np.pi) + 0.5 * np.linalg.slogdet(precision)[1]
    return log_lik + log_prior - log_post


def test_the_truth_matches_a_second_quadrature():
    """Simpson's rule on 300 001 points (spacing 2.5e-5, a thousandth of a lobe's sd) with the
    marginal by another identity gives the same three probabilities (to 1e-8) and log Z (to
    1e-8 nats) as the module's adaptive quadrature; each probability is between 0.05 and 0.9, and
    the density at the regions' boundaries is more than 10 nats below its peak."""
    problem = get("periodic_frequency")
    truth = problem.truths
    grid = np.linspace(LO, HI, 300_001)
    log_f = _log_marginal_by_the_posterior_of_the_amplitudes(grid)
    peak = log_f.max()
    edges = np.searchsorted(grid, PERIODIC_BOUNDARIES)
    masses = []
    for lo, hi in zip((0, *edges), (*edges, len(grid)), strict=True):
        x = grid[lo:hi]
        masses.append(integrate.simpson(np.exp(log_f[lo:hi] - peak), x=x))
    # the pieces between a boundary and the grid point after it are left out: their density is
    # below e^-10 of the peak and they are shorter than the spacing
    masses = np.array(masses)
    np.testing.assert_allclose(truth.mode_probabilities, masses / masses.sum(), rtol=0, atol=1e-8)
    np.testing.assert_allclose(truth.log_z, peak + np.log(masses.sum() / (HI - LO)), rtol=0, atol=1e-8)
    assert truth.mode_probabilities.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all((truth.mode_probabilities > 0.05) & (truth.mode_probabilities < 0.9))
    assert np.all(periodic_log_marginal(np.array(PERIODIC_BOUNDARIES)) < peak - 10)


def test_the_label_follows_the_regions():
    problem = get("periodic_frequency")
    draws = {"omega": np.array([[1.02, 3.0, 3.2, 5.26, 6.2, 6.3, 7.31]])}
    np.testing.assert_array_equal(problem.label(draws)[0], [0, 0, 1, 1, 1, 2, 2])
