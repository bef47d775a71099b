"""Mass beyond every draw of a run (``pymc_tempering.coverage``): the slab under a spike that a
spike-sized base never leaves, against exact answers."""

import dataclasses

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from checks import K, seed
from scipy import stats

import pymc_tempering as pmt
from pymc_tempering.bases.modes import Modes
from pymc_tempering.coverage import BEYOND_LIMIT, OPTIMUM_REGION, mass_beyond_draws
from pymc_tempering.target import Target

DIM, SPIKE, SLAB = 5, 0.1, 1.0


def spike_and_slab(share: float) -> pm.Model:
    """``share N(0, 0.1^2 I) + (1 - share) N(0, I)`` in 5-D, normalised: log Z = 0."""
    with pm.Model() as model:
        x = pm.Flat("x", shape=DIM)
        spike = np.log(share) + pt.sum(pm.logp(pm.Normal.dist(0.0, SPIKE), x))
        slab = np.log1p(-share) + pt.sum(pm.logp(pm.Normal.dist(0.0, SLAB), x))
        pm.Potential("mixture", pt.logaddexp(spike, slab))
    return model


@pytest.mark.parametrize("share", [0.5, 0.9])
def test_the_slab_beyond_spike_draws_is_found(share):
    """Draws of the spike alone with the log Z a spike-only run reports (log share): the slab,
    ``1 - share`` of the mass, lies beyond them, less its part within the farthest spike draw
    (P(chi2_5 < r^2 / 100) for that draw's squared radius r^2, about 1e-3)."""
    rng = np.random.default_rng(seed(1))
    x = SPIKE * rng.standard_normal((4000, DIM))
    base = pmt.Base.from_moments(np.zeros(DIM), SPIKE**2 * np.eye(DIM))
    beyond = mass_beyond_draws(Target(spike_and_slab(share)), x, np.zeros(4000), np.log(share),
                               base, random_seed=seed(2))
    radius2 = np.max(np.sum(x**2, axis=1) / SPIKE**2)
    inside = (1 - share) * stats.chi2(DIM).cdf(radius2 * SPIKE**2 / SLAB**2)
    truth = (1 - share - inside) / (1 - inside)
    assert beyond.se < 0.05
    assert abs(beyond.share - truth) < K * beyond.se, (beyond, truth)


def test_nothing_beyond_draws_of_the_whole_target():
    """Exact draws of a Gaussian target: what lies beyond the farthest of n draws is about
    1 / n of the mass, far below the limit."""
    rng = np.random.default_rng(seed(3))
    x = rng.standard_normal((4000, DIM))
    base = pmt.Base.from_moments(np.zeros(DIM), np.eye(DIM))
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=DIM)
    beyond = mass_beyond_draws(Target(model), x, np.zeros(4000), 0.0, base, random_seed=seed(4))
    assert beyond.share < BEYOND_LIMIT


def _slab_base_with_the_spike_optimum() -> pmt.Base:
    """The slab's Gaussian as the base, carrying the one optimum (at 0, the spike's width)."""
    modes = Modes(points=np.zeros((1, DIM)), log_density=np.zeros(1), log_mass=np.zeros(1),
                  cov=SPIKE**2 * np.eye(DIM)[None], hits=np.array([32]))
    return dataclasses.replace(pmt.Base.from_moments(np.zeros(DIM), SLAB**2 * np.eye(DIM)),
                               modes=modes)


def _mixture_draws(share, n, rng):
    sd = np.where(rng.uniform(size=n) < share, SPIKE, SLAB)
    return sd[:, None] * rng.standard_normal((n, DIM))


def test_a_spike_inside_the_slab_that_the_draws_missed_is_found():
    """Draws of the slab alone, with the slab's log Z: the spike (5% of the mass) is inside their
    reach, so nothing lies beyond them and log Z is 0.05 nats off (about the check's own standard
    error), but the optimum's ellipsoid holds 0.99 of the spike, plus the slab's own share,
    against the slab draws' share there."""
    share, rng = 0.05, np.random.default_rng(seed(6))
    x = _mixture_draws(0.0, 4000, rng)
    beyond = mass_beyond_draws(Target(spike_and_slab(share)), x, np.zeros(4000), np.log1p(-share),
                               _slab_base_with_the_spike_optimum(), random_seed=seed(7))
    radius2 = stats.chi2(DIM).ppf(OPTIMUM_REGION)
    slab_inside = stats.chi2(DIM).cdf(radius2 * SPIKE**2 / SLAB**2)
    drawn_inside = np.mean(np.sum(x**2, axis=1) / SPIKE**2 <= radius2)
    mass = (share * OPTIMUM_REGION + (1 - share) * slab_inside) / (1 - share)  # in the run's Z
    truth = (mass - drawn_inside) / (1 + mass - drawn_inside)
    assert 0 < beyond.near_optimum_se < 0.02
    assert abs(beyond.near_optimum - truth) < K * beyond.near_optimum_se, (beyond, truth)


