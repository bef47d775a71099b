"""The continuously tempered model and its weights, shared by joint and Gibbs continuous tempering.

Both methods of Graham & Storkey (2017, section 5) sample the density::

    beta [log p(x) - log zeta] + (1 - beta) log q(x)

of the target's unconstrained variables ``x`` and an inverse temperature ``beta``, where ``p``
is the model's (unnormalised) density, ``q`` a normalised base and ``zeta`` an approximation of
``Z = int p``; they differ in how ``beta`` moves (a logit under NUTS, or an exact Gibbs draw).
:func:`tempered_model` builds it, :func:`ct_result` weighs a run of it (eqs. 20-22).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pymc as pm
from scipy.special import expit, logsumexp

from pymc_tempering.bases import Base, check_base, discover_optima, gaussian_logp_graph
from pymc_tempering.bases.densities import ELEMENTWISE_MAX_DIM
from pymc_tempering.checks import search_incomplete
from pymc_tempering.checks.calibration import path_vouched
from pymc_tempering.contract import split_seed
from pymc_tempering.coverage import COVERAGE, coverage_group, mass_beyond_draws
from pymc_tempering.estimators import (
    AGREEMENT_Z,
    combine_estimates,
    ct_log_weights,
    log_marginal_likelihood_ct,
    log_sum_of_masses,
)
from pymc_tempering.extended.compiled import run_data
from pymc_tempering.extended.funnel import funnel_correction, funnel_mass
from pymc_tempering.extended.runner import ExtendedSampling
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    TEMPERATURE_CONTROL,
    base_group,
    build_result,
    flat_direction_count,
    mode_draws_group,
    rebuild_posterior,
    strata_group,
)
from pymc_tempering.stratification import HOT, stratify_by_modes
from pymc_tempering.target import Target, target_of

__all__ = ["Tempering", "ct_result", "tempered_model", "tempering_data", "tempering_sampling"]

_POTENTIAL = "tempered_log_density"


class Tempering(NamedTuple):
    """What a continuously tempered model is built from, besides the user's model: the base
    and ``log zeta``. A bootstrap round or an extension changes them; nothing else changes."""

    base: Base
    log_zeta: float


def _dense(base) -> bool:
    """Whether the tempered graph holds the base as a full precision factor: always, but for a
    diagonal base in more than ``ELEMENTWISE_MAX_DIM`` dimensions (whose d x d factor would
    cost more than its own O(d) form). A full factor takes any later base (a bootstrap refit
    is full-covariance) into the same graph."""
    return not (base.diagonal and base.ndim > ELEMENTWISE_MAX_DIM)


def tempering_data(state: Tempering) -> dict[str, np.ndarray]:
    """The values of the tempered model's run data (:func:`tempered_model`) for a state
    (none for a :class:`~pymc_tempering.MixtureBase`, held as constants)."""
    base, log_zeta = state
    if not isinstance(base, Base):
        return {}
    return {**base.parameters(_dense(base)), "log_zeta": np.array(float(log_zeta))}


def tempering_key(method: str, state: Tempering):
    """What fixes the tempered graph of a state: the method and how the base is held (a
    :class:`~pymc_tempering.MixtureBase` is held as constants: no key)."""
    return (method, _dense(state.base)) if isinstance(state.base, Base) else None


def tempered_model(model, base: Base, log_zeta: float | None, inverse_temperature) -> pm.Model:
    """A new model with the density ``beta [log p(x) - log zeta] + (1 - beta) log q(x)``.

    The construction shared by joint and Gibbs continuous tempering: the user's value variables
    as ``pm.Flat`` (under their value names, with static shapes and the model's dims; initial
    values at the base mean), the tempered potential, and the user's free variables
    (constrained) and deterministics as deterministics. ``inverse_temperature()`` is called
    inside the new model's context; it adds the temperature variables and returns ``beta`` and
    a log-density term of its own (the Jacobian of ``u -> beta`` for the joint method).

    A Gaussian base and ``log zeta`` are shared data of the graph
    (:func:`~pymc_tempering.extended.compiled.run_data`; their values :func:`tempering_data`),
    so that one compilation serves every base and ``log zeta`` of the model.
    """
    target = target_of(model)
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
    if isinstance(base, Base):
        dense = _dense(base)
        data = run_data(tempering_data(Tempering(base, log_zeta)))
        mean, zeta = data["mean"], data["log_zeta"]
    else:  # a mixture, as constants
        mean, zeta = base.mean, log_zeta
    new_model = pm.Model(coords=dict(original.coords), model=None)
    with new_model:
        values, start = {}, 0
        for name, shape, size in zip(target.names, target.shapes, target.sizes, strict=True):
            dims = None if name in target.transformed_names else target.dims(name)
            # A static shape beside the dims spares the compiled graph its shape checks.
            initval = mean[start : start + size].reshape(shape)
            values[name] = pm.Flat(name, shape=shape, dims=dims, initval=initval)
            start += size
        beta, log_jacobian = inverse_temperature()
        logp = target.logp_graph(values)
        pieces = [values[name] for name in target.names]
        if isinstance(base, Base):
            logq = gaussian_logp_graph(
                pieces, data["mean"], data["scale"], data["log_norm"], dense=dense
            )
        else:
            logq = base.logp_graph(pieces)
        pm.Potential(_POTENTIAL, beta * (logp - zeta) + (1 - beta) * logq + log_jacobian)
        for name, expr in target.constrained_graph(values).items():
            if name not in values:
                pm.Deterministic(name, expr, dims=target.dims(name))
    return new_model


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
    (:func:`~pymc_tempering.extended.compiled.stored_variables`). Its posterior is rebuilt from
    them (:func:`~pymc_tempering.results.rebuild_posterior`): the user's variables
    (constrained, with their dims), the transformed value variables under their value names,
    ``inverse_temperature`` and, for joint tempering, ``temperature_control``.

    The optima of the base's mode search are joined by those the draws reached and the search
    did not (:func:`~pymc_tempering.bases.discover_optima`); the ``base`` group holds them all.
    With several optima, the weights are post-stratified by them
    (:func:`~pymc_tempering.stratification.stratify_by_modes`, seeded by ``random_seed``); the
    ``mode_probabilities`` group and ``sample_stats.mode_region`` then hold the modes. Not
    where the search is far from complete (:data:`~pymc_tempering.checks.UNSEEN_OPTIMA_LIMIT`)
    and the run's many chains vouch for their own weights
    (:func:`~pymc_tempering.checks.calibration.path_vouched`): on a 22-unit Boltzmann machine
    relaxation, strata around 8 of its thousands of optima put the posterior mean 2.84 off in
    RMSE, the chains' own weights 0.11.
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
    if base.modes is not None:  # the optima the draws reached and the mode search did not
        base = replace(base, modes=discover_optima(
            target, x, base.modes, split_seed(random_seed, 1)[0]))
    groups = {"base": base_group(target, base.mean, np.diag(base.cov), base.modes, funnels)}
    stats_ = {"log_base_weight": log_w0}
    hot = temperature[INVERSE_TEMPERATURE] > HOT
    # many chains whose batches agree, where the mode search is far from complete: their own
    # weights are the posterior; strata cut around a few of thousands of optima are not
    vouched = path_vouched(log_w1, log_w0)
    strata = None
    if not (vouched and search_incomplete(base.modes)):
        strata = stratify_by_modes(target, x, log_w1, hot, base.modes, random_seed)
    if strata is not None:
        log_w1 = strata.log_weight
        groups["mode_probabilities"] = strata_group(strata)
        if strata.mode_draws is not None:
            groups["mode_draws"] = mode_draws_group(target, strata.mode_draws)
        stats_["mode_region"] = strata.region
        lml, estimators = evidence_from_regions(lml, strata, vouched)
        attrs = {**attrs, **estimators}
    # mass at scales the base never reached (a spike's slab), against the final weights
    beyond = mass_beyond_draws(target, x, log_w1, lml[0], base, random_seed)
    if beyond is not None:
        groups[COVERAGE] = coverage_group(beyond)
    return build_result(
        sampled,
        target,
        method=method,
        log_weight=log_w1,
        log_marginal_likelihood=lml,
        attrs={"log_zeta": float(log_zeta), "base_method": base.method, **attrs},
        extra_stats=stats_,
        extra_groups=groups,
        flat_directions=flat_direction_count(target, x, log_w1),
    )


def evidence_from_regions(lml, strata, trust_path: bool = False) -> tuple[tuple, dict]:
    """The run's log Z from its path (eq. 20) and from its regions' masses, combined.

    Where every region's mass is importance-sampled (``strata.method``), the masses of the
    regions, which partition the space, sum to a second estimate of Z with an error of its own
    (:func:`~pymc_tempering.estimators.log_sum_of_masses`), independent of the chains'. Where
    the two agree within ``AGREEMENT_Z`` standard errors of their difference, the estimate is
    their inverse-variance combination; where they do not, the check ``path_regions_agreement``
    flags the run. On narrow modes the regions' estimate is the precise one: a Gaussian base
    moment-matched to modes far apart is far wider than each.
    Where they disagree, the regions' estimate is reported: its error is that of independent
    importance sampling, whose tails the stratification checks (Pareto k-hat), where the
    path's is a Markov chain's over few passages between the ends of beta, which a base far
    wider than the modes makes rare; unless ``trust_path``: the path comes from many
    independent chains whose batches agree
    (:func:`~pymc_tempering.checks.calibration.path_vouched`), and its error is then their
    spread, where regions cut around a few of thousands of optima miss mass (on a 22-unit
    Boltzmann machine relaxation, 128 batched chains gave 112.745 ± 0.062 by the path and
    111.603 ± 0.099 by the regions, against the exact 112.779). Measured: on the sign flip
    with 1000 observations in other units (modes of sd 0.015 at +-1.09, the base's sd 1.1)
    the path gave -6006.69 +- 0.27 and the regions -6008.344 +- 0.002 against quadrature's
    -6008.341; on a normal
    mixture with free component scales the path was 1.15 nats high, 4.7 of its standard
    errors, where the regions agreed with two other seeds' runs to 0.01.

    Returns
    -------
    lml : (estimate, standard_error, per_chain)
        ``lml`` with the combined estimate, or the regions' (the per-chain estimates are the
        path's).
    attrs : dict
        ``log_marginal_likelihood_path`` and ``_path_se``, ``log_marginal_likelihood_regions``
        and ``_regions_se``; empty where the regions give no estimate.
    """
    if strata.method != "importance sampling":
        return lml, {}
    log_z, se = log_sum_of_masses(strata.log_mass, strata.log_mass_se)
    path, path_se, per_chain = lml
    if not (np.isfinite(log_z) and np.isfinite(se)):
        return lml, {}
    attrs = {
        "log_marginal_likelihood_path": float(path),
        "log_marginal_likelihood_path_se": float(path_se),
        "log_marginal_likelihood_regions": float(log_z),
        "log_marginal_likelihood_regions_se": float(se),
    }
    if abs(log_z - path) > AGREEMENT_Z * float(np.hypot(se, path_se)):
        return (lml if trust_path else (log_z, se, per_chain)), attrs
    return (*combine_estimates(path, path_se, log_z, se), per_chain), attrs


def tempering_sampling(target, build, *, method: str, **options) -> ExtendedSampling:
    """How the extended-model runner samples a continuously tempered model of ``target``:
    ``build(model, base, log_zeta)`` gives the model (joint or Gibbs; :func:`tempered_model`) and
    :func:`~pymc_tempering.extended.tempered.ct_result` weighs its draws; ``options`` are the
    other fields of :class:`~pymc_tempering.extended.runner.ExtendedSampling`."""

    def weigh(sampled, state, attrs, seed):
        return ct_result(
            sampled, target, state.base, state.log_zeta, method=method, attrs=attrs,
            random_seed=split_seed(seed, 2)[1],
        )

    return ExtendedSampling(
        method=method,
        build=lambda state: build(target.model, *state),
        weigh=weigh,
        model=target.model,
        key=lambda state: tempering_key(method, state),
        data=tempering_data,
        **options,
    )
