"""The mode search: optima with their Laplace masses, given starts, the spike of a centred
group, and a search far from complete.

The search (optimisations from prior draws) finds the modes of the target independently of the
sampler: a base fitted around some of them gives the others vanishing density along the whole
tempered path.
"""

import numpy as np
import pymc as pm
import pytest
from checks import assert_within_se, seed
from pymc_tempering.problems.mixtures import TWO_MODES_SEP as SEP
from pymc_tempering.problems.mixtures import two_modes

import pymc_tempering as pmt
from pymc_tempering.bases import find_modes, search_modes
from pymc_tempering.problems.schools import eight_schools_model
from pymc_tempering.target import Target

TAU = 1  # flat coordinate of tau_log__ (after mu) in the centred eight schools


def test_find_modes_finds_both_modes_with_their_laplace_masses():
    modes = find_modes(Target(two_modes(0.25)), random_seed=seed(80))
    assert len(modes) == 2
    order = np.argsort(modes.points[:, 0])
    np.testing.assert_allclose(modes.points[order, 0], [-SEP, SEP], atol=1e-3)
    # Each mode is the Gaussian component to within exp(-32): Laplace is exact for it.
    np.testing.assert_allclose(modes.probabilities[order], [0.75, 0.25], atol=1e-6)
    np.testing.assert_allclose(modes.cov[order, 0, 0], [1.0, 1.0], rtol=1e-3)


def test_find_modes_without_a_prior_starts_about_the_initial_point():
    """pm.Flat and a potential of two modes, 0.5 N(-3, 1) + 0.5 N(3, 1), from an initial point
    between them: the starts spread about it at twice the curvature's width reach both."""
    with pm.Model() as model:
        pm.Flat("x", initval=0.5)
        pm.Potential("p", pm.math.logaddexp(-0.5 * (model["x"] - 3) ** 2,
                                            -0.5 * (model["x"] + 3) ** 2))
    modes = find_modes(Target(model), random_seed=seed(81))
    np.testing.assert_allclose(np.sort(modes.points[:, 0]), [-3.0, 3.0], atol=1e-3)
    with pm.Model() as model:
        pm.Flat("x")
        pm.Potential("p", -0.5 * model["x"] ** 2)
    # given starts instead: at least two finite flat points of the model's dimension
    modes = find_modes(Target(model), starts=[[-1.0], [2.0]])
    np.testing.assert_allclose(modes.points[:, 0], [0.0], atol=1e-6)
    for bad in ([1.0, 2.0], [[1.0, 2.0]] * 2, [[1.0]], [[1.0], [np.nan]]):
        with pytest.raises(ValueError, match="starts must"):
            find_modes(Target(model), starts=bad)