def test_nothing_missed_about_the_optimum_by_draws_of_the_whole_target():
    share, rng = 0.05, np.random.default_rng(seed(8))
    x = _mixture_draws(share, 4000, rng)
    beyond = mass_beyond_draws(Target(spike_and_slab(share)), x, np.zeros(4000), 0.0,
                               _slab_base_with_the_spike_optimum(), random_seed=seed(9))
    assert beyond.near_optimum == 0.0
    assert beyond.share < BEYOND_LIMIT


def test_a_mode_that_the_weights_under_represent_is_found():
    """Two unit Gaussians at -3 and +3 with half the mass each; a run whose draws give the left
    one a tenth. Its ellipsoid holds 0.99 of its half by the check (over the run's log Z, here
    exact), against the draws' share there, over the total a run that lacked the difference
    would have."""
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        left = pt.sum(pm.logp(pm.Normal.dist(0.0, 1.0), x - np.array([-3.0, 0.0])))
        right = pt.sum(pm.logp(pm.Normal.dist(0.0, 1.0), x - np.array([3.0, 0.0])))
        pm.Potential("modes", pt.logaddexp(left, right) - np.log(2.0))
    rng = np.random.default_rng(seed(10))
    x = rng.standard_normal((4000, 2)) + np.where(np.arange(4000) < 400, -3.0, 3.0)[:, None] * [1, 0]
    centres = np.array([[-3.0, 0.0], [3.0, 0.0]])
    modes = Modes(points=centres, log_density=np.zeros(2), log_mass=np.zeros(2),
                  cov=np.stack([np.eye(2)] * 2), hits=np.array([16, 16]))
    base = dataclasses.replace(pmt.Base.from_moments(np.zeros(2), np.diag([10.0, 1.0])), modes=modes)
    beyond = mass_beyond_draws(Target(model), x, np.zeros(4000), 0.0, base, random_seed=seed(11))
    radius2 = stats.chi2(2).ppf(OPTIMUM_REGION)
    drawn_left = np.mean(np.sum((x - centres[0]) ** 2, axis=1) <= radius2)
    truth = (0.5 * OPTIMUM_REGION - drawn_left) / (1 + 0.5 * OPTIMUM_REGION - drawn_left)
    assert beyond.near_optimum_se < 0.05
    assert abs(beyond.near_optimum - truth) < K * beyond.near_optimum_se, (beyond, truth)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_sample_ct_says_a_missed_slab_makes_it_unreliable():
    """At the defaults the base is the spike's Laplace Gaussian, and a run whose chains never
    leave the spike estimates log(0.5) with a tiny standard error. Whatever the chains do, the
    run is right within its standard error or unreliable; one that missed a phase (the slab,
    or the spike when the chains went out into the slab and never came back) names it, for
    the evidence and for the posterior."""
    with pytest.warns(UserWarning):
        idata = pmt.sample_ct(model=spike_and_slab(0.5), random_seed=seed(5), progressbar=False)
    lml = pmt.log_normalizing_constant(idata)
    assert not lml.reliable or abs(lml.estimate) < K * lml.standard_error, lml
    if abs(lml.estimate - np.log(0.5)) < 0.05:  # a phase missed
        assert any("no draw of the run went" in p for p in lml.problems), lml.problems
        # beyond the draws, or inside their reach (the check's log Z above the run's)
        missed = pmt.diagnose(idata).checks.loc["mass_beyond_draws", "value"]
        assert missed == pytest.approx(0.5, abs=0.1)
        assert not idata.attrs["posterior_reliable"]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_the_record_is_a_group_written_and_read_back_whole(tmp_path):
    """The check's record lives in the result's ``coverage`` group: written by coverage_group,
    read by read_coverage to the same Beyond (through a zarr store too, as sample_many saves
    results); a result without the group has none."""
    import xarray as xr
    from xarray import DataTree

    from pymc_tempering.coverage import COVERAGE, Beyond, coverage_group, read_coverage

    beyond = Beyond(0.0123, 0.0045, -1.2345678901234, 0.0567, 0.0089, 0.0012)
    tree = DataTree.from_dict({"/posterior": xr.Dataset(), f"/{COVERAGE}": coverage_group(beyond)})
    assert read_coverage(tree) == beyond
    assert set(tree[COVERAGE].data_vars) == {
        "mass_beyond_draws", "mass_beyond_draws_se", "log_z", "log_z_se", "mass_near_optima",
        "mass_near_optima_se",
    }
    tree.to_zarr(tmp_path / "result.zarr", consolidated=False)
    stored = xr.open_datatree(tmp_path / "result.zarr", engine="zarr", consolidated=False)
    assert read_coverage(stored) == beyond
    assert read_coverage(DataTree.from_dict({"/posterior": xr.Dataset()})) is None
