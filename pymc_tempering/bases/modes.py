"""The mode search: optima of the target's log density, their Laplace masses, and spikes.

L-BFGS runs from prior draws on the flat unconstrained space (:func:`find_modes`); each
distinct converged maximum gets a Laplace approximation (the inverse negative Hessian, by
central differences of the gradient, with its precision floored at the prior's). The runs that
climb without converging mark the spikes of centred hierarchical groups
(:func:`search_modes`). The fits of :mod:`pymc_tempering.bases.fit` start from these optima,
:func:`~pymc_tempering.diagnose` compares a run's draws with them, and the funnel-neck
correction of continuous tempering looks along the spikes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm
from scipy import optimize, stats
from scipy.special import logsumexp

from pymc_tempering.contract import reproducible
from pymc_tempering.estimators import unseen_share
from pymc_tempering.results import read_base
from pymc_tempering.target import Target, negative_log_density
from pymc_tempering.timing import phase

__all__ = [
    "LOG_2PI",
    "MODE_BARRIER",
    "MODE_MAX_ITER",
    "MODE_SEARCH_GROWTH",
    "SEARCH_GROWTH_UNSEEN",
    "N_MODE_STARTS",
    "Modes",
    "diagonal_laplace",
    "discover_optima",
    "modes_from_result",
    "no_barrier",
    "find_modes",
    "hessian",
    "laplace_cov",
    "prior_draws",
    "search_modes",
    "starts_without_prior",
]

LOG_2PI = float(np.log(2.0 * np.pi))
N_MODE_STARTS = 32  # optimisations from prior draws in the mode search of fit_base("mixture")
# fit_base repeats its search with this many times the starts when the first one may be
# incomplete (its Good-Turing chance of an unseen optimum above SEARCH_GROWTH_UNSEEN)
MODE_SEARCH_GROWTH = 4
# Measured on Kou's 20 equal components (a): 32 starts found 14 of them with a Good-Turing
# chance of 0.06 to 0.25, and a component that neither the search nor the run's draws reached
# left its probability out (2 of 10 runs 0.05 off); 128 starts miss a component in about 3% of
# runs.
SEARCH_GROWTH_UNSEEN = 0.05
MODE_MAX_ITER = 200  # L-BFGS iterations per optimisation
MODE_BARRIER = 5.0  # nats: a deeper dip of the log density between two points separates modes


@dataclass(frozen=True, eq=False)
class Modes:
    """Local maxima of the target's log density, found by optimisation from prior draws.

    Made by the mode search of ``fit_base(method="mixture")`` (:func:`find_modes`); each
    distinct optimum carries a Laplace approximation of the probability mass around it. The
    ADVI fits of the base start from them, and :func:`~pymc_tempering.diagnose` compares the
    weighted draws of a run with them to see a mode that the run never visited.

    Attributes
    ----------
    points : ndarray, shape (k, ndim)
        The optima on the flat unconstrained space, by decreasing log density.
    log_density : ndarray, shape (k,)
        The target's (unnormalised) log density there.
    log_mass : ndarray, shape (k,)
        Laplace approximation of the log mass around each: ``log p(x*) + ndim/2 log(2 pi) +
        1/2 log det S`` with ``S`` the inverse of the negative Hessian, whose eigenvalues are
        floored at the prior's precision (a direction in which the target is flat, such as
        along a shell, counts as wide as the prior, not infinitely wide).
    cov : ndarray, shape (k, ndim, ndim)
        Those Laplace covariances ``S``.
    hits : ndarray of int, shape (k,)
        How many of the search's runs converged to each. Optima reached once only, ``f1`` of
        ``n = hits.sum()`` runs, say the search is incomplete: by the Good-Turing estimate a new
        run would reach an optimum not yet found with probability about ``f1 / n``
        (:attr:`unseen`).
    """

    points: np.ndarray
    log_density: np.ndarray
    log_mass: np.ndarray
    cov: np.ndarray
    hits: np.ndarray

    @property
    def unseen(self) -> float:
        """Good-Turing estimate of the chance that a new run of the search reaches an optimum
        not found yet: the share of runs whose optimum no other run reached."""
        return unseen_share(self.hits)

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def probabilities(self) -> np.ndarray:
        """Each optimum's share of the total Laplace mass."""
        return np.exp(self.log_mass - logsumexp(self.log_mass))


