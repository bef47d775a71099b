"""Joint continuous tempering (Graham & Storkey 2017, section 5) as a model transformation.

The extended model has the target's unconstrained variables ``x`` and a temperature control
``u`` with inverse temperature ``beta(u) = sigmoid(u)``, and the log density of eq. (15)::

    beta(u) [log p(x) - log zeta] + [1 - beta(u)] log q(x) + log beta'(u)

where ``p`` is the model's (unnormalised) density, ``q`` a normalised Gaussian base and
``zeta`` an approximation of ``Z = int p``. It is an ordinary PyMC model, so any
``pm.sample(nuts_sampler=...)`` runs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.model import modelcontext
from scipy.special import expit, logsumexp

from pymc_tempering.bases import (
    Base,
    base_from_result,
    check_base,
    estimate_log_zeta,
    prepare_base,
    widen_base,
)
from pymc_tempering.diagnostics import MISSED_MASS_LIMIT, diagnose, missed_modes, precision_goal
from pymc_tempering.estimators import ct_log_weights, kish_ess, log_marginal_likelihood_ct
from pymc_tempering.transforms.funnel import funnel_correction, funnel_mass
from pymc_tempering.coverage import mass_beyond_draws
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    TEMPERATURE_CONTROL,
    add_rounds,
    base_group,
    build_result,
    rebuild_posterior,
    strata_group,
)
from pymc_tempering.stratification import HOT, stratify_by_modes
from pymc_tempering.contract import (
    check_bootstrap,
    check_extension_args,
    check_sampler_args,
    reproducible,
    pm_sample_kwargs,
    seed_attrs,
    split_seed,
    warn,
)
from pymc_tempering.report import warn_problems, judge_posterior
from pymc_tempering.target import Target

__all__ = ["continuously_tempered_model", "sample_ct"]

_POTENTIAL = "tempered_log_density"



def continuously_tempered_model(
    model: pm.Model | None = None, base: Base | None = None, log_zeta: float | None = None
) -> pm.Model:
    """Build the jointly continuously tempered model of eq. (15).

    Parameters
    ----------
    model : pymc.Model, optional
        The target. Taken from the context when omitted; it is not modified.
    base : Base
        Gaussian base density on the model's flat unconstrained space.
    log_zeta : float, optional
        Approximation of the model's log marginal likelihood; defaults to ``base.log_zeta``.

    Returns
    -------
    pymc.Model
        A new model (not a child of ``model``) whose free variables are the value variables of
        ``model`` (under their value names, e.g. ``sigma_log__``, as ``pm.Flat``) and
        ``temperature_control``. Its deterministics are ``inverse_temperature`` and the original
        model's free variables (constrained) and deterministics, under their own names and dims.
        It carries the original coords.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, a base of the wrong dimension, or
        no ``log_zeta`` at all.
    """
    return tempered_model(model, base, log_zeta, _sigmoid_inverse_temperature)


def _sigmoid_inverse_temperature():
    u = pm.Flat(TEMPERATURE_CONTROL, initval=0.0)
    beta = pm.Deterministic(INVERSE_TEMPERATURE, pt.sigmoid(u))
    return beta, -pt.softplus(u) - pt.softplus(-u)  # log sigmoid'(u)


def tempered_model(model, base: Base, log_zeta: float | None, inverse_temperature) -> pm.Model:
    """A new model with the density ``beta [log p(x) - log zeta] + (1 - beta) log q(x)``.

    The construction shared by joint and Gibbs continuous tempering: the user's value variables
    as ``pm.Flat`` (under their value names, with static shapes and the model's dims; initial
    values at the base mean), the tempered potential, and the user's free variables
    (constrained) and deterministics as deterministics. ``inverse_temperature()`` is called
    inside the new model's context; it adds the temperature variables and returns ``beta`` and
    a log-density term of its own (the Jacobian of ``u -> beta`` for the joint method).
    """
    target = Target(modelcontext(model))
    target.require_exact("Continuous tempering")
    if base is None:
        raise ValueError("A base is required; fit one with pmt.fit_base().")
    check_base(target, base)
    if log_zeta is None:
        log_zeta = base.log_zeta
    if log_zeta is None or not np.isfinite(log_zeta):
        raise ValueError(
            "log_zeta must be a finite number: pass it, or use a base that carries one "
            "(pmt.fit_base with an ADVI method, or pmt.estimate_log_zeta)."
        )
    log_zeta = float(log_zeta)
    original = target.model
    clash = {TEMPERATURE_CONTROL, INVERSE_TEMPERATURE, _POTENTIAL} & set(original.named_vars)
    if clash:
        raise ValueError(
            f"The model already has variables named {sorted(clash)}, which continuous "
            "tempering adds; rename them."
        )
    mean = target.unravel(base.mean)
    new_model = pm.Model(coords=dict(original.coords), model=None)
    with new_model:
        values = {}
        for name, shape in zip(target.names, target.shapes, strict=True):
            dims = None if name in target.transformed_names else target.dims(name)
            # A static shape beside the dims spares the compiled graph its shape checks.
            values[name] = pm.Flat(name, shape=shape, dims=dims, initval=mean[name])
        beta, log_jacobian = inverse_temperature()
        logp = target.logp_graph(values)
        logq = base.logp_graph([values[name] for name in target.names])
        pm.Potential(_POTENTIAL, beta * (logp - log_zeta) + (1 - beta) * logq + log_jacobian)
        for name, expr in target.constrained_graph(values).items():
            if name not in values:
                pm.Deterministic(name, expr, dims=target.dims(name))
    return new_model


@reproducible
def sample_ct(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    base: Base | None = None,
    log_zeta: float | None = None,
    bootstrap: int | None = None,
    bootstrap_draws: int = 500,
    target_accept: float = 0.9,
    max_extensions: int = 2,
    target_se: float | None = 0.3,
    max_time: float | None = None,
    nuts_sampler: str | None = None,
    **sample_kwargs,
):
    """Sample a model by joint continuous tempering under NUTS.

    Fits a base when none is given, refines it by bootstrap rounds, builds
    :func:`continuously_tempered_model`, runs :func:`pymc.sample` on it and returns weighted
    draws of the original model and its log marginal likelihood. With several optima found,
    each mode holds its importance-sampled mass (:mod:`~pymc_tempering.stratification`), not
    the share the chains' few moves between modes gave it. Warns when
    :func:`~pymc_tempering.diagnose` finds a problem in the evidence, and when
    :func:`~pymc_tempering.posterior_check` finds one in the posterior
    (``attrs["posterior_reliable"]``).

    Parameters
    ----------
    draws, tune, chains : int
        As in :func:`pymc.sample`, for the final run.
    base : Base, optional
        Base density. Default: the Gaussian moment-matched to ``fit_base(model, "laplace")``:
        the Laplace approximations at the optima of a mode search from prior draws, or, where
        an importance-sampling check finds them a poor description of the target (Gaussian
        shells, funnels) or the search finds none, the mixture of mean-field ADVI runs of
        ``fit_base(model, "mixture")`` (eq. 25 of the CT paper). When the
        search found several modes it is defensive (:meth:`~pymc_tempering.MixtureBase.gaussian`):
        half of its weight is spread evenly over the modes and the bootstrap keeps half of it,
        so no mode found is lost to uneven ELBOs or to a round that visited it rarely. A
        :class:`~pymc_tempering.MixtureBase` passed here is replaced by that Gaussian: one
        connected density, which NUTS crosses freely at inverse temperature 0.
    log_zeta : float, optional
        Approximate log marginal likelihood used in the extended density. Default: the larger
        of the base's ``log_zeta`` (the ELBO for an ADVI base, an importance-sampling estimate
        for a Laplace one) and an importance-sampling
        estimate from 1000 base draws (:func:`estimate_log_zeta`). Both are stochastic lower
        bounds on log Z; the tighter one spreads the inverse temperature over (0, 1) instead
        of piling it up at 1 (on hierarchical models the ELBO can be several nats low).
    bootstrap : int or None
        Rounds of the bootstrap of section 6 before the final run: each round runs
        ``bootstrap_draws`` tuning and draws per chain, then takes as the next base the
        full-covariance Gaussian of its weighted moments (:func:`base_from_result`) and as the
        next ``log_zeta`` its log Z estimate (an importance-sampling estimate from the new
        base when the round did not visit both ends of beta, as happens when the ELBO is far
        below log Z). A round whose weights are worth fewer than ``2 * ndim + 10`` draws
        (Kish) updates ``log_zeta`` only. The default (``None``) is no round for the base
        fitted here (``fit_base(method="laplace")``: a Laplace mixture whose ``log_zeta`` passed
        an importance-sampling check, or ADVI fits started at the mode search's optima) and one
        round for a base you pass, whose fit this function knows nothing of. A round costs
        one more compilation of the extended model (with ``nutpie``, most of a run on a small
        model).
    bootstrap_draws : int
    target_accept : float
        NUTS's target acceptance rate. 0.9 rather than PyMC's 0.8: one step size serves the
        whole path from the base to the target, and at 0.8 thin or curved targets (Gaussian
        shells) diverged several times as often.
    max_extensions : int
        The budget of self-extension: how many times the final run may be repeated while
        :func:`~pymc_tempering.diagnose` finds a problem, each time with what the problem asks
        for (``target_accept`` halfway to 1 after divergences; the base widened to the optima
        of its mode search that the run never came near; otherwise the base and ``log_zeta``
        refitted to the run). Each repeat costs one more final run; the runs before the last
        are recorded in the ``bootstrap`` group. ``0`` turns it off.
    target_se : float or None
        A final run whose standard error of log Z is above this is repeated too, with the base
        and ``log_zeta`` refitted to it and its chains lengthened by the factor
        ``1.2 (se / target_se)^2`` (at most 4) that the standard error asks for (within the
        same ``max_extensions`` budget); one whose standard error is still above it when the
        budget is spent is marked unreliable (:func:`~pymc_tempering.diagnose`'s
        ``standard_error`` check). ``None`` accepts any standard error. Below the rounding
        floor of the estimate, ``1e-7 |log Z|`` (the accuracy of the log densities), it is
        raised to that floor: longer chains do not lower it.
    max_time : float or None
        A wall-clock budget in seconds for the whole call, base fit included: no extension
        starts that would, at the pace of the run before it (scaled to its draws), end past
        it. The base fit, the ``bootstrap`` rounds and the first final run always run. A run
        stopped by it says so (``attrs["stopped_by"] = "max_time"``, and a warning) and is
        judged like any other: unreliable while a check fails. ``None`` (the default): the
        extensions are bounded by ``max_extensions`` only. With a budget the result depends on
        the machine's speed (how many extensions fit), so the same seed can give another result
        on another machine.
    nuts_sampler : {"pymc", "nutpie", "numpyro"}, optional
        Passed to :func:`pymc.sample`; ``None`` lets PyMC choose. ``"blackjax"`` is refused: it
        fails inside ``pm.sample`` with PyMC 6.4 and BlackJAX 1.7.1.
    random_seed : int or numpy.random.Generator, optional
        Seeds the base fit, the ``log_zeta`` estimate and the samplers: the same seed gives the
        same result.
    progressbar : bool
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.
    **sample_kwargs
        Passed to :func:`pymc.sample` (``target_accept``, ``nuts={...}``, ``cores``, ...).

    Returns
    -------
    xarray.DataTree
        In the library's layout: ``posterior`` holds the original variables (constrained,
        with their dims), ``inverse_temperature`` and ``temperature_control``;
        ``sample_stats.log_weight`` is ``log p(beta = 1 | x)`` (eq. 21),
        ``sample_stats.log_base_weight`` is ``log p(beta = 0 | x)`` (eq. 22) and
        ``sample_stats.log_marginal_likelihood`` the per-chain estimate of eq. (20); the ``base``
        group holds the final base's mean and variances, the ``bootstrap`` group each round's
        ``log_zeta``, estimate and standard error; the ``mode_probabilities`` group, when the
        weights were stratified, each mode's probability; root attrs hold the pooled
        ``log_marginal_likelihood``, its ``log_marginal_likelihood_se``, ``log_zeta``,
        ``posterior_reliable`` and ``method = "continuous_tempering"``.

    Notes
    -----
    The estimates are only as good as the exploration of ``beta``: the chains must visit both
    ``beta`` near 0 (the base) and near 1 (the target). A base that misses a mode of the target
    is not corrected by tempering; the default base covers the modes its mode search found.
    Read the warnings, or :func:`~pymc_tempering.diagnose`.
    """
    start = time.perf_counter()
    policy = BootstrapPolicy(
        (0 if base is None else 1) if bootstrap is None else bootstrap,
        bootstrap_draws, target_accept, max_extensions, target_se, max_time,
    )
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    # the pm.sample keywords are refused here, if at all, not after the base fit
    pm_sample_kwargs(nuts_sampler, {**sample_kwargs, "target_accept": target_accept})
    target, base, log_zeta, seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    sampling = TemperedSampling(
        build=continuously_tempered_model,
        method="continuous_tempering",
        chains=chains,
        nuts_sampler=nuts_sampler,
        progressbar=progressbar,
        sample_kwargs=sample_kwargs,
        attrs={
            "nuts_sampler": nuts_sampler or "default", "chains": chains, **seed_attrs(random_seed)
        },
    )
    return run_with_bootstrap(sampling, target, base, log_zeta, seed, draws, tune, policy, start)


@dataclass(frozen=True)
class BootstrapPolicy:
    """How :func:`run_with_bootstrap` refines the base before the final run and extends it after.

    Checked when made (:func:`check_bootstrap`, :func:`check_extension_args`).

    Attributes
    ----------
    bootstrap : int
        Rounds of the bootstrap of section 6 before the final run.
    bootstrap_draws : int
        Tuning steps and draws per chain of each round.
    target_accept : float
        NUTS's target acceptance rate of the first run; an extension after divergences raises it.
    max_extensions : int
        How many times the final run may be repeated while it has a problem.
    target_se : float or None
        The standard error of log Z above which the final run is repeated (``None``: any).
    max_time : float or None
        A wall-clock budget in seconds for the whole call (``None``: none).
    """

    bootstrap: int
    bootstrap_draws: int
    target_accept: float = 0.9
    max_extensions: int = 2
    target_se: float | None = None
    max_time: float | None = None

    def __post_init__(self):
        check_bootstrap(self.bootstrap)
        check_extension_args(self.target_accept, self.max_extensions, self.target_se, self.max_time)


class TemperedSampling(NamedTuple):
    """How :func:`run_tempered` samples a continuously tempered model, whatever its base.

    Attributes
    ----------
    build : callable
        ``build(model, base, log_zeta)`` returns the extended model
        (:func:`continuously_tempered_model`, or the Gibbs one).
    method : str
        The result's ``attrs["method"]``.
    chains : int
    nuts_sampler : str or None
        Passed to :func:`pymc.sample`.
    progressbar : bool
    sample_kwargs : dict
        Further :func:`pymc.sample` keywords.
    attrs : dict
        Scalar settings for the result's attrs.
    steps : callable, optional
        ``steps(extended_model, target_accept)``, called in the extended model's context,
        returns the step methods for :func:`pymc.sample`. ``None`` (default): PyMC's NUTS,
        with ``target_accept`` among the ``pm.sample`` keywords.
    """

    build: Callable
    method: str
    chains: int
    nuts_sampler: str | None
    progressbar: bool
    sample_kwargs: dict
    attrs: dict
    steps: Callable | None = None


def run_tempered(
    sampling: TemperedSampling, target: Target, base: Base, log_zeta: float, draws: int,
    tune: int, seed, target_accept: float,
):
    """One run of a continuously tempered model: build, sample and weigh it (:func:`ct_result`)."""
    tempered = sampling.build(target.model, base, log_zeta)
    kwargs = dict(sampling.sample_kwargs)
    step = None
    if sampling.steps is None:
        kwargs["target_accept"] = target_accept
    else:
        with tempered:
            step = sampling.steps(tempered, target_accept)
    sampled = pm.sample(
        draws,
        tune=tune,
        chains=sampling.chains,
        step=step,
        nuts_sampler=sampling.nuts_sampler,
        random_seed=seed,
        progressbar=sampling.progressbar,
        model=tempered,
        var_names=stored_variables(tempered),
        **pm_sample_kwargs(sampling.nuts_sampler, kwargs),
    )
    return ct_result(
        sampled,
        target,
        base,
        log_zeta,
        method=sampling.method,
        attrs={**sampling.attrs, "draws": int(draws), "tune": int(tune)},
        random_seed=split_seed(seed, 2)[1],
    )


def _both_ends(result) -> bool:
    """Whether more than 1% of the draws have beta within 0.1 of 0, and of 1."""
    beta = result["posterior"][INVERSE_TEMPERATURE].values
    return bool(np.mean(beta < 0.1) > 0.01 and np.mean(beta > 0.9) > 0.01)


def _record(result, kind, log_zeta, target_accept, refit) -> dict:
    stats_ = result["sample_stats"]
    return {
        "kind": kind,
        "draws": int(stats_.sizes["draw"]),
        "target_accept": float(target_accept),
        "log_zeta": float(log_zeta),
        "log_marginal_likelihood": result.attrs["log_marginal_likelihood"],
        "log_marginal_likelihood_se": result.attrs["log_marginal_likelihood_se"],
        "ess_weights": kish_ess(stats_["log_weight"].values),
        "base_refit": bool(refit),
        "visited_both_ends": _both_ends(result),
        "divergences": int(stats_["diverging"].sum()) if "diverging" in stats_ else 0,
    }


def _missed(result, base):
    """Which optima of the base's mode search the result missed, or None when none was."""
    if base.modes is None or "mode_point" not in result["base"]:
        return None
    missed, mass = missed_modes(result)
    return missed if mass >= MISSED_MASS_LIMIT else None


