"""The mode search of the default base, the missed-mode check, and runs that extend themselves.

Issue 21: a base fitted around some modes of the target gives the others vanishing density along
the whole tempered path, every chain agrees and the evidence comes out confidently low. The mode
search (optimisations from prior draws) finds the modes independently of the sampler; the check
compares the run's weighted draws with them; the run widens its base to what it missed.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from checks import assert_within_se, seed

import pymc_tempering as pmt
from pymc_tempering.base import find_modes
from pymc_tempering.diagnostics import missed_modes
from pymc_tempering.target import Target

SEP = 8.0  # the two modes at -SEP and +SEP, unit sd: a valley of 32 nats between them


def two_modes(weight_right: float = 0.5) -> pm.Model:
    """A normalised 1-D mixture of N(-8, 1) and N(8, 1): log Z = 0 exactly."""
    with pm.Model() as model:
        pm.Mixture(
            "x",
            w=np.array([1 - weight_right, weight_right]),
            comp_dists=[pm.Normal.dist(-SEP, 1.0), pm.Normal.dist(SEP, 1.0)],
        )
    return model


def test_find_modes_finds_both_modes_with_their_laplace_masses():
    modes = find_modes(Target(two_modes(0.25)), random_seed=seed(80))
    assert len(modes) == 2
    order = np.argsort(modes.points[:, 0])
    np.testing.assert_allclose(modes.points[order, 0], [-SEP, SEP], atol=1e-3)
    # Each mode is the Gaussian component to within exp(-32): Laplace is exact for it.
    np.testing.assert_allclose(modes.probabilities[order], [0.75, 0.25], atol=1e-6)
    np.testing.assert_allclose(modes.cov[order, 0, 0], [1.0, 1.0], rtol=1e-3)


def test_find_modes_needs_a_prior_to_draw_from():
    with pm.Model() as model:
        pm.Flat("x")
        pm.Potential("p", -0.5 * model["x"] ** 2)
    assert find_modes(Target(model), random_seed=seed(81)) is None
    # given starts instead: at least two finite flat points of the model's dimension
    modes = find_modes(Target(model), starts=[[-1.0], [2.0]])
    np.testing.assert_allclose(modes.points[:, 0], [0.0], atol=1e-6)
    for bad in ([1.0, 2.0], [[1.0, 2.0]] * 2, [[1.0]], [[1.0], [np.nan]]):
        with pytest.raises(ValueError, match="starts must"):
            find_modes(Target(model), starts=bad)


def test_default_base_starts_a_fit_on_each_mode():
    with two_modes():
        base = pmt.fit_base(method="mixture", random_seed=seed(82), progressbar=False)
    assert len(base.components) == 2 and len(base.modes) == 2
    np.testing.assert_allclose(np.sort([c.mean[0] for c in base.components]), [-SEP, SEP], atol=0.1)


def _one_mode_run(max_extensions, random_seed):
    """sample_ct with a base on the left mode only, carrying the mode search's optima."""
    model = two_modes()
    modes = find_modes(Target(model), random_seed=random_seed)
    base = pmt.Base(mean=[-SEP], cov=[[1.0]], modes=modes)
    with model:
        return pmt.sample_ct(
            draws=500,
            tune=500,
            chains=2,
            base=base,
            log_zeta=-np.log(2.0),
            bootstrap=0,
            max_extensions=max_extensions,
            random_seed=random_seed,
            progressbar=False,
        )


@pytest.fixture(scope="module")
def one_mode_run():
    with pytest.warns(UserWarning, match="missed a mode"):
        return _one_mode_run(0, seed(83))


def test_missed_mode_fires_when_the_base_sees_one_of_two_modes(one_mode_run):
    # The base N(-8, 1) puts the right mode 16 sd away, behind a valley of 32 nats: no draw at
    # any temperature reaches it.
    missed, mass = missed_modes(one_mode_run)
    assert missed.sum() == 1 and mass == pytest.approx(0.5, abs=1e-6)
    lml = pmt.log_marginal_likelihood(one_mode_run)
    assert not lml.reliable
    assert any("missed a mode" in p for p in lml.problems)
    # ... which is exactly the confidently wrong answer it guards against: log 2 low.
    assert abs(lml.estimate + np.log(2.0)) < 4 * lml.standard_error + 0.05


def test_missed_mode_quiet_when_the_base_covers_both_modes():
    model = two_modes()
    modes = find_modes(Target(model), random_seed=seed(84))
    base = pmt.Base(mean=[0.0], cov=[[SEP**2 + 1.0]], modes=modes)
    with model:
        idata = pmt.sample_ct(
            draws=500, tune=500, chains=2, base=base, bootstrap=0, max_extensions=0,
            random_seed=seed(85), progressbar=False,
        )
    checks = pmt.diagnose(idata).checks
    assert checks.loc["missed_mode_mass", "ok"]
    assert checks.loc["missed_mode_mass", "value"] == 0.0