def no_barrier(target: Target, a: np.ndarray, b: np.ndarray, n: int = 9) -> bool:
    """Whether the target's log density on the segment between the flat points ``a`` and ``b``
    (at ``n`` points inside it) never dips more than ``MODE_BARRIER`` nats below its lower
    end: one mode, where separated modes have a valley between them."""
    t = np.linspace(0.0, 1.0, n + 2)[:, None]
    logp = target.logp(a + t * (b - a))
    return bool(np.min(logp[1:-1]) >= min(logp[0], logp[-1]) - MODE_BARRIER)


@reproducible
def find_modes(
    target: Target, n_starts: int = N_MODE_STARTS, random_seed=None, *, starts=None
) -> Modes | None:
    """Optimise the target's log density from prior draws, and keep the distinct maxima.

    L-BFGS (:func:`scipy.optimize.minimize`) on the flat unconstrained space from ``n_starts``
    prior draws (where the prior cannot be drawn from, as with ``pm.Flat``, from points spread
    about the model's initial point: :func:`starts_without_prior`). A run counts when it
    converged to a finite local maximum (the Hessian, by central differences of the gradient,
    is negative definite up to the flooring described in :class:`Modes`); one that runs off to
    infinity (the spike of a centred hierarchical model) or stops at a saddle does not. Optima that agree within a tenth of their Laplace standard
    deviations are one.

    Parameters
    ----------
    target : Target
    n_starts : int
        Prior draws to start from.
    random_seed : int, optional
    starts : array_like, shape (n, ndim), optional
        At least two finite flat points to start from instead of prior draws (for a model
        whose prior cannot be drawn from, such as one with ``pm.Flat`` variables); their spread
        then stands for the prior's in the flooring of :class:`Modes`.

    Returns
    -------
    Modes or None
        ``None`` when no run converged (or, without a prior to draw from, the first
        optimisation from the initial point failed).
    """
    return search_modes(target, n_starts, random_seed, starts)[0]


@phase("mode_search")
def search_modes(target: Target, n_starts: int, random_seed, starts=None):
    """:func:`find_modes`, the end points of the runs that did not converge (by decreasing
    log density; ``None`` when the prior cannot be drawn from) with the prior's standard
    deviations on the unconstrained space, and the spikes among those ends (:func:`_spikes`)."""
    if starts is not None:
        starts = np.asarray(starts, dtype=float)
        if starts.ndim != 2 or starts.shape[1] != target.ndim or starts.shape[0] < 2:
            raise ValueError(
                f"starts must have shape (n, {target.ndim}) with n >= 2 (flat unconstrained "
                f"points; their spread stands for the prior's), got {starts.shape}."
            )
        if not np.all(np.isfinite(starts)):
            raise ValueError("starts must be finite.")
    else:
        try:
            _, starts = prior_draws(target, n_starts, random_seed)
        except ValueError:
            starts = starts_without_prior(target, n_starts, random_seed)
            if starts is None:
                return None, None, None, ()
    # Directions in which the target is flat count as wide as the prior (see Modes.log_mass).
    prior_sd = np.maximum(starts.std(axis=0), 1e-12)
    centre = starts.mean(axis=0)

    kept, ends = _climb_all(target, starts, prior_sd)
    ends.sort(key=lambda f: -f[0])
    spikes = _spikes(ends, centre, prior_sd)
    ends = np.array([x for _, x in ends]).reshape(-1, target.ndim)
    if not kept:
        return None, ends, prior_sd, spikes
    modes = _modes(target, kept)
    return modes, ends, prior_sd, spikes


