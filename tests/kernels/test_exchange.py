"""The replica-exchange move (:mod:`pymc_tempering.kernels.exchange`): the noise-corrected
exchange test, the swaps and their counts, the minibatches averaged per pair, and the tempered
family each replica samples.

Statistical checks are ``|estimate - truth| < K * standard error`` (``tests/checks.py``,
``K = 4``): binomial for acceptance frequencies. Seeds come from ``checks.seed`` (shifted by
``PMT_TEST_SEED``).
"""

from __future__ import annotations

import numpy as np
import pytest
from checks import K, assert_within_se, seed
from scipy.special import expit
from scipy.stats import halfnorm, norm
from pymc_tempering.problems.minibatch import minibatch_regression

from pymc_tempering.kernels import Info, exchange
from pymc_tempering.kernels.exchange import (
    CORRECTION_SD,
    corrected_acceptance_probability,
    corrected_exchange,
    correction_distribution,
    exchange_log_ratio,
    likelihood_tempered,
    temperature_ladder,
)
from pymc_tempering.target import Target


def test_correction_convolved_with_unit_normal_is_logistic():
    support, weights = correction_distribution()
    assert np.all(weights >= 0) and weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(support, -support[::-1])
    np.testing.assert_allclose(weights, weights[::-1])
    # Var(X) = Var(logistic) - 1 is forced by the convolution
    assert weights @ support**2 == pytest.approx(np.pi**2 / 3 - 1, abs=1e-3)
    delta = np.linspace(-40, 40, 8001)
    err = np.abs(corrected_acceptance_probability(delta) - expit(delta)).max()
    assert err < 5e-5, err


def test_exchange_log_ratio_is_detailed_balance_ratio():
    beta = np.array([1.0, 0.4])
    u = np.array([2.0, 7.0])
    # pi_1(theta_2) pi_2(theta_1) / (pi_1(theta_1) pi_2(theta_2)) with pi_j = exp(-beta_j U)
    log_ratio = (-beta[0] * u[1] - beta[1] * u[0]) - (-beta[0] * u[0] - beta[1] * u[1])
    assert exchange_log_ratio(beta[0], beta[1], u[0], u[1]) == pytest.approx(log_ratio)


def test_exchange_move_swaps_accepted_pairs_and_counts_them():
    """Even pairs, then odd pairs; a swap the energies make certain is made and counted."""
    betas = 1.0 / temperature_ladder(4, 8.0)
    theta = np.arange(2 * 4 * 1, dtype=float).reshape(2, 4, 1)  # (chains, R, D)

    def energies(x):  # U falls with the position: every colder replica takes the hotter one's
        return -1e3 * x[:, 0], None

    state = exchange.init(2, 4)
    rng = np.random.default_rng(0)
    params = exchange.ExchangeParams(betas, energies, corrected=False)
    state, info = exchange.step(state._replace(theta=theta), params, rng)
    swapped = state.theta
    assert isinstance(info, Info) and not info.diverging.any()
    np.testing.assert_array_equal(info.acceptance_rate, [[1.0, np.nan, 1.0]] * 2)
    np.testing.assert_array_equal(info.energy, -1e3 * theta[:, :, 0])
    assert state.rounds == 1 and state.attempted.tolist() == [[1, 0, 1]] * 2
    assert state.accepted.tolist() == [[1, 0, 1]] * 2 and state.skipped.sum() == 0
    np.testing.assert_array_equal(swapped[:, :, 0], theta[:, [1, 0, 3, 2], 0])
    assert theta[0, 0, 0] == 0.0  # the input is left alone
    state, _ = exchange.step(state, params, rng)
    again = state.theta
    assert state.rounds == 2 and state.attempted.tolist() == [[1, 1, 1]] * 2
    np.testing.assert_array_equal(again[:, :, 0], theta[:, [1, 3, 0, 2], 0])
    # one replica: nothing to exchange, and the energies are never evaluated
    single = exchange.init(2, 1)
    one = theta[:, :1]
    single = single._replace(theta=one)
    same_state, info = exchange.step(single, exchange.ExchangeParams(betas[:1], None, False), rng)
    assert same_state is single and same_state.theta is one
    assert info.acceptance_rate.shape == (2, 0) and np.isnan(info.energy).all()


@pytest.mark.parametrize("delta", [-2.0, 0.7, 2.5])
def test_corrected_test_accepts_with_logistic_probability(delta):
    """Binomial frequency of 200 000 tests at K = 4 (6e-5 per delta). The naive test's bias
    (0.023 to 0.030 here, by quadrature) is at least 2.7 times the bound ``2 * K * se`` (0.005
    to 0.008), so it fails to show only with probability far below 1e-6."""
    rng = np.random.default_rng(seed(7))
    n, sigma = 200_000, 0.9
    p = expit(delta)
    bound = K * np.sqrt(p * (1 - p) / n)
    delta_hat = delta + sigma * rng.standard_normal(n)
    accepted, skipped = corrected_exchange(delta_hat, sigma, rng)
    assert not skipped.any()
    assert_within_se(accepted.mean(), p, np.sqrt(p * (1 - p) / n), what="acceptance")
    # the plain logistic test on the noisy difference (no correction) is biased
    naive = (delta_hat + rng.logistic(size=n)) > 0
    assert abs(naive.mean() - p) > 2 * bound, (naive.mean(), p, bound)


