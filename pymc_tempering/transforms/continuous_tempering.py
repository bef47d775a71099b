"""Joint continuous tempering (Graham & Storkey 2017, section 5) as a model transformation.

The extended model has the target's unconstrained variables ``x`` and a temperature control
``u`` with inverse temperature ``beta(u) = sigmoid(u)``, and the log density of eq. (15)::

    beta(u) [log p(x) - log zeta] + [1 - beta(u)] log q(x) + log beta'(u)

where ``p`` is the model's (unnormalised) density, ``q`` a normalised Gaussian base and
``zeta`` an approximation of ``Z = int p``. It is an ordinary PyMC model, so any
``pm.sample(nuts_sampler=...)`` runs it.
"""

from __future__ import annotations


import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.model import modelcontext
from xarray import DataTree

from pymc_tempering.base import Base, base_from_result, check_base, estimate_log_zeta, prepare_base
from pymc_tempering.estimators import ct_log_weights, kish_ess, log_marginal_likelihood_ct
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    TEMPERATURE_CONTROL,
    base_group,
    build_result,
)
from pymc_tempering.sampling import check_sampler_args, keep_value_variables, seed_attrs, split_seed, warn_problems
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
    bootstrap: int = 1,
    bootstrap_draws: int = 500,
    nuts_sampler: str | None = None,
    **sample_kwargs,
):
    """Sample a model by joint continuous tempering under NUTS.

    Fits a base when none is given, refines it by bootstrap rounds, builds
    :func:`continuously_tempered_model`, runs :func:`pymc.sample` on it and returns weighted
    draws of the original model and its log marginal likelihood. Warns when
    :func:`~pymc_tempering.diagnose` finds a problem.

    Parameters
    ----------
    draws, tune, chains : int
        As in :func:`pymc.sample`, for the final run.
    base : Base, optional
        Base density. Default: the Gaussian moment-matched to ``fit_base(model, "mixture")``
        (mean-field ADVI runs from dispersed prior draws, eq. 25 of the CT paper). When the
        fits found several modes it is defensive (:meth:`~pymc_tempering.MixtureBase.gaussian`):
        half of its weight is spread evenly over the modes and the bootstrap keeps half of it,
        so no mode found is lost to uneven ELBOs or to a round that visited it rarely. A
        :class:`~pymc_tempering.MixtureBase` passed here is replaced by that Gaussian: one
        connected density, which NUTS crosses freely at inverse temperature 0.
    log_zeta : float, optional
        Approximate log marginal likelihood used in the extended density. Default: the larger
        of the base's ``log_zeta`` (the ELBO for an ADVI base) and an importance-sampling
        estimate from 1000 base draws (:func:`estimate_log_zeta`). Both are stochastic lower
        bounds on log Z; the tighter one spreads the inverse temperature over (0, 1) instead
        of piling it up at 1 (on a 53-parameter hierarchical model the ELBO is 8 nats low, the
        importance-sampling estimate within 0.5).
    bootstrap : int
        Rounds of the bootstrap of section 6 before the final run: each round runs
        ``bootstrap_draws`` tuning and draws per chain, then takes as the next base the
        full-covariance Gaussian of its weighted moments (:func:`base_from_result`) and as the
        next ``log_zeta`` its log Z estimate (an importance-sampling estimate from the new
        base when the round did not visit both ends of beta, as happens when the ELBO is far
        below log Z). A round whose weights are worth fewer than ``2 * ndim + 10`` draws
        (Kish) updates ``log_zeta`` only. The default of 1 fixes the
        ELBO's bias on hierarchical models (28 nats on the radon linear-Gaussian model) and a
        base that covers the modes only roughly. ``0`` turns it off.
    bootstrap_draws : int
    nuts_sampler : {"pymc", "nutpie", "numpyro", "blackjax"}, optional
        Passed to :func:`pymc.sample`; ``None`` lets PyMC choose.
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
        ``log_zeta``, estimate and standard error; root attrs hold the pooled
        ``log_marginal_likelihood``, its ``log_marginal_likelihood_se``, ``log_zeta`` and
        ``method = "continuous_tempering"``.

    Notes
    -----
    The estimates are only as good as the exploration of ``beta``: the chains must visit both
    ``beta`` near 0 (the base) and near 1 (the target). A base that misses a mode of the target
    is not corrected by tempering; the default mixture base covers the modes its ADVI runs
    found. Read the warnings, or :func:`~pymc_tempering.diagnose`.
    """
    _check_bootstrap(bootstrap)
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    target, base, log_zeta, seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    settings = {
        "nuts_sampler": nuts_sampler or "default",
        "chains": chains,
        **seed_attrs(random_seed),
    }

    def run(base, log_zeta, draws, tune, seed):
        sampled = pm.sample(
            draws,
            tune=tune,
            chains=chains,
            nuts_sampler=nuts_sampler,
            random_seed=seed,
            progressbar=progressbar,
            model=continuously_tempered_model(target.model, base, log_zeta),
            **keep_value_variables(nuts_sampler, sample_kwargs),
        )
        return ct_result(
            sampled,
            target,
            base,
            log_zeta,
            method="continuous_tempering",
            attrs={**settings, "draws": int(draws), "tune": int(tune)},
        )

    return run_with_bootstrap(
        run, target, base, log_zeta, seed, bootstrap, bootstrap_draws, draws, tune
    )


