"""Replica exchange with thermostats (:func:`~pymc_tempering.sample_replica_exchange`): its
options, the minibatch noise estimate of the exchange energies, one pass over the data for
exact energies, the hot replicas' proper densities, and the mode weights of bimodal targets.
The move itself (the corrected test, the swaps) is tested in ``tests/kernels/test_exchange.py``.

Statistical checks are ``|estimate - truth| < K * standard error`` (``tests/checks.py``,
``K = 4``): binomial for acceptance frequencies, MCSE from arviz-stats for sampler output (after
checking the ESS). Seeds come from ``checks.seed`` (shifted by ``PMT_TEST_SEED``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from checks import K, assert_near_laplace, assert_within_mcse, assert_within_se, seed
from scipy.stats import halfnorm, norm
from pymc_tempering.problems.minibatch import minibatch_regression

from pymc_tempering.methods.replica_exchange import (
    minibatch_exchange_energies,
    sample_replica_exchange,
)
from pymc_tempering.kernels.exchange import CORRECTION_SD, temperature_ladder
from pymc_tempering.target import Target, full_data_energies


# ---------------------------------------------------------------------------------------------
# exact, no sampling
# ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_ladder_and_settings_are_validated():
    np.testing.assert_allclose(temperature_ladder(3, 9.0), [1, 3, 9])
    np.testing.assert_allclose(temperature_ladder([1, 2, 5]), [1, 2, 5])
    assert temperature_ladder(1).tolist() == [1.0]
    for bad in ([2, 3], [1, 3, 2], [1, 1, 2], [1, np.inf]):
        with pytest.raises(ValueError, match="ladder"):
            temperature_ladder(bad)
    with pytest.raises(ValueError, match="max_temperature"):
        temperature_ladder(4, 0.5)
    with pm.Model() as m:
        pm.Normal("x")
    with pytest.raises(ValueError, match="exchange_every"):
        sample_replica_exchange(5, model=m, exchange_every=0, progressbar=False)
    with pytest.raises(ValueError, match="ladder"):
        sample_replica_exchange(5, model=m, ladder=[1.5, 3], progressbar=False)
    with pytest.raises(ValueError, match="n_temperatures"):
        sample_replica_exchange(5, model=m, n_temperatures=2.5, progressbar=False)
    with pytest.raises(ValueError, match="n_temperatures"):
        sample_replica_exchange(5, model=m, n_temperatures=3, ladder=[1, 2], progressbar=False)
    with pytest.raises(ValueError, match="tune"):
        sample_replica_exchange(5, -1, model=m, progressbar=False)
    with pm.Model() as discrete:
        pm.Poisson("k", 3.0)
    with pytest.raises(ValueError, match="discrete"):
        sample_replica_exchange(5, model=discrete, progressbar=False)


# ---------------------------------------------------------------------------------------------
# minibatch noise estimate
# ---------------------------------------------------------------------------------------------


def test_minibatch_noise_estimate_matches_spread_of_energy_differences():
    """Two comparisons of means of 2000 independent minibatches at K = 4 (each 6e-5); the second
    allows K standard errors for each of the two estimates it compares."""
    rng = np.random.default_rng(0)
    y = rng.normal(1.0, 2.0, 2000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        yb = pm.Minibatch(y, batch_size=200)
        pm.Normal("y", mu, 2.0, observed=yb, total_size=y.size)
    target = Target(model)
    energies = minibatch_exchange_energies(target, random_seed=seed(1))
    theta = np.array([[0.9], [1.1]])
    diffs, sds = [], []
    for _ in range(2000):
        u, t = energies(theta)
        assert t.shape == (2, 200)
        d = t[0] - t[1]
        diffs.append(u[0] - u[1])
        sds.append(np.sqrt(d.size * d.var(ddof=1)))
    diffs, sds = np.array(diffs), np.array(sds)
    # full-data energy difference of the likelihood (the tempered part; the prior is not), exactly
    full = -(np.sum(-0.5 * ((y - 0.9) / 2) ** 2) - np.sum(-0.5 * ((y - 1.1) / 2) ** 2))
    n = diffs.size
    assert_within_se(diffs.mean(), full, diffs.std() / np.sqrt(n), what="energy difference")
    # the per-minibatch estimate of sigma agrees with the spread over minibatches (the sd of a
    # sample sd from n normal draws is about sd / sqrt(2 n))
    assert abs(sds.mean() - diffs.std()) < K * diffs.std() / np.sqrt(2 * n) + K * sds.std() / np.sqrt(n)


def test_full_data_energies_are_the_full_data_energy():
    """One pass over the data (the last of 101 batches padded) gives the full-data energy: a
    regression on two minibatched arrays, a scale with a log transform, and an observed
    variable without ``pm.Minibatch``, against SciPy's densities (to the float sums'
    rounding)."""
    rng, n = np.random.default_rng(5), 20_001
    x, y = rng.normal(size=(n, 3)), rng.normal(2.0, 1.0, size=n)
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y, batch_size=200)
        theta = pm.Normal("theta", 0, 3)
        b = pm.Normal("b", 0, 1, shape=3)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", theta**2 + xb @ b, s, observed=yb, total_size=n)
        pm.Normal("z", theta, 1, observed=[0.3, 0.1])
    target = Target(model)
    energy, length, m = full_data_energies(target)
    assert (length, m) == (n, 200)
    points = rng.normal(0.5, 0.3, size=(7, target.ndim))
    want = []
    for point in points:
        v = target.unravel(point)
        sd = np.exp(v["s_log__"])
        logp = (norm.logpdf(v["theta"], 0, 3) + norm.logpdf(v["b"], 0, 1).sum()
                + halfnorm.logpdf(sd, scale=2) + v["s_log__"]
                + norm.logpdf(y, v["theta"] ** 2 + x @ v["b"], sd).sum()
                + norm.logpdf([0.3, 0.1], v["theta"], 1).sum())
        want.append(-float(logp))
    np.testing.assert_allclose(energy(points), want, rtol=1e-10)
    # with its gradient (what the missed-mode check's search uses), against central differences
    both, _, _ = full_data_energies(target, gradient=True)
    u, grad = both(points)
    np.testing.assert_allclose(u, want, rtol=1e-10)
    h = 1e-5
    steps = h * np.eye(target.ndim)
    numeric = np.stack(
        [(energy(points + e) - energy(points - e)) / (2 * h) for e in steps], axis=1
    )
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-3)
    assert full_data_energies(target, max_length=n - 1) is None


def test_full_data_energies_need_one_minibatch_call():
    """Two ``pm.Minibatch`` calls (two data sets): no single pass, the test averages."""
    rng = np.random.default_rng(1)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y1", mu, 1, observed=pm.Minibatch(rng.normal(size=500), batch_size=50),
                  total_size=500)
        pm.Normal("y2", mu, 1, observed=pm.Minibatch(rng.normal(size=300), batch_size=30),
                  total_size=300)
    assert full_data_energies(Target(model)) is None


# ---------------------------------------------------------------------------------------------
# the tempered family: prior times likelihood^(1/T)
# ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow  # kernels/test_exchange.py checks the tempering of the likelihood alone
def test_hot_replicas_of_a_regression_stay_proper_at_the_defaults():
    """At the default hottest temperature (the number of data), tempering the whole posterior
    flattened the prior as much: on this regression (30,000 data, minibatches of 300) the hot
    replicas wandered off until the warm-up had halved its step 12 times and raised
    (``DivergenceError``). With the likelihood tempered, the run finishes; the
    ``T = 1`` draws' means are within ``K`` Monte Carlo standard errors plus 0.25 posterior sds of
    the full-data Laplace approximation (Gaussian to well within that at this size) and their
    sds within 25% of it plus ``K`` standard errors."""
    n = 30_000
    with minibatch_regression(n):
        point = pm.find_MAP(progressbar=False)
        cov = np.linalg.inv(pm.find_hessian(point))  # the negated Hessian: the precision
    idata = sample_replica_exchange(
        model=minibatch_regression(n, batch_size=300), random_seed=seed(21), progressbar=False
    )
    assert idata.attrs["max_temperature"] == n
    hot = idata["replicas"]["a"].isel(replica=-1).values
    assert np.all(np.isfinite(hot)) and np.abs(hot).max() < 10 * 10  # ten prior sds
    # the Laplace sds in the unconstrained space: a, b, log s
    sd = np.sqrt(np.diag(cov))
    for k, (name, mean) in enumerate((("a", point["a"]), ("b", point["b"]),
                                      ("s_log__", point["s_log__"]))):
        group = "unconstrained_posterior" if name == "s_log__" else "posterior"
        assert_near_laplace(idata[group][name].values, mean, sd[k], what=name)


# ---------------------------------------------------------------------------------------------
# bimodal target: replica exchange finds the weights, a single replica does not
# ---------------------------------------------------------------------------------------------


def bimodal_model():
    with pm.Model() as model:
        pm.Mixture(
            "x",
            w=[0.3, 0.7],
            comp_dists=[pm.Normal.dist(-3.0, 0.5), pm.Normal.dist(3.0, 0.5)],
        )
    return model


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_bimodal_weights_replica_exchange_vs_single_replica():
    """One weight at K = 4 MCSE (6e-5) after an ESS check. Every pair's swap rate above 0.2: the
    rates of this geometric ladder are about 0.5 to 0.7 (ratio 1.53 per rung), each the mean of
    1500 rounds per chain. The single replica never crosses a barrier of about 18 nats."""
    model = bimodal_model()
    chains = 4
    start = np.full((chains, 1), -3.0)  # every replica starts in the lighter mode
    kwargs = dict(
        model=model, chains=chains, step_size=0.01, steps_per_sample=10,
        initial_points=start, tune=200, progressbar=False,
    )
    re = sample_replica_exchange(
        3000, n_temperatures=8, max_temperature=20.0, random_seed=seed(11), **kwargs
    )
    right = (re.posterior["x"].values > 0).astype(float)
    _, mcse = assert_within_mcse(right, 0.7, min_ess=100, what="weight of the right mode")
    assert re["replicas"]["x"].sizes["replica"] == 8
    rates = re["replica_exchange"]["swap_acceptance_rate"].values
    assert np.all(rates > 0.2)
    assert int(re["replica_exchange"]["swap_skipped"].sum()) == 0
    # the same dynamics with one replica (T = 1 only) stays in the starting mode
    single = sample_replica_exchange(3000, n_temperatures=1, random_seed=seed(11), **kwargs)
    frac = float((single.posterior["x"].values > 0).mean())
    assert abs(frac - 0.7) > 10 * mcse and abs(frac - 0.7) > 0.3, frac


def label_switching_mixture(minibatch: bool = True) -> pm.Model:
    """Two normal components of unit sd at -1 and 1.5 (weights 0.4, 0.6), 10,000 data; the
    means ``N(0, 5)`` and the weights ``Dirichlet(1, 1)``: a posterior of two label-switched
    modes of equal mass, thousands of nats apart."""
    rng = np.random.default_rng(0)
    n = 10_000
    first = rng.random(n) < 0.4
    y = np.where(first, rng.normal(-1.0, 1.0, n), rng.normal(1.5, 1.0, n))
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        mu = pm.Normal("mu", 0.0, 5.0, shape=2)
        observed = pm.Minibatch(y, batch_size=200) if minibatch else y
        pm.NormalMixture("y", w=w, mu=mu, sigma=1.0, observed=observed,
                         total_size=n if minibatch else None)
    return model


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_a_label_switching_mixture_at_the_defaults():
    """Replica exchange at its defaults on :func:`label_switching_mixture`: no divergent draw
    beyond 1%, every chain switches labelling at ``T = 1`` and holds each for between 5% and
    95% of its draws, and within a mode (the means sorted) the means within 0.25 posterior sds
    plus ``K`` Monte Carlo standard errors of the full-data Laplace approximation and the sds
    within 25% of it plus ``K`` standard errors. Without the warm-up undoing kicks beyond
    ``max_kick`` (``ThermostatParams.kick_raises``), a kick in the second window throws a mean far
    out and every draw is tamed, each chain in one labelling.

    The labelling's weight, 1/2 by symmetry, is not checked against its Monte Carlo error: the
    chains switch 110 to 190 times each, but their shares wander over hundreds of draws
    (0.25 to 0.71 per chain at ``PMT_TEST_SEED`` 0 to 3; the ESS of the indicator 33 to 170,
    and ``tune=3000`` did not raise it), so four chains cannot calibrate it. The 5% to 95% band
    is 3.7 of the chains' sd of about 0.12 from 1/2."""
    with label_switching_mixture(minibatch=False):
        point = pm.find_MAP(start={"mu": np.array([-1.0, 1.5]),
                                   "w_simplex__": np.array([np.log(0.4 / 0.6)])},
                            progressbar=False)
        cov = np.linalg.inv(pm.find_hessian(point))  # w_simplex__, then mu
    mode, sd = np.sort(point["mu"]), np.sqrt(np.diag(cov))[1:][np.argsort(point["mu"])]
    idata = sample_replica_exchange(
        model=label_switching_mixture(), random_seed=seed(14), progressbar=False
    )
    assert idata["sample_stats"]["diverging"].values.mean() < 0.01
    mu = idata["posterior"]["mu"].values
    labelling = mu[..., 0] < mu[..., 1]
    switches = (np.diff(labelling.astype(int), axis=1) != 0).sum(axis=1)
    share = labelling.mean(axis=1)
    assert np.all(switches >= 10) and np.all((share > 0.05) & (share < 0.95)), (switches, share)
    ordered = np.sort(mu, axis=-1)
    for k in range(2):
        assert_near_laplace(ordered[..., k], mode[k], sd[k], what=f"sorted mu {k}")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_flat_prior_and_potential_runs_with_the_potential_tempered():
    """A density written as a potential on a flat variable (the poster's ``U(theta)``): its
    prior is a constant, whose gradient PyTensor calls disconnected (the run must not raise at
    compile time); the replicas temper the potential: at ``T`` the two-mode
    potential's barrier (18 nats) is ``18 / T`` nats, so the hottest replica (``T = 20``)
    visits both modes from a start in one."""
    with pm.Model() as model:
        x = pm.Flat("x")
        pm.Potential("u", pm.math.logsumexp(pt.stack([
            pm.logp(pm.Normal.dist(-3.0, 0.5), x) + np.log(0.3),
            pm.logp(pm.Normal.dist(3.0, 0.5), x) + np.log(0.7),
        ])))
    idata = sample_replica_exchange(
        200, tune=100, model=model, chains=2, n_temperatures=8, max_temperature=20.0,
        initial_points=np.full((2, 1), -3.0), random_seed=seed(12), progressbar=False,
    )
    hot = idata["replicas"]["x"].isel(replica=-1).values
    assert (hot > 0).any() and (hot < 0).any()


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_reproducible_for_a_seed():
    model = bimodal_model()
    kwargs = dict(model=model, n_temperatures=4, tune=20, chains=2, random_seed=seed(5),
                  progressbar=False)
    a, b = sample_replica_exchange(50, **kwargs), sample_replica_exchange(50, **kwargs)
    np.testing.assert_array_equal(a.posterior["x"].values, b.posterior["x"].values)
    np.testing.assert_array_equal(
        a["replica_exchange"]["swap_accepted"].values, b["replica_exchange"]["swap_accepted"].values
    )


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_minibatch_model_runs_with_corrected_test():
    rng = np.random.default_rng(2)
    y = rng.normal(1.0, 2.0, 1000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 2.0, observed=pm.Minibatch(y, batch_size=500), total_size=y.size)
    res = sample_replica_exchange(
        100, 20, 2, model=model, ladder=[1.0, 1.05, 1.1], step_size=1e-3,
        initial_points=np.full((2, 1), 1.0), random_seed=seed(3), progressbar=False,
    )
    assert res.attrs["exchange_test"] == "corrected_logistic"
    ex = res["replica_exchange"]
    assert int(ex["swap_attempted"].sum()) > 0
    # neighbouring temperatures this close and batches of 500: sigma is far below 1
    assert int(ex["swap_skipped"].sum()) == 0 and int(ex["swap_accepted"].sum()) > 0
    assert float(ex["exchange_noise_sd_max"].max()) < CORRECTION_SD
    assert int((ex["swap_accepted"] + ex["swap_skipped"]).sum()) <= int(ex["swap_attempted"].sum())
    assert np.isfinite(res.posterior["mu"].values).all()


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_minibatch_run_reproducible_for_a_seed():
    """Both compiled minibatch functions (dynamics and exchange test) draw seeded minibatches."""
    y = np.random.default_rng(2).normal(1.0, 2.0, 1000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 2.0, observed=pm.Minibatch(y, batch_size=500), total_size=y.size)
    energies = [minibatch_exchange_energies(Target(model), random_seed=1) for _ in range(2)]
    theta = np.array([[0.9], [1.1]])
    assert [float(energies[0](theta)[0][0]) for _ in range(5)] == [
        float(energies[1](theta)[0][0]) for _ in range(5)
    ]
    kwargs = dict(model=model, ladder=[1.0, 1.05, 1.1], tune=20, chains=2, step_size=1e-3,
                  initial_points=np.full((2, 1), 1.0), random_seed=seed(3), progressbar=False)
    a, b = sample_replica_exchange(100, **kwargs), sample_replica_exchange(100, **kwargs)
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)
    np.testing.assert_array_equal(
        a["replica_exchange"]["swap_accepted"].values, b["replica_exchange"]["swap_accepted"].values
    )