def test_run_widens_its_base_to_a_missed_mode_and_gets_the_evidence():
    idata = _one_mode_run(1, seed(86))
    kinds = list(idata["bootstrap"]["kind"].values)
    # the widened base's run has MISSED_MODE_GROWTH (2) times the draws: more excursions
    assert kinds == ["extension after a missed mode and 1000 draws per chain"]
    assert idata.attrs["extensions"] == 1 and idata["posterior"].sizes["draw"] == 1000
    lml = pmt.log_marginal_likelihood(idata)
    assert pmt.diagnose(idata).checks.loc["missed_mode_mass", "ok"]
    assert_within_se(lml.estimate, 0.0, lml.standard_error, what="log Z after widening")


def test_run_raises_target_accept_after_divergences():
    """A wall in the log density (a drop of 1e4 nats at |x| = 2) makes NUTS diverge whenever a
    trajectory at beta > 0 crosses it; the run is repeated halfway closer to an acceptance of 1,
    and the bootstrap group records why."""
    with pm.Model():
        x = pm.Normal("x", 0.0, 3.0)
        pm.Potential("wall", pm.math.switch(abs(x) < 2.0, 0.0, -1e4))
        idata = pmt.sample_ct(
            draws=300, tune=300, chains=2, bootstrap=0, max_extensions=1,
            random_seed=seed(87), progressbar=False,
        )
    first = idata["bootstrap"].to_dataset().isel(round=0)
    assert first["divergences"] > 0
    assert "divergences" in str(first["kind"].values)
    assert float(first["target_accept"]) == 0.9
    assert idata.attrs["target_accept"] == pytest.approx(0.95)


def test_default_base_is_laplace_where_importance_sampling_confirms_it():
    """Each mode of the two-mode mixture is a Gaussian, so its Laplace approximation is exact:
    the default base needs no ADVI, and its importance-sampling log_zeta is log Z = 0 (the
    base is the target up to the finite-difference Hessian and the exp(-32) overlap)."""
    with two_modes():
        base = pmt.fit_base(method="laplace", random_seed=seed(88), progressbar=False)
    assert base.method == "Laplace mixture of 2"
    assert all(c.method == "laplace" for c in base.components)
    assert abs(base.log_zeta) < 1e-4


def test_default_base_falls_back_to_advi_on_a_shell():
    """A thin 3-D Gaussian shell (radius 2, width 0.1, off the centre of its box, as in the
    evidence suite): a Gaussian at a point of the shell is no description of it, its
    importance-sampling estimate is nats below its Laplace mass, and the base is the ADVI
    mixture instead."""
    centre = np.array([3.5, 0.0, 0.0])
    with pm.Model():
        x = pm.Uniform("x", -6.0, 6.0, shape=3)
        radius = pm.math.sqrt(pm.math.sum((x - centre) ** 2))
        pm.Potential("shell", pm.logp(pm.Normal.dist(2.0, 0.1), radius))
        base = pmt.fit_base(method="laplace", random_seed=seed(89), progressbar=False)
        # a base passed in gets a bootstrap round by default, one fitted by sample_ct none
        idata = pmt.sample_ct(
            200, tune=200, chains=2, max_extensions=0, base=base, random_seed=seed(89),
            progressbar=False,
        )
    assert base.method.startswith("mixture of")
    assert all(c.method == "advi" for c in base.components)
    assert idata.attrs["bootstrap"] == 1


def test_run_extends_itself_while_the_standard_error_is_above_target_se():
    # a Student-t: the Laplace base is not the target, so the standard error is Monte Carlo
    # error far above the rounding floor (1e-7 here) and far above target_se
    with pm.Model():
        pm.StudentT("x", nu=3.0, mu=1.0, sigma=2.0)
        idata = pmt.sample_ct(
            draws=200, tune=200, chains=2, max_extensions=1, target_se=1e-5,
            random_seed=seed(90), progressbar=False,
        )
        with pytest.raises(ValueError, match="target_se"):
            pmt.sample_ct(target_se=-1.0, progressbar=False)
    assert idata.attrs["bootstrap"] == 0  # the base sample_ct fitted
    (kind,) = idata["bootstrap"]["kind"].values
    assert "standard error" in str(kind) and "refit" in str(kind)
    assert idata.attrs["extensions"] == 1
    # the chains of the repeat are longer: by the factor the standard error asks for, at most 4
    assert idata["bootstrap"]["draws"].values.tolist() == [200]
    assert idata["posterior"].sizes["draw"] == 800 and "800 draws per chain" in str(kind)
    # still above target_se when the budget is spent: unreliable, and the reason given
    lml = pmt.log_marginal_likelihood(idata)
    assert not lml.reliable
    assert any("above target_se" in p for p in lml.problems)
    assert not pmt.diagnose(idata).checks.loc["standard_error", "ok"]
    idata.attrs["target_se"] = 1.0  # the same run asked for less precision: no problem
    assert pmt.diagnose(idata).checks.loc["standard_error", "ok"]


