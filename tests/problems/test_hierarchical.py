"""The hierarchical bilinear model: the model is the density the truth integrates, its closed-form
marginal is the Gaussian one, and a second quadrature gives the same mode probabilities and
log Z."""

import numpy as np
import pytest
from checks import seed
from scipy import integrate, stats

from pymc_tempering.problems import get
from pymc_tempering.problems.hierarchical import (
    HIERARCHICAL_A_PRIOR,
    HIERARCHICAL_MU_B_SD,
    HIERARCHICAL_SIGMA,
    HIERARCHICAL_TAU,
    hierarchical_bilinear_data,
    hierarchical_bilinear_log_marginal,
)

Y = hierarchical_bilinear_data()
J, N = Y.shape


def test_the_data_and_the_model_are_the_density_the_truth_integrates():
    """8 groups of 10, generated identically at each call; PyMC's log density is ``log N(a) +
    log N(mu_b) + sum log N(b_j) + sum log N(y_ij)`` written out, at random points."""
    assert Y.shape == (8, 10)
    np.testing.assert_array_equal(Y, hierarchical_bilinear_data())
    logp = get("hierarchical_bilinear").build().compile_logp()
    rng = np.random.default_rng(seed(30))
    for _ in range(3):
        a, mu_b, b = rng.normal(), rng.normal(), rng.normal(size=J)
        expected = (stats.norm.logpdf(a, *HIERARCHICAL_A_PRIOR)
                    + stats.norm.logpdf(mu_b, 0, HIERARCHICAL_MU_B_SD)
                    + stats.norm.logpdf(b, mu_b, HIERARCHICAL_TAU).sum()
                    + stats.norm.logpdf(Y, a * b[:, None], HIERARCHICAL_SIGMA).sum())
        np.testing.assert_allclose(logp({"a": a, "mu_b": mu_b, "b": b}), expected, rtol=1e-10)


def test_the_closed_form_marginal_is_the_full_gaussian():
    """``hierarchical_bilinear_log_marginal`` against ``N(vec y; 0, a^2 (tau^2 blocks of ones +
    sd(mu_b)^2 ones) + sigma^2 I)`` with the full 80 x 80 covariance."""
    groups = np.repeat(np.arange(J), N)
    same_group = (groups[:, None] == groups[None, :]).astype(float)
    for a in (-2.0, -1.65, 0.0, 0.4, 1.65, 3.0):
        cov = a**2 * (HIERARCHICAL_TAU**2 * same_group + HIERARCHICAL_MU_B_SD**2) \
            + HIERARCHICAL_SIGMA**2 * np.eye(J * N)
        full = stats.multivariate_normal(np.zeros(J * N), cov).logpdf(Y.ravel())
        np.testing.assert_allclose(hierarchical_bilinear_log_marginal(a), full, rtol=1e-11)


def _log_marginal_by_the_posterior_of_the_effects(a):
    """``log p(y | a) = log p(y | m) + log p(m) - log p(m | y)`` at the posterior mean ``m`` of
    ``(mu_b, b)``: the Gaussian identity over 9 parameters, another route than the module's group
    means."""
    a = np.asarray(a, dtype=float)
    # prior precision of (mu_b, b_1..b_J): mu_b ~ N(0, s0^2), b_j | mu_b ~ N(mu_b, tau^2)
    t2, s2 = HIERARCHICAL_TAU**2, HIERARCHICAL_MU_B_SD**2
    prior_precision = np.zeros((J + 1, J + 1))
    prior_precision[0, 0] = 1 / s2 + J / t2
    prior_precision[0, 1:] = prior_precision[1:, 0] = -1 / t2
    prior_precision[1:, 1:] = np.eye(J) / t2
    lik_precision = np.zeros((len(a), J + 1, J + 1))
    lik_precision[:, np.arange(1, J + 1), np.arange(1, J + 1)] = (a**2 * N / HIERARCHICAL_SIGMA**2)[:, None]
    precision = prior_precision + lik_precision
    shift = np.zeros((len(a), J + 1))
    shift[:, 1:] = a[:, None] * Y.sum(axis=1) / HIERARCHICAL_SIGMA**2
    m = np.linalg.solve(precision, shift[..., None])[..., 0]
    mu_b, b = m[:, 0], m[:, 1:]
    log_lik = stats.norm.logpdf(Y, (a[:, None] * b)[:, :, None], HIERARCHICAL_SIGMA).sum(axis=(1, 2))
    log_prior = (stats.norm.logpdf(mu_b, 0, HIERARCHICAL_MU_B_SD)
                 + stats.norm.logpdf(b, mu_b[:, None], HIERARCHICAL_TAU).sum(axis=1))
    log_post = -(J + 1) / 2 * np.log(2 * np.pi) + 0.5 * np.linalg.slogdet(precision)[1]
    return log_lik + log_prior - log_post


def test_the_truth_matches_a_second_quadrature():
    """Simpson's rule on 8001 points over ``[-10, 10]`` (spacing 0.0025, a 150th of a lobe's sd)
    with the marginal by another identity gives the same two probabilities (to 1e-8) and log Z
    (to 1e-8 nats) as the module's adaptive quadrature; both probabilities are between 0.1 and
    0.9, and the density at ``a = 0`` is more than 100 nats below its peak (no mass between the
    modes)."""
    truth = get("hierarchical_bilinear").truths
    grid = np.linspace(-10, 10, 8001)
    log_f = stats.norm.logpdf(grid, *HIERARCHICAL_A_PRIOR) + _log_marginal_by_the_posterior_of_the_effects(grid)
    peak = log_f.max()
    middle = len(grid) // 2  # grid[middle] = 0
    neg = integrate.simpson(np.exp(log_f[: middle + 1] - peak), x=grid[: middle + 1])
    pos = integrate.simpson(np.exp(log_f[middle:] - peak), x=grid[middle:])
    np.testing.assert_allclose(truth.mode_probabilities, [neg / (neg + pos), pos / (neg + pos)], rtol=0, atol=1e-8)
    np.testing.assert_allclose(truth.log_z, peak + np.log(neg + pos), rtol=0, atol=1e-8)
    assert truth.mode_probabilities.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all((truth.mode_probabilities > 0.1) & (truth.mode_probabilities < 0.9))
    assert log_f[middle] < peak - 100


def test_the_label_is_the_sign_of_a():
    draws = {"a": np.array([[-1.6, -0.01, 0.01, 1.7]])}
    np.testing.assert_array_equal(get("hierarchical_bilinear").label(draws)[0], [0, 0, 1, 1])
