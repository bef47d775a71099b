"""Kou's mixture and the registry's mixtures: normalised, with the published truths."""

import numpy as np
import pytest

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
