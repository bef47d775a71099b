"""Mode probabilities by stratification: each mode's mass by importance sampling, its shape from
the draws.

A tempering run moves between well-separated modes only through excursions towards the base,
so the share of its draws in each mode rests on a few dozen such crossings per chain and is
noisy at the defaults. The mass of each mode, though, can be estimated without any
crossing: the run's own draws in that mode show its shape, a proposal fitted to them is drawn
from exactly, and ``Z_r = E_g[p(x) 1{x in r} / g(x)]`` is the mode's mass with an independent
standard error. The draws' weights are then rescaled so that each mode holds ``Z_r / sum Z``
of the weight and, within a mode, keep their own proportions (post-stratification). Every
weighted summary of the result (:func:`~pymc_tempering.weighted_summary`,
:func:`~pymc_tempering.resample`) reads the rescaled weights.

Regions
-------
Each draw belongs to the optimum of the base's mode search whose Laplace Gaussian (diagonal,
weighted by its Laplace mass) explains it best; optima between which the chains move at least
``MIN_CROSSINGS`` times while both draws are near the target (``beta > HOT``) form one region,
since the target itself connects them (the optima along a thin shell). The regions partition
the space, so the estimator is consistent whatever they are; they decide only its variance.
Where modes overlap, the crossings join them and the region's probability comes from the draws
as before; where the search found one optimum there is nothing to stratify. An optimum that no
draw came near is its own region, importance-sampled from its Laplace Gaussian: its mass is
reported, and the draws cannot describe it.

Proposals
---------
Per region, a defensive mixture: a multivariate t (``T_DOF`` degrees of freedom, the
region's weighted mean and covariance) with weight ``T_SHARE``, and Gaussian kernels at
``N_KERNELS`` of the region's weighted draws with Silverman's bandwidth, which follow a curved
ridge (the branch of a hyperbola) that the t alone misses. A region whose importance weights
have a Pareto k-hat above ``KHAT_LIMIT`` (:func:`~pymc_tempering.estimators.importance_khat`,
which counts weights bounded near their mean as light-tailed) makes
every probability fall back to the draws' shares, after one more try with ``RETRY_GROWTH``
times the proposal draws (a k-hat from 2,000 draws near the limit is noisy). The masses are
not compared with those shares: the shares are what is wrong when the chains have moved
between modes too rarely.

Why by hand: PyMC, ArviZ and SciPy give the pieces (the t, PSIS, kernel densities for one
bandwidth) but no stratified estimator of mode masses from MCMC draws.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np
from scipy import linalg, stats
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import logsumexp

from pymc_tempering.estimators import KHAT_LIMIT, importance_khat, kish_ess, weighted_mean_cov
from pymc_tempering.target import Target

__all__ = ["Strata", "stratify", "stratify_by_modes", "assign_optima", "connected_regions", "HOT"]

HOT = 0.9  # inverse temperature above which a draw counts as near the target
MIN_CROSSINGS = 5  # moves between two optima near the target that join them into one region
N_PROPOSAL = 2000  # proposal draws per region
RETRY_GROWTH = 4  # proposal draws of a region's second try, in units of N_PROPOSAL
N_KERNELS = 1000  # kernels of the proposal's kernel part (fewer where the region has fewer draws)
T_SHARE = 0.2  # weight of the proposal's t part
CHUNK = 4_000_000  # kernel distances held at once per block of rows (32 MB)
T_DOF = 5


class Strata(NamedTuple):
    """A run's regions and their probabilities (:func:`stratify`).

    Attributes
    ----------
    region : ndarray of int, shape (chain, draw)
        Each draw's region (an index into the arrays below).
    optima : tuple of str
        Per region, the indices of the mode search's optima it holds (``"0+2"``).
    probability, standard_error : ndarray, shape (region,)
        The regions' posterior probabilities and their standard errors.
    covariance : ndarray, shape (region, region)
        The covariance of the probabilities' errors (they sum to one: its rows sum to zero),
        whose diagonal is ``standard_error ** 2``.
    draws_probability, draws_standard_error : ndarray, shape (region,)
        The shares of the weighted draws in each region, and their standard errors: what the
        run alone says, without the importance sampling.
    log_mass, log_mass_se : ndarray, shape (region,)
        ``log Z_r`` by importance sampling and its standard error (NaN without a proposal).
    khat : ndarray, shape (region,)
        The Pareto k-hat of each region's importance weights.
    method : str
        ``"importance sampling"`` or ``"draws"`` (the fallback, see the module docstring).
    log_weight : ndarray, shape (chain, draw)
        The run's log weights, rescaled so that each region holds ``probability`` of the weight.
    problems : tuple of str
        Why the fallback was taken, or why the probabilities cannot be trusted.
    """

    region: np.ndarray
    optima: tuple
    probability: np.ndarray
    standard_error: np.ndarray
    covariance: np.ndarray
    draws_probability: np.ndarray
    draws_standard_error: np.ndarray
    log_mass: np.ndarray
    log_mass_se: np.ndarray
    khat: np.ndarray
    method: str
    log_weight: np.ndarray
    problems: tuple


def assign_optima(x, points, variances, log_mass) -> np.ndarray:
    """The optimum (index into ``points``) whose diagonal Laplace Gaussian, weighted by
    ``exp(log_mass)``, is largest at each point of ``x (..., ndim)``."""
    x = np.asarray(x, dtype=float)
    flat = x.reshape(-1, x.shape[-1])
    var = np.asarray(variances, dtype=float)
    score = np.empty((flat.shape[0], len(points)))
    for k, (point, v) in enumerate(zip(np.asarray(points, dtype=float), var, strict=True)):
        score[:, k] = -0.5 * np.sum((flat - point) ** 2 / v, axis=1) - 0.5 * np.sum(np.log(v))
    return np.argmax(score + np.asarray(log_mass, dtype=float), axis=1).reshape(x.shape[:-1])


def connected_regions(labels, hot, n_optima: int, min_crossings: int = MIN_CROSSINGS):
    """Join the optima that the chains move between at least ``min_crossings`` times while both
    draws are ``hot``; returns each optimum's region, numbered 0, 1, ... in order of optima.

    ``labels`` and ``hot`` are ``(chain, draw)`` arrays (optimum index, near the target).
    """
    both = hot[:, 1:] & hot[:, :-1]
    moves = Counter(zip(labels[:, :-1][both].tolist(), labels[:, 1:][both].tolist()))
    counts = np.zeros((n_optima, n_optima))
    for (i, j), count in moves.items():
        counts[i, j] += count
    joined = (counts + counts.T >= min_crossings) & ~np.eye(n_optima, dtype=bool)
    return connected_components(csr_matrix(joined), directed=False)[1]


class _Proposal:
    """The defensive t-and-kernels proposal of one region (module docstring)."""

    def __init__(self, x, w, laplace, rng):
        ndim = x.shape[1]
        with np.errstate(divide="ignore"):
            enough = x.shape[0] and kish_ess(np.log(w)) >= ndim + 2
        if enough:
            mean = w @ x
            cov = (x - mean).T @ ((x - mean) * w[:, None])
            cov = cov + 1e-6 * np.diag(np.diag(cov)) + 1e-12 * np.eye(ndim)
            # draws spread over many orders of magnitude leave it numerically indefinite (scipy
            # takes eigenvalues under about 2e-10 of the largest for zero)
            values, vectors = np.linalg.eigh(0.5 * (cov + cov.T))
            cov = (vectors * np.maximum(values, 1e-8 * values.max())) @ vectors.T
            enough = bool(np.all(np.isfinite(cov)) and values.max() > 0)
        if not enough:  # too few draws for a covariance: the optimum's Laplace Gaussian
            mean = x[np.argmax(w)] if x.shape[0] else laplace[0]
            cov = np.diag(laplace[1])
        self.t = stats.multivariate_t(loc=mean, shape=cov, df=T_DOF, seed=rng)
        self.ndim, self.rng = ndim, rng
        n_k = min(N_KERNELS, x.shape[0]) if enough else 0
        self.centres = x[rng.choice(x.shape[0], size=n_k, p=w)] if n_k else x[:0]
        h = (4 / (ndim + 2)) ** (2 / (ndim + 4)) * max(n_k, 1) ** (-2 / (ndim + 4))
        self.chol = np.linalg.cholesky(h * cov)
        self.t_share = T_SHARE if n_k else 1.0

    def sample(self, n: int) -> np.ndarray:
        n_t = int(round(n * self.t_share))
        parts = [np.reshape(self.t.rvs(n_t), (n_t, self.ndim))]
        if n - n_t:
            at = self.centres[self.rng.integers(len(self.centres), size=n - n_t)]
            parts.append(at + self.rng.standard_normal((n - n_t, self.ndim)) @ self.chol.T)
        return np.concatenate(parts)

    def logpdf(self, z) -> np.ndarray:
        log_t = np.atleast_1d(self.t.logpdf(z))
        if self.t_share == 1.0:
            return log_t
        log_det = np.sum(np.log(np.diag(self.chol))) + 0.5 * self.ndim * np.log(2 * np.pi)
        # whitened by the kernels' common Cholesky factor, the squared distances are
        # |z|^2 + |c|^2 - 2 z.c: a matrix product per block of rows (bounded memory)
        whiten = linalg.solve_triangular(self.chol, np.eye(self.ndim), lower=True).T
        zw, cw = np.asarray(z, dtype=float) @ whiten, self.centres @ whiten
        z2, c2 = np.sum(zw**2, axis=1), np.sum(cw**2, axis=1)
        log_k = np.empty((len(zw), len(cw)))
        rows = max(1, CHUNK // len(cw))
        for start in range(0, len(zw), rows):
            block = slice(start, start + rows)
            squared = z2[block, None] + c2[None, :] - 2 * zw[block] @ cw.T
            log_k[block] = -0.5 * np.maximum(squared, 0.0) - log_det
        log_kernels = logsumexp(log_k, axis=1) - np.log(len(self.centres))
        return np.logaddexp(log_t + np.log(self.t_share), log_kernels + np.log1p(-self.t_share))


def _region_mass(target, proposal, region_of, r, n):
    """``log Z_r``, its standard error and the Pareto k-hat, from ``n`` proposal draws."""
    z = proposal.sample(n)
    inside = region_of(z) == r
    log_ratio = np.full(n, -np.inf)
    if inside.any():
        log_ratio[inside] = target.logp(z[inside]) - proposal.logpdf(z[inside])
    log_ratio[~np.isfinite(log_ratio)] = -np.inf
    finite = log_ratio[np.isfinite(log_ratio)]
    if finite.size < 10:
        return -np.inf, np.inf, np.inf
    log_z = logsumexp(log_ratio) - np.log(n)
    w = np.exp(log_ratio - log_z)
    return float(log_z), float(np.std(w, ddof=1) / np.sqrt(n)), importance_khat(log_ratio)


def stratify(
    target: Target, x, log_weight, hot, points, variances, log_mass, random_seed=None,
    n_proposal: int = N_PROPOSAL,
) -> Strata | None:
    """Post-stratify a weighted run by the optima of its base's mode search (module docstring).

    Parameters
    ----------
    target : Target
    x : ndarray, shape (chain, draw, ndim)
        The run's flat unconstrained draws.
    log_weight : ndarray, shape (chain, draw)
        Their log weights towards the target.
    hot : ndarray of bool, shape (chain, draw)
        Which draws are near the target (for tempering runs, ``beta > HOT``).
    points, variances : ndarray, shape (k, ndim)
        The optima and their Laplace variances (diagonals).
    log_mass : ndarray, shape (k,)
        Their Laplace log masses.
    random_seed : int or numpy.random.Generator, optional
    n_proposal : int
        Proposal draws per region.

    Returns
    -------
    Strata or None
        None when the optima form one region (one optimum, or all joined by the chains).
    """
    x, lw = np.asarray(x, dtype=float), np.asarray(log_weight, dtype=float)
    points, variances = np.asarray(points, dtype=float), np.asarray(variances, dtype=float)
    labels = assign_optima(x, points, variances, log_mass)
    roots = connected_regions(labels, np.asarray(hot, dtype=bool), len(points))
    n_regions = int(roots.max()) + 1
    if n_regions < 2:
        return None
    region = roots[labels]
    onehot = (region[..., None] == np.arange(n_regions)).astype(float)
    draws_p, draws_cov = weighted_mean_cov(onehot, lw)
    rng = np.random.default_rng(random_seed)
    w = np.exp(lw - lw.max())

    def region_of(z):
        return roots[assign_optima(z, points, variances, log_mass)]

    masses = []
    for r in range(n_regions):
        inside = region == r
        best = int(np.flatnonzero(roots == r)[np.argmax(np.asarray(log_mass)[roots == r])])
        wr = w[inside] / w[inside].sum() if inside.any() and w[inside].sum() > 0 else w[inside]
        proposal = _Proposal(x[inside], wr, (points[best], variances[best]), rng)
        mass = _region_mass(target, proposal, region_of, r, n_proposal)
        if not mass[2] <= KHAT_LIMIT:  # k-hat is noisy: once more with RETRY_GROWTH times the draws
            mass = _region_mass(target, proposal, region_of, r, RETRY_GROWTH * n_proposal)
        masses.append(mass)
    log_z, rel_se, khat = (np.array(v) for v in zip(*masses, strict=True))
    return _combine(region, roots, lw, draws_p, draws_cov, log_z, rel_se, khat)


def stratify_by_modes(target, x, log_weight, hot, modes, random_seed=None) -> Strata | None:
    """:func:`stratify` by the optima of a :class:`~pymc_tempering.Modes` (a base's mode search,
    with their Laplace variances); None without at least two optima."""
    if modes is None or len(modes.points) < 2:
        return None
    variances = np.diagonal(modes.cov, axis1=1, axis2=2)
    return stratify(target, x, log_weight, hot, modes.points, variances, modes.log_mass,
                    random_seed)


def _combine(region, roots, lw, draws_p, draws_cov, log_z, rel_se, khat) -> Strata:
    """The probabilities, their method and the rescaled weights, from the regions' masses."""
    problems = []
    finite = np.isfinite(log_z)
    p = np.exp(log_z - logsumexp(log_z[finite])) if finite.any() else np.zeros_like(log_z)
    # delta method on independent log masses: dP_r = P_r (dlog Z_r - sum_j P_j dlog Z_j), so
    # Cov(P) = J diag(se^2) J' with J = diag(P) - P P'
    jacobian = np.diag(p) - np.outer(p, p)
    cov = (jacobian * np.where(finite, rel_se, 0.0) ** 2) @ jacobian.T
    bad = ~finite | (khat > KHAT_LIMIT)
    unseen = (draws_p == 0) & (p > 0.01) & ~bad
    if bad.any():
        problems.append(
            f"importance sampling of {int(bad.sum())} of {len(p)} modes was unreliable "
            f"(Pareto k-hat {np.max(np.where(np.isfinite(khat), khat, np.inf)):.2f} above "
            f"{KHAT_LIMIT})"
        )
    method = "importance sampling" if not problems else "draws"
    if unseen.any() and not problems:
        problems.append(
            f"{int(unseen.sum())} mode(s) holding {p[unseen].sum():.2f} of the mass have no "
            "draws: the summaries lack them"
        )
    if method == "draws":
        p, cov = draws_p, draws_cov
    share = np.where(draws_p > 0, draws_p, 1.0)
    with np.errstate(divide="ignore"):
        new_lw = lw + np.log(np.where(draws_p > 0, p, 0.0) / share)[region]
    optima = tuple("+".join(str(i) for i in np.flatnonzero(roots == r)) for r in range(len(p)))
    rel = np.where(finite, rel_se, np.nan)
    draws_se = np.sqrt(np.diag(draws_cov))
    return Strata(region, optima, p, np.sqrt(np.diag(cov)), cov, draws_p, draws_se,
                  np.where(finite, log_z, np.nan), rel, khat, method, new_lw, tuple(problems))
