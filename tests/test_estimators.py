"""Estimators on arrays with a closed-form answer (no MCMC)."""

import numpy as np
import pytest
from checks import K, assert_within_se, seed
from scipy import stats
from scipy.special import logsumexp

from pymc_tempering.estimators import (
    ct_log_weights,
    kish_ess,
    log_marginal_likelihood_ct,
    log_mean_exp,
    log_ratio_by_chain,
    log_ratio_of_means,
    weighted_mean,
)


class TestCTWeights:
    def test_match_direct_formula_where_it_is_accurate(self):
        d = np.concatenate([np.linspace(-30, -1e-3, 200), np.linspace(1e-3, 30, 200)])
        log_w0, log_w1 = ct_log_weights(d)
        np.testing.assert_allclose(np.exp(log_w1), d / np.expm1(d), rtol=1e-12)
        np.testing.assert_allclose(np.exp(log_w0), d / -np.expm1(-d), rtol=1e-12)

    def test_stable_from_minus_to_plus_1e4(self):
        d = np.concatenate([-np.logspace(-12, 4, 300), [0.0], np.logspace(-12, 4, 300)])
        log_w0, log_w1 = ct_log_weights(d)
        assert np.all(np.isfinite(log_w0)) and np.all(np.isfinite(log_w1))
        big = d > 50  # log w1 = log D - D - log(1 - e^-D), the last term below 1e-21
        np.testing.assert_allclose(log_w1[big], np.log(d[big]) - d[big], rtol=1e-14)
        small = d < -50  # log w1 = log(-D) - log(1 - e^D)
        np.testing.assert_allclose(log_w1[small], np.log(-d[small]), rtol=1e-14)
        # w0(D) = w1(-D) and w0 - w1 = D
        np.testing.assert_allclose(log_w0, ct_log_weights(-d)[1], rtol=1e-13, atol=1e-13)
        mid = np.abs(d) < 30
        np.testing.assert_allclose(np.exp(log_w0[mid]) - np.exp(log_w1[mid]), d[mid], atol=1e-12)

    def test_continuous_at_zero(self):
        log_w0, log_w1 = ct_log_weights(np.array([0.0, 1e-10, -1e-10]))
        assert log_w0[0] == 0.0 and log_w1[0] == 0.0
        # log(D / (e^D - 1)) = -D/2 + O(D^2)
        np.testing.assert_allclose(log_w1[1:], [-0.5e-10, 0.5e-10], rtol=1e-5, atol=1e-15)
        np.testing.assert_allclose(log_w0[1:], [0.5e-10, -0.5e-10], rtol=1e-5, atol=1e-15)

    def test_weights_are_conditional_probabilities_of_the_ends(self):
        # w1 = p(beta=1|x) and w0 = p(beta=0|x) for the truncated exponential of eq. (17)
        for d in [-3.0, 0.5, 7.0]:
            density = lambda b: np.exp(-b * d) * d / (1 - np.exp(-d))  # noqa: E731
            log_w0, log_w1 = ct_log_weights(d)
            np.testing.assert_allclose(np.exp(log_w1), density(1.0), rtol=1e-12)
            np.testing.assert_allclose(np.exp(log_w0), density(0.0), rtol=1e-12)


def _gauss_log_int(beta, a, A, b, B):
    """log of int N(x; a, A)^beta N(x; b, B)^(1 - beta) dx (A, B variances)."""
    prec = beta / A + (1 - beta) / B
    mean = (beta * a / A + (1 - beta) * b / B) / prec
    c = (
        -0.5 * beta * np.log(2 * np.pi * A)
        - 0.5 * (1 - beta) * np.log(2 * np.pi * B)
        - 0.5 * (beta * a**2 / A + (1 - beta) * b**2 / B - prec * mean**2)
    )
    return c + 0.5 * np.log(2 * np.pi / prec), mean, 1 / prec


