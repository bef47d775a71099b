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
Each draw belongs to the optimum of the base's mode search (with the optima the run's draws
reached, :func:`~pymc_tempering.bases.discover_optima`, and without those holding under
``MIN_STRATUM_SHARE`` of the Laplace mass) whose Laplace Gaussian (diagonal, weighted by its
Laplace mass) explains it best; optima between which the chains move at least
``MIN_CROSSINGS`` times while both draws are near the target (``beta > HOT``) form one region,
since the target itself connects them (the optima along a thin shell). The regions partition
the space, so the estimator is consistent whatever they are; they decide only its variance.
Where modes overlap, the crossings join them and the region's probability comes from the draws
as before; where the search found one optimum there is nothing to stratify. An optimum that no
draw came near is its own region, importance-sampled from its optimum's t: its mass is
reported, and its proposal draws describe it (below).

Proposals
---------
Per region, a defensive mixture: a multivariate t (``T_DOF`` degrees of freedom, the
region's weighted mean and covariance) with weight ``T_SHARE``; t's at each of the region's
optima with their Laplace covariances, ``LAPLACE_SHARE`` in all, so that an optimum the draws
rarely reached is still proposed; and Gaussian kernels at ``N_KERNELS`` of the region's
weighted draws with Silverman's bandwidth, which follow a curved ridge (the branch of a
hyperbola) that the t alone misses. A region whose importance weights have a Pareto k-hat above
``KHAT_LIMIT`` (:func:`~pymc_tempering.estimators.importance_khat`, which counts weights
bounded near their mean as light-tailed) gets ``RETRY_GROWTH`` times the proposal draws more (a
k-hat from 2,000 draws near the limit is noisy); one still above it makes every probability
fall back to the draws' shares. The masses are not compared with those shares: the shares are
what is wrong when the chains have moved between modes too rarely.

Where every region's k-hat is trusted and a probability's standard error is above
``TARGET_MODE_SE``, the regions get further proposal draws, allocated by their share of the
probabilities' variance (Neyman allocation: no chain is lengthened), in at most
``MAX_ALLOCATIONS`` passes and up to ``MAX_REGION_DRAWS`` per region. The proposal draws that
fell in each region are kept (:attr:`Strata.mode_draws`): independent weighted draws of it,
which the weighted summaries combine with the chains' draws there, and which alone describe a
region the chains barely reached.

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

from pymc_tempering.estimators import (
    KHAT_LIMIT,
    importance_khat,
    kish_ess,
    weighted_mean_cov,
)
from pymc_tempering.target import Target

__all__ = ["Strata", "stratify", "stratify_by_modes", "assign_optima", "connected_regions", "HOT"]

HOT = 0.9  # inverse temperature above which a draw counts as near the target
MIN_STRATUM_SHARE = 1e-3  # Laplace share of the mass below which an optimum is no region
MIN_CROSSINGS = 5  # moves between two optima near the target that join them into one region
N_PROPOSAL = 2000  # proposal draws per region
RETRY_GROWTH = 4  # proposal draws of a region's second try, in units of N_PROPOSAL
N_KERNELS = 1000  # kernels of the proposal's kernel part (fewer where the region has fewer draws)
T_SHARE = 0.2  # weight of the proposal's t part
LAPLACE_SHARE = 0.1  # weight of its t's at the region's optima
TARGET_MODE_SE = 0.01  # the probabilities' standard error that further proposal draws aim at
MAX_ALLOCATIONS = 2  # passes of further proposal draws
MAX_REGION_DRAWS = 16 * N_PROPOSAL  # most proposal draws per region
MAX_MODE_DRAWS = 2000  # proposal draws kept per region (the mode draws) ...
TOTAL_MODE_DRAWS = 20_000  # ... and in all, at least MIN_MODE_DRAWS per region
MIN_MODE_DRAWS = 100
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
    mode_draws : tuple of (ndarray, ndarray, ndarray) or None
        With importance sampling, the proposal draws that fell in each region, flat
        ``(n, ndim)``, their log importance weights ``(n,)`` and their regions ``(n,)`` (at
        most ``MAX_MODE_DRAWS`` per region, ``TOTAL_MODE_DRAWS`` in all but at least
        ``MIN_MODE_DRAWS`` per region): independent weighted draws of each region, which
        the weighted summaries combine with the chains' draws in it
        (:func:`~pymc_tempering.estimators.stratified_mean`,
        :func:`~pymc_tempering.estimators.pooled_weights`); they alone describe a region that
        the chains barely reached.
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
    mode_draws: tuple | None = None


