"""Pseudo-extended MCMC (Nemeth, Lindsten, Filippone & Hensman) under any ``pm.sample`` NUTS.

:func:`sample_pe` runs the model of :mod:`~pymc_tempering.methods.pseudo_extended.model` on the
extended-model runner (:mod:`pymc_tempering.extended.runner`). Draws of the target are recovered
by the post-hoc weights of eq. (13), ``w_i ∝ gamma(x_i) / gamma_beta_i(x_i)``, normalised within
each draw.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import xarray as xr
from scipy.special import expit, logsumexp
from xarray import DataTree

from pymc_tempering.bases import Base, MixtureBase, PriorDensity
from pymc_tempering.contract import check_sampler_args, reproducible, seed_attrs
from pymc_tempering.estimators import log_marginal_likelihood_pe
from pymc_tempering.extended.runner import ExtendedSampling, run_extended
from pymc_tempering.methods.pseudo_extended.model import (
    DEFAULT_BETA_MIN,
    PESettings,
    build_pe_model,
    pe_settings,
)
from pymc_tempering.report import warn_weighted
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    PSEUDO_SAMPLE,
    TEMPERATURE_CONTROL,
    build_result,
    constrained_draws,
)
from pymc_tempering.target import Target, target_of
from pymc_tempering.timing import timed

__all__ = ["pe_log_weights", "pe_result", "sample_pe"]


def pe_log_weights(log_gamma, log_q) -> np.ndarray:
    """Log weights of eq. (13), normalised within each draw.

    Parameters
    ----------
    log_gamma : array_like, shape (chain, draw, pseudo_sample)
        ``log gamma(x_i)``, the target's unnormalised log density at each pseudo-sample.
    log_q : array_like, same shape
        The proposal's log density at each pseudo-sample, ``log q(x_i)`` for a base or
        ``log gamma_beta_i(x_i)`` for the tempered proposal (``pi = g = 1``): ``beta_i log
        gamma(x_i)``, or ``log p0(x_i) + beta_i log L(x_i)`` with the likelihood tempered.

    Returns
    -------
    ndarray
        ``log w_i - log sum_j w_j`` with ``w_i = gamma(x_i) / q(x_i)``: every draw carries total
        weight one.
    """
    r = np.asarray(log_gamma, dtype=float) - np.asarray(log_q, dtype=float)
    return r - logsumexp(r, axis=-1, keepdims=True)


@reproducible
@timed
def sample_pe(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    n_pseudo: int = 2,
    proposal: str | Base | MixtureBase = "tempered",
    beta_min: float = DEFAULT_BETA_MIN,
    tempering: str = "auto",
    nuts_sampler: str | None = None,
    **sample_kwargs,
):
    """Sample a model by pseudo-extended MCMC under NUTS.

    Builds :func:`pseudo_extended_model`, runs :func:`pymc.sample` on it and returns weighted
    pseudo-samples of the original model.

    Parameters
    ----------
    draws, tune, chains : int
        As in :func:`pymc.sample`.
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.
    random_seed : int, optional
        Seeds the sampler: the same seed gives the same result.
    progressbar : bool
    n_pseudo : int
        Number of pseudo-samples ``N``. The paper finds 2 to 5 the best value per unit of
        computing time on its mixtures; more lowers the variance at a cost linear in ``N``.
    proposal : "tempered", Base or MixtureBase
        See :func:`pseudo_extended_model`. Only a (normalised) base gives the evidence.
    beta_min : float
        Lower bound of the inverse temperatures (tempered proposal); see
        :func:`pseudo_extended_model`.
    tempering : {"auto", "likelihood", "posterior"}
        What the tempered proposal tempers; see :func:`pseudo_extended_model`. The default
        tempers the likelihood where the model has one and proper priors.
    nuts_sampler : {"pymc", "nutpie", "numpyro"}, optional
        Passed to :func:`pymc.sample`; ``None`` lets PyMC choose. ``"blackjax"`` is refused: it
        fails inside ``pm.sample`` with PyMC 6.4 and BlackJAX 1.7.1.
    **sample_kwargs
        Passed to :func:`pymc.sample`. ``target_accept`` defaults to 0.9 here: the
        pseudo-samples swap between target-like (``beta`` near 1) and diffuse (``beta`` near
        ``beta_min``) roles, so no single step size fits both, and the smaller step size of a
        higher acceptance target avoids divergences at the narrow end.

    Returns
    -------
    xarray.DataTree
        In the library's layout: ``posterior`` holds the original variables (constrained,
        with their dims) with an extra leading ``pseudo_sample`` dim, and for the tempered
        proposal ``inverse_temperature`` and ``temperature_control`` (``pseudo_sample``);
        ``unconstrained_posterior`` the transformed value variables;
        ``sample_stats.log_weight`` (chain, draw, pseudo_sample) holds the weights of eq. (13)
        normalised within each draw (each draw has total weight one). With a Base proposal the
        evidence of eq. (4) is reported: ``sample_stats.log_marginal_likelihood`` per chain and
        the pooled ``log_marginal_likelihood`` and ``log_marginal_likelihood_se`` in attrs.
        With the tempered proposal the evidence is not identified (``C`` of eq. (7) is
        unknown): no number is reported and :func:`pymc_tempering.log_marginal_likelihood`
        raises. Root attrs also hold ``method = "pseudo_extended"``, ``n_pseudo``,
        ``proposal``, ``beta_min`` and ``tempering`` (``"likelihood"`` or ``"posterior"``;
        ``None`` for a Base proposal).

    Notes
    -----
    :func:`pymc_tempering.resample` picks one pseudo-sample per draw by these weights (the
    procedure of appendix B) and :func:`pymc_tempering.weighted_summary` averages over draws
    and pseudo-samples.

    The modes' probabilities here are the weighted pseudo-samples' shares, with standard errors
    from the chains' autocorrelation: they rest on the chains' moves between modes, and the
    result is not stratified. Pseudo-extended MCMC has no mode search and no per-mode
    proposal to importance-sample each mode's mass from, and no extension that re-runs it
    when its verdict fails. For mode probabilities with trusted standard errors, and a run
    that spends more work where its verdict asks for it, use :func:`pymc_tempering.sample_ct`
    (or :func:`pymc_tempering.sample_gibbs_ct`), whose runs post-stratify by the modes.
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    target = target_of(model)
    settings = pe_settings(target, n_pseudo, proposal, beta_min, tempering)
    target_accept = None  # given in nuts={...}, where pm.sample takes it from
    if "target_accept" not in (sample_kwargs.get("nuts") or {}):
        target_accept = sample_kwargs.pop("target_accept", 0.9)
    sampling = ExtendedSampling(
        method="pseudo_extended",
        build=lambda _: build_pe_model(target, settings),
        weigh=lambda sampled, _, attrs, __: pe_result(sampled, target, settings, attrs=attrs),
        chains=chains,
        nuts_sampler=nuts_sampler,
        progressbar=progressbar,
        sample_kwargs=sample_kwargs,
        attrs={
            "nuts_sampler": nuts_sampler or "default",
            "chains": chains,
            "n_pseudo": settings.n_pseudo,
            "beta_min": settings.beta_min if settings.proposal == "tempered" else None,
            **seed_attrs(random_seed),
        },
    )
    result = run_extended(sampling, None, draws, tune, random_seed, target_accept)
    return warn_weighted(result)