def _climb_all(target: Target, starts, prior_sd, kept=None):
    """The L-BFGS runs of the mode search from ``starts``: the distinct converged maxima as
    ``[log density, point, Laplace covariance, runs that reached it]`` (added to ``kept``, whose
    entries count the runs that reach them again), and the ends of the runs that did not
    converge as ``[(log density, point), ...]``."""
    negative = negative_log_density(target)
    optima, ends = [], []
    for start in starts:
        res = _climb(negative, start)
        if res is not None:
            (optima if res.success else ends).append((-float(res.fun), res.x))
    optima.sort(key=lambda f: -f[0])
    kept = [] if kept is None else kept

    def same(x, within):
        """The first kept optimum within ``within`` (one scale, or one per kept optimum and
        coordinate) of ``x`` in every coordinate, or None."""
        if not kept:
            return None
        near = np.all(np.abs(x - np.array([k[1] for k in kept])) < within, axis=1)
        return kept[int(np.argmax(near))] if near.any() else None

    for logp, x in optima:
        # Runs that reached one optimum first, cheaply (before a Hessian for each): then
        # optima that agree within a tenth of their Laplace standard deviations.
        match = same(x, 1e-3 * prior_sd)
        if match is not None:
            match[3] += 1
            continue
        laplace = laplace_cov(target, x, 1.0 / prior_sd.max() ** 2)
        if laplace is None:
            ends.append((logp, x))
            continue
        cov, grad = laplace
        # Converged: the Newton step to the quadratic's maximum gains under 0.01 nats. (A run
        # that L-BFGS stopped on a slope, climbing a centred model's spike, does not count.)
        if 0.5 * grad @ cov @ grad >= 0.01:
            ends.append((logp, x))
            continue
        match = same(x, 0.1 * np.sqrt(np.array([np.diag(k[2]) for k in kept])))
        if match is not None:
            match[3] += 1
        else:
            kept.append([logp, x, cov, 1])
    return kept, ends


def _entries(modes: Modes) -> list:
    """:class:`Modes` as :func:`_climb_all`'s optima, ``[log density, point, covariance,
    hits]`` each, by which further runs add to them."""
    return [[ld, pt, c, int(h)] for ld, pt, c, h in
            zip(modes.log_density, modes.points, modes.cov, modes.hits, strict=True)]


def _modes(target: Target, kept) -> Modes:
    """:class:`Modes` from :func:`_climb_all`'s optima, by decreasing log density."""
    kept = sorted(kept, key=lambda k: -k[0])
    covs = np.array([k[2] for k in kept])
    log_density = np.array([k[0] for k in kept])
    log_det = np.array([np.linalg.slogdet(c)[1] for c in covs])
    return Modes(
        points=np.array([k[1] for k in kept]),
        log_density=log_density,
        log_mass=log_density + 0.5 * target.ndim * LOG_2PI + 0.5 * log_det,
        cov=covs,
        hits=np.array([k[3] for k in kept]),
    )


N_DISCOVERY_STARTS = 32  # optimisations from a run's draws far from every known optimum
DISCOVERY_ROUNDS = 3  # rounds of them, each from the draws far from the optima found so far
FAR_QUANTILE = 0.999  # a draw is far from an optimum beyond this quantile of its Laplace Gaussian
MIN_FOUND_SHARE = 1e-3  # Laplace share of the mass below which a found optimum is left out
# draws a discovery looks among for its starts; a run with more (many batched chains) is
# subsampled: a region that holds 0.1% of the draws keeps about 20 of them
MAX_DISCOVERY_DRAWS = 20_000


