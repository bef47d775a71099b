"""``P_0`` for ``initial="auto"``: from the optima of the mode search, their Laplace Gaussians
and the entropy bound of their mixture, at every scale of the parameters."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from checks import seed
from pymc_tempering.problems.ergodic import shifted_scaled_gaussian

from pymc_tempering.kernels.ergodic import gaussian_entropy
from pymc_tempering.methods.ergodic.initial import auto_initial
from pymc_tempering.target import Target


@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e2])
def test_auto_initial_is_scale_free(scale):
    """``initial="auto"`` from the mode search: on a Gaussian, one optimum, P_0 centred at the
    mean with the marginal sds (the Laplace Gaussian is exact on a quadratic) at every scale,
    and the bound ``h`` the entropy of that factorised Gaussian. The optimum is L-BFGS's, which
    stops on an absolute gradient tolerance: within 1e-2 sds of the mean."""
    model, mean, cov = shifted_scaled_gaussian(scale)
    auto = auto_initial(Target(model), seed(41))
    sd = np.sqrt(np.diag(cov))
    assert auto.n_modes == 1
    np.testing.assert_allclose(auto.mean, mean, rtol=0, atol=1e-2 * sd.min())
    np.testing.assert_allclose(auto.std, sd, rtol=1e-3)
    np.testing.assert_allclose(auto.local_std, sd, rtol=1e-3)
    assert auto.entropy_bound == pytest.approx(gaussian_entropy(sd**2), abs=1e-6)


@pytest.mark.parametrize("scale", [1e-2, 1e2])
def test_auto_initial_covers_every_mode(scale):
    """Two separated modes, N(+-3 scale, scale^2) with equal weights: P_0's centre and sd are
    those of the defensive Gaussian moment-matched to the two Laplace Gaussians (mean 0,
    variance 10 scale^2); the leapfrog's unit is one mode's sd, and ``h`` the mixture's
    entropy bound, H(N(0, scale^2)) + log 2."""
    with pm.Model() as model:
        pm.NormalMixture("x", w=[0.5, 0.5], mu=[-3 * scale, 3 * scale], sigma=scale)
    auto = auto_initial(Target(model), seed(42))
    assert auto.n_modes == 2
    np.testing.assert_allclose(auto.mean, 0.0, rtol=0, atol=1e-3 * scale)
    np.testing.assert_allclose(auto.std, np.sqrt(10.0) * scale, rtol=1e-3)
    np.testing.assert_allclose(auto.local_std, scale, rtol=1e-3)
    assert auto.entropy_bound == pytest.approx(gaussian_entropy([scale**2]) + np.log(2), abs=1e-4)
