"""Mode probabilities by stratification: exact masses from draws whose shares are wrong."""

import numpy as np
import pymc as pm
import pytest
import xarray as xr
from checks import K, seed
from scipy import integrate, stats

import pymc_tempering as pmt
from pymc_tempering.estimators import stratified_mean, weighted_mean
from pymc_tempering.stratification import (
    KHAT_LIMIT,
    _combine,
    assign_optima,
    connected_regions,
    stratify,
)
from pymc_tempering.target import Target

WEIGHTS, MUS, SIGMAS = (0.7, 0.3), (-4.0, 3.0), (1.0, 0.5)


def two_gaussians() -> pm.Model:
    """``x`` with the density of 0.7 N(-4, 1) + 0.3 N(3, 0.5^2) (a potential on a flat prior)."""
    with pm.Model() as model:
        x = pm.Flat("x")
        parts = [np.log(w) + pm.logp(pm.Normal.dist(m, s), x)
                 for w, m, s in zip(WEIGHTS, MUS, SIGMAS, strict=True)]
        pm.Potential("mixture", pm.math.logsumexp(pm.math.stack(parts)))
    return model


def exact_draws(shares, rng, chains=4, draws=500):
    """Exact draws of each mode, in the given shares of the chains (not the true weights):
    chain c holds mode 0 for its first ``shares[c]`` of its draws, then mode 1."""
    x = np.empty((chains, draws, 1))
    for c, share in enumerate(shares):
        n0 = int(share * draws)
        x[c, :n0, 0] = rng.normal(MUS[0], SIGMAS[0], n0)
        x[c, n0:, 0] = rng.normal(MUS[1], SIGMAS[1], draws - n0)
    return x


def stratify_exact(x, random_seed):
    """stratify the draws ``x`` of :func:`two_gaussians` (equal weights, all near the target)
    by its two optima, with their exact Gaussians as the Laplace fits."""
    points = np.array([[MUS[0]], [MUS[1]]])
    covariances = np.array([[[SIGMAS[0] ** 2]], [[SIGMAS[1] ** 2]]])
    return stratify(Target(two_gaussians()), x, np.zeros(x.shape[:2]), np.ones(x.shape[:2], bool),
                    points, covariances, np.log(WEIGHTS), random_seed=random_seed)


def test_region_masses_are_exact_whatever_the_draws_shares():
    """Chains that spend 90% of their draws in the lighter mode give its share as 0.9; the
    stratified probability is the true 0.3 within K standard errors, with a standard error
    far below the draws' own, and the rescaled weights carry it to every weighted mean."""
    x = exact_draws([0.1, 0.1, 0.1, 0.1], np.random.default_rng(seed(1)))
    strata = stratify_exact(x, seed(2))
    assert strata.method == "importance sampling" and not strata.problems
    assert abs(strata.draws_probability[1] - 0.9) < 0.01
    assert np.all(np.abs(strata.probability - WEIGHTS) < K * strata.standard_error)
    assert np.all(strata.standard_error < 0.02)
    indicator = (x[..., 0] > 0).astype(float)[..., None]
    mean, se = weighted_mean(indicator, strata.log_weight)
    assert abs(mean[0] - strata.probability[1]) < 1e-12
    smean, sse = stratified_mean(indicator, strata.log_weight, strata.region,
                                 strata.probability, strata.covariance)
    assert abs(smean[0] - 0.3) < K * sse[0] and sse[0] < 0.02
    # the indicator of a region is its probability, with its standard error (not 0.71 of it)
    assert np.isclose(sse[0], strata.standard_error[1], rtol=1e-9)
    assert np.allclose(strata.covariance.sum(axis=1), 0.0, atol=1e-12)