def _refit(target, result, base, zeta_seed):
    """A bootstrap round's update: the base refitted to the result's weighted moments when
    they are worth ``2 * ndim + 10`` draws, and the next ``log_zeta``: the result's estimate
    when it saw both ends of beta (eq. 20 compares them), else an importance-sampling estimate
    from the (refitted) base."""
    refit = kish_ess(result["sample_stats"]["log_weight"].values) >= 2 * target.ndim + 10
    if refit:
        base = base_from_result(result, target.model, previous=base)
    if _both_ends(result):
        log_zeta = result.attrs["log_marginal_likelihood"]
    else:
        log_zeta = estimate_log_zeta(target, base, random_seed=zeta_seed)
    return base, log_zeta, refit


def _widen(target, base, log_zeta, missed, zeta_seed):
    """The base widened to the missed optima; the run's estimate lacks their mass, which the
    widened base's importance-sampling estimate may see."""
    base = widen_base(base, missed)
    return base, max(log_zeta, estimate_log_zeta(target, base, random_seed=zeta_seed))


DRAWS_GROWTH = 4.0  # most growth of the draws per extension for target_se
MISSED_MODE_GROWTH = 2.0  # growth of the draws in an extension after a missed mode
# Failed checks that no refit of the base mends: the weights' tail, the standard error (which
# longer chains mend), a missed mode (a widened base), an incomplete mode search (the base's own)
# and a funnel's neck that NUTS does not enter or mass beyond every draw or about an optimum (a
# higher target_accept does not enter it either, and a refit to draws that lack it cannot add it).
NOT_REFIT = frozenset(
    {"divergences", "pareto_khat", "missed_mode_mass", "standard_error", "unseen_optima",
     "funnel_mass", "mass_beyond_draws", "mass_near_optima"}
)


