"""The problem records: unique names, builders that build, truths where the problems say."""

import numpy as np
import pymc as pm
import pytest

from pymc_tempering.problems import FAMILIES, PROBLEMS, Problem, get

#: Problems whose truths are quick (no radon quadrature, no enumeration, no 10^6 draws).
QUICK = ["conjugate_normal", "gauss_in_box", "eight_schools", "quickstart", "shells_2d",
         "peaks_2d", "spike_slab_5d_even", "bilinear_regression", "label_switching",
         "label_switching_3", "periodic_frequency", "hierarchical_bilinear"]


def test_every_problem_is_in_one_family_and_named_once():
    names = [p.name for family in FAMILIES for p in family.problems()]
    assert len(names) == len(set(names)) == len(PROBLEMS)
    for problem in PROBLEMS.values():
        assert isinstance(problem, Problem)
        assert problem.family in {f.__name__.rsplit(".", 1)[1] for f in FAMILIES}
    with pytest.raises(KeyError, match="unknown problem 'nope'"):
        get("nope")


@pytest.mark.parametrize("name", QUICK)
def test_a_problem_builds_a_model_and_gives_its_truths(name):
    problem = get(name)
    assert isinstance(problem.build(), pm.Model)
    truth = problem.truths
    assert truth.log_z is not None or truth.mode_probabilities is not None
    if truth.mode_probabilities is not None:
        assert len(truth.mode_probabilities) == len(problem.modes)
        assert np.sum(truth.mode_probabilities) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["gauss_in_box", "eight_schools", "peaks_2d", "rosenbrock_2d"])
def test_the_nested_form_is_the_models_density(name):
    """PyMC's log density without the transforms' Jacobians is the nested form's log prior plus
    log likelihood, at prior draws."""
    from pymc.model.transform.conditioning import remove_value_transforms

    problem = get(name)
    nested = problem.nested
    logp = remove_value_transforms(problem.build()).compile_logp(jacobian=False)
    theta = nested.prior_transform(np.random.default_rng(0).uniform(size=(4, nested.ndim)))
    for t in theta:
        expected = nested.log_prior(t) + nested.loglike(t)
        np.testing.assert_allclose(logp(nested.point(t)), expected, rtol=1e-9, atol=1e-6)