def assign_optima(x, points, variances, log_mass) -> np.ndarray:
    """The optimum (index into ``points``) whose diagonal Laplace Gaussian, weighted by
    ``exp(log_mass)``, is largest at each point of ``x (..., ndim)``.

    The squared distances are matrix products, ``x^2 / v - 2 x p / v + p^2 / v`` about the
    optima's centre (so that the terms stay small), in blocks of rows."""
    x = np.asarray(x, dtype=float)
    points = np.asarray(points, dtype=float)
    centre = points.mean(axis=0)
    flat = x.reshape(-1, x.shape[-1]) - centre
    p = points - centre
    inverse = 1.0 / np.asarray(variances, dtype=float)
    offset = (-0.5 * np.sum(p**2 * inverse, axis=1)
              - 0.5 * np.sum(np.log(variances), axis=1) + np.asarray(log_mass, dtype=float))
    labels = np.empty(flat.shape[0], dtype=int)
    rows = max(1, CHUNK // max(len(points), 1))
    for start in range(0, flat.shape[0], rows):
        block = flat[start:start + rows]
        score = -0.5 * (block**2) @ inverse.T + block @ (p * inverse).T + offset
        labels[start:start + rows] = np.argmax(score, axis=1)
    return labels.reshape(x.shape[:-1])


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


def _weighted_cov(x, w) -> tuple[np.ndarray, np.ndarray] | None:
    """The weighted mean and covariance of draws ``x (n, ndim)`` (``w`` sums to one), made
    numerically positive definite; None where they are not finite."""
    ndim = x.shape[1]
    mean = w @ x
    cov = (x - mean).T @ ((x - mean) * w[:, None])
    cov = cov + 1e-6 * np.diag(np.diag(cov)) + 1e-12 * np.eye(ndim)
    cov = _positive(cov) if np.all(np.isfinite(cov)) else None
    return None if cov is None else (mean, cov)


def _positive(cov) -> np.ndarray | None:
    """``cov`` made numerically positive definite for SciPy, which takes eigenvalues under
    about 2e-10 of the largest for zero (draws spread over many orders of magnitude, or a
    Laplace covariance floored in a flat direction, leave it indefinite); None where it has
    no positive eigenvalue."""
    values, vectors = np.linalg.eigh(0.5 * (cov + cov.T))
    if not (np.all(np.isfinite(values)) and values.max() > 0):
        return None
    return (vectors * np.maximum(values, 1e-8 * values.max())) @ vectors.T


class _T:
    """A multivariate t component (``T_DOF`` degrees of freedom)."""

    def __init__(self, mean, cov, rng):
        self.dist = stats.multivariate_t(loc=mean, shape=cov, df=T_DOF, seed=rng)
        self.ndim = len(mean)

    def sample(self, n: int) -> np.ndarray:
        return np.reshape(self.dist.rvs(n), (n, self.ndim))

    def logpdf(self, z) -> np.ndarray:
        return np.atleast_1d(self.dist.logpdf(z))


class _Kernels:
    """Gaussian kernels at draws, with Silverman's bandwidth times their covariance."""

    def __init__(self, centres, cov, rng):
        self.centres, self.rng = centres, rng
        n, ndim = centres.shape
        h = (4 / (ndim + 2)) ** (2 / (ndim + 4)) * n ** (-2 / (ndim + 4))
        self.chol = np.linalg.cholesky(h * cov)

    def sample(self, n: int) -> np.ndarray:
        at = self.centres[self.rng.integers(len(self.centres), size=n)]
        return at + self.rng.standard_normal((n, self.centres.shape[1])) @ self.chol.T

    def logpdf(self, z) -> np.ndarray:
        ndim = self.centres.shape[1]
        log_det = np.sum(np.log(np.diag(self.chol))) + 0.5 * ndim * np.log(2 * np.pi)
        # whitened by the kernels' common Cholesky factor, the squared distances are
        # |z|^2 + |c|^2 - 2 z.c: a matrix product per block of rows (bounded memory)
        whiten = linalg.solve_triangular(self.chol, np.eye(ndim), lower=True).T
        zw, cw = z @ whiten, self.centres @ whiten
        z2, c2 = np.sum(zw**2, axis=1), np.sum(cw**2, axis=1)
        out = np.empty(len(zw))
        rows = max(1, CHUNK // len(cw))
        for start in range(0, len(zw), rows):
            block = slice(start, start + rows)
            # -log k + log_det, then each row's log-sum-exp by its smallest entry (NumPy's
            # own reductions: SciPy's logsumexp checks and copies, 4 of a run's 7 s weighing
            # the kernels of a 50-parameter factor model's strata)
            half = 0.5 * np.maximum(z2[block, None] + c2[None, :] - 2 * zw[block] @ cw.T, 0.0)
            least = half.min(axis=1)
            np.subtract(least[:, None], half, out=half)
            np.exp(half, out=half)
            out[block] = np.log(half.sum(axis=1)) - least
        return out - log_det - np.log(len(self.centres))


class _Proposal:
    """A mixture of components (``[(weight, component), ...]``, weights summing to one)."""

    def __init__(self, parts, rng):
        self.parts, self.rng = parts, rng

    @classmethod
    def defensive(cls, x, w, optima, rng) -> _Proposal:
        """The defensive proposal of one region (module docstring): a t at the draws'
        moments, t's at the region's optima with their Laplace covariances, kernels at the
        draws; the optima's t's alone where the draws are too few for a covariance."""
        points, covs = optima
        # every optimum of the region is proposed, whatever the draws saw
        laplace = [(LAPLACE_SHARE / len(points), _T(pt, _positive(c), rng))
                   for pt, c in zip(points, covs, strict=True)]
        with np.errstate(divide="ignore"):
            enough = x.shape[0] and kish_ess(np.log(w)) >= x.shape[1] + 2
        moments = _weighted_cov(x, w) if enough else None
        if moments is None:
            return cls([(1.0 / len(points), t) for _, t in laplace], rng)
        centres = x[rng.choice(x.shape[0], size=min(N_KERNELS, x.shape[0]), p=w)]
        kernels = _Kernels(centres, moments[1], rng)
        return cls([(T_SHARE, _T(*moments, rng))] + laplace
                   + [(1.0 - T_SHARE - LAPLACE_SHARE, kernels)], rng)

    def adapted(self, z, log_ratio) -> _Proposal | None:
        """Half this proposal, half a t at the importance-weighted moments of its draws ``z``
        (their ``log_ratio``, ``-inf`` outside the region): one step of adaptive importance
        sampling, for a region whose weights had a heavy tail. None without such moments."""
        inside = np.isfinite(log_ratio)
        if kish_ess(log_ratio[inside]) < 2:
            return None
        w = np.exp(log_ratio[inside] - logsumexp(log_ratio[inside]))
        moments = _weighted_cov(z[inside], w)
        if moments is None:
            return None
        return _Proposal([(0.5 * share, part) for share, part in self.parts]
                         + [(0.5, _T(*moments, self.rng))], self.rng)

    def sample(self, n: int) -> np.ndarray:
        counts = self.rng.multinomial(n, [share for share, _ in self.parts])
        z = [part.sample(k) for (_, part), k in zip(self.parts, counts, strict=True) if k]
        return self.rng.permutation(np.concatenate(z))

    def logpdf(self, z) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        return logsumexp([np.log(share) + part.logpdf(z) for share, part in self.parts], axis=0)


def _log_ratios(target, proposal, region_of, r, n) -> tuple[np.ndarray, np.ndarray]:
    """``n`` proposal draws ``z`` and ``log p(z) - log g(z)`` there, ``-inf`` outside region
    ``r``."""
    z = proposal.sample(n)
    inside = region_of(z) == r
    log_ratio = np.full(n, -np.inf)
    if inside.any():
        log_ratio[inside] = target.logp(z[inside]) - proposal.logpdf(z[inside])
    log_ratio[~np.isfinite(log_ratio)] = -np.inf
    return z, log_ratio


def _region_mass(log_ratio):
    """``log Z_r``, its relative standard error and the Pareto k-hat, from the log ratios of
    :func:`_log_ratios`."""
    n = log_ratio.size
    if np.isfinite(log_ratio).sum() < 10:
        return -np.inf, np.inf, np.inf
    log_z = logsumexp(log_ratio) - np.log(n)
    w = np.exp(log_ratio - log_z)
    return float(log_z), float(np.std(w, ddof=1) / np.sqrt(n)), importance_khat(log_ratio)


def _extra_draws(p, rel_se, n, target_se) -> np.ndarray:
    """Proposal draws to add per region so that every probability's standard error falls to
    ``target_se``: the draws that the largest standard error asks for in all, allocated by
    each region's share of the probabilities' variance (Neyman: ``n_r`` proportional to
    ``sqrt(sum_k J_kr^2 v_r)``, ``v_r`` a draw's relative variance)."""
    jacobian = np.diag(p) - np.outer(p, p)
    se = np.sqrt(np.diag((jacobian * rel_se**2) @ jacobian.T))
    total = n.sum() * (se.max() / target_se) ** 2
    allocation = np.sqrt((jacobian**2).sum(axis=0) * rel_se**2 * n)
    wanted = total * allocation / allocation.sum()
    return np.maximum(np.ceil(wanted - n), 0).astype(int)


def stratify(
    target: Target, x, log_weight, hot, points, covariances, log_mass, random_seed=None,
    n_proposal: int = N_PROPOSAL, names=None,
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
    points : ndarray, shape (k, ndim)
        The optima.
    covariances : ndarray, shape (k, ndim, ndim)
        Their Laplace covariances (the diagonals assign the draws to optima, the full
        covariances shape the proposals' t's at the optima).
    log_mass : ndarray, shape (k,)
        Their Laplace log masses.
    random_seed : int or numpy.random.Generator, optional
    n_proposal : int
        Proposal draws per region in the first pass.
    names : array_like of int, shape (k,), optional
        The optima's numbers in :attr:`Strata.optima` (default ``0, 1, ...``).

    Returns
    -------
    Strata or None
        None when the optima form one region (one optimum, or all joined by the chains).
    """
    x, lw = np.asarray(x, dtype=float), np.asarray(log_weight, dtype=float)
    points, covs = np.asarray(points, dtype=float), np.asarray(covariances, dtype=float)
    variances = np.diagonal(covs, axis1=1, axis2=2)
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

    proposals, draws, ratios, masses = [], [], [], []
    for r in range(n_regions):
        inside = region == r
        wr = w[inside] / w[inside].sum() if inside.any() and w[inside].sum() > 0 else w[inside]
        proposal = _Proposal.defensive(x[inside], wr, (points[roots == r], covs[roots == r]), rng)
        z, log_ratio = _log_ratios(target, proposal, region_of, r, n_proposal)
        mass = _region_mass(log_ratio)
        if not mass[2] <= KHAT_LIMIT:
            # a heavy tail, or a noisy k-hat: RETRY_GROWTH times the draws, from the proposal
            # adapted to its own weighted draws where it can be
            proposal = proposal.adapted(z, log_ratio) or proposal
            z, log_ratio = _log_ratios(target, proposal, region_of, r, RETRY_GROWTH * n_proposal)
            mass = _region_mass(log_ratio)
        proposals.append(proposal)
        draws.append(z)
        ratios.append(log_ratio)
        masses.append(mass)
        if not mass[2] <= KHAT_LIMIT:
            break  # the probabilities fall back to the draws: the other regions need no mass
    masses += [(np.nan, np.nan, np.nan)] * (n_regions - len(masses))  # not tried
    log_z, rel_se, khat = (np.array(v) for v in zip(*masses, strict=True))
    # more draws where the probabilities' variance is, while every region's k-hat is trusted
    for _ in range(MAX_ALLOCATIONS):
        if not (np.all(np.isfinite(log_z)) and np.all(khat <= KHAT_LIMIT)):
            break
        n = np.array([lr.size for lr in ratios])
        extra = np.minimum(_extra_draws(np.exp(log_z - logsumexp(log_z)), rel_se, n,
                                        TARGET_MODE_SE), MAX_REGION_DRAWS - n)
        if extra.sum() < 0.1 * n.sum():
            break
        for r in np.flatnonzero(extra > 0):
            z, log_ratio = _log_ratios(target, proposals[r], region_of, r, int(extra[r]))
            draws[r] = np.concatenate([draws[r], z])
            ratios[r] = np.concatenate([ratios[r], log_ratio])
            log_z[r], rel_se[r], khat[r] = _region_mass(ratios[r])
    names = np.arange(len(points)) if names is None else np.asarray(names)
    strata = _combine(region, roots, names, lw, draws_p, draws_cov, log_z, rel_se, khat)
    if strata.method != "importance sampling":
        return strata
    # every region's proposal draws describe it beside the chains' own draws in it
    kept, most = [], max(MIN_MODE_DRAWS, min(MAX_MODE_DRAWS, TOTAL_MODE_DRAWS // n_regions))
    for r in range(n_regions):
        inside = np.flatnonzero(np.isfinite(ratios[r]))
        if inside.size > most:
            inside = np.sort(rng.choice(inside, most, replace=False))
        kept.append((draws[r][inside], ratios[r][inside], np.full(inside.size, r)))
    if not kept:
        return strata
    z, log_ratio, which = (np.concatenate(v) for v in zip(*kept, strict=True))
    problems = tuple(q for q in strata.problems if "have no draws" not in q)
    return strata._replace(mode_draws=(z, log_ratio, which), problems=problems)


def stratify_by_modes(target, x, log_weight, hot, modes, random_seed=None) -> Strata | None:
    """:func:`stratify` by the optima of a :class:`~pymc_tempering.Modes` (a base's mode search,
    with their Laplace covariances) that hold at least ``MIN_STRATUM_SHARE`` of its Laplace
    mass; None without two such optima. (An optimum 20 nats below the others, a saddle-like
    bump between label orderings, made a region of no mass whose importance weights had a
    heavy tail, and every probability fell back to the draws.)"""
    if modes is None or len(modes.points) < 2:
        return None
    keep = modes.probabilities >= MIN_STRATUM_SHARE
    if keep.sum() < 2:
        return None
    # the regions name the optima by their index in ``modes``
    return stratify(target, x, log_weight, hot, modes.points[keep], modes.cov[keep],
                    modes.log_mass[keep], random_seed, names=np.flatnonzero(keep))


def _combine(region, roots, names, lw, draws_p, draws_cov, log_z, rel_se, khat) -> Strata:
    """The probabilities, their method and the rescaled weights, from the regions' masses."""
    problems = []
    finite = np.isfinite(log_z)
    p = np.exp(log_z - logsumexp(log_z[finite])) if finite.any() else np.zeros_like(log_z)
    # delta method on independent log masses: dP_r = P_r (dlog Z_r - sum_j P_j dlog Z_j), so
    # Cov(P) = J diag(se^2) J' with J = diag(P) - P P'
    jacobian = np.diag(p) - np.outer(p, p)
    cov = (jacobian * np.where(finite, rel_se, 0.0) ** 2) @ jacobian.T
    tried = ~np.isnan(log_z)  # stratify stops at the first region it cannot trust
    bad = tried & (~finite | (khat > KHAT_LIMIT))
    unseen = (draws_p == 0) & (p > 0.01) & ~bad
    if bad.any():
        problems.append(
            f"importance sampling of {int(bad.sum())} of the {int(tried.sum())} modes tried "
            f"(of {len(p)}) was unreliable (Pareto k-hat "
            f"{np.max(np.where(np.isfinite(khat[bad]), khat[bad], np.inf)):.2f} above "
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
    optima = tuple("+".join(str(i) for i in names[roots == r]) for r in range(len(p)))
    rel = np.where(finite, rel_se, np.nan)
    draws_se = np.sqrt(np.diag(draws_cov))
    return Strata(region, optima, p, np.sqrt(np.diag(cov)), cov, draws_p, draws_se,
                  np.where(finite, log_z, np.nan), rel, khat, method, new_lw, tuple(problems))