@phase("mode_search")
def discover_optima(target: Target, x, modes: Modes, random_seed=None) -> Modes:
    """The optima that a run's draws reached and the mode search did not: ``modes`` with them.

    The draws ``x (..., ndim)`` (flat, of any inverse temperature: hot draws spread over the
    base, draws near the target sit in the modes) that lie beyond the ``FAR_QUANTILE``
    ellipsoid of every known optimum's diagonal Laplace Gaussian (among ``MAX_DISCOVERY_DRAWS``
    of them drawn at random, where the run has more) are the starts, at most
    ``N_DISCOVERY_STARTS`` of them spread by farthest-point selection; the optimisations run
    as in :func:`find_modes`, with the draws' spread standing for the prior's. While a round
    finds a new optimum, another starts from the draws far from every optimum found so far (at
    most ``DISCOVERY_ROUNDS``). A new maximum
    whose Laplace share of the mass is at least ``MIN_FOUND_SHARE`` joins, with no ``hits``:
    these runs start where the known optima are not, so they do not enter the search's
    Good-Turing estimate (:attr:`Modes.unseen`), which stays that of the search's own runs.

    Returns
    -------
    Modes
        ``modes`` itself when there was nothing to add, else a new :class:`Modes` holding the
        known optima and the new ones, by decreasing log density.

    Notes
    -----
    Measured on Kou's 20-component mixture (a): the search from 32 prior draws found 14
    optima; with the optima the first run's draws reached, all 20. One round of 32 starts left
    a component out in 2 of 10 runs (each start lands in one of 20 basins).
    """
    flat = np.asarray(x, dtype=float).reshape(-1, target.ndim)
    flat = flat[np.all(np.isfinite(flat), axis=1)]
    if len(flat) == 0:
        return modes
    spread = np.maximum(flat.std(axis=0), 1e-12)
    rng = np.random.default_rng(random_seed)
    if len(flat) > MAX_DISCOVERY_DRAWS:
        flat = flat[np.sort(rng.choice(len(flat), MAX_DISCOVERY_DRAWS, replace=False))]
    centre = flat.mean(axis=0)
    centred = flat - centre
    found = modes
    for _ in range(DISCOVERY_ROUNDS):
        # each draw's least squared distance to an optimum in its Laplace variances, as
        # sum(x^2 / v) - 2 x . (p / v) + sum(p^2 / v), with x and p centred on the draws' mean
        # (less to cancel): three products in place of a loop over the optima
        precision = 1.0 / np.diagonal(found.cov, axis1=1, axis2=2)
        points = found.points - centre
        d2 = (centred**2 @ precision.T - 2 * centred @ (points * precision).T
              + np.sum(points**2 * precision, axis=1)).min(axis=1)
        candidates = flat[d2 > stats.chi2.ppf(FAR_QUANTILE, target.ndim)]
        if len(candidates) == 0:
            break
        starts = _farthest_points(candidates / spread, N_DISCOVERY_STARTS, rng)
        kept = _entries(found)
        known = len(kept)
        kept, _ = _climb_all(target, candidates[starts], spread, kept)
        if len(kept) == known:
            break
        # the known optima keep their masses (a fit's ELBO may have raised one)
        added = _modes(target, [k[:3] + [0] for k in kept[known:]])
        share = np.exp(added.log_mass - logsumexp(np.r_[found.log_mass, added.log_mass]))
        if not np.any(share >= MIN_FOUND_SHARE):
            break
        # the search's own hits: these runs do not count (see above)
        found = _joined(found, added, share >= MIN_FOUND_SHARE)
    return found


def _joined(a: Modes, b: Modes, keep) -> Modes:
    """The optima of ``a`` and those of ``b`` where ``keep`` (bool) holds, by decreasing log
    density."""
    both = {f: np.concatenate([getattr(a, f), getattr(b, f)[keep]])
            for f in ("points", "log_density", "log_mass", "cov", "hits")}
    order = np.argsort(-both["log_density"], kind="stable")
    return Modes(**{f: v[order] for f, v in both.items()})


def modes_from_result(result, known: Modes | None = None) -> Modes | None:
    """The optima a continuous tempering result's ``base`` group holds (the base's mode search
    and those its run found, :func:`discover_optima`), as :class:`Modes`; ``None`` without.

    The group keeps the diagonals of the Laplace covariances; an optimum that is one of
    ``known``'s points gets ``known``'s full covariance back.
    """
    base = read_base(result)
    if base is None or base.optima is None:
        return None
    optima = base.optima
    points = optima.points
    cov = np.array([np.diag(v) for v in optima.variance])
    if known is not None:
        for i, point in enumerate(points):
            same = np.flatnonzero(np.all(known.points == point, axis=1))
            if same.size:
                cov[i] = known.cov[same[0]]
    return Modes(points=points, log_density=optima.log_density, log_mass=optima.log_mass,
                 cov=cov, hits=optima.hits)


