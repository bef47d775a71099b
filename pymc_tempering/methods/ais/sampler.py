"""Annealed importance sampling (Neal 2001) from a Gaussian base to a PyMC model.

The geometric path ``pi(x | beta) = p(x)^beta q(x)^(1 - beta)`` (eq. 4 of the CT paper) over a
fixed schedule ``0 = beta_0 < ... < beta_N = 1``. Each run starts from an independent draw of the
base and alternates the weight increment ``(beta_n - beta_{n-1}) [log p(x) - log q(x)]``
(eq. 10) with one HMC transition leaving ``pi(. | beta_n)`` invariant (the annealing kernel of
:mod:`pymc_tempering.kernels.ladder`). The mean of the weights is an unbiased estimate of
``Z``; the weighted final states estimate target expectations.

All runs move together as one batch through the one driver loop
(:func:`pymc_tempering.driver.run_kernel`; one iteration is one rung, one compiled log density
and gradient call per leapfrog step). The ``tune`` pilot runs travel in the same batch: after
each rung the step size of the next rung is adapted from the pilot runs' acceptance alone, so
the main runs see a step-size schedule that depends on the pilot only, never on themselves,
and their weights stay unbiased.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pymc as pm
from scipy.special import logsumexp

from pymc_tempering.bases import Base, prepare_base
from pymc_tempering.driver import driver_result, run_kernel
from pymc_tempering.estimators import log_mean_exp
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels.ladder import (
    AnnealingState,
    AnnealParams,
    anneal_init,
    anneal_step,
    temperature_schedule,
)
from pymc_tempering.contract import check_sampler_args, reproducible, split_seed
from pymc_tempering.timing import timed

__all__ = ["sample_ais"]


class _State(NamedTuple):
    runs: AnnealingState  # pilot runs first, then the main runs
    step_size_sum: float  # of the (unjittered) step sizes used so far, for the attrs


class _Params(NamedTuple):
    evaluate: Callable
    betas: np.ndarray
    n_leapfrog: int
    log_step_size: float  # of the next rung
    n_pilot: int  # 0: the step size is fixed
    target_accept: float


def _step(state: _State, params: _Params, rng: np.random.Generator):
    eps = float(np.exp(params.log_step_size))
    kernel = AnnealParams(params.betas, eps, params.n_leapfrog, params.evaluate)
    runs, info = anneal_step(state.runs, kernel, rng)
    return _State(runs, state.step_size_sum + eps), info


def _warmup(state: _State, info, params: _Params, iteration: int):
    """The next rung's step size from the pilot runs' mean acceptance (gain 1)."""
    if params.n_pilot == 0:
        return state, params
    rate = info.acceptance_rate[: params.n_pilot].mean()
    log_eps = hmc.adapt_log_step_size(params.log_step_size, rate, params.target_accept, gain=1.0)
    return state, params._replace(log_step_size=log_eps)


def _record(state: _State, info) -> dict:
    runs = state.runs
    return {
        "z": runs.position.z,
        "log_weight": runs.log_weight,
        "acceptance_rate": runs.acceptance_rate,
        "diverging": runs.diverged,
        "lp": runs.position.log_target,
    }


def _anneal(target, base, betas, n_leapfrog, step_size, target_accept, n_pilot, n_runs, seed,
            progressbar) -> tuple[dict, float]:
    """Run ``n_pilot + n_runs`` runs up the schedule; the main runs' records and mean step size.

    The rungs before the last are :func:`run_kernel`'s warm-up (where the pilot adapts the step
    size); the last is the one draw kept of every run.
    """
    loop_seed, minibatch_seed = split_seed(seed, 2)
    rng = np.random.default_rng(loop_seed)
    evaluate = hmc.whitened_density(target, base, minibatch_seed)
    start = hmc.init(rng.standard_normal((n_pilot + n_runs, target.ndim)), evaluate)
    log_eps0 = np.log(1.0 / target.ndim**0.25 if step_size is None else step_size)
    params = _Params(evaluate, betas, n_leapfrog, log_eps0, n_pilot, target_accept)
    trace = run_kernel(
        _step, _State(anneal_init(start), 0.0), params, draws=1, tune=len(betas) - 2,
        chains=n_pilot + n_runs, rng=rng, record=_record, warmup=_warmup, description="AIS",
        progressbar=progressbar,
    )
    main = {name: value[n_pilot:, 0] for name, value in trace.draws.items()}
    return main, trace.state.step_size_sum / (len(betas) - 1)


@reproducible
@timed
def sample_ais(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    n_temperatures: int = 200,
    n_leapfrog: int = 10,
    step_size: float | None = None,
    target_accept: float = 0.8,
    schedule: str = "sigmoid",
    base: Base | None = None,
):
    """Annealed importance sampling with HMC transitions from a Gaussian base to the model.

    ``draws * chains`` independent runs; each chain's runs give its own estimate of log Z.

    Parameters
    ----------
    draws : int
        Runs per chain.
    tune : int
        Pilot runs (in all, not per chain) that tune the step size of every rung towards
        ``target_accept``, starting from ``ndim ** -0.25``; they are discarded. They anneal in
        the same batch as the main runs, which use the pilot's step sizes only, so the weights
        stay unbiased. ``tune=0`` keeps the initial step size; ignored when ``step_size`` is
        given.
    chains : int
        Groups of runs (the ``chain`` dimension of the result); runs are independent anyway.
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.
    random_seed : int or Generator, optional
        Same seed, same result.
    progressbar : bool
    n_temperatures : int
        Length of the schedule, both ends included (the paper uses 1000 to 10000).
    n_leapfrog : int
        Leapfrog steps of each HMC transition (one transition per temperature).
    step_size : float, optional
        Leapfrog step size in the base's whitened coordinates (jittered by ±20% per
        transition) at every temperature. Default: tuned by the ``tune`` pilot runs.
    target_accept : float
    schedule : {"sigmoid", "linear", "geometric"}
        See :func:`~pymc_tempering.kernels.ladder.temperature_schedule`.
    base : Base, optional
        Default: the base :func:`~pymc_tempering.sample_ct` fits (through
        :func:`~pymc_tempering.bases.prepare_base`).

    Returns
    -------
    xarray.DataTree
        In the library's layout: ``posterior`` holds the final state of each run,
        ``sample_stats`` the AIS ``log_weight``, each run's mean HMC ``acceptance_rate``,
        ``diverging`` (whether any transition of the run diverged), ``lp`` (the model's log
        density at the final state) and each chain's ``log_marginal_likelihood``; root attrs
        the pooled ``log_marginal_likelihood`` and its ``log_marginal_likelihood_se`` (delta
        method over independent runs) and ``method = "ais"``.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, a base of the wrong dimension, or
        bad settings.

    Notes
    -----
    The estimate of log Z is a stochastic lower bound (Jensen) whose bias is about
    ``-se^2 / 2``. When the runs do not reach all modes of the target (AIS cannot move between
    modes once ``beta`` is large), the weights cannot tell: the standard error is then too small.
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    n_leapfrog = hmc.check_options(n_leapfrog, step_size, target_accept)
    betas = temperature_schedule(n_temperatures, schedule)
    n_pilot = 0 if step_size is not None else tune
    target, base, log_zeta, run_seed = prepare_base(model, base, None, random_seed, progressbar)
    out, mean_step_size = _anneal(
        target, base, betas, n_leapfrog, step_size, target_accept, n_pilot, draws * chains,
        run_seed, progressbar,
    )
    log_w = out["log_weight"].reshape(chains, draws)
    stats = {k: out[k].reshape(chains, draws) for k in ("diverging", "acceptance_rate", "lp")}
    return driver_result(
        target, base.unwhiten(out["z"]).reshape(chains, draws, target.ndim), method="ais",
        sample_stats=stats, random_seed=random_seed,
        attrs={
            "log_zeta": float(log_zeta), "base_method": base.method, "draws": draws,
            "tune": n_pilot, "chains": chains, "n_temperatures": len(betas),
            "n_leapfrog": n_leapfrog, "schedule": schedule,
            "step_size": None if step_size is None else float(step_size),
            "mean_step_size": float(mean_step_size),
        },
        log_weight=log_w,
        log_marginal_likelihood=(*log_mean_exp(log_w), logsumexp(log_w, axis=1) - np.log(draws)),
    )
