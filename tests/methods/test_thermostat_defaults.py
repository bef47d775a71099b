"""TACT-HMC and replica exchange at their defaults (``step_size="auto"``, the warm-up of
:mod:`pymc_tempering.adaptation`) as a user meets them: the sign-flip posterior across data
sizes and units, the warnings a run at the defaults gives, and the options it refuses.

The sign-flip posterior (``targets.sign_flip``): ``theta ~ N(0, 3 s)``,
``y_i ~ N((theta / s)^2, 1)`` for ``n`` data points drawn with mean ``1.5^2``, minibatches of
200. Two modes at ``theta = +-s u0`` (``u0^2 = ybar - 1 / (18 n)``), each with Laplace standard
deviation ``s / sqrt(4 n u0^2 + 1/9)`` in ``theta``. Checked for each run:

- no divergence (the run finishes; blow-ups during the warm-up are undone and counted);
- both modes visited, with weight within ``K`` standard errors of 1/2. The barrier between the
  modes is ``n ybar^2 / 2`` nats (1,266 at ``n = 500``). In the sweep the chains start jittered
  symmetrically about the saddle at 0 and the chains are the independent units: the standard
  error is that of the mean of the per-chain fractions (TACT-HMC, whose default hottest
  temperature is 10, does not cross the barrier). In the crossing test every chain starts in
  the + mode, and replica exchange (hottest temperature ``n`` by default) must carry the
  crossings of its hot replicas down to ``T = 1``: the standard error is the Monte Carlo one of
  the mode indicator's mean, from its ESS;
- the draws' spread around each mode within 25% of the Laplace standard deviation, up to
  ``K`` Monte Carlo standard errors of the ratio (and their mean within 25% of that standard
  deviation of the mode, up to ``K`` MCSE). The posterior is symmetric, so the folded draws
  ``|theta|`` give the MCSE of the variance (arviz-stats, over the chains), which is divided by
  the square root of the mode's share of the draws for one mode's ratio.

The expensive cases are ``slow``; one case per method (and one crossing case) runs by default.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from arviz_stats.base import array_stats
from checks import K, assert_within_se, mcse_of_mean, seed
from pymc_tempering.problems.sign_flip import sign_flip, sign_flip_laplace

import pymc_tempering as pmt

def check_sign_flip(idata, y, s: float, weight_se: str = "chains") -> dict:
    """The three checks of the module docstring on a run; returns what was measured.

    ``weight_se="chains"``: the standard error of the + mode's weight is that of the mean of
    the per-chain fractions (chains started symmetrically, each possibly stuck); ``"ess"``:
    the Monte Carlo standard error of the mean of the mode indicator from its effective sample
    size (arviz-stats), for runs whose chains change mode, after checking that ESS.
    """
    assert not idata["sample_stats"]["diverging"].values.any()
    theta = idata["posterior"]["theta"].values  # (chain, draw)
    chains = theta.shape[0]
    mode, sd_laplace = sign_flip_laplace(y, s)
    per_chain = (theta > 0).mean(axis=1)
    weight = per_chain.mean()
    assert 0 < weight < 1, f"one mode only: weight {weight}"
    out = {"weight": weight}
    if weight_se == "chains":
        se = per_chain.std(ddof=1) / np.sqrt(chains)
    else:
        indicator = (theta > 0).astype(float)
        ess_w = float(np.asarray(
            array_stats.ess(indicator, method="mean", chain_axis=0, draw_axis=1)
        ))
        assert ess_w > 50, f"ESS of the mode indicator {ess_w}: too few crossings to judge"
        se = float(mcse_of_mean(indicator))
        out["ess_weight"] = ess_w
        out["crossings_per_chain"] = float(np.mean(np.sum(np.diff(indicator, axis=1) != 0, 1)))
    assert_within_se(weight, 0.5, se, what="weight of the + mode")
    out["weight_se"] = se
    # spread around each mode: within 25% of the Laplace sd, up to K MCSE of the ratio
    folded = np.abs(theta)
    squared = (folded - folded.mean()) ** 2
    ess = float(np.asarray(array_stats.ess(squared, method="mean", chain_axis=0, draw_axis=1)))
    assert ess > 50, f"ESS of the spread {ess}: the run is too short for its own check"
    var_se = float(mcse_of_mean(squared))
    out["ess_spread"] = ess
    for sign, share in ((1, weight), (-1, 1 - weight)):
        draws = theta[theta * sign > 0]
        sd = draws.std()
        ratio = sd / sd_laplace
        ratio_se = ratio * var_se / (2 * sd**2) / np.sqrt(share)
        assert abs(ratio - 1) < 0.25 + K * ratio_se, (
            f"mode {sign:+d}: spread {ratio:.3f} x Laplace sd (se {ratio_se:.3f})"
        )
        # and centred on the mode, within 25% of the Laplace sd up to K MCSE (the folded mean's)
        mean_se = float(mcse_of_mean(folded)) / np.sqrt(share)
        assert abs(abs(draws.mean()) - mode) < 0.25 * sd_laplace + K * mean_se, (
            f"mode {sign:+d}: mean {draws.mean()} against {sign * mode} (se {mean_se})"
        )
        out[f"ratio{sign:+d}"], out[f"ratio_se{sign:+d}"] = ratio, ratio_se
    return out


def run(method: str, n: int, s: float, chains: int = 16, draws: int = 1000, tune: int = 1000,
        one_mode: bool = False):
    model, y = sign_flip(n, s)
    sampler = pmt.sample_tact if method == "tact" else pmt.sample_replica_exchange
    kwargs = {}
    if one_mode:  # every chain (every replica) starts at the + mode
        kwargs["initial_points"] = np.full((chains, 1), sign_flip_laplace(y, s)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy overflow in a blown-up step
        idata = sampler(draws, tune=tune, chains=chains, model=model, random_seed=seed(61),
                        progressbar=False, **kwargs)
    assert idata.attrs["step_size_mode"] == "auto"
    return idata, y


SWEEP = [(500, 1.0), (20_000, 1.0), (200_000, 1.0), (20_000, 1e-3), (20_000, 1e3)]
# replica exchange's default case is the crossing test's (below): at n = 20,000 its exchange
# test averages up to 400 minibatches per swap near T = 1, too slow for the default run
DEFAULT_CASES = {("tact", 20_000, 1e-3)}


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize(
    "method,n,s",
    [
        pytest.param(
            m, n, s, marks=() if (m, n, s) in DEFAULT_CASES else pytest.mark.slow,
            id=f"{m}-n{n}-s{s:g}",
        )
        for m in ("tact", "replica_exchange")
        for n, s in SWEEP
    ],
)
def test_sign_flip_at_defaults(method, n, s):
    """No divergence, both modes with weight 1/2, spread within 25%."""
    draws = tune = 200 if (method, n, s) in DEFAULT_CASES else 1000
    idata, y = run(method, n, s, draws=draws, tune=tune)
    measured = check_sign_flip(idata, y, s)
    print(method, n, s, {k: round(float(v), 4) for k, v in measured.items()})  # for -s runs
    scale = idata["warmup"]["preconditioner_scale"].values
    assert scale.shape == (1,) and np.all(np.isfinite(scale) & (scale > 0))


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_chains_left_in_different_modes_warn_as_pm_sample_does():
    """Safe defaults: a run that finishes with chains that disagree warns (PyMC's
    R-hat and ESS checks). TACT-HMC at its defaults cannot cross the sign-flip barrier (1,266
    nats at n = 500): two chains started in each mode stay there, and R-hat says so. Chains
    that agree do not warn: a standard normal, 200 draws (R-hat at most 1.0041 over eight
    seeds, ESS 740 to 1000)."""
    model, y = sign_flip(500, 1.0)
    mode = sign_flip_laplace(y, 1.0)[0]
    kwargs = dict(tune=100, chains=4, random_seed=seed(64), progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.warns(UserWarning, match=r"tact_hmc: R-hat above 1.01 \(largest"):
            idata = pmt.sample_tact(
                100, model=model, initial_points=np.array([[mode], [mode], [-mode], [-mode]]),
                **kwargs,
            )
        assert set((idata["posterior"]["theta"].values > 0).mean(1)) == {0.0, 1.0}
        with pm.Model() as normal:
            pm.Normal("x", 0, 1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pmt.sample_tact(200, model=normal, **kwargs)
    assert not [w for w in caught if "R-hat" in str(w.message)]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_bad_step_size_strings_are_refused():
    model, _ = sign_flip(50, 1.0)
    with pytest.raises(ValueError, match="step_size"):
        pmt.sample_tact(5, model=model, step_size="large", progressbar=False)
    with pytest.raises(ValueError, match="step_size"):
        pmt.sample_replica_exchange(5, model=model, step_size="large", progressbar=False)
    # the thermostat option: TACT-HMC's variants say whether there is one, replica exchange's
    # False is a constant friction; True (the old spelling of replica exchange's) is refused
    for bad in ("per_coordinate", True, False):
        with pytest.raises(ValueError, match="thermostat must be 'diagonal' or 'scalar'"):
            pmt.sample_tact(5, model=model, thermostat=bad, progressbar=False)
    for bad in ("per_coordinate", True, None):
        with pytest.raises(ValueError, match="thermostat must be 'diagonal', 'scalar' or False"):
            pmt.sample_replica_exchange(5, model=model, thermostat=bad, progressbar=False)


CROSSING_DEFAULT_CASES = {("replica_exchange", 500, 1.0)}


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize(
    "method,n,s",
    [
        pytest.param(
            m, n, s, marks=() if (m, n, s) in CROSSING_DEFAULT_CASES else pytest.mark.slow,
            id=f"{m}-n{n}-s{s:g}",
        )
        for m in ("replica_exchange",)  # TACT-HMC does not cross yet: see docs/tact_hmc.md
        for n, s in SWEEP
    ],
)
def test_sign_flip_crosses_the_barrier_at_defaults(method, n, s):
    """Every chain starts in the + mode; at the defaults (``max_temperature="auto"``) the
    draws at ``T = 1`` visit both modes with weight 1/2 within ``K`` Monte Carlo standard
    errors (from the ESS of the mode indicator), and keep the spread around each mode within
    25% of the Laplace sd. The barrier is about ``2.53 n`` nats.

    From ``n = 20 000`` on (11 and 14 rungs) the warm-up is 3000 iterations: after the default
    1000 the ladder has not yet forgotten the one-mode start, and the draws' weight of the +
    mode stays high by more than its Monte Carlo error (0.586 +- 0.027 at ``n = 20 000``;
    0.606 +- 0.024 at ``n = 200 000``, whose first quarter of draws is at 0.66 to 0.72 over
    seeds), which the ESS does not see because every chain starts alike
    (``docs/replica_exchange.md``). The sweep above runs those sizes at the defaults from
    symmetric starts."""
    idata, y = run(method, n, s, one_mode=True, tune=1000 if n < 20_000 else 3000)
    measured = check_sign_flip(idata, y, s, weight_se="ess")
    print(method, n, s, {k: round(float(v), 4) for k, v in measured.items()})  # for -s runs
    assert idata.attrs["max_temperature"] >= n


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_a_mode_no_chain_visits_is_warned_about():
    """Chains that all miss the same mode agree, so R-hat cannot see it: on a model without
    minibatches the drivers compare the draws with the optima of a mode search. Every chain
    starts at the middle mode of a mixture of three normals (weights 0.2, 0.3, 0.5 at -20, 0,
    30); the barrier to the 0.5 mode, about 450 nats, is far beyond what TACT-HMC's hottest
    temperature (10) flattens, so that mode's half of the mass is missed. The barrier to the
    0.2 mode, about 12 nats, is crossed in some runs and not in others (PMT_TEST_SEED=3: not),
    so the missed mass is 0.5, or 0.7 with that mode."""
    with pm.Model():
        pm.NormalMixture("x", w=[0.2, 0.3, 0.5], mu=[-20.0, 0.0, 30.0], sigma=[1.0, 2.0, 0.5])
        with pytest.warns(UserWarning, match="never came near [12] of the 3 local maxima"):
            idata = pmt.sample_tact(
                200, tune=200, initial_points=np.zeros((4, 1)), random_seed=seed(63),
                progressbar=False,
            )
    x = idata["posterior"]["x"].values
    assert (x < 10).all()
    mass = idata.attrs["missed_mode_mass"]
    if (x < -10).any():  # a few draws there may still be too few to count as a visit
        assert mass == pytest.approx(0.5, abs=0.01) or mass == pytest.approx(0.7, abs=0.01)
    else:
        assert mass == pytest.approx(0.7, abs=0.01)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_a_mode_no_chain_visits_is_warned_about_on_minibatches():
    """The same check on a ``pm.Minibatch`` model, against the optima of the exact full-data
    density (one pass over the data per evaluation): the sign-flip posterior with 2,000 data,
    every chain started in the - mode, stays there (a barrier of about 5,000 nats), and the + mode
    with half the mass is reported missed. Chains started in both modes miss nothing."""
    import warnings

    model, y = sign_flip(2000, 1.0)
    u, _ = sign_flip_laplace(y, 1.0)
    kwargs = dict(draws=100, tune=100, random_seed=seed(64), progressbar=False)
    with model:
        with pytest.warns(UserWarning, match="never came near 1 of the 2 local maxima"):
            idata = pmt.sample_tact(initial_points=np.full((4, 1), -u), **kwargs)
        assert idata.attrs["missed_mode_mass"] == pytest.approx(0.5, abs=0.01)
        assert (idata["posterior"]["theta"].values < 0).all()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idata = pmt.sample_tact(initial_points=np.array([[-u], [u], [-u], [u]]), **kwargs)
    assert not [w for w in caught if "never came near" in str(w.message)]
    assert idata.attrs["missed_mode_mass"] < 0.05