class _Extension(NamedTuple):
    """What the next run of :func:`run_with_bootstrap` changes, and why."""

    base: Base
    log_zeta: float
    draws: int
    target_accept: float
    reasons: list
    refit: bool


def _extension(target, result, base, log_zeta, draws, target_accept, target_se, zeta_seed):
    """The next run that the problems :func:`diagnose` finds in ``result`` ask for, or None."""
    checks = diagnose(result).checks
    failed = set() if checks.empty else set(checks.index[~checks["ok"]])
    se = result.attrs.get("log_marginal_likelihood_se", 0.0)
    imprecise = target_se is not None and se > precision_goal(
        target_se, result.attrs["log_marginal_likelihood"]
    )
    if not failed and not imprecise:
        return None
    reasons, refit, next_accept = [], False, target_accept
    if "divergences" in failed:
        next_accept = 1 - (1 - target_accept) / 2
        reasons.append("divergences")
    missed = _missed(result, base)
    others = failed - NOT_REFIT
    if missed is not None:
        base, log_zeta = _widen(target, base, log_zeta, missed, zeta_seed)
        reasons.append("a missed mode")
    elif others or imprecise:
        base, log_zeta, refit = _refit(target, result, base, zeta_seed)
        why = [f"failed checks ({', '.join(sorted(others))})"] if others else []
        why += [f"a standard error of {se:.3g} above {target_se}"] if imprecise else []
        reasons.append(" and ".join(why) + ": refit")
    # A missed mode: the chains reach a mode only through excursions towards beta = 0, so
    # the widened base's run gets MISSED_MODE_GROWTH times more of them. The standard error
    # falls as 1 / sqrt(draws): enough draws for target_se with a fifth to spare, at most
    # DRAWS_GROWTH times more per extension.
    grow = MISSED_MODE_GROWTH if missed is not None else 1.0
    if imprecise:
        grow = max(grow, min(DRAWS_GROWTH, 1.2 * (se / target_se) ** 2))
    next_draws = draws
    if grow > 1:
        next_draws = int(np.ceil(draws * grow))
        reasons.append(f"{next_draws} draws per chain")
    if not reasons:
        return None
    return _Extension(base, log_zeta, next_draws, next_accept, reasons, refit)