def exact_joint_draws(rng, shape, log_z, log_zeta, target=(1.0, 0.5), base=(0.0, 2.0)):
    """I.i.d. draws of (x, beta) from the joint (16) for a Gaussian target and base.

    Target ``Z N(x; a, A)``, base ``N(x; b, B)``. beta is drawn from its marginal
    ``z(beta) / zeta^beta`` by inverse transform on a fine grid; x | beta is Gaussian.
    """
    (a, A), (b, B) = target, base
    grid = np.linspace(0, 1, 200_001)
    log_int, _, _ = _gauss_log_int(grid, a, A, b, B)
    log_marg = log_int + grid * (log_z - log_zeta)
    pdf = np.exp(log_marg - log_marg.max())
    cdf = np.concatenate([[0], np.cumsum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    beta = np.interp(rng.random(shape), cdf, grid)
    _, mean, var = _gauss_log_int(beta, a, A, b, B)
    x = rng.normal(mean, np.sqrt(var))
    log_p = log_z + stats.norm.logpdf(x, a, np.sqrt(A))
    log_q = stats.norm.logpdf(x, b, np.sqrt(B))
    return x, beta, log_zeta + log_q - log_p


class TestLogZ:
    log_z, log_zeta = 2.3, 1.6

    def test_estimate_within_reported_error(self):
        rng = np.random.default_rng(seed(0))
        _, _, delta = exact_joint_draws(rng, (4, 1000), self.log_z, self.log_zeta)
        est, se, per_chain = log_marginal_likelihood_ct(delta, self.log_zeta)
        assert se > 0 and per_chain.shape == (4,)
        assert abs(est - self.log_z) < K * se

    def test_standard_error_is_calibrated(self):
        # Over independent replicates the z-scores are standard normal: their sd is 1 within
        # its sampling error (sd of a sample sd ~ 1/sqrt(2 n)), and ~95% fall within 2.
        # That holds for the delta-method (ESS) standard error. The reported one is the larger of
        # it and the spread of the 4 chains' estimates, (spread / ESS se)^2 ~ chi^2_3 / 3 for
        # independent draws, which shrinks the sd of z to E[1 / max(1, chi^2_3 / 3)]^(1/2) =
        # 0.928 (by simulation, 200,000 draws).
        rng = np.random.default_rng(seed(1))
        n_rep = 300
        z, z_ess = [], []
        for _ in range(n_rep):
            _, _, delta = exact_joint_draws(rng, (4, 250), self.log_z, self.log_zeta)
            est, se, _ = log_marginal_likelihood_ct(delta, self.log_zeta)
            log_w0, log_w1 = ct_log_weights(delta)
            ess_se = log_ratio_of_means(log_w1, log_w0)[1]
            assert se >= ess_se
            z.append((est - self.log_z) / se)
            z_ess.append((est - self.log_z) / ess_se)
        z, z_ess = np.array(z), np.array(z_ess)
        assert abs(np.std(z_ess) - 1) < K / np.sqrt(2 * n_rep)
        assert abs(np.mean(z_ess)) < K / np.sqrt(n_rep)
        assert abs(np.std(z) - 0.928) < K / np.sqrt(2 * n_rep)

    def test_weighted_moments_of_target_and_base(self):
        # eq. (21) with w1 gives the target's mean, eq. (22) with w0 the base's.
        rng = np.random.default_rng(seed(2))
        x, _, delta = exact_joint_draws(rng, (4, 2000), self.log_z, self.log_zeta)
        log_w0, log_w1 = ct_log_weights(delta)
        mean1, se1 = weighted_mean(x[..., None], log_w1)
        mean0, se0 = weighted_mean(x[..., None], log_w0)
        assert abs(mean1[0] - 1.0) < K * se1[0]
        assert abs(mean0[0] - 0.0) < K * se0[0]

    def test_autocorrelation_inflates_the_error(self):
        # Repeating each draw 10 times keeps the estimate but must not shrink the error.
        rng = np.random.default_rng(seed(3))
        _, _, delta = exact_joint_draws(rng, (4, 200), self.log_z, self.log_zeta)
        _, se = log_ratio_of_means(*ct_log_weights(delta)[::-1])
        _, se_rep = log_ratio_of_means(*ct_log_weights(np.repeat(delta, 10, axis=1))[::-1])
        assert se_rep > 0.7 * se

    def test_disagreeing_chains_inflate_the_error(self):
        rng = np.random.default_rng(seed(4))
        _, _, delta = exact_joint_draws(rng, (4, 500), self.log_z, self.log_zeta)
        _, se = log_marginal_likelihood_ct(delta, self.log_zeta)[:2]
        shifted = delta + np.array([[-1.0], [0.0], [0.0], [1.0]])
        _, se_shift = log_marginal_likelihood_ct(shifted, self.log_zeta)[:2]
        assert se_shift > 2 * se


def test_weighted_mean_importance_sampling_calibrated():
    # Self-normalised importance sampling of N(1, 0.5^2) from N(0, 2^2).
    rng = np.random.default_rng(seed(5))
    z = []
    for _ in range(200):
        x = rng.normal(0, 2, size=(2, 500))
        lw = stats.norm.logpdf(x, 1, 0.5) - stats.norm.logpdf(x, 0, 2)
        m, se = weighted_mean(x[..., None], lw + 1000.0)  # scale-free in the weights
        z.append((m[0] - 1.0) / se[0])
    assert abs(np.std(z) - 1) < K / np.sqrt(400)


def test_kish_ess():
    assert kish_ess(np.zeros(100)) == pytest.approx(100)
    assert kish_ess(np.array([0.0, -np.inf, -np.inf])) == pytest.approx(1)
    lw = np.log(np.array([1.0, 2.0, 3.0]))
    assert kish_ess(lw) == pytest.approx(36 / 14)
    assert np.isfinite(kish_ess(np.array([1e4, 1e4 - 1])))


def test_log_ratio_of_means_exact():
    a = np.log(np.array([[1.0, 2.0, 3.0, 4.0, 5.0]]))
    b = np.log(np.array([[2.0, 2.0, 2.0, 2.0, 2.0]]))
    est, _ = log_ratio_of_means(a, b)
    assert est == pytest.approx(np.log(3.0 / 2.0))
    assert logsumexp(a) == pytest.approx(np.log(15.0))



def test_log_ratio_by_chain_takes_the_spread_of_the_chains():
    """Chains whose estimates differ by more than their within-chain noise says: the standard
    error is the spread of the per-chain estimates over sqrt(chains); with two chains (one
    degree of freedom) it is the ESS standard error alone; with chains that agree, about the ESS one."""
    rng = np.random.default_rng(seed(3))
    noise = 0.01 * rng.standard_normal((4, 1000))
    offsets = np.array([-0.3, -0.1, 0.1, 0.3])[:, None]  # each chain's estimate of log a/b
    log_a, log_b = offsets + noise, np.zeros((4, 1000))
    est, se, per_chain = log_ratio_by_chain(log_a, log_b)
    ess_est, ess_se = log_ratio_of_means(log_a, log_b)
    assert est == ess_est
    np.testing.assert_allclose(per_chain, logsumexp(log_a, axis=1) - np.log(1000))
    assert se == pytest.approx(np.std(per_chain, ddof=1) / 2) and se > ess_se
    _, se_two, _ = log_ratio_by_chain(log_a[:2], log_b[:2])
    assert se_two == log_ratio_of_means(log_a[:2], log_b[:2])[1]
    _, se_agree, per_chain = log_ratio_by_chain(noise, log_b)
    ess_se = log_ratio_of_means(noise, log_b)[1]
    assert se_agree == max(ess_se, np.std(per_chain, ddof=1) / 2)
    # iid draws: (spread / ESS standard error)^2 is about chi^2_3 / 3, above 9 with p = 6e-6
    assert se_agree < 3 * ess_se


def test_log_mean_exp():
    rng = np.random.default_rng(seed(2))
    w = rng.lognormal(0.0, 0.5, size=100_000)
    est, se = log_mean_exp(np.log(w))
    assert_within_se(est, 0.125, se)  # E[w] = exp(sigma^2 / 2)
    est2, _ = log_mean_exp(np.log(w) - 1e4)  # no underflow
    assert est2 == pytest.approx(est - 1e4)


def test_importance_khat_sees_heavy_tails_and_not_bounded_weights():
    """Log-normal weights with sd 3 have a heavy tail (k-hat near 1 and above 0.7); weights all
    within 20 times their mean are light-tailed whatever the Pareto fit says (it is
    ill-conditioned there); too few positive weights give NaN."""
    from pymc_tempering.estimators import KHAT_LIMIT, importance_khat

    rng = np.random.default_rng(seed(40))
    assert importance_khat(rng.normal(0.0, 3.0, 4000)) > KHAT_LIMIT
    nearly_constant = rng.normal(0.0, 0.05, 4000)
    assert importance_khat(nearly_constant) <= KHAT_LIMIT
    with_zeros = np.where(rng.random(4000) < 0.5, -np.inf, nearly_constant)
    assert importance_khat(with_zeros) <= KHAT_LIMIT
    assert np.isnan(importance_khat(np.r_[np.zeros(5), np.full(100, -np.inf)]))


def test_log_sum_of_masses_and_its_error():
    """Two regions of equal mass with relative errors 0.1 and 0.2: log(2 Z), and the sum's
    relative error sqrt(0.25 * 0.01 + 0.25 * 0.04); a NaN in either gives NaN."""
    from pymc_tempering.estimators import log_sum_of_masses

    est, se = log_sum_of_masses([1.0, 1.0], [0.1, 0.2])
    assert est == pytest.approx(1.0 + np.log(2.0))
    assert se == pytest.approx(np.sqrt(0.25 * 0.01 + 0.25 * 0.04))
    # one region carrying all the mass carries its own error
    est, se = log_sum_of_masses([0.0, -50.0], [0.1, 0.5])
    assert est == pytest.approx(0.0) and se == pytest.approx(0.1, rel=1e-6)
    assert np.isnan(log_sum_of_masses([0.0, np.nan], [0.1, 0.1])[0])


def test_combine_estimates_by_inverse_variance():
    from pymc_tempering.estimators import combine_estimates

    est, se = combine_estimates(1.0, 0.1, 2.0, 0.1)
    assert est == pytest.approx(1.5) and se == pytest.approx(0.1 / np.sqrt(2))
    est, se = combine_estimates(1.0, 0.3, 2.0, 0.1)
    assert est == pytest.approx((1 / 0.09 + 2 / 0.01) / (1 / 0.09 + 1 / 0.01))
    # an exact estimate (no error) is the answer; a missing error leaves the other
    assert combine_estimates(1.0, 0.3, 2.0, 0.0) == (2.0, 0.0)
    assert combine_estimates(1.0, 0.3, 2.0, float("nan")) == (1.0, 0.3)
