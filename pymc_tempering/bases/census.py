"""The regions of a target whose mode search finds no optimum: short NUTS runs from the prior.

Where the log density is unbounded along the way (a noise scale going to 0 while latent factors
fit one feature exactly; a mixture component collapsing on one point; a centred group's scale
going to 0), every L-BFGS run of the mode search climbs a spike and none converges, so the
search names no optimum and the base of continuous tempering would be fitted around whichever
region its ADVI runs reached. :func:`census_regions` finds the regions instead by short runs
of PyMC's NUTS on the model itself, one chain from each of ``n_chains`` prior draws (the
parallel runs that Yao, Vehtari and Gelman (2022) combine by stacking): a chain settles in the
region its start falls towards and stays there, so the chains' regions are a census of the
target's, and the number of chains in each a count for the Good-Turing chance of a region not
yet seen (:attr:`~pymc_tempering.bases.Modes.unseen`). Two chains are in one region when the
target's log density on the segment between their means never dips ``MODE_BARRIER`` nats
below its lower end (the barrier test the ADVI fits of a base are merged by).

Each region is returned as an entry of :class:`~pymc_tempering.bases.Modes`: its chains'
mean, their covariance (shrunk towards its diagonal), the log density there and the mass of
that Gaussian at it. These are descriptions for the base and for the stratification, which
importance-samples every region's true mass; nothing here claims a region's probability.

Why PyMC's NUTS and not nutpie: ``pm.sample(nuts_sampler="pymc")`` takes one start per chain
(``initvals``) and compiles the model's log density through PyTensor's cache, where nutpie
takes one start for all chains and compiles a model of its own. Measured on a one-factor model
(50 parameters): 8 chains of 200 tuning steps and 100 draws took 3 s, and reached both signs
of the loadings.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pymc as pm
from pymc.exceptions import SamplingError

from pymc_tempering.bases.modes import LOG_2PI, Modes, no_barrier, prior_draws
from pymc_tempering.contract import split_seed
from pymc_tempering.target import Target
from pymc_tempering.timing import phase

__all__ = ["CENSUS_CHAINS", "CENSUS_DRAWS", "CENSUS_TUNE", "census_regions"]

#: Chains of the census, each from a prior draw. With two regions of equal mass, all chains
#: land in one with probability 2^(1 - n): 1e-3 for 12; with four, one is missed with
#: probability about 4 (3/4)^12 = 0.13, and the run's draws and the Good-Turing chance of the
#: census tell the rest.
CENSUS_CHAINS = 12
CENSUS_TUNE = 200  # NUTS warm-up steps per chain
CENSUS_DRAWS = 100  # draws per chain after it
SHRINKAGE = 0.2  # weight of the diagonal in a region's covariance (few draws, many dimensions)


def _regions_of(target: Target, means: np.ndarray) -> np.ndarray:
    """Each chain's region (an index), chains joined where no barrier lies between their
    means (:func:`~pymc_tempering.bases.modes.no_barrier`), in the order of
    the chains' mean log density (the first region is the highest)."""
    order = np.argsort(-np.asarray(target.logp(means), dtype=float))
    region = np.full(len(means), -1)
    heads: list[int] = []
    for i in order:
        for r, head in enumerate(heads):
            if no_barrier(target, means[head], means[i]):
                region[i] = r
                break
        else:
            region[i] = len(heads)
            heads.append(int(i))
    return region


def _shrunk_cov(x: np.ndarray) -> np.ndarray:
    """The covariance of draws ``(n, ndim)`` shrunk towards its diagonal (positive definite for
    fewer draws than dimensions)."""
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    diag = np.diag(np.maximum(np.diag(cov), 1e-12))
    return (1 - SHRINKAGE) * cov + SHRINKAGE * diag


@phase("mode_search")
def census_regions(
    target: Target,
    n_chains: int = CENSUS_CHAINS,
    tune: int = CENSUS_TUNE,
    draws: int = CENSUS_DRAWS,
    random_seed=None,
) -> Modes | None:
    """The target's regions found by short NUTS runs from prior draws (module docstring).

    Parameters
    ----------
    target : Target
    n_chains, tune, draws : int
        Chains (one per prior draw), and warm-up steps and draws per chain.
    random_seed : int, optional

    Returns
    -------
    Modes or None
        One entry per region (its chains' mean, shrunk covariance, log density and Gaussian
        mass; ``hits`` the chains in it), by decreasing log density; None where the prior
        cannot be drawn from, the model's density cannot be evaluated at its draws, or no
        chain ended at a finite log density.
    """
    start_seed, sample_seed = split_seed(random_seed, 2)
    try:
        starts, _ = prior_draws(target, n_chains, start_seed)
    except ValueError:
        return None
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampled = pm.sample(
                draws, tune=tune, chains=n_chains, cores=1, nuts_sampler="pymc",
                initvals=starts, random_seed=sample_seed, progressbar=False,
                compute_convergence_checks=False, model=target.model,
                idata_kwargs={"include_transformed": True},
            )
    except (SamplingError, ValueError, FloatingPointError, np.linalg.LinAlgError):
        # a log density that cannot be evaluated at the prior's draws: the fits that follow
        # name the problem
        return None
    finally:
        logger.setLevel(level)
    x = target.flat_draws(sampled["posterior"])  # (chain, draw, ndim)
    means = x.mean(axis=1)
    finite = np.isfinite(np.asarray(target.logp(means), dtype=float))
    if not finite.any():
        return None
    x, means = x[finite], means[finite]
    region = _regions_of(target, means)
    points, covs, log_density, log_mass, hits = [], [], [], [], []
    for r in range(region.max() + 1):
        draws_r = x[region == r].reshape(-1, target.ndim)
        mean = draws_r.mean(axis=0)
        cov = _shrunk_cov(draws_r)
        logp = float(target.logp(mean[None])[0])
        _, logdet = np.linalg.slogdet(cov)
        points.append(mean)
        covs.append(cov)
        log_density.append(logp)
        log_mass.append(logp + 0.5 * (target.ndim * LOG_2PI + logdet))
        hits.append(int(np.sum(region == r)))
    order = np.argsort(-np.array(log_density))
    return Modes(
        points=np.array(points)[order],
        log_density=np.array(log_density)[order],
        log_mass=np.array(log_mass)[order],
        cov=np.array(covs)[order],
        hits=np.array(hits, dtype=int)[order],
    )
