"""Simulated tempering (Marinari & Parisi 1992) with the Rao-Blackwellised estimator of Carlson
et al.

A discrete ladder ``0 = beta_0 < ... < beta_N = 1`` and the joint (eq. 7 of the CT paper)::

    p(x, beta_n) ∝ p(x)^beta_n q(x)^(1 - beta_n) exp(w_n),    w_n = -beta_n log zeta,

the discrete analogue of the continuous tempering joint (16). Each iteration makes one HMC
transition of ``x`` given ``beta`` (:func:`pymc_tempering.kernels.hmc.step`) and an independent
draw of ``beta`` given ``x`` (the ladder kernel :func:`pymc_tempering.kernels.ladder.ladder_step`)
from::

    P(beta_n | x) ∝ exp(-beta_n Delta(x)),    Delta(x) = log zeta + log q(x) - log p(x).

With ``P(beta_n)`` estimated by averaging ``P(beta_n | x)`` over the draws (eq. 9),
``Z = exp(w_0 - w_N) P(beta_N) / P(beta_0) = zeta P(beta_N) / P(beta_0)`` (eq. 8), and target
expectations are weighted by ``P(beta_N | x)``. Many chains move together as one batch, in the
one driver loop (:func:`pymc_tempering.driver.run_kernel`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pymc as pm

from pymc_tempering.bases import Base, prepare_base
from pymc_tempering.driver import driver_result, run_kernel
from pymc_tempering.estimators import log_ratio_by_chain
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels.ladder import (
    LadderParams,
    LadderState,
    ladder_init,
    ladder_step,
    temperature_schedule,
)
from pymc_tempering.results import INVERSE_TEMPERATURE
from pymc_tempering.contract import check_sampler_args, reproducible, split_seed
from pymc_tempering.timing import timed

__all__ = ["sample_simulated_tempering"]


class _Params(NamedTuple):
    evaluate: Callable
    betas: np.ndarray
    log_zeta: float
    n_leapfrog: int
    step_size: np.ndarray  # per chain, used by the next step
    adaptation: hmc.StepSizeAdaptation | None  # None: the step size is fixed
    target_accept: float
    tune: int


def _step(state: LadderState, params: _Params, rng: np.random.Generator):
    """HMC on x given beta (jittered step size), then the ladder draw of beta given x.

    Returns the HMC transition's :class:`~pymc_tempering.kernels.Info` (the ladder draw's
    acceptance is always 1).
    """
    eps = hmc.jittered(params.step_size, state.level.size, rng)
    move = hmc.HMCParams(params.betas[state.level], eps, params.n_leapfrog, params.evaluate)
    position, info = hmc.step(state.position, move, rng)
    state, _ = ladder_step(state._replace(position=position), _ladder(params), rng)
    return state, info


def _ladder(params: _Params) -> LadderParams:
    return LadderParams(params.betas, params.log_zeta)


def _warmup(state: LadderState, info, params: _Params, iteration: int):
    """Adapt each chain's step size; after the last warm-up iteration use its average."""
    if params.adaptation is None:
        return state, params
    adaptation = hmc.step_size_adaptation_update(
        params.adaptation, info.acceptance_rate, params.target_accept, iteration, params.tune
    )
    last = iteration == params.tune - 1
    log_eps = adaptation.log_step_size_avg if last else adaptation.log_step_size
    return state, params._replace(step_size=np.exp(log_eps), adaptation=adaptation)


def _record(state: LadderState, info) -> dict:
    return {
        "z": state.position.z,
        "level": state.level,
        "log_p1": state.log_conditional[:, -1],
        "log_p0": state.log_conditional[:, 0],
        "acceptance_rate": info.acceptance_rate,
        "diverging": info.diverging,
        "lp": state.position.log_target,
    }


def _initial(evaluate, ladder: LadderParams, chains, ndim, rng) -> LadderState:
    """Draws of the base, each at a uniformly drawn rung."""
    position = hmc.init(rng.standard_normal((chains, ndim)), evaluate)
    level = rng.integers(len(ladder.betas), size=chains)
    return ladder_init(position, level, ladder)