def test_max_time_stops_the_extensions_and_says_so():
    """A wall-clock budget the first final run already spends: no extension starts, the result
    says why (``stopped_by``, a warning) and is the run ``max_extensions=0`` gives, bit for bit
    (the extensions' seeds come after the final run's). The budget is checked against the
    projected end, so a budget this small cannot be met on any machine."""
    kwargs = dict(draws=200, tune=200, chains=2, target_se=1e-5, random_seed=seed(90),
                  progressbar=False)
    with pm.Model():
        pm.StudentT("x", nu=3.0, mu=1.0, sigma=2.0)
        with pytest.warns(UserWarning, match=r"Stopped extending after .* past max_time"):
            idata = pmt.sample_ct(max_extensions=1, max_time=1e-3, **kwargs)
        with pytest.warns(UserWarning, match="above target_se"):
            plain = pmt.sample_ct(max_extensions=0, **kwargs)
        for bad in (0.0, -1.0, "1 min"):
            with pytest.raises(ValueError, match="max_time"):
                pmt.sample_ct(max_time=bad, progressbar=False)
            with pytest.raises(ValueError, match="max_time"):
                pmt.sample_gibbs_ct(max_time=bad, progressbar=False)
    assert idata.attrs["stopped_by"] == "max_time" and idata.attrs["max_time"] == 1e-3
    assert idata.attrs["extensions"] == 0 and "bootstrap" not in idata.children
    assert "stopped_by" not in plain.attrs
    assert idata.attrs["log_marginal_likelihood"] == plain.attrs["log_marginal_likelihood"]
    lml = pmt.log_marginal_likelihood(idata)
    assert not lml.reliable and any("max_time" in p for p in lml.problems)


def test_target_se_below_the_rounding_floor_is_the_floor():
    """A standard error at the rounding floor (1e-7 |log Z|: the log densities are no more
    accurate) is not extended and passes: no longer chain lowers it. Before, a normal mean with
    100,000 data (log Z = -1.1e6) had a floor of 1.1 nats, above the default target_se, and every
    run was extended twice and marked unreliable."""
    rng = np.random.default_rng(3)
    n, sigma, m0, s0 = 20_000, np.float64(2e4), 1e5, 1e5  # float64: exact constants
    y = rng.normal(1.3e5, sigma, size=n)
    ybar, ss = y.mean(), np.sum((y - y.mean()) ** 2)
    log_z = (
        -0.5 * n * np.log(2 * np.pi * sigma**2) - ss / (2 * sigma**2)
        + 0.5 * np.log(2 * np.pi * sigma**2 / n)
        + stats.norm.logpdf(ybar, m0, np.sqrt(s0**2 + sigma**2 / n))
    )
    with pm.Model():
        mu = pm.Normal("mu", m0, s0)
        pm.Normal("y", mu, sigma, observed=y)
        idata = pmt.sample_ct(
            draws=200, tune=200, chains=2, target_se=1e-4, random_seed=seed(91), progressbar=False
        )
    lml = pmt.log_marginal_likelihood(idata)
    floor = 1e-7 * abs(lml.estimate)
    assert floor > 1e-4  # the case: target_se below the floor
    assert lml.standard_error == pytest.approx(floor)
    assert idata.attrs["extensions"] == 0
    assert lml.reliable, lml.problems
    assert_within_se(lml.estimate, log_z, lml.standard_error, what="log Z")


def test_a_mode_search_that_keeps_finding_new_optima_makes_the_run_unreliable():
    """256 equal modes (a two-component mixture in each of 8 coordinates): 32 runs of the
    search from prior draws land on about 28 distinct optima, most reached by one run only
    (occupancy: 32 * (255/256)^31 = 28.3 of 32 runs alone in expectation), so the Good-Turing
    chance of a new optimum is far above 0.5 and the evidence cannot be vouched for, whatever
    its standard error. (On the Boltzmann relaxations such runs passed every other check and
    came out up to 17.4 standard errors low.) The evidence suite's ten problems, eight schools
    among them, measured 0.12 (the 18 peaks) or 0."""
    with pm.Model() as model:
        pm.NormalMixture("x", w=[0.5, 0.5], mu=[-3.0, 3.0], sigma=0.5, shape=8)
    modes = find_modes(Target(model), random_seed=seed(92))
    assert modes.hits.sum() == 32 and modes.unseen > 0.5
    with model:
        idata = pmt.sample_ct(
            200, tune=200, chains=2, max_extensions=0, random_seed=seed(92), progressbar=False
        )
    # the base's search, far from complete at 32 starts, was repeated from 128 (still far:
    # 128 * (255/256)^127 = 78 runs alone in expectation)
    assert idata["base"]["mode_hits"].values.sum() > 32
    checks = pmt.diagnose(idata).checks
    assert not checks.loc["unseen_optima", "ok"]
    lml = pmt.log_marginal_likelihood(idata)
    assert not lml.reliable and any("mode search is far from complete" in p for p in lml.problems)
