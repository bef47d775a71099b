"""How the bases are fitted: ADVI, the mode search's mixtures, the prior, and a run's refit.

:func:`fit_base` is the user's entry point and :func:`fit_base_to_target` the same for a
:class:`~pymc_tempering.Target` already built; the mixture of section 6 of the continuous
tempering paper (eq. 25) starts its ADVI runs (:mod:`pymc_tempering.bases.advi`) from the
optima of the mode search (:mod:`pymc_tempering.bases.modes`). :func:`base_from_result` is the
bootstrap refit of section 6 (eq. 21), :func:`widen_base` widens a base to optima a run missed,
:func:`estimate_log_zeta` estimates log Z by importance sampling from a base, and
:func:`prepare_base` is the set-up shared by every method that bridges to a base.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from scipy.special import logsumexp

from pymc_tempering.bases.advi import ADVI_ITERATIONS, AdviSteps, fit_advi
from pymc_tempering.bases.densities import (
    DEFENSIVE_WEIGHT,
    Base,
    MixtureBase,
    PriorDensity,
    check_base,
)
from pymc_tempering.bases.census import census_regions
from pymc_tempering.bases.modes import (
    MODE_SEARCH_GROWTH,
    no_barrier,
    SEARCH_GROWTH_UNSEEN,
    N_MODE_STARTS,
    Modes,
    diagonal_laplace,
    prior_draws,
    search_modes,
)
from pymc_tempering.contract import reproducible, split_seed, warn
from pymc_tempering.target import Target, target_of
from pymc_tempering.timing import phase

__all__ = [
    "N_FITS",
    "base_from_result",
    "estimate_log_zeta",
    "fit_base",
    "fit_base_to_target",
    "prepare_base",
    "widen_base",
]

N_FITS = 4  # most ADVI runs of a mixture base (fit_base's n_fits)
# nats of ELBO below the best fit of a mixture at which a fit counts as failed and is dropped
# (fits of distinct modes of the evidence suite differ by up to 6 nats; failed fits of the
# radon models lay 300 or more below until ADVI's stop got better, and then a fit that
# collapsed into the centred intercepts' spike, sd 1e-4 where the best fit has 0.25, came
# out 99 nats below, was kept at the weight floor and made the run unreliable, 1 nat off)
FAILED_FIT_GAP = 30.0
LAPLACE_AGREEMENT = 1.0  # nats between the Laplace mass and its importance-sampling check


@reproducible
def fit_base(
    model: pm.Model | None = None,
    method: str = "advi",
    n: int = ADVI_ITERATIONS,
    random_seed=None,
    progressbar: bool = True,
    *,
    n_fits: int = N_FITS,
    prior_weight: float = 0.0,
    **fit_kwargs,
) -> Base | MixtureBase:
    """Fit a Gaussian base density to a PyMC model.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the context when omitted. It is not modified.
    method : {"advi", "fullrank_advi", "mixture", "laplace", "prior"}
        - ``"advi"`` (mean-field) and ``"fullrank_advi"`` run PyMC's ADVI (see
          ``**fit_kwargs``) with Adam
          (step 0.01) until the mean loss of 500 iterations gains less than 0.1 nats on the
          500 before, twice in a row; then with a step of 0.001 until that happens again, or
          ``n`` iterations in all; ``log_zeta`` is the ELBO averaged over the last 10%
          of the iterations. (PyMC's default optimiser, adagrad with a step of 0.001, left the
          92-parameter radon model's fits 100 to 2000 nats below log Z after 10,000 iterations;
          Adam came within 3 nats in 2000 to 8500.) Pass ``obj_optimizer`` to use another
          optimiser (then without the schedule and the stop), or ``callbacks``.
        - ``"mixture"`` (section 6 of the CT paper): a mode search first
          (:func:`find_modes`: L-BFGS from 32 prior draws, the distinct converged maxima with
          their Laplace masses; repeated from 128 when more than 5% of the converged runs
          reached an optimum that no other run reached, a Good-Turing chance of a new optimum
          above 0.05, as on a Boltzmann relaxation or Kou's 20 components); then mean-field ADVI runs from the
          ``n_fits`` most dispersed optima (one run when it found one), the other optima joining
          as their Laplace Gaussians; each run starts at the widths of its optimum's Laplace
          Gaussian. Where no run of the search converged (a centred hierarchical model's spike,
          a flat direction), half the ``n_fits`` ADVI runs start where the search's runs ended,
          those with the largest diagonal Laplace mass first, at the widths of the diagonal
          curvature there, and the others from dispersed prior draws; where the prior cannot be
          drawn from, from points spread around a first fit at three of its standard deviations.
          There, too, short NUTS runs from 12 prior draws take a census of the target's regions
          (:func:`~pymc_tempering.bases.census.census_regions`: a log density unbounded along
          the way, as in factor models, has regions but no optimum); where they find two or
          more, the regions stand for the optima (their chains' means and covariances) and the
          base is built on them as on optima, and where they find one it is the base's mode.
          Fits more than 30 nats of ELBO below the best are failed optimisations and dropped;
          fits of one mode are dropped as duplicates (means within one standard deviation in
          every coordinate, or no dip of the log density deeper than 5 nats on the segment
          between them). The components are kept as the true mixture of eq. (25), weighted by
          their ELBOs and Laplace masses (a :class:`MixtureBase`: exact log density and draws,
          carrying the optima as ``modes``); ``log_zeta`` is eq. (25)'s ``log sum exp(ELBO_i)``.
          :meth:`MixtureBase.gaussian` is the defensive Gaussian that continuous tempering runs
          with.
        - ``"laplace"`` (the default base of continuous tempering, AIS and simulated
          tempering): the mode search of ``"mixture"``, and the mixture of the optima's
          Laplace Gaussians weighted by their Laplace masses, without ADVI. Its ``log_zeta``
          is an importance-sampling estimate with the mixture as proposal (1000 draws); when
          that disagrees with the total Laplace mass by more than a nat (a Gaussian at a point
          of a Gaussian shell, a funnel), the search finds nothing, or ``prior_weight`` is
          set, it is ``"mixture"``.
          Measured on the evidence suite, it saves the ADVI runs on the six of ten problems
          where it holds, with the same accuracy.
        - ``"prior"`` moment-matches a Gaussian to ``n`` draws of the prior on the unconstrained
          space (wide, so it covers modes that a variational fit misses; potentials are not part
          of the prior and are ignored); its ``log_zeta`` is left unset.
    n : int
        Most iterations of the optimiser (per fit), or prior draws for ``"prior"``.
    random_seed : int, optional
    progressbar : bool
    n_fits : int
        Most ADVI runs for ``"mixture"``.
    prior_weight : float
        Weight of the model's prior as a component of ``"mixture"`` (a defensive mixture,
        Hesterberg 1995), in [0, 1); it needs a proper prior that can be drawn from. Off by
        default: measured on the two 20-D Gaussian shells, a weight of 0.1 left the base so
        much wider than the target that the chains never reached inverse temperature 0 (11
        nats off, flagged), where the fits alone were right.
    **fit_kwargs
        :func:`pymc.fit` keywords (for example ``obj_optimizer``). The ADVI runs of a base
        share one step function per method, PyMC's objective and Adam compiled with the
        Monte Carlo noise as an input (drawn with NumPy: :func:`pymc.fit`'s step draws it
        from a generator that numba dispatches slowly; see :mod:`pymc_tempering.bases.advi`),
        unless these hold more than ``callbacks``,
        ``obj_n_mc``, ``total_grad_norm_constraint``, ``compile_kwargs`` and ``backend``
        (an ``obj_optimizer``, say); each run then calls :func:`pymc.fit`.

    Returns
    -------
    Base or MixtureBase
        A :class:`MixtureBase` for ``"mixture"``, a Gaussian :class:`Base` otherwise.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, an unknown method, or a fit that
        diverged to NaN.
    """
    target = target_of(model)
    target.require_exact("fit_base")
    return fit_base_to_target(
        target, method, n, random_seed, progressbar, n_fits, prior_weight, **fit_kwargs
    )


def fit_base_to_target(
    target: Target, method, n=ADVI_ITERATIONS, random_seed=None, progressbar=True, n_fits=N_FITS,
    prior_weight=0.0, **fit_kwargs,
) -> Base | MixtureBase:
    """:func:`fit_base` for a :class:`Target` already built (and its functions compiled)."""
    if method == "prior":
        return _fit_prior(target, n, random_seed)
    if method in ("mixture", "laplace"):
        return _fit_mixture(
            target, n, n_fits, prior_weight, random_seed, progressbar, fit_kwargs, method == "mixture"
        )
    if method not in ("advi", "fullrank_advi"):
        raise ValueError(
            f"Unknown base method {method!r}; use 'laplace', 'mixture', 'advi', 'fullrank_advi' "
            "or 'prior'."
        )
    return fit_advi(target, method, n, random_seed, progressbar, **fit_kwargs)


def _fit_prior(target: Target, n: int, random_seed) -> Base:
    _, draws = prior_draws(target, n, random_seed)
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    return Base(mean=draws.mean(axis=0), cov=cov, log_zeta=None, method="prior")


def _dispersed(points: np.ndarray, k: int) -> list[int]:
    """Indices of ``k`` mutually distant points (farthest-point selection, standardised)."""
    z = (points - points.mean(0)) / np.maximum(points.std(0), 1e-12)
    chosen = [int(np.argmin(np.sum(z**2, axis=1)))]
    dist = np.sum((z - z[chosen[0]]) ** 2, axis=1)
    while len(chosen) < min(k, len(points)):
        chosen.append(int(np.argmax(dist)))
        dist = np.minimum(dist, np.sum((z - z[chosen[-1]]) ** 2, axis=1))
    return chosen



def _same_mode(target: Target, a: Base, b: Base, n: int = 9) -> bool:
    """Whether two fits sit on one mode of the target.

    Yes when their means are within one standard deviation in every coordinate, or when the
    target's log density on the segment between them never dips more than ``MODE_BARRIER``
    nats below its lower end: ADVI runs from different starts stop at slightly different
    points of one mode (more than a standard deviation apart somewhere, in many dimensions),
    while separated modes have a valley between them.
    """
    if np.all(np.abs(a.mean - b.mean) < np.maximum(a.std, b.std)):
        return True
    return no_barrier(target, a.mean, b.mean, n)


def _fit_mixture(
    target: Target,
    n: int,
    n_fits: int,
    prior_weight,
    random_seed,
    progressbar,
    fit_kwargs,
    advi: bool = True,
) -> MixtureBase:
    """``fit_base(method="mixture")`` (and ``"laplace"``, ``advi=False``): the mode search,
    then the Laplace mixture when it holds, or ADVI runs weighted by eq. (25)."""
    if n_fits < 1:
        raise ValueError(f"n_fits must be at least 1, got {n_fits}.")
    if not 0 <= prior_weight < 1:
        raise ValueError(f"prior_weight must be in [0, 1), got {prior_weight!r}.")
    start_seed, mode_seed, *fit_seeds = split_seed(random_seed, n_fits + 2)
    modes, ends, prior_sd, spikes = _complete_search(target, mode_seed)
    census = None
    if modes is None:
        # No run of the search converged (an unbounded density): the regions from short NUTS
        # runs. With two or more, the base is built on them as on optima; with one (a funnel's
        # bulk), the fits start as before and the region is the run's mode to compare with.
        census = census_regions(target, random_seed=split_seed(mode_seed, 2)[1])
        if census is not None and len(census) > 1:
            modes, census = census, None
    if modes is not None and not advi and prior_weight == 0:
        mixture = _laplace_mixture(target, modes, start_seed, spikes)
        if mixture is not None:
            return mixture
    fits, laplace = _advi_fits(
        target, n, n_fits, start_seed, fit_seeds, progressbar, fit_kwargs, modes, ends, prior_sd
    )
    kept = _distinct_fits(target, fits, modes)
    if modes is not None and census is None:
        modes = _masses_from_fits(target, modes, kept)
    elbo = np.array([k.log_zeta for k in kept])
    components = kept + laplace
    log_mass = np.array([k.log_zeta for k in components])
    prior = PriorDensity(target, random_seed=start_seed) if prior_weight > 0 else None
    method = f"mixture of {len(components)}" + (" and the prior" if prior is not None else "")
    return MixtureBase(
        components=tuple(components),
        # eq. (25)'s weights (the ELBOs, and the Laplace masses of the optima without a fit),
        # floored so that no mode found becomes invisible in the base
        weights=np.maximum(np.exp(log_mass - log_mass.max()), 1e-3),
        prior=prior,
        prior_weight=float(prior_weight),
        # the ELBOs only: each is a lower bound on the mass of its mode, a Laplace mass is not
        log_zeta=float(logsumexp(elbo)),
        method=method,
        modes=modes if census is None else census,
        spikes=spikes,
    )


def _masses_from_fits(target: Target, modes: Modes, fits: list) -> Modes:
    """The optima's log masses, each at least the ELBO of an ADVI fit that lies on its mode
    (its mean nearest that optimum, no barrier between them): an ELBO is a lower bound on the
    mass of the mode it fits, a Laplace mass is not. In many dimensions the Laplace mass can
    be far too low where the mode is not Gaussian or the optimum was found to a few nats only
    (measured: a one-factor model with 208 parameters, whose two sign modes have equal masses,
    had Laplace masses 8.5 and 12 nats apart, ELBOs 0.1 apart). The strata
    (:func:`~pymc_tempering.stratification.stratify_by_modes`) and the check of missed optima
    (:func:`~pymc_tempering.checks.missed_modes`) weigh the optima by these masses, and an
    optimum wrongly put below ``MIN_STRATUM_SHARE`` was left out of both: its mode's
    probability came out 0, marked reliable."""
    scale = np.sqrt(np.maximum(np.einsum("kii->ki", modes.cov).max(0), 1e-300))
    log_mass = modes.log_mass.copy()
    for fit in fits:
        i = int(np.argmin((((modes.points - fit.mean) / scale) ** 2).sum(1)))
        if fit.log_zeta > log_mass[i] and no_barrier(target, fit.mean, modes.points[i]):
            log_mass[i] = fit.log_zeta
    return replace(modes, log_mass=log_mass)


def _complete_search(target: Target, mode_seed):
    """The mode search (:func:`~pymc_tempering.bases.modes.search_modes`) from
    ``N_MODE_STARTS`` prior draws, repeated from ``MODE_SEARCH_GROWTH`` times as many when the
    first may be incomplete (its Good-Turing chance of an unseen optimum above
    ``SEARCH_GROWTH_UNSEEN``)."""
    modes, ends, prior_sd, spikes = search_modes(target, N_MODE_STARTS, mode_seed)
    if modes is not None and modes.unseen > SEARCH_GROWTH_UNSEEN:
        # The target may have more optima than the search found, and a base moment-matched to
        # a few of them misses the mass of the others. Measured on the 22-unit Boltzmann
        # relaxations (five machines, four seeds each, the proper-prior form of
        # evidence_calibration.py): 128 starts instead of 32 cut the RMSE of sample_ct's log Z
        # from 0.32 to 0.17 nats, in the same time.
        modes, ends, prior_sd, spikes = search_modes(
            target, MODE_SEARCH_GROWTH * N_MODE_STARTS, mode_seed
        )
    return modes, ends, prior_sd, spikes


def _advi_fits(
    target, n, n_fits, start_seed, fit_seeds, progressbar, fit_kwargs, modes, ends, prior_sd
):
    """The ADVI runs of a mixture base (sharing one compiled step function,
    :class:`~pymc_tempering.bases.advi.AdviSteps`) from the starts of :func:`_starts`, or,
    where the prior cannot be drawn from, from points spread around a first fit at three of its
    standard deviations; and the Laplace Gaussians of the optima that no run starts from.
    Failed runs are dropped with a warning (an error when all fail)."""
    rv_names = [rv.name for rv in target.model.free_RVs]
    fits: list[Base] = []
    laplace: list[Base] = []
    start_sds: list = []
    steps = AdviSteps(target.model)
    try:
        starts = _starts(
            target, modes, ends, prior_sd, n_fits, start_seed, rv_names, start_sds, laplace
        )
    except ValueError:
        # No prior to draw from: spread the starts around a first fit.
        fits.append(
            fit_advi(
                target, "advi", n, fit_seeds.pop(), progressbar, steps=steps, **fit_kwargs
            )
        )
        rng = np.random.default_rng(start_seed)
        flat = fits[0].mean + 3 * fits[0].std * rng.standard_normal((n_fits - 1, target.ndim))
        starts = [{k: target.constrained(x)[k] for k in rv_names} for x in flat]
    errors = []
    start_sds += [None] * (len(starts) - len(start_sds))
    for start, sd, seed in zip(starts, start_sds, fit_seeds, strict=False):
        try:
            fits.append(
                fit_advi(
                    target,
                    "advi",
                    n,
                    seed,
                    progressbar,
                    start_sd=sd,
                    steps=steps,
                    start=start,
                    **fit_kwargs,
                )
            )
        except ValueError as err:
            errors.append(err)
    if not fits:
        raise ValueError(
            f"Every ADVI run of the mixture base failed. The first: {errors[0]}"
        ) from errors[0]
    if errors:
        warn(
            f"{len(errors)} of {len(errors) + len(fits)} ADVI runs of the mixture base failed and "
            f"were dropped. The first: {errors[0]}"
        )
    return fits, laplace


def _starts(target, modes, ends, prior_sd, n_fits, start_seed, rv_names, start_sds, laplace):
    """The starts (constrained points) of a mixture base's ADVI runs. Their widths go into
    ``start_sds`` and the Laplace Gaussians of the optima without a run into ``laplace`` (both
    filled in place, as far as they got when this raises). Raises ``ValueError`` where the
    prior cannot be drawn from."""
    if modes is not None:
        # One ADVI run from each of the n_fits most dispersed optima (one run when the
        # search found one), starting at the widths of its Laplace Gaussian; the other
        # optima join the mixture as their Laplace approximations.
        chosen = _dispersed(modes.points, n_fits)
        starts = [target.constrained(modes.points[i]) for i in chosen]
        starts = [{k: start[k] for k in rv_names} for start in starts]
        start_sds.extend([np.sqrt(np.diag(modes.cov[i])) for i in chosen])
        laplace.extend([
            Base(
                mean=modes.points[i],
                cov=modes.cov[i],
                log_zeta=float(modes.log_mass[i]),
                method="laplace",
            )
            for i in range(len(modes))
            if i not in chosen
        ])
    elif ends is not None and len(ends):
        # No optimum: the runs climbed a spike (a centred hierarchical model's, as the
        # scale of a group goes to 0) or stopped on a slope. Half the ADVI runs start where
        # the search's runs ended, those of the largest diagonal Laplace mass first (a
        # point in a spike has a high density but a tiny mass), at the widths of the
        # diagonal curvature there; the others from dispersed prior draws. Measured on the
        # radon models (importance-sampling estimate of log Z from each fit): with the
        # county intercepts non-centred, fits from the ends came within 0.15 nats and fits
        # from prior draws 300 to 6000 nats below in 10,000 iterations; centred, every end
        # lay in the spike (log sigma_alpha -8 to -19), fits from there failed by 1e8 nats
        # or more and fits from prior draws came within 0.5.
        scored = sorted(
            ((diagonal_laplace(target, x, prior_sd), x) for x in ends),
            key=lambda f: -f[0][0],
        )
        n_ends = (n_fits + 1) // 2
        starts = [
            {k: v for k, v in target.constrained(x).items() if k in rv_names}
            for _, x in scored[:n_ends]
        ]
        start_sds.extend([sd for (_, sd), _ in scored[:n_ends]])
        if n_fits > n_ends:
            constrained, flat = prior_draws(target, 50 * n_fits, start_seed)
            starts += [constrained[i] for i in _dispersed(flat, n_fits - n_ends)]
    else:
        # Starts spread over the prior: the most central of 50 * n_fits prior draws, then
        # repeatedly the draw farthest from those already chosen.
        constrained, flat = prior_draws(target, 50 * n_fits, start_seed)
        starts = [constrained[i] for i in _dispersed(flat, n_fits)]
    return starts


def _distinct_fits(target: Target, fits: list, modes) -> list:
    """The best fit of each mode, by decreasing ELBO, without the failed ones.

    Fits of one mode are duplicates. Fits started at distinct optima of the mode search
    (``modes`` not None) are distinct modes already, and the test of their means
    (:func:`_same_mode`) would be wrong for them: a fit of a Gaussian shell has its mean in
    the shell's hole, where the log density is far below the valley between two shells, so
    the segment between two such means shows no dip (measured on the 5-D shells: the two fits
    merged and the run missed a shell).
    """
    kept: list[Base] = []
    best = max(f.log_zeta for f in fits)
    for fit in sorted(fits, key=lambda f: -f.log_zeta):
        if fit.log_zeta < best - FAILED_FIT_GAP:
            # A failed optimisation, not a mode: its mass is negligible beside the best fit's,
            # and it would distort the moments of the Gaussian base.
            continue
        if modes is not None or not any(_same_mode(target, fit, k) for k in kept):
            kept.append(fit)
    return kept


def _laplace_mixture(target: Target, modes: Modes, random_seed, spikes=()) -> MixtureBase | None:
    """The mixture of the optima's Laplace Gaussians weighted by their Laplace masses, when it
    describes the target: its importance-sampling estimate of log Z (1000 draws) agrees with
    the total Laplace mass within ``LAPLACE_AGREEMENT`` nats; ``None`` otherwise.

    Measured on the evidence suite (``benchmarks/evidence_suite.py``): they agree within 0.2
    nats on the 18 peaks, the correlated 10-D Gaussian, the Gaussian cut by its box and the
    bimodal Cauchy likelihood, and within 0.75 on the Rosenbrock valley; they disagree by 1.4
    to 1190 nats on the Gaussian shells (a Gaussian at a point of a shell is no description
    of it) and by 3 on eight schools' funnel, where ADVI does better.
    """
    components = [
        Base(mean=x, cov=c, log_zeta=float(m), method="laplace")
        for x, c, m in zip(modes.points, modes.cov, modes.log_mass, strict=True)
    ]
    mixture = MixtureBase(
        components=tuple(components),
        weights=np.maximum(modes.probabilities, 1e-3 * modes.probabilities.max()),
        method=f"Laplace mixture of {len(components)}",
        modes=modes,
        spikes=spikes,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log_zeta = estimate_log_zeta(target, mixture, random_seed=random_seed)
    if abs(log_zeta - logsumexp(modes.log_mass)) > LAPLACE_AGREEMENT:
        return None
    return replace(mixture, log_zeta=log_zeta)


def base_from_result(idata, model: pm.Model | None = None, previous: Base | None = None) -> Base:
    """A full-covariance Gaussian from a weighted result: the bootstrap of section 6.

    Mean and covariance are the weighted moments of the result's draws on the model's flat
    unconstrained space (eq. 21), and ``log_zeta`` its log marginal likelihood estimate. When
    the ``previous`` base has a ``defensive_weight`` (one moment-matched to several modes), the
    new base is moment-matched to the mixture of the weighted draws and that share of the
    previous base, and keeps the same ``defensive_weight``: a round whose weights sit on some
    of the modes (as they do whenever its chains crossed between them rarely) would otherwise
    shrink the base onto those and the next run would never see the others.

    Parameters
    ----------
    idata : xarray.DataTree
        A result with ``sample_stats.log_weight`` and a log marginal likelihood.
    model : pymc.Model, optional
        The model the result belongs to; taken from the context when omitted.
    previous : Base, optional
        The base the result was sampled with.
    """
    target = target_of(model)
    if "log_marginal_likelihood" not in idata.attrs or "log_weight" not in idata["sample_stats"]:
        raise ValueError("The result carries no log weights or no log marginal likelihood.")
    posterior = idata["posterior"].to_dataset()
    if "unconstrained_posterior" in idata.children:
        posterior = posterior.merge(idata["unconstrained_posterior"].to_dataset())
    x = target.flat_draws(posterior).reshape(-1, target.ndim)
    lw = idata["sample_stats"]["log_weight"].transpose("chain", "draw").values.ravel()
    w = np.exp(lw - logsumexp(lw))
    mean = w @ x
    centred = x - mean
    cov = (centred * w[:, None]).T @ centred
    keep = 0.0 if previous is None else previous.defensive_weight
    if keep > 0:
        shift = previous.mean - mean
        mean = mean + keep * shift
        cov = (1 - keep) * cov + keep * previous.cov + keep * (1 - keep) * np.outer(shift, shift)
    # Guard against a singular estimate (few effective draws in many dimensions).
    cov = cov + 1e-10 * np.mean(np.diag(cov)) * np.eye(target.ndim)
    return Base(
        mean=mean,
        cov=cov,
        log_zeta=float(idata.attrs["log_marginal_likelihood"]),
        method="bootstrap",
        defensive_weight=keep,
        modes=None if previous is None else previous.modes,
        spikes=() if previous is None else previous.spikes,
    )


def widen_base(base: Base, missed) -> Base:
    """The base widened to the optima of its mode search that a run missed.

    Moment-matched to the mixture of the base (half) and the Laplace approximations of the
    ``missed`` optima of ``base.modes`` (half, shared equally), and defensive like
    :meth:`MixtureBase.gaussian`, so that a bootstrap refit keeps half of it.

    Parameters
    ----------
    base : Base
        A base with ``modes``.
    missed : array_like of bool, shape (mode,)
        Which optima to add (:func:`~pymc_tempering.checks.missed_modes`).
    """
    index = np.flatnonzero(missed)
    if base.modes is None or index.size == 0:
        raise ValueError("widen_base needs a base with modes and at least one missed optimum.")
    laplace = [Base(mean=base.modes.points[i], cov=base.modes.cov[i]) for i in index]
    parts = [(1 - DEFENSIVE_WEIGHT, base)] + [(DEFENSIVE_WEIGHT / index.size, c) for c in laplace]
    mean, cov = MixtureBase._moments(parts)
    return Base(
        mean=mean,
        cov=cov,
        log_zeta=base.log_zeta,
        method=f"{base.method}, widened to {index.size} missed optima",
        defensive_weight=DEFENSIVE_WEIGHT,
        modes=base.modes,
        spikes=base.spikes,
    )


@reproducible
def estimate_log_zeta(target: Target, base: Base, n: int = 1000, random_seed=None) -> float:
    """Importance-sampling estimate of the target's log normaliser with the base as proposal.

    ``log((1/n) sum_i p(x_i) / q(x_i))`` with ``x_i ~ q``: a stochastic lower bound on log Z,
    tighter than the ELBO. Used as ``log_zeta`` when a base carries none.

    Parameters
    ----------
    target : Target
        The model's log density on the flat unconstrained space.
    base : Base
        The proposal, on the same space.
    n : int
        Number of base draws.
    random_seed : int or numpy.random.Generator, optional

    Returns
    -------
    float
        The estimate of log Z. Draws where the target's log density is not finite count as zero
        weight (with a warning).
    """
    x = base.sample(n, random_seed=random_seed)
    log_ratio = target.logp(x) - base.logp(x)
    log_ratio = log_ratio[np.isfinite(log_ratio)]
    if log_ratio.size == 0:
        raise ValueError("The target log density is not finite at any draw of the base.")
    if log_ratio.size < n:
        warn(f"{n - log_ratio.size} of {n} base draws have a non-finite target log density.")
    return float(logsumexp(log_ratio) - np.log(n))


@phase("base_fit")
def prepare_base(model, base, log_zeta, random_seed, progressbar):
    """The set-up shared by every method that bridges to a base (CT, Gibbs CT, AIS, ST).

    Checks the model, fits a base when none is given (``fit_base(method="laplace")``), takes
    the moment-matched
    Gaussian of a :class:`MixtureBase` (:meth:`MixtureBase.gaussian`: one connected density,
    which NUTS and the HMC kernels cross freely at inverse temperature 0), and chooses
    ``log_zeta`` (see :func:`~pymc_tempering.sample_ct`).

    Returns
    -------
    target : Target
    base : Base
    log_zeta : float
    sample_seed : int or None
        The seed left for the sampler.
    """
    model = modelcontext(model)
    target = target_of(model)
    target.require_exact("Tempering from a base (continuous tempering, AIS, simulated tempering)")
    fit_seed, zeta_seed, sample_seed = split_seed(random_seed, 3)
    given = base is not None
    if not given:
        base = fit_base_to_target(target, "laplace", random_seed=fit_seed, progressbar=progressbar)
    check_base(target, base)
    if isinstance(base, MixtureBase):
        base = base.gaussian()
    if given and base.modes is None and not base.spikes:
        # The optima and spikes that diagnose compares the run with. A base fitted here carries
        # its own search's (no optimum where no run converged: searching again with another
        # seed, as this did, took a few percent of a radon model's run and found none either).
        modes, _, _, spikes = search_modes(target, N_MODE_STARTS, fit_seed)
        base = replace(base, modes=modes, spikes=spikes)
    if log_zeta is None:
        # Both the ELBO and the importance-sampling estimate are (stochastic) lower bounds on
        # log Z; the tighter one keeps beta from piling up at 1 (section 6 of the paper).
        log_zeta = estimate_log_zeta(target, base, random_seed=zeta_seed)
        if base.log_zeta is not None:
            log_zeta = max(log_zeta, base.log_zeta)
    return target, base, float(log_zeta), sample_seed
