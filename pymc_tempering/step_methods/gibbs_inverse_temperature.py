"""Gibbs continuous tempering (Graham & Storkey 2017, section 5): a PyMC step method for beta | x.

The joint density of eq. (16) on the target state ``x`` and the inverse temperature
``beta in [0, 1]``::

    log p(x, beta) = beta [log p(x) - log zeta] + (1 - beta) log q(x) + const
                   = log q(x) - beta Delta(x),     Delta(x) = log zeta + log q(x) - log p(x)

is linear in ``beta``, so ``beta | x`` is an exponential distribution of rate ``Delta(x)``
truncated to ``[0, 1]`` (eq. 17). :class:`GibbsInverseTemperature` draws it exactly by inverse
transform; PyMC's NUTS (or HMC) moves ``x`` given ``beta`` in a ``CompoundStep``.
:func:`sample_gibbs_ct` builds the model and runs both through :func:`pymc.sample`.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.blocking import RaveledVars
from pymc.model import modelcontext
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pytensor.graph.replace import graph_replace

from pymc_tempering.bases import Base, prepare_base
from pymc_tempering.results import INVERSE_TEMPERATURE
from pymc_tempering.contract import (
    check_extension_args,
    check_sampler_args,
    pm_sample_kwargs,
    reproducible,
    seed_attrs,
)
from pymc_tempering.transforms.continuous_tempering import (
    BootstrapPolicy,
    TemperedSampling,
    run_with_bootstrap,
    tempered_model,
)

__all__ = [
    "GibbsInverseTemperature",
    "gibbs_tempered_model",
    "sample_gibbs_ct",
    "truncated_exponential_inverse_cdf",
]

_POTENTIAL = "tempered_log_density"
_SERIES_BELOW = 1e-10  # |Delta| below which the inverse CDF is the first-order series in Delta


def truncated_exponential_inverse_cdf(delta, u) -> np.ndarray:
    """Inverse CDF of the density ``Delta exp(-beta Delta) / (1 - exp(-Delta))`` on ``[0, 1]``.

    This is eq. (17) of the CT paper, the conditional of the inverse temperature given ``x``.
    With ``a = |Delta|`` and ``t`` the truncated exponential of rate ``a``,
    ``t(u) = -log1p(u expm1(-a)) / a`` and ``beta = t(u)`` for ``Delta > 0``,
    ``beta = 1 - t(1 - u)`` for ``Delta < 0`` (the density is mirrored), so nothing overflows for
    any size of ``Delta`` and ``beta`` increases with ``u``. For
    ``a < 1e-10`` the first-order series ``t = u - a u (1 - u) / 2`` keeps full accuracy
    (``Delta = 0`` gives the uniform distribution). ``Delta = +inf`` gives 0, ``-inf`` gives 1.

    Parameters
    ----------
    delta : array_like
        ``Delta(x) = log zeta + log q(x) - log p(x)``.
    u : array_like
        Uniform variates in ``[0, 1)``, broadcast against ``delta``.

    Returns
    -------
    ndarray
        Draws of ``beta`` in ``[0, 1]``.
    """
    d = np.asarray(delta, dtype=float)
    u = np.asarray(u, dtype=float)
    d, u = np.broadcast_arrays(d, u)
    a = np.abs(d)
    u = np.where(d < 0, 1.0 - u, u)  # mirrored: beta = 1 - t(1 - u) keeps beta increasing in u
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        general = -np.log1p(u * np.expm1(-a)) / a
        series = u - a * u * (1.0 - u) / 2.0
    t = np.where(a < _SERIES_BELOW, series, general)
    t = np.where(np.isinf(a), 0.0, t)
    t = np.clip(t, 0.0, 1.0)
    beta = np.where(d < 0, 1.0 - t, t)
    return np.where(np.isnan(d), np.nan, beta)


class GibbsInverseTemperature(ArrayStepShared):
    """Draw the inverse temperature exactly from its conditional given the other variables.

    For any PyMC model whose log density is linear in a scalar variable ``beta`` on ``[0, 1]``
    (the Gibbs continuously tempered model of :func:`gibbs_tempered_model`, eq. 16 of the CT
    paper), the conditional of ``beta`` given the rest is a truncated exponential of rate
    ``Delta = logp(beta=0) - logp(beta=1)`` (eq. 17). Each step evaluates ``Delta`` at the
    current values of the other variables and draws ``beta`` by inverse transform
    (:func:`truncated_exponential_inverse_cdf`), so the step leaves the joint invariant and
    always accepts. Use it beside NUTS or HMC on the other variables:
    ``pm.sample(step=[GibbsInverseTemperature([beta])])``.

    Parameters
    ----------
    vars : list of one variable, optional
        The inverse temperature: a scalar free variable without a transform (for example
        ``pm.Uniform("inverse_temperature", 0, 1, default_transform=None)``). Default: the
        model's ``inverse_temperature``.
    model : pymc.Model, optional
    rng : int, Generator or None
        The step's only source of randomness (PyMC seeds it from ``pm.sample``'s
        ``random_seed``).
    initial_point : dict, optional
    compile_kwargs : dict, optional
        Passed to :func:`pytensor.function`.
    blocked : bool
        Unused (one variable); accepted for PyMC's step-method protocol.

    Raises
    ------
    ValueError
        If the variable is not a scalar, has a transform, or the model's log density is not
        linear in it.

    Notes
    -----
    Sampler stats: ``delta`` (``Delta`` at the ``x`` the draw was conditioned on).
    """

    name = "gibbs_inverse_temperature"
    default_blocked = True
    stats_dtypes_shapes = {"delta": (np.float64, [])}
    _state_class = StepMethodState

    def __init__(
        self,
        vars=None,
        *,
        model=None,
        rng=None,
        initial_point=None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
    ):
        model = modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        if vars is None:
            if INVERSE_TEMPERATURE not in model.named_vars:
                raise ValueError(
                    f"The model has no variable {INVERSE_TEMPERATURE!r}; pass vars=[beta]."
                )
            vars = [model[INVERSE_TEMPERATURE]]
        vars = [model.rvs_to_values.get(v, v) for v in vars]
        if len(vars) != 1:
            raise ValueError(
                f"GibbsInverseTemperature updates exactly one variable, got {len(vars)}."
            )
        (value,) = vars
        if value not in model.value_vars:
            raise ValueError(f"{value} is not a free variable of the model.")
        rv = model.values_to_rvs[value]
        if model.rvs_to_transforms.get(rv) is not None:
            raise ValueError(
                f"The inverse temperature {rv.name!r} has a transform; declare it without one "
                "(default_transform=None) so its value is beta itself."
            )
        if np.asarray(initial_point[value.name]).shape != ():
            raise ValueError(f"The inverse temperature {rv.name!r} must be a scalar.")

        shared = make_shared_replacements(initial_point, vars, model)
        logp = model.logp(jacobian=True)
        ends = [
            graph_replace(logp, {value: pt.constant(b, dtype=value.dtype)}, strict=False)
            for b in (0.0, 0.5, 1.0)
        ]
        ends = graph_replace(ends, shared, strict=False)
        kwargs = compile_kwargs or {}
        self._delta_fn = pm.compile([], ends[0] - ends[2], **kwargs)
        # The conditional is a truncated exponential only if logp is linear in beta.
        mid_fn = pm.compile([], ends[1] - 0.5 * (ends[0] + ends[2]), **kwargs)
        gap, delta0 = float(mid_fn()), float(self._delta_fn())
        if not (np.isfinite(gap) and np.isfinite(delta0)):
            raise ValueError(
                "The model's log density is not finite at the initial point for beta in "
                f"{{0, 0.5, 1}} of {rv.name!r}."
            )
        if abs(gap) > 1e-8 * (1.0 + abs(delta0)):
            raise ValueError(
                f"The model's log density is not linear in {rv.name!r} (off by {gap:.3g} at "
                "beta = 0.5), so its conditional is not the truncated exponential of eq. (17)."
            )
        super().__init__(vars, shared, blocked=True, rng=rng)

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        delta = float(self._delta_fn())
        if np.isnan(delta):
            beta = q0.data.copy()  # log density undefined at x: keep beta
        else:
            beta = np.atleast_1d(truncated_exponential_inverse_cdf(delta, self.rng.random()))
        return RaveledVars(beta.astype(q0.data.dtype), q0.point_map_info), [{"delta": delta}]

    @staticmethod
    def competence(var, has_grad):
        return Competence.INCOMPATIBLE


def gibbs_tempered_model(
    model: pm.Model | None = None, base: Base | None = None, log_zeta: float | None = None
) -> pm.Model:
    """Build the Gibbs continuously tempered model: the joint of eq. (16) on ``(x, beta)``.

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
        A new model whose free variables are the value variables of ``model`` (under their
        value names, as ``pm.Flat``) and ``inverse_temperature``, a ``Uniform(0, 1)`` without
        a transform, which NUTS is not to move: sample it with :class:`GibbsInverseTemperature`.
        Its log density is ``beta (log p(x) - log zeta) + (1 - beta) log q(x)``; its
        deterministics are the original model's free variables (constrained) and deterministics.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, a base of the wrong dimension, no
        ``log_zeta``, or reserved names in the model.
    """
    return tempered_model(model, base, log_zeta, _uniform_inverse_temperature)


def _uniform_inverse_temperature():
    # No transform: the Gibbs step draws beta itself, on (0, 1).
    beta = pm.Uniform(INVERSE_TEMPERATURE, 0.0, 1.0, default_transform=None, initval=0.5)
    return beta, 0.0


@reproducible
def sample_gibbs_ct(
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
    target_accept: float | None = None,
    max_extensions: int = 2,
    target_se: float | None = 0.3,
    max_time: float | None = None,
    nuts_sampler: str | None = None,
    x_step: str = "nuts",
    **sample_kwargs,
):
    """Sample a model by Gibbs continuous tempering: exact draws of beta | x, NUTS on x | beta.

    Same arguments and result layout as :func:`~pymc_tempering.sample_ct`; the extended model
    is :func:`gibbs_tempered_model` and the sampler a ``CompoundStep`` of PyMC's NUTS (or HMC)
    on ``x`` and :class:`GibbsInverseTemperature` on ``beta``.

    Parameters
    ----------
    draws, tune, chains : int
        As in :func:`pymc.sample`.
    base : Base, optional
        Base density. Default: the base :func:`~pymc_tempering.sample_ct` fits (through
        :func:`~pymc_tempering.bases.prepare_base`).
    log_zeta : float, optional
        As in :func:`~pymc_tempering.sample_ct`.
    bootstrap, bootstrap_draws : int
        Bootstrap rounds before the final run and their length, as in
        :func:`~pymc_tempering.sample_ct`. One round by default here: PyMC's own sampler
        compiles the model cheaply, so a round costs only its draws.
    target_accept : float, optional
        Of the step method for ``x``; default 0.9 for NUTS (as in
        :func:`~pymc_tempering.sample_ct`) and PyMC's 0.65 for HMC.
    max_extensions, target_se, max_time
        Self-extension budget, the standard error that triggers an extension and the
        wall-clock budget in seconds, as in :func:`~pymc_tempering.sample_ct`.
    nuts_sampler : {None, "pymc"}
        Only PyMC's own sampler runs step methods; other values raise ``ValueError``.
    random_seed : int or Generator, optional
        Seeds the base fit, the ``log_zeta`` estimate and the sampler.
    progressbar : bool
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.
    x_step : {"nuts", "hmc"}
        PyMC's step method for ``x`` given ``beta``.
    **sample_kwargs
        Passed to :func:`pymc.sample` (``cores``, ...); not ``step``.

    Returns
    -------
    xarray.DataTree
        As :func:`~pymc_tempering.sample_ct`, with ``method = "gibbs_continuous_tempering"``;
        the posterior holds ``inverse_temperature`` but no ``temperature_control`` (there is
        none: beta is sampled directly). ``sample_stats.delta`` is ``Delta(x)`` at each draw.

    Raises
    ------
    ValueError
        For the cases of :func:`~pymc_tempering.sample_ct`, an external ``nuts_sampler``, an
        unknown ``x_step`` or a ``step`` in ``sample_kwargs``.

    """
    if nuts_sampler not in (None, "pymc"):
        raise ValueError(
            f"sample_gibbs_ct runs a compound step (NUTS on x, a Gibbs draw of beta), which only "
            f"PyMC's own sampler can run; got nuts_sampler={nuts_sampler!r}. Use sample_ct for "
            "external samplers."
        )
    if x_step not in ("nuts", "hmc"):
        raise ValueError(f"x_step must be 'nuts' or 'hmc', got {x_step!r}.")
    if "step" in sample_kwargs:
        raise ValueError("sample_gibbs_ct chooses the step methods itself; do not pass step=.")
    start = time.perf_counter()
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    if target_accept is None:
        target_accept = 0.9 if x_step == "nuts" else 0.65  # PyMC's HMC default
    check_extension_args(target_accept, max_extensions, target_se, max_time)  # before the fit
    pm_sample_kwargs("pymc", sample_kwargs)  # refused here, if at all, not after the base fit
    target, base, log_zeta, seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    x_cls = pm.NUTS if x_step == "nuts" else pm.HamiltonianMC

    def steps(gibbs_model, target_accept):
        beta_step = GibbsInverseTemperature([gibbs_model[INVERSE_TEMPERATURE]])
        x_vars = [v for v in gibbs_model.value_vars if v.name != INVERSE_TEMPERATURE]
        return [x_cls(x_vars, target_accept=target_accept), beta_step]

    sampling = TemperedSampling(
        build=gibbs_tempered_model,
        method="gibbs_continuous_tempering",
        chains=chains,
        nuts_sampler="pymc",
        progressbar=progressbar,
        sample_kwargs=sample_kwargs,
        attrs={
            "nuts_sampler": "pymc", "x_step": x_step, "chains": chains, **seed_attrs(random_seed)
        },
        steps=steps,
    )
    policy = BootstrapPolicy(
        bootstrap, bootstrap_draws, target_accept, max_extensions, target_se, max_time
    )
    return run_with_bootstrap(sampling, target, base, log_zeta, seed, draws, tune, policy, start)
