"""Pseudo-extended MCMC (Nemeth, Lindsten, Filippone & Hensman) as a model transformation.

The extended model holds ``N`` copies ("pseudo-samples") ``x_1, ..., x_N`` of the target's
unconstrained variables. With a normalised proposal ``q`` (a :class:`~pymc_tempering.Base`) its
log density is eq. (4)::

    log sum_i exp{log gamma(x_i) - log q(x_i)} - log N + sum_j log q(x_j)

With the tempered proposal of section 3.3 each pseudo-sample also carries an inverse temperature
``beta_i`` and, with ``pi(beta) = g(beta) = 1``, the log density is eq. (8)::

    log sum_i exp{(1 - beta_i) log gamma(x_i)} - log N + sum_j beta_j log gamma(x_j)

where ``gamma`` is the model's unnormalised density on the unconstrained space (with the
Jacobians of PyMC's transforms). By default (``tempering="auto"``), on a model with proper
priors and a likelihood (observed variables or potentials), only the likelihood is tempered:
``gamma = p0 L`` and ``gamma_beta = p0 L^beta``, with ``p0`` the normalised prior, so that eq. (8)
reads::

    log sum_i exp{(1 - beta_i) log L(x_i)} - log N + sum_j [log p0(x_j) + beta_j log L(x_j)]

(the power posteriors of ``pm.sample_smc``; see :func:`pseudo_extended_model`). ``beta_i = beta_min + (1 - beta_min) sigmoid(u_i)``: the
sampler moves ``u_i = temperature_control`` on the real line (a logit transform) and the log
Jacobian ``log sigmoid'(u_i)`` is added. Draws of the target are recovered by the post-hoc weights
of eq. (13), ``w_i ∝ gamma(x_i) / gamma_beta_i(x_i)``, normalised within each draw.

The extended model is an ordinary PyMC model, so every ``pm.sample(nuts_sampler=...)`` runs it.
"""

from __future__ import annotations

import numbers

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.model import modelcontext
from pytensor.graph.replace import vectorize_graph
from scipy.special import logsumexp

from pymc_tempering.bases import Base, MixtureBase, PriorDensity, check_base
from pymc_tempering.estimators import log_marginal_likelihood_pe
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    PSEUDO_SAMPLE,
    TEMPERATURE_CONTROL,
    build_result,
)
from pymc_tempering.contract import (
    check_sampler_args,
    reproducible,
    pm_sample_kwargs,
    seed_attrs,
)
from pymc_tempering.report import warn_problems, judge_posterior
from pymc_tempering.target import Target

__all__ = ["pseudo_extended_model", "sample_pe", "pe_log_weights", "DEFAULT_BETA_MIN"]

_POTENTIAL = "pseudo_extended_log_density"

#: Default lower bound of the inverse temperatures (see :func:`pseudo_extended_model`).
DEFAULT_BETA_MIN = 1e-3


def _check_n_pseudo(n_pseudo) -> int:
    if isinstance(n_pseudo, bool) or not isinstance(n_pseudo, numbers.Integral):
        raise ValueError(f"n_pseudo must be an integer >= 1, got {n_pseudo!r}.")
    if n_pseudo < 1:
        raise ValueError(f"n_pseudo must be an integer >= 1, got {n_pseudo}.")
    return int(n_pseudo)


def _check_proposal(target: Target, proposal):
    if isinstance(proposal, str):
        if proposal != "tempered":
            raise ValueError(
                f"proposal must be 'tempered' or a pymc_tempering.Base, got {proposal!r}."
            )
        return "tempered"
    if not isinstance(proposal, Base | MixtureBase):
        raise ValueError(
            "proposal must be 'tempered', a pymc_tempering.Base or a MixtureBase, got "
            f"{type(proposal).__name__}."
        )
    check_base(target, proposal)
    return proposal


TEMPERINGS = ("auto", "likelihood", "posterior")