def _check_bootstrap(bootstrap) -> None:
    if not isinstance(bootstrap, int | np.integer) or bootstrap < 0:
        raise ValueError(f"bootstrap must be a number of rounds >= 0, got {bootstrap!r}.")


def run_with_bootstrap(run, target, base, log_zeta, seed, bootstrap, bootstrap_draws, draws, tune):
    """Bootstrap rounds (section 6), the final run, and warnings from :func:`diagnose`.

    Shared by the continuous tempering samplers (joint and Gibbs): ``run(base, log_zeta, draws,
    tune, seed)`` samples once and returns a result (:func:`ct_result`). Each round refits the
    base to the round's weighted moments (when its weights are worth at least
    ``2 * ndim + 10`` draws) and sets ``log_zeta`` to the round's estimate, or, when the round
    did not visit both ends of beta (more than 1% of draws within 0.1 of 0 and of 1), to an
    importance-sampling estimate from the refitted base; the rounds are recorded in the final
    result's ``bootstrap`` group.
    """
    _check_bootstrap(bootstrap)
    *seeds, final_seed = split_seed(seed, 2 * int(bootstrap) + 1)
    rounds = []
    for round_seed, zeta_seed in zip(seeds[::2], seeds[1::2], strict=True):
        result = run(base, log_zeta, bootstrap_draws, bootstrap_draws, round_seed)
        ess = kish_ess(result["sample_stats"]["log_weight"].values)
        refit = ess >= 2 * target.ndim + 10
        beta = result["posterior"][INVERSE_TEMPERATURE].values
        both_ends = np.mean(beta < 0.1) > 0.01 and np.mean(beta > 0.9) > 0.01
        rounds.append(
            {
                "log_zeta": log_zeta,
                "log_marginal_likelihood": result.attrs["log_marginal_likelihood"],
                "log_marginal_likelihood_se": result.attrs["log_marginal_likelihood_se"],
                "ess_weights": ess,
                "base_refit": refit,
                "visited_both_ends": both_ends,
            }
        )
        if refit:
            base = base_from_result(result, target.model, previous=base)
        # The round's estimate is only trustworthy when it saw both ends of beta (eq. 20
        # compares them); otherwise estimate log zeta afresh by importance sampling from the
        # (refitted) base.
        if both_ends:
            log_zeta = result.attrs["log_marginal_likelihood"]
        else:
            log_zeta = estimate_log_zeta(target, base, random_seed=zeta_seed)
    result = run(base, log_zeta, draws, tune, final_seed)
    if rounds:
        result["bootstrap"] = DataTree(
            xr.Dataset({k: ("round", [r[k] for r in rounds]) for k in rounds[0]})
        )
    result.attrs["bootstrap"] = len(rounds)
    warn_problems(result, stacklevel=4)
    return result


def ct_result(sampled, target: Target, base: Base, log_zeta: float, *, method: str, attrs: dict):
    """Weights (eqs. 21-22) and log Z (eq. 20) of a continuous tempering run, in the result layout.

    ``sampled`` is what ``pm.sample`` returned for an extended model whose posterior holds the
    user's value variables under their value names.
    """
    x = target.flat_draws(sampled["posterior"])
    delta = log_zeta + base.logp(x) - target.logp(x)
    log_w0, log_w1 = ct_log_weights(delta)
    return build_result(
        sampled,
        target,
        method=method,
        log_weight=log_w1,
        log_marginal_likelihood=log_marginal_likelihood_ct(delta, log_zeta),
        attrs={"log_zeta": float(log_zeta), "base_method": base.method, **attrs},
        extra_stats={"log_base_weight": log_w0},
        extra_groups={"base": base_group(target, base.mean, np.diag(base.cov))},
    )
