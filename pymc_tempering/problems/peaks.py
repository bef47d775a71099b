"""Gaussian peaks in a uniform box: 18 separated peaks, and a narrow spike on a broad slab (a
phase change, Skilling 2006), with log Z in closed form."""

from __future__ import annotations

import functools
import math

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import stats
from scipy.special import logsumexp

from pymc_tempering.problems.nested import LOG_2PI, log_mean_exp, prior_monte_carlo, uniform_box
from pymc_tempering.problems.record import Nested, Problem, Truth

__all__ = ["PEAK_CENTRES", "SPIKE_SHARES", "peaks_2d", "problems", "spike_slab"]

# --- peaks_2d --------------------------------------------------------------------------------

PEAK_SD = 0.3
PEAK_CENTRES = np.array([(x, y) for y in (-5.0, 0.0, 5.0) for x in (-7.5, -4.5, -1.5, 1.5, 4.5, 7.5)])


def peaks_2d() -> Problem:
    k, box = len(PEAK_CENTRES), 10.0
    prior_transform, log_prior = uniform_box(-box, box, 2)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -box, box, shape=2)
            log_peaks = pm.logp(pm.Normal.dist(PEAK_CENTRES, PEAK_SD), x).sum(axis=-1)
            pm.Potential("likelihood", pm.math.logsumexp(log_peaks) - np.log(k))
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        d2 = ((theta[..., None, :] - PEAK_CENTRES) ** 2).sum(-1)
        return logsumexp(-0.5 * d2 / PEAK_SD**2, axis=-1) - np.log(k) - LOG_2PI - 2 * np.log(PEAK_SD)

    @functools.cache
    def truth():
        # Z = int U(x) L(x) dx = (1/400) * (1/18) sum_k prod_i P(box | peak k, coordinate i)
        mass = np.prod(
            stats.norm.cdf(box, PEAK_CENTRES, PEAK_SD) - stats.norm.cdf(-box, PEAK_CENTRES, PEAK_SD),
            axis=1,
        )
        return float(np.log(mass.mean()) - 2 * np.log(2 * box))

    nested = Nested((("x", (2,)),), loglike, prior_transform, log_prior,
                    mc_check=lambda rng, n: prior_monte_carlo(nested, rng, n))
    return Problem("peaks_2d", "peaks", build, lambda: Truth(log_z=truth()),
                   "18 separated Gaussian peaks (sd 0.3) in U(-10, 10)^2", nested=nested)


# --- spike_slab_* ----------------------------------------------------------------------------

SPIKE_SD, SLAB_SD, SPIKE_HALF_WIDTH = 0.01, 0.1, 0.5
SPIKE_SHARES = {"spike": 0.99, "even": 0.5, "slab": 0.01}


def spike_slab(ndim: int, kind: str) -> Problem:
    share = SPIKE_SHARES[kind]
    half = SPIKE_HALF_WIDTH
    prior_transform, log_prior = uniform_box(-half, half, ndim)
    log_share, log_rest = math.log(share), math.log1p(-share)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -half, half, shape=ndim)
            spike = log_share + pt.sum(pm.logp(pm.Normal.dist(0.0, SPIKE_SD), x))
            slab = log_rest + pt.sum(pm.logp(pm.Normal.dist(0.0, SLAB_SD), x))
            pm.Potential("likelihood", pt.logaddexp(spike, slab))
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        spike = log_share + stats.norm.logpdf(theta, 0.0, SPIKE_SD).sum(-1)
        return np.logaddexp(spike, log_rest + stats.norm.logpdf(theta, 0.0, SLAB_SD).sum(-1))

    @functools.cache
    def truth():
        # the box holds prod_k P(|x_k| < 1/2) of each normalised Gaussian; its volume is 1
        def inside(sd):
            return ndim * math.log(stats.norm.cdf(half / sd) - stats.norm.cdf(-half / sd))

        return float(np.logaddexp(log_share + inside(SPIKE_SD), log_rest + inside(SLAB_SD)))

    def mc_check(rng, n):
        # L is a normalised mixture density: Z = P(x in the box) for x drawn from it (volume 1)
        sd = np.where(rng.uniform(size=n) < share, SPIKE_SD, SLAB_SD)
        x = rng.normal(0.0, sd[:, None], size=(n, ndim))
        return log_mean_exp(log_prior(x)) + ("share of mixture draws inside the box",)

    nested = Nested((("x", (ndim,)),), loglike, prior_transform, log_prior, mc_check=mc_check)
    return Problem(
        f"spike_slab_{ndim}d_{kind}", "peaks", build, lambda: Truth(log_z=truth()),
        f"{share:.0%} spike (sd {SPIKE_SD}) on a slab (sd {SLAB_SD}) in U(-{half}, {half})^{ndim}",
        nested=nested,
    )


def problems() -> list[Problem]:
    """``peaks_2d`` and the nine ``spike_slab_{5,10,20}d_{spike,even,slab}``."""
    return [peaks_2d(), *(spike_slab(d, kind) for kind in SPIKE_SHARES for d in (5, 10, 20))]