def _tempering(target: Target, tempering, proposal) -> str | None:
    """What the tempered proposal tempers: ``"likelihood"`` or ``"posterior"`` (``None`` for a
    Base proposal, which has no temperatures)."""
    if not isinstance(tempering, str) or tempering not in TEMPERINGS:
        raise ValueError(f"tempering must be one of {TEMPERINGS}, got {tempering!r}.")
    if not isinstance(proposal, str):
        return None
    model = target.model
    has_likelihood = bool(model.observed_RVs or model.potentials)
    proper = not target.improper_variables
    if tempering == "auto":
        return "likelihood" if has_likelihood and proper else "posterior"
    if tempering == "likelihood" and not (has_likelihood and proper):
        why = (
            f"the prior of {target.improper_variables} is improper" if not proper
            else "the model has no observed variables or potentials"
        )
        raise ValueError(
            f'tempering="likelihood" needs proper priors and a likelihood, but {why}; use '
            'tempering="posterior".'
        )
    return tempering


def _check_beta_min(beta_min) -> float:
    beta_min = float(beta_min)
    if not 0.0 <= beta_min < 1.0:
        raise ValueError(f"beta_min must lie in [0, 1), got {beta_min}.")
    return beta_min


def _per_pseudo_sample(build, target: Target, values: dict, n_pseudo: int):
    """Evaluate ``build(single_values) -> list of tensors`` for every pseudo-sample.

    ``values[name]`` has a leading pseudo-sample axis. The graph is built once for a single
    copy and vectorised over that axis (``vectorize_graph``); should an Op refuse, the copies
    are built one by one and stacked. Outputs have a leading axis of length ``n_pseudo``.
    """
    single = {
        name: pt.tensor(name=f"{name}_single", shape=shape, dtype=values[name].dtype)
        for name, shape in zip(target.names, target.shapes, strict=True)
    }
    outputs = build(single)
    try:
        batched = vectorize_graph(outputs, replace={single[n]: values[n] for n in target.names})
        if all(o.type.ndim == s.type.ndim + 1 for o, s in zip(batched, outputs, strict=True)):
            return list(batched)
    except Exception:  # noqa: BLE001 - any Op that cannot batch: fall back to a loop
        pass
    copies = [build({n: values[n][i] for n in target.names}) for i in range(n_pseudo)]
    return [pt.stack([c[k] for c in copies]) for k in range(len(outputs))]


def _extended_logp(
    target, values: dict, log_gamma, n_pseudo: int, proposal, beta_min: float, tempering
):
    """The extended log density of eq. (4) (a Base proposal) or eq. (8) (the tempered one,
    of the likelihood or of the whole density), inside the model being built: the tempered
    proposal adds its temperature controls."""
    if isinstance(proposal, Base | MixtureBase):
        (log_q,) = _per_pseudo_sample(
            lambda v: [proposal.logp_graph([v[n] for n in target.names])],
            target,
            values,
            n_pseudo,
        )
        return pt.logsumexp(log_gamma - log_q) - np.log(n_pseudo) + pt.sum(log_q)
    u = pm.Flat(TEMPERATURE_CONTROL, shape=(n_pseudo,), dims=PSEUDO_SAMPLE)
    beta = pm.Deterministic(
        INVERSE_TEMPERATURE, beta_min + (1.0 - beta_min) * pt.sigmoid(u), dims=PSEUDO_SAMPLE
    )
    log_dbeta = -pt.softplus(u) - pt.softplus(-u)  # log sigmoid'(u); (1 - beta_min) cancels
    # gamma = gamma_0 gamma_t and gamma_beta = gamma_0 gamma_t^beta: gamma_0 the prior when the
    # likelihood alone is tempered, 1 when the whole density is
    if tempering == "likelihood":
        (log_prior,) = _per_pseudo_sample(
            lambda v: [target.prior_logp_graph(v)], target, values, n_pseudo
        )
        log_tempered = log_gamma - log_prior
    else:
        log_prior, log_tempered = 0.0, log_gamma
    return (
        pt.logsumexp((1.0 - beta) * log_tempered)
        - np.log(n_pseudo)
        + pt.sum(log_prior + beta * log_tempered)
        + pt.sum(log_dbeta)
    )