def test_probabilities_that_sum_to_one_have_the_delta_methods_standard_errors():
    """Two regions at P = 0.5 with independent relative errors r: the indicator of one region
    has standard error sqrt(0.125) r (the delta method with the covariance of P), not the
    0.71 of it that treating the probabilities as independent gave."""
    region = np.repeat([[0, 1]], 200, axis=0).reshape(4, 100)
    r = 0.04
    strata = _combine(region, np.array([0, 1]), np.array([0, 1]), np.zeros((4, 100)), np.array([0.5, 0.5]),
                      np.eye(2) * 1e-4, np.log([0.5, 0.5]), np.array([r, r]), np.zeros(2))
    indicator = (region == 0).astype(float)[..., None]
    _, se = stratified_mean(indicator, strata.log_weight, region, strata.probability,
                            strata.covariance)
    assert np.isclose(se[0], np.sqrt(0.125) * r, rtol=1e-9)
    assert np.isclose(strata.standard_error[0], np.sqrt(0.125) * r, rtol=1e-9)


def test_a_region_seen_by_one_draw_cannot_claim_a_small_error():
    """One draw stands for a region of probability 0.5: the error of a mean is at least
    0.5 times the run's own spread, where the draws' series alone said about 0."""
    rng = np.random.default_rng(seed(4))
    values = rng.normal(0.0, 1.0, (4, 250, 1))
    region = np.zeros((4, 250), dtype=int)
    region[2, 17] = 1
    cov = np.diag([1e-6, 1e-6])
    _, se = stratified_mean(values, np.zeros((4, 250)), region, np.array([0.5, 0.5]), cov)
    assert se[0] >= 0.5 * values.std() * 0.99


def test_a_region_whose_chain_draws_weigh_nothing_is_described_by_its_mode_draws():
    """A region holding one chain draw of weight zero (a draw at beta near 0, whose weight
    towards the target underflowed), and mode draws of its own: the stratified mean and the
    pooled weights read its mode draws and stay finite (they were NaN: 0/0 in the region's
    chain weights, on a tanh network's run)."""
    from pymc_tempering.estimators import pooled_weights

    rng = np.random.default_rng(seed(5))
    values = rng.normal(0.0, 1.0, (2, 100, 1))
    lw, region = np.zeros((2, 100)), np.zeros((2, 100), dtype=int)
    region[1, 3], lw[1, 3] = 1, -np.inf
    sub_values = rng.normal(5.0, 1.0, (1, 200, 1))
    sub_lw, sub_region = np.zeros((1, 200)), np.ones((1, 200), dtype=int)
    p, cov = np.array([0.5, 0.5]), np.diag([1e-4, 1e-4])
    mean, se = stratified_mean(values, lw, region, p, cov, (sub_values, sub_lw, sub_region))
    assert np.isfinite(mean).all() and np.isfinite(se).all()
    assert abs(mean[0] - 0.5 * (values.mean() + sub_values.mean())) < 4 * se[0] + 0.05
    w, sub_w = pooled_weights(lw, region, p, sub_lw, sub_region)
    assert np.isfinite(w).all() and np.isfinite(sub_w).all() and w[1, 3] == 0.0
    assert sub_w.sum() == pytest.approx(0.5) and w.sum() == pytest.approx(0.5)


def test_the_covariance_of_shares_of_a_partition():
    """weighted_mean_cov: the diagonal is weighted_mean's squared errors; the shares of a
    partition sum to one, so the covariance's rows sum to about zero (each share's error has
    its own ESS estimate, a few per cent apart: not exactly zero)."""
    rng = np.random.default_rng(seed(5))
    labels = rng.integers(3, size=(4, 300))
    onehot = (labels[..., None] == np.arange(3)).astype(float)
    lw = rng.normal(0, 0.3, (4, 300))
    mean, cov = pmt.estimators.weighted_mean_cov(onehot, lw)
    _, se = weighted_mean(onehot, lw)
    assert np.allclose(np.diag(cov), se**2)
    assert np.all(np.abs(cov.sum(axis=1)) < 0.2 * np.diag(cov))