def test_the_mode_search_finds_the_spike_of_a_centred_group():
    """Every run of the search on the centred eight schools climbs the spike at ``tau -> 0``:
    no optimum, and the spike is in ``tau_log__`` (the runs end near -19)."""
    schools = Target(eight_schools_model(non_centered=False))
    modes, _, _, spikes = search_modes(schools, 32, seed(300))
    assert modes is None
    below = [s for s in spikes if s[1] < 0]
    assert [k for k, _, _ in below] == [TAU]
    assert below[0][1] < -10 and below[0][2] > 50  # far down, and far above the posterior


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_a_mode_search_that_keeps_finding_new_optima_makes_the_run_unreliable():
    """256 equal modes (a two-component mixture in each of 8 coordinates): 32 runs of the
    search from prior draws land on about 28 distinct optima, most reached by one run only
    (occupancy: 32 * (255/256)^31 = 28.3 of 32 runs alone in expectation), so the Good-Turing
    chance of a new optimum is far above 0.5 and the evidence cannot be vouched for, whatever
    its standard error. (On the Boltzmann relaxations such runs passed every other check and
    came out up to 17.4 standard errors low.) The evidence suite's ten problems, eight schools
    among them, measured 0.12 (the 18 peaks) or 0.

    That holds for NUTS's two chains; by default such a model gets 128 batched chains, whose
    batches' agreement stands in for the search: the run is calibrated, unseen_optima passes,
    and its log Z is within its standard errors of the exact 0 (the prior is normalised)."""
    with pm.Model() as model:
        pm.NormalMixture("x", w=[0.5, 0.5], mu=[-3.0, 3.0], sigma=0.5, shape=8)
    modes = find_modes(Target(model), random_seed=seed(92))
    assert modes.hits.sum() == 32 and modes.unseen > 0.5
    with model:
        batched = pmt.sample_ct(200, tune=200, max_extensions=0, random_seed=seed(92),
                                progressbar=False)
        idata = pmt.sample_ct(200, tune=200, chains=2, max_extensions=0, random_seed=seed(92),
                              progressbar=False, batched_chains=0)
    assert batched.attrs["nuts_sampler"] == "batched"
    assert pmt.diagnose(batched).checks.loc["unseen_optima", "ok"]
    result = pmt.log_marginal_likelihood(batched)
    assert_within_se(result.estimate, 0.0, result.standard_error, what="log Z")
    # the base's search, far from complete at 32 starts, was repeated from 128 (still far:
    # 128 * (255/256)^127 = 78 runs alone in expectation)
    assert idata["base"]["mode_hits"].values.sum() > 32
    checks = pmt.diagnose(idata).checks
    assert not checks.loc["unseen_optima", "ok"]
    lml = pmt.log_marginal_likelihood(idata)
    assert not lml.reliable and any("mode search is far from complete" in p for p in lml.problems)


def four_peaks() -> pm.Model:
    """``x`` in 2-D with the density of four unit Gaussians at (+-6, +-6), weights 0.4, 0.3,
    0.2, 0.1 (a potential on a flat prior)."""
    centres = np.array([[-6.0, -6.0], [6.0, 6.0], [-6.0, 6.0], [6.0, -6.0]])
    weights = np.array([0.4, 0.3, 0.2, 0.1])
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        parts = [np.log(w) - 0.5 * pm.math.sum((x - c) ** 2) for w, c in zip(weights, centres, strict=True)]
        pm.Potential("peaks", pm.math.logsumexp(pm.math.stack(parts)))
    return model, centres, weights


def test_discover_optima_adds_the_optima_that_draws_reached_and_the_search_did_not():
    """A search from starts near two of four peaks finds those two; draws from all four (as a
    tempering run's reach them) give the other two, with their Laplace masses and no hits
    (the search's Good-Turing estimate is its own); draws near the known optima give the same
    Modes back."""
    from pymc_tempering.bases import discover_optima

    model, centres, weights = four_peaks()
    target = Target(model)
    rng = np.random.default_rng(seed(81))
    near_two = np.concatenate([c + rng.normal(0, 0.5, (8, 2)) for c in centres[:2]])
    known = find_modes(target, starts=near_two)
    assert len(known) == 2
    draws = np.concatenate([c + rng.normal(0, 1, (500, 2)) for c in centres])[None]
    found = discover_optima(target, draws, known, random_seed=seed(82))
    assert len(found) == 4
    rounded = np.round(found.points, 2)  # optima agree with the centres to 1e-3, not in bits
    order = np.lexsort((rounded[:, 1], rounded[:, 0]))
    expected = np.lexsort((centres[:, 1], centres[:, 0]))
    np.testing.assert_allclose(found.points[order], centres[expected], atol=1e-3)
    np.testing.assert_allclose(found.probabilities[order], weights[expected], atol=1e-6)
    assert found.hits.sum() == known.hits.sum() and found.unseen == known.unseen
    near = np.concatenate([c + rng.normal(0, 1, (500, 2)) for c in centres[:2]])[None]
    assert discover_optima(target, near, known, random_seed=seed(83)) is known