def _farthest_points(points, n: int, random_seed) -> np.ndarray:
    """Indices of at most ``n`` of ``points`` spread out: a random first one, then each the
    farthest from those chosen."""
    rng = np.random.default_rng(random_seed)
    chosen = [int(rng.integers(len(points)))]
    d2 = np.sum((points - points[chosen[0]]) ** 2, axis=1)
    while len(chosen) < min(n, len(points)):
        nxt = int(np.argmax(d2))
        if d2[nxt] == 0:
            break
        chosen.append(nxt)
        d2 = np.minimum(d2, np.sum((points - points[nxt]) ** 2, axis=1))
    return np.array(chosen)


SPIKE_PRIOR_Z = 4.0  # prior sds from the prior draws' mean at which an end of the search is a spike


START_SPREAD = 2.0  # curvature widths by which starts without a prior spread about the initial point


def starts_without_prior(target: Target, n: int, random_seed) -> np.ndarray | None:
    """``n`` starts for the mode search of a model whose prior cannot be drawn from (``pm.Flat``
    variables with a ``pm.Potential``, say): points spread about the model's initial point at
    ``START_SPREAD`` times the widths of the log density's diagonal curvature at the optimum
    that L-BFGS reaches from there (a direction with no curvature gets the widest of the others,
    at least 1). ``None`` when that optimisation fails.

    The widths make the spread follow the model's units, and the initial point is where the
    user says the mass is. Measured on 10-unit Boltzmann relaxations (three machines): starts
    about the initial point found 25 to 31 optima, as many as prior draws of the proper form of
    the model; about the optimum (which lay 10 widths from the bulk), 1 to 15, and the base
    missed the mass.
    """
    x0 = target.ravel(target.model.initial_point())
    res = _climb(negative_log_density(target), x0)
    if res is None:
        return None
    hess, _ = hessian(target, res.x)
    curvature = -np.diag(hess)
    curved = np.isfinite(curvature) & (curvature > 0)
    sd = np.ones(target.ndim)
    if np.any(curved):
        sd[curved] = 1.0 / np.sqrt(curvature[curved])
        sd[~curved] = max(1.0, float(sd[curved].max()))
    noise = np.random.default_rng(random_seed).standard_normal((n, target.ndim))
    return x0 + START_SPREAD * sd * noise


def _climb(negative, start: np.ndarray):
    """The L-BFGS run of the mode search from ``start`` on ``negative``
    (:func:`~pymc_tempering.target.negative_log_density`): SciPy's result, ``None`` where it
    ended where the log density is not finite."""
    with np.errstate(all="ignore"):
        res = optimize.minimize(
            negative, start, jac=True, method="L-BFGS-B", options={"maxiter": MODE_MAX_ITER}
        )
    return res if np.isfinite(res.fun) and res.fun < 1e299 else None


def _spikes(ends: list, centre: np.ndarray, prior_sd: np.ndarray) -> tuple:
    """The spikes among the search's unconverged ends ``[(log density, point), ...]``: for
    each end, the flat coordinate in which it lies farthest from the prior draws' mean in their
    standard deviations, when that is ``SPIKE_PRIOR_Z`` or more (a centred group's log scale
    run off towards -inf: -8 to -19 on the centred radon intercepts and eight schools, whose
    members stay at their mean). Per coordinate and side, the end of highest log density:
    ``((k, value, log density), ...)``. A run that drifted along a flat ridge to the other side
    (measured: towards large ``tau`` on the centred eight schools) is kept apart from the spike
    and judged by its own, low, log density
    (:func:`~pymc_tempering.extended.funnel.funnel_mass`)."""
    found: dict[tuple[int, bool], tuple[int, float, float]] = {}
    for logp, end in ends:
        z = (end - centre) / prior_sd
        k = int(np.argmax(np.abs(z)))
        key = (k, bool(z[k] > 0))
        if abs(z[k]) >= SPIKE_PRIOR_Z and (key not in found or logp > found[key][2]):
            found[key] = (k, float(end[k]), float(logp))
    return tuple(found[key] for key in sorted(found))


