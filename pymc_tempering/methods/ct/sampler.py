"""Joint continuous tempering (Graham & Storkey 2017, section 5) under any ``pm.sample`` NUTS.

The extended model has the target's unconstrained variables ``x`` and a temperature control
``u`` with inverse temperature ``beta(u) = sigmoid(u)``, and the log density of eq. (15)::

    beta(u) [log p(x) - log zeta] + [1 - beta(u)] log q(x) + log beta'(u)

where ``p`` is the model's (unnormalised) density, ``q`` a normalised Gaussian base and
``zeta`` an approximation of ``Z = int p``. It is an ordinary PyMC model, so any
``pm.sample(nuts_sampler=...)`` runs it. The model and its weights are shared with Gibbs
continuous tempering (:mod:`pymc_tempering.extended.tempered`), and so are the runs
(:mod:`pymc_tempering.extended.rounds`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import pymc as pm
import pytensor.tensor as pt

from pymc_tempering.bases import Base, prepare_base
from pymc_tempering.contract import (
    check_sampler_args,
    pm_sample_kwargs,
    reproducible,
    seed_attrs,
)
from pymc_tempering.extended.rounds import BootstrapPolicy, run_with_bootstrap
from pymc_tempering.extended.tempered import tempered_model, tempering_sampling
from pymc_tempering.driver.tempered_chains import (
    BATCH_BOOTSTRAP,
    batched_chain_count,
    batched_sampling,
    check_batched_chains,
)
from pymc_tempering.results import INVERSE_TEMPERATURE, TEMPERATURE_CONTROL
from pymc_tempering.timing import timed

__all__ = ["continuously_tempered_model", "sample_ct"]


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


@reproducible
@timed
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
    batched_chains: int | None = None,
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
        its draws: every run of the call (and later calls on the same model) samples one
        compiled extended model, whose base and ``log_zeta`` are data.
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
    batched_chains : int, optional
        Run this many chains of joint continuous tempering as one batch through one compiled
        density (:mod:`~pymc_tempering.driver.tempered_chains`: HMC of 10 leapfrog steps in
        the base's coordinates, one step size adapted over all chains in a warm-up of at most
        250 iterations) instead of PyMC's NUTS on the extended model; ``0``: NUTS. ``None``
        (the default) chooses 128 batched chains where the base's mode search is far from
        complete (more than half of its runs reached an optimum no other run reached, as on
        Boltzmann machine relaxations with thousands of optima) for models of at most 100
        parameters, with two bootstrap rounds (unless ``bootstrap`` says otherwise), and NUTS
        elsewhere or when ``nuts_sampler`` or :func:`pymc.sample` keywords are given. There
        the mode search cannot vouch for the run, and the agreement of 8 independent batches
        of chains can (:func:`~pymc_tempering.checks.calibrated`); each chain costs what an
        AIS run's transitions cost. ``draws`` is then per batched chain and ``chains`` is not
        used; ``attrs["nuts_sampler"]`` is ``"batched"``.
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
    batched_chains = check_batched_chains(batched_chains, nuts_sampler, sample_kwargs)
    target, base, log_zeta, seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    batched = batched_chain_count(target, base, batched_chains, nuts_sampler, sample_kwargs)
    if batched and bootstrap is None:  # a round of batched chains compiles nothing
        policy = replace(policy, bootstrap=BATCH_BOOTSTRAP)
    sampling = tempering_sampling(
        target,
        continuously_tempered_model,
        method="continuous_tempering",
        chains=batched or chains,
        nuts_sampler=nuts_sampler,
        progressbar=progressbar,
        sample_kwargs=sample_kwargs,
        attrs={
            "nuts_sampler": "batched" if batched else nuts_sampler or "default",
            "chains": batched or chains, **seed_attrs(random_seed),
        },
        sample=batched_sampling(target, "joint", batched, progressbar) if batched else None,
    )
    return run_with_bootstrap(sampling, target, base, log_zeta, seed, draws, tune, policy, start)
