"""Models with known answers, for the tests, the benchmarks and the examples.

Each problem is a :class:`Problem` record: a name, its family (the module that defines it), a
model builder and its truths (log Z, moments, mode probabilities), computed by the solvers
beside it (closed forms, quadrature, a semidefinite programme, exact enumeration).
:data:`PROBLEMS` holds every problem by name, in family order, for a harness to iterate over.

This package stands outside the library's layers: nothing in the library imports it (an
import-linter contract says so); it builds PyMC models and computes truths. The shipped data
it reads are in ``pymc_tempering/data``.

Families: :mod:`~pymc_tempering.problems.conjugate`, :mod:`~pymc_tempering.problems.gaussian`,
:mod:`~pymc_tempering.problems.radon`, :mod:`~pymc_tempering.problems.schools`,
:mod:`~pymc_tempering.problems.mixtures`, :mod:`~pymc_tempering.problems.sign_flip`,
:mod:`~pymc_tempering.problems.shells`, :mod:`~pymc_tempering.problems.peaks`,
:mod:`~pymc_tempering.problems.nonlinear`, :mod:`~pymc_tempering.problems.periodic`,
:mod:`~pymc_tempering.problems.hierarchical`, :mod:`~pymc_tempering.problems.boltzmann`,
:mod:`~pymc_tempering.problems.ergodic`, :mod:`~pymc_tempering.problems.latent`; and
:mod:`~pymc_tempering.problems.minibatch`, models for the minibatch samplers without an exact
truth.
"""

from __future__ import annotations

from pymc_tempering.problems import (
    boltzmann,
    conjugate,
    ergodic,
    gaussian,
    hierarchical,
    latent,
    mixtures,
    nonlinear,
    peaks,
    periodic,
    radon,
    schools,
    shells,
    sign_flip,
)
from pymc_tempering.problems.boltzmann import (
    boltzmann_machine,
    boltzmann_relaxation,
    boltzmann_relaxation_model,
    boltzmann_relaxation_truth,
)
from pymc_tempering.problems.mixtures import kou_mixture_model, kou_mixture_moments
from pymc_tempering.problems.radon import (
    load_radon,
    radon_intercepts_model,
    radon_log_marginal_likelihood,
    radon_model,
    radon_pooled_model,
)
from pymc_tempering.problems.record import Nested, Problem, Truth
from pymc_tempering.problems.schools import (
    EIGHT_SCHOOLS_SIGMA,
    EIGHT_SCHOOLS_Y,
    eight_schools_log_marginal_likelihood,
    eight_schools_model,
)

__all__ = [
    "EIGHT_SCHOOLS_SIGMA",
    "EIGHT_SCHOOLS_Y",
    "FAMILIES",
    "Nested",
    "PROBLEMS",
    "Problem",
    "Truth",
    "boltzmann_machine",
    "boltzmann_relaxation",
    "boltzmann_relaxation_model",
    "boltzmann_relaxation_truth",
    "eight_schools_log_marginal_likelihood",
    "eight_schools_model",
    "get",
    "kou_mixture_model",
    "kou_mixture_moments",
    "load_radon",
    "radon_intercepts_model",
    "radon_log_marginal_likelihood",
    "radon_model",
    "radon_pooled_model",
]

#: The family modules, each with a ``problems()`` that lists its problems.
FAMILIES = (conjugate, gaussian, radon, schools, mixtures, sign_flip, shells, peaks, nonlinear,
            periodic, hierarchical, boltzmann, ergodic, latent)

#: Every problem by name. Building the records computes nothing: models are built and truths
#: computed when asked for.
PROBLEMS: dict[str, Problem] = {p.name: p for family in FAMILIES for p in family.problems()}


def get(name: str) -> Problem:
    """The problem called ``name``.

    Raises
    ------
    KeyError
        For an unknown name, listing the known ones.
    """
    try:
        return PROBLEMS[name]
    except KeyError:
        raise KeyError(f"unknown problem {name!r}; known: {', '.join(PROBLEMS)}") from None
