"""The eight schools: one model in two forms, and its log marginal likelihood."""

import numpy as np
from checks import seed
from scipy import integrate, stats

from pymc_tempering.problems.schools import (
    EIGHT_SCHOOLS_SIGMA,
    EIGHT_SCHOOLS_Y,
    eight_schools_log_marginal_likelihood,
    eight_schools_model,
)


def test_eight_schools_forms_and_their_log_marginal_likelihood():
    """The two forms are one model (the non-centred log density is the centred one at ``theta =
    mu + tau theta_tilde`` plus the Jacobian ``8 log tau``), and the 1-D quadrature over
    ``tau`` (``mu`` and ``theta`` integrated in closed form) agrees with a 2-D quadrature over
    ``mu`` and ``tau`` (``theta`` in closed form) to 1e-6."""
    centred, non_centred = eight_schools_model(non_centered=False), eight_schools_model()
    logp_c, logp_nc = centred.compile_logp(), non_centred.compile_logp()
    rng = np.random.default_rng(seed(1))
    for _ in range(3):
        mu, log_tau, tilde = rng.normal(), rng.normal(), rng.normal(size=8)
        theta = mu + np.exp(log_tau) * tilde
        lp_nc = logp_nc({"mu": mu, "tau_log__": log_tau, "theta_tilde": tilde})
        lp_c = logp_c({"mu": mu, "tau_log__": log_tau, "theta": theta})
        np.testing.assert_allclose(lp_nc, lp_c + 8 * log_tau, rtol=1e-10)

    log_z = eight_schools_log_marginal_likelihood()
    shift = 31.0

    def integrand(mu, v):  # v in (0, 1): tau = 5 tan(pi v / 2), the half-Cauchy(5) quantile
        tau = 5 * np.tan(0.5 * np.pi * v)
        sd = np.sqrt(EIGHT_SCHOOLS_SIGMA**2 + tau**2)
        return np.exp(
            stats.norm.logpdf(mu, 0, 5) + stats.norm.logpdf(EIGHT_SCHOOLS_Y, mu, sd).sum() + shift
        )

    value, _ = integrate.dblquad(integrand, 0, 1, -40, 40, epsabs=0, epsrel=1e-9)
    assert abs(np.log(value) - shift - log_z) < 1e-6
    assert abs(log_z + 31.3113) < 1e-4
