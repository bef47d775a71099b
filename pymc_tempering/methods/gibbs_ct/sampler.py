"""Gibbs continuous tempering (Graham & Storkey 2017, section 5): exact draws of beta | x.

The joint density of eq. (16) on ``(x, beta)`` is the continuously tempered density of
:mod:`pymc_tempering.extended.tempered` with ``beta`` itself a free variable on ``[0, 1]``;
:func:`sample_gibbs_ct` runs a ``CompoundStep`` of PyMC's NUTS (or HMC) on ``x`` and
:class:`~pymc_tempering.methods.gibbs_ct.step.GibbsInverseTemperature` on ``beta``, through the
runs of joint continuous tempering (:mod:`pymc_tempering.extended.rounds`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import pymc as pm

from pymc_tempering.bases import Base, prepare_base
from pymc_tempering.contract import (
    check_sampler_args,
    pm_sample_kwargs,
    reproducible,
    seed_attrs,
)
from pymc_tempering.driver.tempered_chains import (
    BATCH_BOOTSTRAP,
    batched_chain_count,
    batched_sampling,
    check_batched_chains,
)
from pymc_tempering.extended.rounds import BootstrapPolicy, run_with_bootstrap
from pymc_tempering.extended.tempered import tempered_model, tempering_sampling
from pymc_tempering.methods.gibbs_ct.step import GibbsInverseTemperature
from pymc_tempering.results import INVERSE_TEMPERATURE
from pymc_tempering.timing import timed

__all__ = ["gibbs_tempered_model", "sample_gibbs_ct"]


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
@timed
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
    bootstrap: int | None = None,
    bootstrap_draws: int = 500,
    target_accept: float | None = None,
    max_extensions: int = 2,
    target_se: float | None = 0.3,
    max_time: float | None = None,
    nuts_sampler: str | None = None,
    x_step: str = "nuts",
    batched_chains: int | None = None,
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
        :func:`~pymc_tempering.sample_ct`. By default one round here (PyMC's own sampler
        compiles the model cheaply, so a round costs only its draws), and two before batched
        chains (:data:`~pymc_tempering.driver.tempered_chains.BATCH_BOOTSTRAP`).
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
    batched_chains : int, optional
        As in :func:`~pymc_tempering.sample_ct`: chains of Gibbs continuous tempering batched
        through one compiled density (HMC on ``x`` given each chain's ``beta``, then the exact
        draw of ``beta``), chosen by default where the base's mode search is far from
        complete; ``x_step`` is then not used.
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
    # checked when made, before the base fit
    policy = BootstrapPolicy(
        1 if bootstrap is None else bootstrap, bootstrap_draws, target_accept, max_extensions,
        target_se, max_time,
    )
    pm_sample_kwargs("pymc", sample_kwargs)  # refused here, if at all, not after the base fit
    batched_chains = check_batched_chains(batched_chains, nuts_sampler, sample_kwargs)
    target, base, log_zeta, seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    batched = batched_chain_count(target, base, batched_chains, nuts_sampler, sample_kwargs)
    if batched and bootstrap is None:
        policy = replace(policy, bootstrap=BATCH_BOOTSTRAP)
    x_cls = pm.NUTS if x_step == "nuts" else pm.HamiltonianMC

    def steps(gibbs_model, target_accept):
        beta_step = GibbsInverseTemperature([gibbs_model[INVERSE_TEMPERATURE]])
        x_vars = [v for v in gibbs_model.value_vars if v.name != INVERSE_TEMPERATURE]
        return [x_cls(x_vars, target_accept=target_accept), beta_step]

    sampling = tempering_sampling(
        target,
        gibbs_tempered_model,
        method="gibbs_continuous_tempering",
        chains=batched or chains,
        nuts_sampler="pymc",
        progressbar=progressbar,
        sample_kwargs=sample_kwargs,
        attrs={
            "nuts_sampler": "batched" if batched else "pymc",
            "x_step": "batched hmc" if batched else x_step, "chains": batched or chains,
            **seed_attrs(random_seed),
        },
        steps=steps,
        sample=batched_sampling(target, "gibbs", batched, progressbar) if batched else None,
    )
    return run_with_bootstrap(sampling, target, base, log_zeta, seed, draws, tune, policy, start)