def test_optima_joined_only_by_enough_moves_near_the_target():
    labels = np.array([[0, 1, 0, 1, 0, 1, 2, 2]])
    hot = np.ones_like(labels, dtype=bool)
    assert list(connected_regions(labels, hot, 3, min_crossings=5)) == [0, 0, 1]
    assert list(connected_regions(labels, hot, 3, min_crossings=6)) == [0, 1, 2]
    cold = hot.copy()
    cold[0, 1::2] = False  # the moves happen away from the target: no join
    assert list(connected_regions(labels, cold, 3, min_crossings=1)) == [0, 1, 2]


def test_assignment_follows_each_optimums_laplace_gaussian():
    """A point nearer the narrow optimum in distance belongs to the wide one whose Gaussian
    (weighted by its mass) is larger there."""
    points, variances = np.array([[0.0], [3.0]]), np.array([[9.0], [0.01]])
    labels = assign_optima(np.array([[2.0], [2.95]]), points, variances, np.log([0.5, 0.5]))
    assert list(labels) == [0, 1]


def test_untrusted_importance_sampling_falls_back_to_the_draws():
    region = np.array([[0, 0, 1, 1]])
    args = (region, np.array([0, 1]), np.array([0, 1]), np.zeros((1, 4)), np.array([0.5, 0.5]),
            np.array([[0.04, -0.04], [-0.04, 0.04]]), np.log([0.7, 0.3]), np.array([0.01, 0.01]))
    trusted = _combine(*args, np.array([0.1, 0.2]))
    assert trusted.method == "importance sampling" and not trusted.problems
    untrusted = _combine(*args, np.array([0.1, KHAT_LIMIT + 0.2]))
    assert untrusted.method == "draws" and "k-hat" in untrusted.problems[0]
    assert np.allclose(untrusted.probability, 0.5)


def sign_flip_model():
    """The quickstart's posterior: ``y_i ~ N(theta^2, 1)``, ``theta ~ N(0.5, 1.5^2)``."""
    y = np.array([2.1, 1.4, 2.6, 1.7, 2.2, 1.9, 2.4, 1.6, 2.0, 2.3])
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.5, 1.5)
        pm.Normal("y", theta**2, 1.0, observed=y)

    def log_joint(t):
        return stats.norm.logpdf(t, 0.5, 1.5) + stats.norm.logpdf(y, t**2, 1.0).sum()

    shift = log_joint(np.sqrt(2.0))
    pos = integrate.quad(lambda t: np.exp(log_joint(t) - shift), 0, 10)[0]
    neg = integrate.quad(lambda t: np.exp(log_joint(t) - shift), -10, 0)[0]
    return model, pos / (pos + neg)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_sample_ct_mode_probability_at_the_defaults_matches_quadrature():
    """Short CT run on the sign-flip posterior: P(theta > 0) from the weighted draws is within
    K standard errors of quadrature (no bias from the chains' few moves between the modes),
    with a standard error below 0.02, and the run says its posterior is reliable."""
    model, truth = sign_flip_model()
    with model:
        idata = pmt.sample_ct(draws=300, tune=300, random_seed=seed(3), progressbar=False)
    check = pmt.posterior_check(idata)
    assert check.mode_probabilities is not None and len(check.mode_probabilities) == 2
    indicator = (idata["posterior"]["theta"].values > 0).astype(float)[..., None]
    strata = idata["mode_probabilities"]
    region = idata["sample_stats"]["mode_region"].values
    p, se = stratified_mean(indicator, idata["sample_stats"]["log_weight"].values, region,
                            strata["probability"].values, strata["covariance"].values)
    assert se[0] < 0.02
    assert abs(p[0] - truth) < K * se[0]
    assert idata.attrs["posterior_reliable"] == check.reliable


