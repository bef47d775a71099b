"""The pseudo-extended model (Nemeth, Lindsten, Filippone & Hensman) as a model transformation.

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

(the power posteriors of ``pm.sample_smc``; see :func:`pseudo_extended_model`).
``beta_i = beta_min + (1 - beta_min) sigmoid(u_i)``: the sampler moves
``u_i = temperature_control`` on the real line (a logit transform) and the log Jacobian
``log sigmoid'(u_i)`` is added. The extended model is an ordinary PyMC model, so every
``pm.sample(nuts_sampler=...)`` runs it.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.replace import vectorize_graph

from pymc_tempering.bases import Base, MixtureBase, check_base
from pymc_tempering.results import INVERSE_TEMPERATURE, PSEUDO_SAMPLE, TEMPERATURE_CONTROL
from pymc_tempering.target import Target, target_of

__all__ = ["DEFAULT_BETA_MIN", "PESettings", "build_pe_model", "pe_settings", "pseudo_extended_model"]

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
    target = target_of(model)
    return build_pe_model(target, pe_settings(target, n_pseudo, proposal, beta_min, tempering))


class PESettings(NamedTuple):
    """A pseudo-extended model's settings, checked (:func:`pe_settings`)."""

    n_pseudo: int
    proposal: str | Base | MixtureBase
    beta_min: float
    tempering: str | None
    """``"likelihood"`` or ``"posterior"``; ``None`` for a Base proposal."""


def pe_settings(target: Target, n_pseudo, proposal, beta_min, tempering) -> PESettings:
    """The settings of :func:`pseudo_extended_model`, checked once (``ValueError`` for what it
    refuses), with ``tempering="auto"`` resolved."""
    target.require_exact("Pseudo-extended MCMC")
    n_pseudo = _check_n_pseudo(n_pseudo)
    proposal = _check_proposal(target, proposal)
    beta_min = _check_beta_min(beta_min)
    return PESettings(n_pseudo, proposal, beta_min, _tempering(target, tempering, proposal))


def build_pe_model(target: Target, settings: PESettings) -> pm.Model:
    """The model of :func:`pseudo_extended_model` for checked ``settings``."""
    n_pseudo, proposal, beta_min, tempering = settings
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