@reproducible
@timed
def sample_simulated_tempering(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    n_temperatures: int = 101,
    schedule: str = "linear",
    n_leapfrog: int = 10,
    step_size: float | None = None,
    target_accept: float = 0.8,
    base: Base | None = None,
    log_zeta: float | None = None,
):
    """Simulated tempering with HMC on x | beta and independent draws of beta | x.

    Parameters
    ----------
    draws, tune, chains : int
        Draws kept per chain (at least 4), warm-up iterations per chain (step-size adaptation;
        discarded), and independent chains, all moving together as one batch.
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.
    random_seed : int or Generator, optional
        Same seed, same result.
    progressbar : bool
    n_temperatures : int
        Rungs of the ladder, both ends included (the paper uses 1000).
    schedule : {"linear", "sigmoid", "geometric"}
        Spacing of the ladder (see :func:`~pymc_tempering.kernels.ladder.temperature_schedule`).
        ``"linear"`` is the discrete analogue of the uniform prior on beta in continuous
        tempering.
    n_leapfrog : int
        Leapfrog steps per HMC transition of x.
    step_size : float, optional
        Leapfrog step size in the base's whitened coordinates (jittered by ±20% per step).
        Default: adapted per chain during ``tune`` towards ``target_accept`` from
        ``ndim ** -0.25``, then fixed at its average over the second half of ``tune``.
    target_accept : float
    base : Base, optional
        Default: the base :func:`~pymc_tempering.sample_ct` fits (through
        :func:`~pymc_tempering.bases.prepare_base`).
    log_zeta : float, optional
        Sets the ladder weights ``w_n = -beta_n log zeta``; the default is chosen as in
        :func:`~pymc_tempering.sample_ct`.

    Returns
    -------
    xarray.DataTree
        In the library's layout: ``posterior`` holds the model's variables and
        ``inverse_temperature`` (the rung each draw was at); ``sample_stats`` holds
        ``log_weight = log P(beta = 1 | x)`` (the Rao-Blackwellised weight for the target),
        ``diverging`` and ``acceptance_rate`` (of the HMC transition), ``lp`` (the model's
        log density at the draw), ``step_size`` and ``log_marginal_likelihood`` per chain;
        root attrs the pooled estimate of eqs. (8)-(9) and its standard error (delta method
        with the multi-chain ESS) and ``method = "simulated_tempering"``.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, a base of the wrong dimension, or
        bad settings.
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains, min_draws=4)
    n_leapfrog = hmc.check_options(n_leapfrog, step_size, target_accept)
    betas = temperature_schedule(n_temperatures, schedule)
    target, base, log_zeta, run_seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    loop_seed, minibatch_seed = split_seed(run_seed, 2)
    rng = np.random.default_rng(loop_seed)
    evaluate = hmc.whitened_density(target, base, minibatch_seed)
    if step_size is None:
        adaptation = hmc.step_size_adaptation_init(np.full(chains, 1.0 / target.ndim**0.25))
        eps0 = np.exp(adaptation.log_step_size)
    else:
        eps0, adaptation = np.full(chains, float(step_size)), None
    params = _Params(evaluate, betas, log_zeta, n_leapfrog, eps0, adaptation, target_accept, tune)
    trace = run_kernel(
        _step, _initial(evaluate, _ladder(params), chains, target.ndim, rng), params,
        draws=draws, tune=tune, chains=chains, rng=rng, record=_record, warmup=_warmup,
        description="Simulated tempering", progressbar=progressbar,
    )
    out = trace.draws
    estimate, se, per_chain = log_ratio_by_chain(out["log_p1"], out["log_p0"])
    stats = {name: out[name] for name in ("diverging", "acceptance_rate", "lp")}
    stats["step_size"] = np.repeat(trace.params.step_size[:, None], draws, axis=1)
    return driver_result(
        target, base.unwhiten(out["z"]), method="simulated_tempering", sample_stats=stats,
        random_seed=random_seed,
        attrs={
            "log_zeta": float(log_zeta), "base_method": base.method, "draws": draws,
            "tune": tune, "chains": chains, "n_temperatures": int(n_temperatures),
            "schedule": schedule, "n_leapfrog": n_leapfrog,
        },
        log_weight=out["log_p1"], log_marginal_likelihood=(log_zeta + estimate, se, log_zeta + per_chain),
        extra_posterior={INVERSE_TEMPERATURE: betas[out["level"]]},
    )
