"""The sign-flip problems: each model is the density its quadrature integrates, and the
quadrature's log Z and mode probabilities agree with a brute-force grid written from the raw
observations and, for the two with many observations, with Laplace's approximation."""

import numpy as np
import pytest
from checks import seed
from scipy import stats

from pymc_tempering.problems import get
from pymc_tempering.problems.sign_flip import (
    SIGN_FLIP_PRIOR,
    sign_flip_data,
    sign_flip_log_likelihood,
    sign_flip_quadrature,
)

NAMES = ["quickstart", "sign_flip_2000", "sign_flip_narrow"]
MANY = ["sign_flip_2000", "sign_flip_narrow"]


def _log_joint(theta, name):
    """``log N(theta; 0.5, 1.5^2) + sum_i log N(y_i; a theta^2, s^2)`` over the raw observations,
    for ``theta`` of shape ``(g,)``."""
    y, a, s = sign_flip_data(name)
    theta = np.asarray(theta, dtype=float)
    return (stats.norm.logpdf(theta, *SIGN_FLIP_PRIOR)
            + stats.norm.logpdf(y[None, :], a * theta[:, None] ** 2, s).sum(axis=1))


def _laplace_modes(name):
    """Each mode by Newton's method on the raw log joint, and its second derivative there."""
    y, a, s = sign_flip_data(name)
    mu, sd = SIGN_FLIP_PRIOR
    out = []
    for sign in (-1, 1):
        t = sign * np.sqrt(y.mean() / a)
        for _ in range(50):
            grad = -(t - mu) / sd**2 + np.sum((y - a * t**2) * 2 * a * t) / s**2
            hess = -1 / sd**2 + np.sum(2 * a * (y - a * t**2) - 4 * a**2 * t**2) / s**2
            t -= grad / hess
        out.append((t, hess))
    return out


