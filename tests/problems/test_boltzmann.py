"""The Boltzmann machine relaxations' truths: enumeration in chunks against the states summed
one by one, and the relaxation's moments against its defining mixture."""

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp

from pymc_tempering.problems.boltzmann import (
    _enumerate_boltzmann,
    boltzmann_machine,
    boltzmann_relaxation,
    boltzmann_relaxation_truth,
)


@pytest.mark.parametrize("chunk_bits", [2, 5, 9])
def test_enumeration_in_chunks_is_the_sum_over_every_state(chunk_bits):
    """log Z_B, E[s] and E[s s^T] by the chunked pass (a running maximum rescales the sums as
    the chunks' energies grow) equal those of every state's term summed directly."""
    w, b = boltzmann_machine(9, np.random.default_rng(7))
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=9)))
    energy = 0.5 * np.einsum("ij,jk,ik->i", states, w, states) + states @ b
    log_zb = logsumexp(energy)
    p = np.exp(energy - log_zb)
    got = _enumerate_boltzmann(w, b, chunk_bits=chunk_bits)
    assert got[0] == pytest.approx(log_zb, abs=1e-12)
    np.testing.assert_allclose(got[1], p @ states, atol=1e-12)
    np.testing.assert_allclose(got[2], (states * p[:, None]).T @ states, atol=1e-12)


def test_relaxation_moments_are_those_of_its_mixture():
    """Eqs. (53)-(54): the relaxation is a mixture over the states s of N(Q^T s, I) with the
    machine's probabilities, so its mean and covariance follow from the states' moments."""
    w, b = boltzmann_machine(6, np.random.default_rng(3))
    q, d = boltzmann_relaxation(w, b)
    _, mean, cov = boltzmann_relaxation_truth(w, b, q, d)
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=6)))
    # the relaxation's states are weighted by the machine's energy with W + diag(d) = Q Q^T
    energy = 0.5 * np.einsum("ij,jk,ik->i", states, w, states) + states @ b
    p = np.exp(energy - logsumexp(energy))
    centres = states @ q
    np.testing.assert_allclose(mean, p @ centres, atol=1e-10)
    second = (centres * p[:, None]).T @ centres + np.eye(q.shape[1])
    np.testing.assert_allclose(cov, second - np.outer(mean, mean), atol=1e-10)