def pseudo_extended_model(
    model: pm.Model | None = None,
    n_pseudo: int = 2,
    proposal: str | Base | MixtureBase = "tempered",
    *,
    beta_min: float = DEFAULT_BETA_MIN,
    tempering: str = "auto",
) -> pm.Model:
    """Build the pseudo-extended model: eq. (8) (tempered proposal) or eq. (4) (a Base).

    Parameters
    ----------
    model : pymc.Model, optional
        The target. Taken from the context when omitted; it is not modified.
    n_pseudo : int
        Number of pseudo-samples ``N >= 1``. ``N = 1`` gives the target itself (with the
        tempered proposal, times an independent density on the inverse temperature).
    proposal : "tempered", Base or MixtureBase
        ``"tempered"`` (default): the tempered proposal of section 3.3 with
        ``pi(beta) = g(beta) = 1`` on ``(beta_min, 1)``, eq. (8). A
        :class:`~pymc_tempering.Base` or :class:`~pymc_tempering.MixtureBase`: a normalised
        proposal on the flat unconstrained space, eq. (4); then the evidence is identified
        (:func:`sample_pe`). ``fit_base(model, "mixture")`` gives the mixture of the modes its
        fits found.
    beta_min : float
        Lower bound of the inverse temperatures (tempered proposal only), in ``[0, 1)``.
        For a ``d``-dimensional target with Gaussian tails, ``int gamma^beta dx`` grows like
        ``beta^(-d/2)``, so with ``beta_min = 0`` the extended target is improper for
        ``d >= 2`` and the sampler drifts to ``beta -> 0``, ``|x| -> inf``. The default
        ``0.001`` keeps it proper with ``gamma^beta`` up to ~30 times wider than ``gamma``
        (a Gaussian's scale grows like ``beta^(-1/2)``); on the mixtures of section 4.1 a
        larger one mixes slower between the modes, or leaves some unvisited. In many
        dimensions the proposal's marginal ``q(beta) ∝ beta^(-d/2)`` piles the diffuse
        pseudo-samples up at ``beta_min``: raise it there.
    tempering : {"auto", "likelihood", "posterior"}
        What the tempered proposal raises to the power ``beta``. ``"posterior"``: the whole
        density, ``gamma_beta = gamma^beta`` (the paper's section 3.3). ``"likelihood"``: the
        likelihood only, ``gamma_beta = p0 L^beta`` with ``p0`` the prior (the power posteriors
        that ``pm.sample_smc`` moves through); it needs proper priors and observed variables
        or potentials, and ``beta`` near 0 then gives the prior rather than an ever flatter
        density. ``"auto"`` (default): ``"likelihood"`` where the model allows it, else
        ``"posterior"`` (a ``pm.Flat`` with a potential, a prior-only mixture). Tempering
        the whole density flattens the prior's tails too: on a hierarchical model (the
        non-centred eight schools) the diffuse pseudo-samples go out to group scales whose
        likelihood is stiff beyond any one step size, and most transitions diverge, none with
        the likelihood tempered. Ignored by a Base proposal.

    Returns
    -------
    pymc.Model
        A new model (not a child of ``model``) with coords ``pseudo_sample = 0..N-1`` beside
        the original ones. Free variables: the value variables of ``model`` under their value
        names (e.g. ``sigma_log__``) as ``pm.Flat`` with a leading ``pseudo_sample`` dim, and,
        for the tempered proposal, ``temperature_control`` (``pseudo_sample``), the logit of
        the rescaled inverse temperature. Deterministics: ``inverse_temperature``
        (``pseudo_sample``, tempered proposal only) and the original model's free variables
        (constrained) and deterministics under their own names, with a leading
        ``pseudo_sample`` dim.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses (discrete or no free variables),
        ``n_pseudo < 1``, an unknown proposal, a base of the wrong dimension, a ``beta_min``
        outside ``[0, 1)``, an unknown ``tempering`` or ``"likelihood"`` where the model has
        no likelihood or an improper prior, or variable names that clash with those the
        method adds.
    """
    target = Target(modelcontext(model))
    target.require_exact("Pseudo-extended MCMC")
    n_pseudo = _check_n_pseudo(n_pseudo)
    proposal = _check_proposal(target, proposal)
    beta_min = _check_beta_min(beta_min)
    tempering = _tempering(target, tempering, proposal)
    original = target.model
    added = {PSEUDO_SAMPLE, INVERSE_TEMPERATURE, TEMPERATURE_CONTROL, _POTENTIAL}
    clash = added & (set(original.named_vars) | set(original.coords))
    if clash:
        raise ValueError(
            f"The model already has variables or coords named {sorted(clash)}, which the "
            "pseudo-extended method adds; rename them."
        )

    coords = dict(original.coords)
    coords[PSEUDO_SAMPLE] = np.arange(n_pseudo)
    point = original.initial_point()

    def dims_of(name, shape):
        dims = target.dims(name)
        if dims is None and len(shape) > 0:
            dims = tuple(f"{name}_dim_{k}" for k in range(len(shape)))
            for dim, size in zip(dims, shape, strict=True):
                coords.setdefault(dim, np.arange(size))
        return (PSEUDO_SAMPLE, *(dims or ()))

    value_dims = {n: dims_of(n, s) for n, s in zip(target.names, target.shapes, strict=True)}
    constrained_names = list(target.constrained_names)
    const_shapes = {n: tuple(np.shape(v)) for n, v in target.constrained(
        target.ravel({n: point[n] for n in target.names})
    ).items()}
    constrained_dims = {n: dims_of(n, const_shapes[n]) for n in constrained_names}

    pe_model = pm.Model(coords=coords, model=None)
    with pe_model:
        values = {}
        for name, shape in zip(target.names, target.shapes, strict=True):
            init = np.broadcast_to(np.asarray(point[name], dtype=float), (n_pseudo, *shape))
            values[name] = pm.Flat(
                name, shape=(n_pseudo, *shape), dims=value_dims[name], initval=init.copy()
            )
        (log_gamma,) = _per_pseudo_sample(
            lambda v: [target.logp_graph(v)], target, values, n_pseudo
        )
        logp = _extended_logp(target, values, log_gamma, n_pseudo, proposal, beta_min, tempering)
        pm.Potential(_POTENTIAL, logp)
        outs = _per_pseudo_sample(
            lambda v: list(target.constrained_graph(v).values()), target, values, n_pseudo
        )
        for name, expr in zip(constrained_names, outs, strict=True):
            if name not in values:
                pm.Deterministic(name, expr, dims=constrained_dims[name])
    return pe_model


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
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    model = modelcontext(model)
    target = Target(model)
    target.require_exact("Pseudo-extended MCMC")
    n_pseudo = _check_n_pseudo(n_pseudo)
    proposal = _check_proposal(target, proposal)
    beta_min = _check_beta_min(beta_min)
    tempering = _tempering(target, tempering, proposal)
    pe_model = pseudo_extended_model(
        model, n_pseudo, proposal, beta_min=beta_min, tempering=tempering or "auto"
    )
    if "target_accept" not in (sample_kwargs.get("nuts") or {}):
        sample_kwargs.setdefault("target_accept", 0.9)
    sampled = pm.sample(
        draws,
        tune=tune,
        chains=chains,
        nuts_sampler=nuts_sampler,
        random_seed=random_seed,
        progressbar=progressbar,
        model=pe_model,
        **pm_sample_kwargs(nuts_sampler, sample_kwargs),
    )
    result = pe_result(
        sampled,
        target,
        proposal,
        tempering=tempering,
        attrs={
            "nuts_sampler": nuts_sampler or "default",
            "draws": draws,
            "tune": tune,
            "chains": chains,
            "n_pseudo": n_pseudo,
            "beta_min": beta_min if proposal == "tempered" else None,
            **seed_attrs(random_seed),
        },
    )
    warn_problems(result)
    judge_posterior(result, result.attrs["method"])
    return result


def _flat_pseudo_draws(target: Target, posterior) -> np.ndarray:
    """Flat unconstrained draws ``(chain, draw, pseudo_sample, ndim)``."""
    parts = []
    for name in target.names:
        arr = np.asarray(
            posterior[name].transpose("chain", "draw", PSEUDO_SAMPLE, ...).values, dtype=float
        )
        parts.append(arr.reshape(arr.shape[:3] + (-1,)))
    return np.concatenate(parts, axis=-1)


def pe_result(sampled, target: Target, proposal, *, tempering: str | None = None, attrs: dict):
    """Weights (eq. 13) and, for a Base proposal, log Z of a pseudo-extended run, in the layout.

    ``sampled`` is what ``pm.sample`` returned for :func:`pseudo_extended_model`, built with
    ``tempering`` (``"likelihood"`` or ``"posterior"``; ignored for a Base proposal).
    """
    posterior = sampled["posterior"]
    x = _flat_pseudo_draws(target, posterior)
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