def test_corrected_test_skips_when_noise_exceeds_correction():
    rng = np.random.default_rng(seed(3))
    sigma = np.array([0.5, CORRECTION_SD, 1.01, 5.0, np.nan])
    accepted, skipped = corrected_exchange(np.full(5, 100.0), sigma, rng)
    assert skipped.tolist() == [False, False, True, True, True]
    assert accepted.tolist() == [True, True, False, False, False]


def test_batches_for_noise_sizes_the_average_and_picks_exact_pairs():
    """``ceil(v / 0.5^2)`` minibatches, at least 1 (also for a pair with no noise measured, or
    not finite) and at most ``max_batches``; 0 (exact energies) from ``exact_from`` on."""
    v = np.array([0.0, np.nan, 0.1, 0.3, 2.0, 100.0])
    np.testing.assert_array_equal(exchange.batches_for_noise(v, 50), [1, 1, 1, 2, 8, 50])
    np.testing.assert_array_equal(exchange.batches_for_noise(v, 50, exact_from=8),
                                  [1, 1, 1, 2, 0, 0])


def test_exact_pairs_take_the_metropolis_test():
    """A pair marked 0 in ``n_batches`` takes its energies from ``exact_energies`` and the
    Metropolis test: with noisy minibatch energies (which the corrected test would skip, sd 5)
    and exact ones giving ``Delta = -0.7`` it accepts with frequency ``exp(-0.7)`` (binomial
    standard error over 20 000 rounds); the other pair averages minibatches and is skipped."""
    betas = np.array([1.0, 0.5, 0.25])
    theta = np.tile(np.array([0.0, 1.0, 2.0])[None, :, None], (20_000, 1, 1))
    rng = np.random.default_rng(seed(8))

    def noisy(x):  # U = position plus noise, terms whose spread makes sigma >> 1
        u = x[:, 0] + rng.normal(0, 5, x.shape[0])
        return u, rng.normal(0, 20, (x.shape[0], 10))

    def exact(x):  # Delta = (1 - 0.5) (U_0 - U_1) = 0.5 (0 - 1.4)
        return 1.4 * x[:, 0]

    state = exchange.init(theta.shape[0], 3)._replace(theta=theta)
    params = exchange.ExchangeParams(betas, noisy, True, np.array([0, 1]), exact)
    state, info = exchange.step(state, params, rng)
    p = np.exp(-0.7)
    np.testing.assert_allclose(info.acceptance_rate[:, 0], p)  # the Metropolis probability
    assert state.attempted[:, 0].all() and not state.attempted[:, 1].any()
    assert not state.skipped.any() and np.all(state.noise_max[:, 0] == 0)
    assert_within_se(state.accepted[:, 0].mean(), p, np.sqrt(p * (1 - p) / theta.shape[0]),
                     what="acceptance of the exact pair")
    state, info = exchange.step(state._replace(theta=theta), params, rng)
    assert state.skipped[:, 1].mean() > 0.99  # the odd pair: one noisy minibatch, skipped


def test_noise_variance_of_an_exchange_pair_survives_a_large_mean():
    """The variance of one minibatch's energy difference is pooled over the minibatches that a
    pair averages. Per-datum differences of mean 1e6 and sd 1e-3: the plain sum of squares minus
    the squared sum cancelled to a negative variance (a NaN noise sd and numpy's "invalid value
    encountered in sqrt", seen on a minibatched mixture at the defaults); it must match the
    pooled sample variance."""
    rng = np.random.default_rng(0)
    m, batches = 50, 3
    data = 1e6 + 1e-3 * rng.standard_normal((batches, m))  # replica 0's terms; replica 1's are 0
    calls = iter(range(1, batches))

    def energies(theta):
        t = np.stack([data[next(calls)], np.zeros(m)])
        return np.zeros(2), t

    theta = np.zeros((1, 2, 1))
    first = (np.zeros((1, 2)), np.stack([data[0], np.zeros(m)])[None])
    _, single, rounds = exchange.averaged_energies(
        energies, theta, np.array([0]), np.array([batches, batches]), first
    )
    assert rounds[0] == batches
    np.testing.assert_allclose(single[0, 0], m * data.var(ddof=1), rtol=1e-6)


def test_replicas_temper_the_likelihood_not_the_prior():
    """Replica ``j``'s log density is ``log prior + beta_j log L``, by hand at three points."""
    model = minibatch_regression(40)
    target = Target(model)
    tempered = likelihood_tempered(
        target.batched_logp_and_grad(), target.batched_logp_and_grad(prior=True),
        np.array([1.0, 0.1, 0.01]),
    )
    points = np.array([[3.0, 0.02, np.log(0.5)], [1.0, 0.1, 0.0], [-2.0, 0.5, 1.0]])
    rng = np.random.default_rng(3)
    x = rng.normal(50, 10, 40)
    y = 3.0 + 0.02 * x + rng.normal(0, 0.5, 40)
    a, b, log_s = points.T
    s = np.exp(log_s)
    prior = norm(0, 10).logpdf(a) + norm(0, 1).logpdf(b) + halfnorm(0, 2).logpdf(s) + log_s
    like = norm(a[:, None] + b[:, None] * x, s[:, None]).logpdf(y).sum(1)
    logp, grad = tempered(points)
    np.testing.assert_allclose(logp, prior + np.array([1.0, 0.1, 0.01]) * like, rtol=1e-7)
    assert grad.shape == points.shape and np.all(np.isfinite(grad))