def run_with_bootstrap(
    sampling: TemperedSampling,
    target: Target,
    base: Base,
    log_zeta: float,
    seed,
    draws: int,
    tune: int,
    policy: BootstrapPolicy,
    start: float | None = None,
):
    """Bootstrap rounds (section 6), the final run, its extensions, and :func:`diagnose`'s warnings.

    Shared by the continuous tempering samplers (joint and Gibbs): each run is
    :func:`run_tempered` with ``sampling``; ``policy`` sets the rounds and the extensions.

    Each bootstrap round (``policy.bootstrap_draws`` tuning steps and draws) refits the base to
    the round's weighted moments (when its weights are worth at least ``2 * ndim + 10`` draws)
    and sets ``log_zeta`` to the round's estimate, or, when the round did not visit both ends
    of beta (more than 1% of draws within 0.1 of 0 and of 1), to an importance-sampling
    estimate from the refitted base; when the round missed optima of the base's mode search
    (:func:`~pymc_tempering.diagnostics.missed_modes`), the base is then widened to them
    (:func:`~pymc_tempering.bases.widen_base`).

    Then, up to ``policy.max_extensions`` times, while :func:`diagnose` finds a problem in the
    final run, the run is repeated with what the problem asks for: ``target_accept`` halfway to
    1 after divergences; the base widened to the missed optima after a missed mode, with
    ``MISSED_MODE_GROWTH`` times longer chains (a chain reaches a mode only through an
    excursion towards beta = 0, and longer chains make more of them); otherwise (the base's
    moments not reproduced, chains that disagree, an end of beta not reached) the base and
    ``log_zeta`` refitted to the run, as in a bootstrap round; a run whose standard error of
    log Z is above ``policy.target_se`` is refitted in the same way and its chains made longer,
    by the factor ``1.2 (se / target_se)^2`` that the standard error asks for, at most
    ``DRAWS_GROWTH``. Every run before the last is recorded in the result's ``bootstrap``
    group, whose ``kind`` says which and why. With ``policy.max_time`` (seconds since
    ``start``, a ``time.perf_counter()`` value; default now), no extension starts whose
    projected end, at the pace of the run before it scaled to its ``draws + tune``, is past the
    budget; the result then has ``attrs["stopped_by"] = "max_time"`` and a warning says so.
    """
    start = time.perf_counter() if start is None else start
    *seeds, final_seed = split_seed(seed, 2 * int(policy.bootstrap) + 1)
    rounds = []
    accept = policy.target_accept
    for round_seed, zeta_seed in zip(seeds[::2], seeds[1::2], strict=True):
        size = policy.bootstrap_draws
        result = run_tempered(sampling, target, base, log_zeta, size, size, round_seed, accept)
        missed = _missed(result, base)
        old_zeta = log_zeta
        base, log_zeta, refit = _refit(target, result, base, zeta_seed)
        rounds.append(_record(result, "bootstrap", old_zeta, accept, refit))
        if missed is not None:
            base, log_zeta = _widen(target, base, log_zeta, missed, zeta_seed)
    run_seed, *extension_seeds = split_seed(final_seed, 2 * int(policy.max_extensions) + 1)
    began = time.perf_counter()
    result = run_tempered(sampling, target, base, log_zeta, draws, tune, run_seed, accept)
    seconds = time.perf_counter() - began
    stopped = None
    for run_seed, zeta_seed in zip(extension_seeds[::2], extension_seeds[1::2], strict=True):
        nxt = _extension(target, result, base, log_zeta, draws, accept, policy.target_se, zeta_seed)
        if nxt is None:
            break
        if policy.max_time is not None:
            pace = seconds * (nxt.draws + tune) / (draws + tune)
            elapsed = time.perf_counter() - start
            if elapsed + pace > policy.max_time:
                stopped = (elapsed, pace)
                break
        kind = "extension after " + " and ".join(nxt.reasons)
        rounds.append(_record(result, kind, log_zeta, accept, nxt.refit))
        base, log_zeta, draws, accept = nxt.base, nxt.log_zeta, nxt.draws, nxt.target_accept
        began = time.perf_counter()
        result = run_tempered(sampling, target, base, log_zeta, draws, tune, run_seed, accept)
        seconds = time.perf_counter() - began
    add_rounds(result, rounds, {
        "bootstrap": int(policy.bootstrap),
        "extensions": len(rounds) - int(policy.bootstrap),
        "target_accept": float(accept),
        # diagnose compares the final run with target_se
        "target_se": None if policy.target_se is None else float(policy.target_se),
        "max_time": None if policy.max_time is None else float(policy.max_time),
        "stopped_by": None if stopped is None else "max_time",
    })
    if stopped is not None:
        warn(
            f"Stopped extending after {stopped[0]:.0f} s: the next run would take about "
            f"{stopped[1]:.0f} s at the last one's pace, past max_time ({policy.max_time:g} s). "
            "The problems reported are those of the last run; a larger max_time lets it go on."
        )
    warn_problems(result)
    judge_posterior(result, result.attrs["method"])
    return result


