"""Gibbs continuous tempering (Graham & Storkey 2017, section 5): a PyMC step method for beta | x.

The joint density of eq. (16) on the target state ``x`` and the inverse temperature
``beta in [0, 1]``::

    log p(x, beta) = beta [log p(x) - log zeta] + (1 - beta) log q(x) + const
                   = log q(x) - beta Delta(x),     Delta(x) = log zeta + log q(x) - log p(x)

is linear in ``beta``, so ``beta | x`` is an exponential distribution of rate ``Delta(x)``
truncated to ``[0, 1]`` (eq. 17). :class:`GibbsInverseTemperature` draws it exactly by inverse
transform; PyMC's NUTS (or HMC) moves ``x`` given ``beta`` in a ``CompoundStep``.
:func:`~pymc_tempering.methods.gibbs_ct.sampler.sample_gibbs_ct` builds the model and runs both
through :func:`pymc.sample`.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.blocking import RaveledVars
from pymc.model import modelcontext
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pytensor.graph.replace import graph_replace

from pymc_tempering.kernels.continuous import truncated_exponential_inverse_cdf
from pymc_tempering.results import INVERSE_TEMPERATURE

__all__ = ["GibbsInverseTemperature", "truncated_exponential_inverse_cdf"]

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
