"""bases.census: the regions of a target whose mode search finds no optimum, by short NUTS runs
from prior draws, and the base built on them."""

import numpy as np
import pymc as pm
import pytest
from checks import seed
from targets import tiny_factor

import pymc_tempering as pmt
from pymc_tempering.bases.census import census_regions
from pymc_tempering.bases.modes import search_modes
from pymc_tempering.target import target_of


@pytest.fixture(scope="module")
def factor_target():
    return target_of(tiny_factor())


def test_the_mode_search_of_a_factor_model_finds_no_optimum(factor_target):
    """The case the census is for: every run climbs a spike."""
    modes, _, _, _ = search_modes(factor_target, 32, seed(1))
    assert modes is None


def test_census_finds_both_signs_and_counts_its_chains(factor_target):
    """Two regions, one per sign of lambda (their points mirror each other), every chain in
    one of them; the chains' counts are the Good-Turing census (none alone: nothing unseen).
    Their masses are described, not claimed: the stratification importance-samples them."""
    regions = census_regions(factor_target, random_seed=seed(2))
    assert len(regions) == 2 and regions.hits.sum() == 12 and regions.hits.min() >= 2
    assert regions.unseen == 0.0
    lam0 = regions.points[:, 0]
    assert np.sign(lam0[0]) == -np.sign(lam0[1])
    # the mirror image: the regions' points agree up to the sign of (lambda, f) within their widths
    sd = np.sqrt(np.diagonal(regions.cov, axis1=1, axis2=2))
    flip = np.r_[-np.ones(9), np.ones(3)]
    assert np.all(np.abs(regions.points[0] - flip * regions.points[1]) < 3 * (sd[0] + sd[1]))


def test_a_unimodal_target_is_one_region():
    """Chains in one region share it: no barrier between their means."""
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=3)
    regions = census_regions(target_of(model), n_chains=4, random_seed=seed(3))
    assert len(regions) == 1 and regions.hits.tolist() == [4]


def test_the_base_of_an_unbounded_target_covers_every_region(factor_target):
    """fit_base's default (laplace) base carries the census's regions as its modes when the
    search found none, every chain in one of them, both signs of lambda among them (a chain
    that a short run left apart, in a funnel's neck, can be a region of its own: seed 15 gave
    three, of 5, 6 and 1 chains), and its moment-matched Gaussian spans both signs."""
    base = pmt.fit_base(factor_target.model, method="laplace", random_seed=seed(4),
                        progressbar=False)
    assert base.modes is not None and base.modes.hits.sum() == 12
    assert set(np.sign(base.modes.points[:, 0])) == {-1.0, 1.0}
    gaussian = base.gaussian()
    lam0 = base.modes.points[:, 0]
    assert gaussian.mean[0] - 2 * gaussian.std[0] < lam0.min()
    assert gaussian.mean[0] + 2 * gaussian.std[0] > lam0.max()


def test_a_model_whose_density_cannot_be_evaluated_has_no_census():
    """A log density that is NaN at the prior's draws: no region, and the caller's own error
    (the ADVI fit's) names the problem."""
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0)
        pm.Potential("nan", x * np.nan)
    assert census_regions(target_of(model), n_chains=2, random_seed=seed(6)) is None