def stored_variables(model: pm.Model) -> list[str]:
    """The ``var_names`` of ``pm.sample`` for a tempered model: its free variables (the user's
    value variables and the temperature variable) only. :func:`ct_result` computes the user's
    constrained variables and deterministics from them, once per draw, with the function the
    :class:`~pymc_tempering.Target` compiled already; the samplers would compile them again
    (nutpie compiles them into a second function, which costs more than the calls on a large
    model).
    """
    return [rv.name for rv in model.free_RVs]


def _temperature(posterior) -> dict[str, np.ndarray]:
    """``inverse_temperature`` and, for joint tempering, ``temperature_control`` of the draws."""
    if TEMPERATURE_CONTROL in posterior:
        control = posterior[TEMPERATURE_CONTROL].values
        return {TEMPERATURE_CONTROL: control, INVERSE_TEMPERATURE: expit(control)}
    return {INVERSE_TEMPERATURE: posterior[INVERSE_TEMPERATURE].values}


def ct_result(
    sampled, target: Target, base: Base, log_zeta: float, *, method: str, attrs: dict,
    random_seed=None,
):
    """Weights (eqs. 21-22) and log Z (eq. 20) of a continuous tempering run, in the result layout.

    ``sampled`` is what ``pm.sample`` returned for an extended model whose posterior holds the
    user's value variables under their value names and the temperature variable
    (:func:`stored_variables`). Its posterior is rebuilt from them
    (:func:`~pymc_tempering.results.rebuild_posterior`): the user's variables (constrained, with
    their dims), the transformed value variables under their value names,
    ``inverse_temperature`` and, for joint tempering, ``temperature_control``.

    With several optima in the base's mode search, the weights are post-stratified by them
    (:func:`~pymc_tempering.stratification.stratify_by_modes`, seeded by ``random_seed``); the
    ``mode_probabilities`` group and ``sample_stats.mode_region`` then hold the modes.
    """
    x = target.flat_draws(sampled["posterior"])
    temperature = _temperature(sampled["posterior"])
    sampled = rebuild_posterior(sampled, target, x, temperature)
    delta = log_zeta + base.logp(x) - target.logp(x)
    log_w0, log_w1 = ct_log_weights(delta)
    funnels = funnel_mass(target, x, log_w1, base.spikes)
    # the profile's mass in each neck in place of what the draws hold there (log f = 0 without)
    log_factor, factor_error = funnel_correction(x, log_w1, funnels)
    lml = log_marginal_likelihood_ct(delta, log_zeta, log_factor, factor_error)
    if any(f.complete for f in funnels):
        correction = logsumexp(log_w1 + log_factor) - logsumexp(log_w1)
        attrs = {**attrs, "funnel_correction": float(correction)}
    groups = {"base": base_group(target, base.mean, np.diag(base.cov), base.modes, funnels)}
    stats_ = {"log_base_weight": log_w0}
    hot = temperature[INVERSE_TEMPERATURE] > HOT
    strata = stratify_by_modes(target, x, log_w1, hot, base.modes, random_seed)
    if strata is not None:
        log_w1 = strata.log_weight
        groups["mode_probabilities"] = strata_group(strata)
        stats_["mode_region"] = strata.region
    # mass at scales the base never reached (a spike's slab), against the final weights
    beyond = mass_beyond_draws(target, x, log_w1, lml[0], base, random_seed)
    if beyond is not None:
        attrs = {**attrs, "mass_beyond_draws": beyond.share, "mass_beyond_draws_se": beyond.se,
                 "scale_check_log_z": beyond.log_z, "scale_check_log_z_se": beyond.log_z_se,
                 "mass_missed_near_optima": beyond.near_optimum}
    return build_result(
        sampled,
        target,
        method=method,
        log_weight=log_w1,
        log_marginal_likelihood=lml,
        attrs={"log_zeta": float(log_zeta), "base_method": base.method, **attrs},
        extra_stats=stats_,
        extra_groups=groups,
    )
