"""The warm-up's windows (:mod:`pymc_tempering.adaptation.windows`): the preconditioner they
estimate depends on the parameters' units only through them, and a dense one gives a
correlated posterior its width.

Statistical checks are ``|estimate - truth| < K * MCSE`` (``tests/checks.py``, ``K = 4``) with
the MCSE from arviz-stats, after checking the ESS. Seeds come from ``checks.seed``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from arviz_stats.base import array_stats
from checks import K, mcse_of_mean, seed
from pymc_tempering.problems.sign_flip import sign_flip

import pymc_tempering as pmt


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_warmup_is_scale_free():
    """The warm-up depends on the parameter's units only through them: the same seed on the
    model rescaled by 1e-3 and 1e3 gives the same draws of every replica in units of ``s``, the
    same preconditioners in those units and the same minibatches per exchange (to rounding).
    The run is short (40 warm-up iterations: all four windows) because the hot replicas' dynamics
    are chaotic: rounding differences of 1e-16 grow to 1e-13 in 20 iterations and to a
    different trajectory by 100."""
    out = []
    for s in (1e-3, 1e3):
        model, _ = sign_flip(2_000, s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            idata = pmt.sample_replica_exchange(
                5, tune=40, chains=2, model=model, random_seed=seed(62), progressbar=False,
            )
        out.append((
            idata["replicas"]["theta"].values / s,
            idata["warmup"]["replica_preconditioner_scale"].values / s,
            idata["warmup"]["exchange_batches"].values,
        ))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-6)
    np.testing.assert_array_equal(out[0][2], out[1][2])
    assert out[0][2][0] == 0  # the cold pair's noise needs the exact energies (one data pass)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_dense_warmup_is_scale_free():
    """The dense preconditioner too: a correlated 2-D Gaussian (correlation 0.95, sds 1 and 3)
    with its coordinates in units ``1e-3`` and ``1e3``, then ``1e3`` and ``1e-3``; the same seed
    gives the same draws of replica exchange in those units, and the basis maps the same
    coordinates ``v`` to them (its rows scale with the units). Short (30 warm-up iterations: the
    second to fourth windows change the basis) for the reason given above. TACT-HMC's
    trajectories part sooner (its tempering variable meets discrete events, the biasing
    force's bins and the well's walls, where a rounding difference changes the branch: 6% apart
    after 16 iterations on this model with the diagonal preconditioner alone)."""
    precision = np.linalg.inv(np.array([[1.0, 0.95 * 3.0], [0.95 * 3.0, 9.0]]))
    out = []
    for units in (np.array([1e-3, 1e3]), np.array([1e3, 1e-3])):
        with pm.Model() as model:  # written in units of s, so that only rounding differs
            x = pm.Flat("x", shape=2)
            z = x / units - np.array([1.0, -2.0])
            pm.Potential("gaussian", -0.5 * pm.math.dot(z, pm.math.dot(precision, z)))
        idata = pmt.sample_replica_exchange(5, tune=30, chains=2, model=model,
                                            random_seed=seed(66), progressbar=False)
        basis = idata["warmup"]["preconditioner_basis"].values
        out.append((idata["posterior"]["x"].values / units, basis / units[:, None]))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-6)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize(
    "method",
    # a statistical run of the dense warm-up (test_dense_warmup_is_scale_free checks it in the
    # default run); replica exchange passes with the diagonal preconditioner too (its sds 0.90
    # to 1.05 of Laplace on the benchmark)
    [pytest.param(m, marks=pytest.mark.slow) for m in ("tact", "replica_exchange")],
)
def test_a_correlated_posterior_gets_its_width_from_a_dense_preconditioner(method):
    """A regression on a covariate of mean 50 and sd 10 (3,000 points, minibatches of 300,
    the noise sd known, so the posterior is Gaussian and exact): intercept and slope correlated
    -0.99. With a diagonal preconditioner the step along the ridge is bounded by its narrow
    direction, and TACT-HMC's sds came out 0.53 to 0.75 of the truth on this model with a noise
    scale (``benchmarks/minibatch.py``); from the second warm-up window the warm-up
    now decorrelates the coordinates (``adaptation.decorrelating_basis``). Each coefficient's
    sd within 10% of the exact one (the Euler step's own bias, a few percent) plus ``K`` Monte
    Carlo standard errors of the ratio, and its mean within a quarter of it plus ``K`` MCSE."""
    n, sigma = 3000, 0.5
    rng = np.random.default_rng(3)
    x = rng.normal(50, 10, n)
    y = 3.0 + 0.02 * x + rng.normal(0, sigma, n)
    design = np.column_stack([np.ones(n), x])
    cov = np.linalg.inv(design.T @ design / sigma**2 + np.diag([1 / 10.0**2, 1.0]))
    mean, sd = cov @ (design.T @ y / sigma**2), np.sqrt(np.diag(cov))
    assert cov[0, 1] / (sd[0] * sd[1]) < -0.98
    with pm.Model():
        xb, yb = pm.Minibatch(x, y, batch_size=300)
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", a + b * xb, sigma, observed=yb, total_size=n)
        sampler = pmt.sample_tact if method == "tact" else pmt.sample_replica_exchange
        idata = sampler(500, tune=500, random_seed=seed(65), progressbar=False)
    assert idata["warmup"]["preconditioner_basis"].shape == (2, 2)
    for i, name in enumerate(("a", "b")):
        d = idata["posterior"][name].values
        squared = (d - d.mean()) ** 2
        ess = float(array_stats.ess(squared, method="mean", chain_axis=0, draw_axis=1))
        ratio, ratio_se = d.std() / sd[i], np.sqrt(2 / ess) / 2
        assert abs(ratio - 1) < 0.1 + K * ratio_se, f"{name}: sd {ratio:.3f} x exact (se {ratio_se:.3f})"
        mean_se = float(mcse_of_mean(d))
        assert abs(d.mean() - mean[i]) < 0.25 * sd[i] + K * mean_se, (
            f"{name}: mean {d.mean()} against {mean[i]} (sd {sd[i]}, se {mean_se})"
        )
