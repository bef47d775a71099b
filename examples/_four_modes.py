"""The four-mode posterior shared by ``multimodal.py`` and ``gibbs_ct.py`` (not an example itself).

Prior ``x ~ N(0, 5^2 I)`` in 2-D; likelihood a mixture of four narrow Gaussians (sd 0.3) at
``(+-2.5, +-2.5)`` with weights 0.4, 0.3, 0.2, 0.1: log Z and each mode's posterior mass are known
in closed form.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import stats
from scipy.special import logsumexp

import pymc_tempering as pmt

PRIOR_SD, MODE_SD = 5.0, 0.3
MEANS = np.array([[2.5, 2.5], [-2.5, 2.5], [-2.5, -2.5], [2.5, -2.5]])
WEIGHTS = np.array([0.4, 0.3, 0.2, 0.1])


def build_model() -> pm.Model:
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, PRIOR_SD, shape=2)
        comp = [
            np.log(w) + pm.logp(pm.MvNormal.dist(m, MODE_SD**2 * np.eye(2)), x)
            for w, m in zip(WEIGHTS, MEANS, strict=True)
        ]
        pm.Potential("mixture_likelihood", pt.logsumexp(pt.stack(comp)))
    return model


def exact():
    """log Z and the posterior mass of each mode, in closed form."""
    marg = stats.multivariate_normal(np.zeros(2), (PRIOR_SD**2 + MODE_SD**2) * np.eye(2))
    log_terms = np.log(WEIGHTS) + marg.logpdf(MEANS)
    return logsumexp(log_terms), np.exp(log_terms - logsumexp(log_terms))


def mode_of(x: np.ndarray) -> np.ndarray:
    """Index of the nearest mode for each draw (..., 2)."""
    return np.argmin(((x[..., None, :] - MEANS) ** 2).sum(-1), axis=-1)


def mode_masses(idata) -> np.ndarray:
    """Weighted posterior mass of each mode and its MCSE, shape ``(4, 2)``
    (:func:`pymc_tempering.weighted_expectation`: stratified by the modes where the result is)."""
    def indicators(posterior):
        x = posterior["x"].transpose("chain", "draw", ...).values
        return mode_of(x)[..., None] == np.arange(len(MEANS))

    mean, se = pmt.weighted_expectation(idata, indicators)
    return np.stack([mean, se], axis=1)