@pytest.fixture(scope="module")
def logps():
    return {name: get(name).build().compile_logp() for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_the_data_and_the_model_are_the_density_the_quadrature_integrates(name, logps):
    """The data are regenerated identically with the documented sizes and means; PyMC's log
    density, the module's sufficient-statistic likelihood plus the prior and (where there is one)
    the nested form all equal the log joint summed over the raw observations, at random points
    of both signs."""
    y, a, s = sign_flip_data(name)
    np.testing.assert_array_equal(y, sign_flip_data(name)[0])
    n, theta_true = {"quickstart": (10, 1.5), "sign_flip_2000": (2000, 1.1),
                     "sign_flip_narrow": (1000, 1.1)}[name]
    assert y.shape == (n,)
    assert abs(y.mean() - a * theta_true**2) < 4 * s / np.sqrt(n)
    thetas = np.random.default_rng(seed(50)).uniform(-2.0, 2.0, 4)
    expected = _log_joint(thetas, name)
    mine = stats.norm.logpdf(thetas, *SIGN_FLIP_PRIOR) + sign_flip_log_likelihood(y, a, s)(thetas)
    pymc = [logps[name]({"theta": t}) for t in thetas]
    np.testing.assert_allclose(mine, expected, rtol=1e-11)
    np.testing.assert_allclose(pymc, expected, rtol=1e-11)
    nested = get(name).nested
    if nested is not None:
        np.testing.assert_allclose(nested.log_prior(thetas[:, None]) + nested.loglike(thetas[:, None]),
                                   expected, rtol=1e-11)
        u = np.array([0.1, 0.5, 0.9])
        np.testing.assert_allclose(nested.prior_transform(u[:, None])[:, 0],
                                   stats.norm.ppf(u, *SIGN_FLIP_PRIOR), rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_the_quadrature_matches_a_brute_force_grid(name):
    """The trapezoid rule on 4001 points over each mode's +-25 Laplace sds (cut at zero, where the
    quickstart's broad modes reach it), from the raw observations, gives the module's log Z and
    probabilities within the grid's own error (twice the difference between the grid and every
    second point of it, plus a round-off floor); outside the windows a grid over the
    quadrature's range (0.001 apart, by the sufficient statistics, which the test above checks)
    finds the density more than 60 nats below its peak (nothing left out)."""
    truth = get(name).truths
    windows, halves = [], []
    for (mode, hess), (lo, hi) in zip(_laplace_modes(name), ((-45, 0), (0, 45)), strict=True):
        sd = 1 / np.sqrt(-hess)
        grid = np.linspace(max(mode - 25 * sd, lo), min(mode + 25 * sd, hi), 4001)
        windows.append(grid)
        halves.append(_log_joint(grid, name))
    peak = max(h.max() for h in halves)
    pairs = list(zip(windows, halves, strict=True))
    fine = np.array([np.trapezoid(np.exp(h - peak), g) for g, h in pairs])
    coarse = np.array([np.trapezoid(np.exp(h[::2] - peak), g[::2]) for g, h in pairs])
    rel_err = np.abs(fine - coarse).max() / fine.sum() + 1e-10
    np.testing.assert_allclose(truth.log_z, peak + np.log(fine.sum()), rtol=0, atol=2 * rel_err)
    np.testing.assert_allclose(truth.mode_probabilities, fine / fine.sum(), rtol=0, atol=2 * rel_err)
    assert truth.mode_probabilities.sum() == pytest.approx(1.0, abs=1e-12)

    outside = np.linspace(-45, 45, 90_001)
    outside = outside[~np.any([(outside >= g[0]) & (outside <= g[-1]) for g in windows], axis=0)]
    y, a, s = sign_flip_data(name)
    log_f = stats.norm.logpdf(outside, *SIGN_FLIP_PRIOR) + sign_flip_log_likelihood(y, a, s)(outside)
    assert log_f.max() < peak - 60


@pytest.mark.parametrize("name", MANY)
def test_the_quadrature_matches_laplace_with_many_observations(name):
    """With 1000 or 2000 observations each mode is nearly Gaussian: Laplace's approximation
    (Newton's modes and second derivatives from the raw observations) is below the quadrature by
    its leading correction to 10 % (``3 / (16 c theta^4)`` nats with ``c = n a^2 / 2 s^2``, from
    the likelihood's third and fourth derivatives at the mode: 1.2e-4 and 2.7e-4 nats here, far
    within 0.01), the probabilities agree to 1e-6, and the quadrature's modes are Newton's. The
    modes are weighted apart (0.3 to 0.45 for ``theta < 0``) and the density at 0 is more than
    500 nats below the peaks."""
    quad = sign_flip_quadrature(*sign_flip_data(name))
    modes = _laplace_modes(name)
    terms = np.array([_log_joint([m], name)[0] + 0.5 * np.log(2 * np.pi / -h) for m, h in modes])
    laplace = np.logaddexp(*terms)
    y, a, s = sign_flip_data(name)
    correction = 3 / (16 * (y.size * a**2 / (2 * s**2)) * (y.mean() / a) ** 2)
    assert correction < 1e-3
    assert quad.log_z - laplace == pytest.approx(correction, rel=0.1)
    np.testing.assert_allclose(quad.mode_probabilities, np.exp(terms - laplace), rtol=0, atol=1e-6)
    np.testing.assert_allclose(quad.modes, [m for m, _ in modes], rtol=1e-8)
    assert max(quad.relative_errors) < 1e-9
    assert 0.3 < quad.mode_probabilities[0] < 0.45
    assert _log_joint([0.0], name)[0] < min(_log_joint([m], name)[0] for m, _ in modes) - 500


@pytest.mark.parametrize("name", NAMES)
def test_the_label_is_the_sign_of_theta(name):
    draws = {"theta": np.array([[-1.1, -0.001, 0.001, 1.1]])}
    problem = get(name)
    np.testing.assert_array_equal(problem.label(draws)[0], [0, 0, 1, 1])
    assert problem.modes == ("theta<0", "theta>0")