def test_a_mode_the_chains_never_reached_is_described_by_its_proposal_draws():
    """Every chain stays in the heavier mode: the lighter one's mass (0.3) comes from its
    proposal (the optimum's Laplace t), and so does its shape: the stratification keeps the
    proposal draws that fell in it (and in any region they describe better than the chains'
    draws), and the weighted summaries, expectations and resamples read them (the mean of x is 0.7 (-4) + 0.3 (3) = -1.9, its sd the mixture's)."""
    from xarray import DataTree

    from pymc_tempering.results import mode_draws_group, strata_group

    x = exact_draws([1.0, 1.0, 1.0, 1.0], np.random.default_rng(seed(6)))
    strata = stratify_exact(x, seed(7))
    target = Target(two_gaussians())
    assert strata.method == "importance sampling" and not strata.problems
    z, log_ratio, which = strata.mode_draws
    assert 1 in set(which.tolist()) and np.sum(which == 1) > 1000
    tree = DataTree.from_dict({
        "/posterior": xr.Dataset({"x": (("chain", "draw"), x[..., 0])}),
        "/sample_stats": xr.Dataset({"log_weight": (("chain", "draw"), strata.log_weight),
                                     "mode_region": (("chain", "draw"), strata.region)}),
        "/mode_probabilities": strata_group(strata),
        "/mode_draws": mode_draws_group(target, strata.mode_draws),
    })
    tree.attrs = {"method": "continuous_tempering"}
    p, se = pmt.weighted_expectation(tree, lambda post: post["x"].values > 0)
    assert abs(p - 0.3) < K * se and se < 0.02
    mean, se = pmt.weighted_expectation(tree, lambda post: post["x"].values)
    assert abs(mean - (-1.9)) < K * se
    summary = pmt.weighted_summary(tree)
    sd = np.sqrt(sum(w * (s**2 + m**2) for w, m, s in zip(WEIGHTS, MUS, SIGMAS)) - 1.9**2)
    assert abs(summary.loc["x", "sd"] - sd) < 0.1 * sd
    resampled = pmt.resample(tree, random_seed=seed(8))["posterior"]["x"].values
    assert abs(np.mean(resampled > 0) - 0.3) < 0.05
    # the values at the chains' draws alone cannot reach the mode: it is left out
    alone, _ = pmt.weighted_expectation(tree, tree["posterior"]["x"].values > 0)
    assert alone == 0.0


def test_pooled_weights_give_each_region_its_probability_shared_by_effective_counts():
    """Each region holds its probability; a region with chain draws and mode draws shares it
    by their Kish counts, one the chains barely reached (under 10 draws) gives it all to its
    mode draws, and one without mode draws leaves it to the chains."""
    from pymc_tempering.estimators import pooled_weights

    region = np.array([[0] * 40 + [1] * 5 + [2] * 55])
    lw = np.zeros(region.shape)
    sub_region = np.array([[0] * 40 + [1] * 60])
    sub_lw = np.zeros(sub_region.shape)
    probability = np.array([0.5, 0.3, 0.2])
    w, sub_w = pooled_weights(lw, region, probability, sub_lw, sub_region)
    assert np.isclose(w.sum() + sub_w.sum(), 1.0)
    for r, p_r in enumerate(probability):
        assert np.isclose(w[region == r].sum() + sub_w[sub_region == r].sum(), p_r)
    assert np.isclose(w[region == 0].sum(), 0.5 * 40 / 80)  # 40 chain draws, 40 mode draws
    assert w[region == 1].sum() == 0.0  # 5 chain draws: the mode draws alone
    assert np.isclose(w[region == 2].sum(), 0.2)  # no mode draws


def test_further_proposal_draws_go_where_the_probabilities_variance_is():
    """Three regions, one of them noisy: the draws that the largest standard error asks for go
    mostly to the noisy region, and with them every standard error falls to about the target
    (a region's relative error falls as 1 / sqrt(draws))."""
    from pymc_tempering.stratification import _extra_draws

    p, rel = np.array([0.5, 0.3, 0.2]), np.array([0.01, 0.08, 0.01])
    n = np.full(3, 2000)
    extra = _extra_draws(p, rel, n, 0.005)
    assert extra[1] > 5 * max(extra[0], extra[2])
    new_rel = rel * np.sqrt(n / (n + extra))
    jacobian = np.diag(p) - np.outer(p, p)
    se = np.sqrt(np.diag((jacobian * new_rel**2) @ jacobian.T))
    assert se.max() < 1.1 * 0.005
