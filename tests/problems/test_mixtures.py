"""Kou's mixture and the registry's mixtures: normalised, with the published truths."""

import numpy as np
import pytest
from checks import seed

from pymc_tempering.problems import get
from pymc_tempering.problems.mixtures import kou_mixture_model, kou_mixture_moments


def test_kou_mixture_moments_match_the_papers_table_1_truth():
    # Table 1 of the pseudo-extended paper, scenario (a), printed to 3 decimals
    np.testing.assert_allclose(kou_mixture_moments("a"), [4.478, 4.905, 25.605, 33.920], atol=5e-4)


def test_kou_mixture_is_normalised_and_refuses_unknown_scenarios():
    model = kou_mixture_model("b")
    logp = model.compile_logp()
    # log Z = 0: the density integrates to one over a grid covering all components
    grid = np.linspace(-3.0, 13.0, 801)
    step = grid[1] - grid[0]
    dens = np.exp([[logp({"x": np.array([a, b])}) for b in grid] for a in grid[::4]])
    assert abs(dens.sum() * step * step * 4 - 1.0) < 0.01
    with pytest.raises(ValueError, match="scenario"):
        kou_mixture_model("c")
    with pytest.raises(ValueError, match="scenario"):
        kou_mixture_moments("c")


@pytest.mark.parametrize("name", ["two_modes", "four_mode_mixture", "bimodal_mixture"])
def test_the_tests_mixtures_label_their_modes_by_the_truths_order(name):
    """Each mode's own centre is labelled as that mode."""
    problem = get(name)
    centres = {"two_modes": [[-8.0], [8.0]], "bimodal_mixture": [[-3.0], [3.0]],
               "four_mode_mixture": [[-4, -4], [-4, 4], [4, -4], [4, 4]]}[name]
    x = np.asarray(centres, dtype=float)
    draws = {"x": (x[:, 0] if x.shape[1] == 1 else x)[None]}
    np.testing.assert_array_equal(problem.label(draws)[0], np.arange(len(centres)))
    assert problem.truths.mode_probabilities.sum() == pytest.approx(1.0)


def test_label_switching_3_orderings_are_equally_likely_by_symmetry():
    """The joint density of ``label_switching_3`` (without the transforms' Jacobians) is the same
    at every permutation of the components (``w`` and ``mu`` permuted together), at random points:
    the permutations map each ordering of ``mu`` onto every other with the same mass, so each of
    the 6 has probability 1/6. The data are regenerated identically (120 points, three groups
    of 40), and the label of a point is the ordering its means are in."""
    from pymc.model.transform.conditioning import remove_value_transforms

    from pymc_tempering.problems.mixtures import ORDERINGS_3

    problem = get("label_switching_3")
    model, again = problem.build(), problem.build()
    y = model.rvs_to_values[model["y"]].data
    assert y.shape == (120,)
    np.testing.assert_array_equal(y, again.rvs_to_values[again["y"]].data)
    np.testing.assert_allclose([y[:40].mean(), y[40:80].mean(), y[80:].mean()], [-4, 0, 4], atol=0.5)

    logp = remove_value_transforms(model).compile_logp(jacobian=False)
    rng = np.random.default_rng(seed(40))
    for _ in range(3):
        w, mu, sigma = rng.dirichlet(np.ones(3)), rng.normal(0, 4, 3), rng.uniform(0.5, 2)
        values = [logp({"w": w[list(p)], "mu": mu[list(p)], "sigma": sigma}) for p in ORDERINGS_3]
        assert np.all(np.isfinite(values))
        np.testing.assert_allclose(values, values[0], rtol=1e-12)

    truth = problem.truths
    assert truth.log_z is None
    np.testing.assert_array_equal(truth.mode_probabilities, np.full(6, 1 / 6))
    assert truth.mode_probabilities.sum() == pytest.approx(1.0)
    mu = np.empty((6, 3))
    for k, perm in enumerate(ORDERINGS_3):
        mu[k, list(perm)] = [-4.0, 0.0, 4.0]  # mu[perm[0]] < mu[perm[1]] < mu[perm[2]]
        assert problem.modes[k] == "<".join(f"mu{i + 1}" for i in perm)
    np.testing.assert_array_equal(problem.label({"mu": mu[None]})[0], np.arange(6))
