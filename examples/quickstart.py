"""Quickstart: a bimodal posterior that NUTS cannot cross, sampled by continuous tempering.

The sign of theta is not identified by the data (y_i ~ N(theta^2, 1)), so the posterior has two
modes near +-1.5; the prior N(0.5, 1.5^2) makes the positive one about twice as probable.
Plain NUTS stays in whichever mode each chain starts in. ``pmt.sample_ct`` runs NUTS on the
continuously tempered model and returns weighted draws and the log marginal likelihood with a
standard error, checked here against 1-D quadrature.

Run: ``python examples/quickstart.py``.
"""

import logging

import numpy as np
import pymc as pm
from scipy import integrate, stats

import pymc_tempering as pmt

logging.getLogger("pymc").setLevel(logging.ERROR)

rng = np.random.default_rng(42)
y = rng.normal(1.5**2, 1.0, size=10)
PRIOR_MU, PRIOR_SD = 0.5, 1.5

with pm.Model() as model:
    theta = pm.Normal("theta", PRIOR_MU, PRIOR_SD)
    pm.Normal("y", theta**2, 1.0, observed=y)


def log_joint(t):
    return stats.norm.logpdf(t, PRIOR_MU, PRIOR_SD) + stats.norm.logpdf(y, t**2, 1.0).sum()


# The truth by quadrature (1-D), to compare with.
peak = max(log_joint(-1.5), log_joint(1.5))
z_neg = integrate.quad(lambda t: np.exp(log_joint(t) - peak), -6, 0, points=[-1.5], limit=200)[0]
z_pos = integrate.quad(lambda t: np.exp(log_joint(t) - peak), 0, 6, points=[1.5], limit=200)[0]
exact_log_z = peak + np.log(z_neg + z_pos)
exact_p_pos = z_pos / (z_neg + z_pos)

# Plain NUTS: each chain stays in one mode.
with model:
    plain = pm.sample(chains=4, random_seed=1, progressbar=False)
frac = (plain["posterior"]["theta"].values > 0).mean(axis=1)
print("Plain NUTS, P(theta > 0) per chain:", np.round(frac, 2))

# Continuous tempering at its defaults: the base is fitted from a mode search started at prior
# draws, and the run checks itself (pmt.diagnose) and extends itself if needed.
with model:
    idata = pmt.sample_ct(random_seed=3)

lml = pmt.log_marginal_likelihood(idata)
print(f"\nlog marginal likelihood: {lml.estimate:.3f} ± {lml.standard_error:.3f}"
      f"   (quadrature: {exact_log_z:.3f})")
print("per chain:", np.round(lml.per_chain, 3))

# Each mode's probability is its importance-sampled mass (the weights are post-stratified by
# the modes the search found), so it does not rest on the chains' few moves between modes.
p_pos, p_se = pmt.weighted_expectation(idata, lambda posterior: posterior["theta"].values > 0)
print(f"P(theta > 0): {p_pos:.3f} ± {p_se:.3f}   (quadrature: {exact_p_pos:.3f})")
check = pmt.posterior_check(idata)
print("posterior reliable:", check.reliable, check.problems)

print("\nWeighted summary:")
print(pmt.weighted_summary(idata, var_names=["theta"]).round(3).to_string())