def _rebuild_posterior(sampled, target: Target, x: np.ndarray, beta_min: float):
    """``sampled`` with the model's variables (constrained) and deterministics beside the stored
    value variables, each with a leading ``pseudo_sample`` dim, and ``inverse_temperature``
    for the tempered proposal: what the extended model's deterministics are, computed with the
    :class:`~pymc_tempering.Target`'s compiled function instead of a second compilation."""
    posterior = sampled["posterior"].to_dataset()
    lead = ("chain", "draw", PSEUDO_SAMPLE)
    coords = {d: posterior[d] for d in lead}
    for name, values in constrained_draws(target, x).items():
        if name in posterior:
            continue
        dims = target.dims(name) or tuple(
            f"{name}_dim_{k}" for k in range(np.ndim(values) - len(lead))
        )
        posterior[name] = xr.DataArray(values, dims=(*lead, *dims), coords=coords)
    if TEMPERATURE_CONTROL in posterior:
        u = posterior[TEMPERATURE_CONTROL]
        posterior[INVERSE_TEMPERATURE] = beta_min + (1.0 - beta_min) * xr.apply_ufunc(expit, u)
    return sampled.assign({"posterior": DataTree(posterior)})


def _flat_pseudo_draws(target: Target, posterior) -> np.ndarray:
    """Flat unconstrained draws ``(chain, draw, pseudo_sample, ndim)``."""
    parts = []
    for name in target.names:
        arr = np.asarray(
            posterior[name].transpose("chain", "draw", PSEUDO_SAMPLE, ...).values, dtype=float
        )
        parts.append(arr.reshape(arr.shape[:3] + (-1,)))
    return np.concatenate(parts, axis=-1)


def pe_result(sampled, target: Target, settings: PESettings, *, attrs: dict):
    """Weights (eq. 13) and, for a Base proposal, log Z of a pseudo-extended run, in the layout.

    ``sampled`` is what ``pm.sample`` returned for the model
    :func:`~pymc_tempering.methods.pseudo_extended.model.build_pe_model` built with ``settings``:
    its posterior holds the free variables (the pseudo-samples of the user's value variables
    and, for the tempered proposal, ``temperature_control``), from which the user's variables
    (constrained) and ``inverse_temperature`` are computed
    (:func:`~pymc_tempering.extended.runner.stored_variables`).
    """
    proposal, tempering = settings.proposal, settings.tempering
    posterior = sampled["posterior"]
    x = _flat_pseudo_draws(target, posterior)
    sampled = _rebuild_posterior(sampled, target, x, settings.beta_min)
    posterior = sampled["posterior"]
    log_gamma = target.logp(x)
    lml = None
    if isinstance(proposal, Base | MixtureBase):
        log_q = proposal.logp(x)
        proposal_name = f"base ({proposal.method})"
        # log of (1/N) sum_i gamma(x_i) / q(x_i): its inverse has mean 1/Z under eq. (4)
        log_r = logsumexp(log_gamma - log_q, axis=-1) - np.log(x.shape[2])
        lml = log_marginal_likelihood_pe(log_r)
        extra = {}
    else:
        beta = np.asarray(
            posterior[INVERSE_TEMPERATURE].transpose("chain", "draw", PSEUDO_SAMPLE).values,
            dtype=float,
        )
        if tempering == "likelihood":
            log_prior = PriorDensity(target).logp(x)
            log_q = log_prior + beta * (log_gamma - log_prior)
        elif tempering == "posterior":
            log_q = beta * log_gamma
        else:
            raise ValueError(f'tempering must be "likelihood" or "posterior", got {tempering!r}.')
        proposal_name = "tempered"
        extra = {
            "log_marginal_likelihood_note": "not identified with the tempered proposal: the "
            "proposal's normalising constant C of eq. (7) is unknown; use a Base proposal"
        }
    return build_result(
        sampled,
        target,
        method="pseudo_extended",
        log_weight=pe_log_weights(log_gamma, log_q),
        log_weight_dims=[PSEUDO_SAMPLE],
        log_marginal_likelihood=lml,
        attrs={"proposal": proposal_name, "tempering": tempering, **extra, **attrs},
    )