def hessian(target: Target, x: np.ndarray):
    """The Hessian of the target's log density at ``x`` (central differences of the gradient)
    and the gradient there."""
    d = x.size
    grad = target.logp_and_grad(x)[1]
    h = 1e-5 * np.maximum(1.0, np.abs(x))
    hess = np.empty((d, d))
    for i in range(d):
        e = np.zeros(d)
        e[i] = h[i]
        plus, minus = target.logp_and_grad(x + e)[1], target.logp_and_grad(x - e)[1]
        hess[i] = (plus - minus) / (2 * h[i])
    return hess, grad


def laplace_cov(target: Target, x: np.ndarray, floor: float):
    """Inverse negative Hessian at ``x``, eigenvalues of the precision floored at ``floor``,
    and the gradient there; ``None`` at a saddle or where the gradient fails."""
    hess, grad = hessian(target, x)
    if not (np.all(np.isfinite(hess)) and np.all(np.isfinite(grad))):
        return None
    precision = -0.5 * (hess + hess.T)
    values, vectors = np.linalg.eigh(precision)
    if values.min() < -1e-3 * max(abs(values.max()), floor):  # a saddle, not a maximum
        return None
    values = np.maximum(values, floor)
    return (vectors / values) @ vectors.T, grad


def diagonal_laplace(target: Target, x: np.ndarray, prior_sd: np.ndarray):
    """The log mass of a Gaussian at ``x`` (any point, not only a maximum) with the standard
    deviations of the log density's diagonal curvature there, each at most the prior's, and
    those standard deviations: ``(log p(x) + sum log sd + ndim/2 log 2 pi, sd)``."""
    hess, _ = hessian(target, x)
    curvature = np.where(np.isfinite(np.diag(hess)), -np.diag(hess), 0.0)
    sd = 1.0 / np.sqrt(np.maximum(curvature, 1.0 / prior_sd**2))
    logp = float(target.logp(x[None])[0])
    return logp + float(np.sum(np.log(sd))) + 0.5 * x.size * LOG_2PI, sd


def prior_draws(target: Target, n: int, random_seed) -> tuple[list[dict], np.ndarray]:
    """``n`` prior draws of the free variables: constrained (dicts) and flat unconstrained."""
    model = target.model
    if target.improper_variables:
        # refused before compiling: PyTensor would warn that it runs the improper prior's
        # random variable in Numba's object mode, and then fail to draw from it
        raise ValueError(
            f"The prior of {target.improper_variables} is improper and cannot be drawn from, "
            "so method='prior' is unavailable; use 'advi'."
        )
    forward = []
    for rv in model.free_RVs:
        transform = model.rvs_to_transforms.get(rv)
        forward.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
    try:
        fn = pm.compile(inputs=[], outputs=list(model.free_RVs) + forward, random_seed=random_seed)
        raw = [fn() for _ in range(int(n))]
    except NotImplementedError as err:
        raise ValueError(
            "The model's prior cannot be drawn from (an improper or custom prior without a "
            "random generator), so method='prior' is unavailable; use 'advi'."
        ) from err
    k = len(model.free_RVs)
    names = [rv.name for rv in model.free_RVs]
    constrained = [dict(zip(names, r[:k], strict=True)) for r in raw]
    # Value variables are listed in the same order as free_RVs.
    flat = np.array([np.concatenate([np.ravel(v) for v in r[k:]]) for r in raw], dtype=float)
    if not np.all(np.isfinite(flat)):
        raise ValueError("Prior draws on the unconstrained space are not all finite.")
    return constrained, flat
