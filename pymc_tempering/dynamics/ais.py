"""Annealed importance sampling (Neal 2001) from a Gaussian base to a PyMC model.

The geometric path ``pi(x | beta) = p(x)^beta q(x)^(1 - beta)`` (eq. 4 of the CT paper) over a
fixed schedule ``0 = beta_0 < ... < beta_N = 1``. Each run starts from an independent draw of the
base and alternates the weight increment ``(beta_n - beta_{n-1}) [log p(x) - log q(x)]``
(eq. 10) with one HMC transition leaving ``pi(. | beta_n)`` invariant. The mean of the weights
is an unbiased estimate of ``Z``; the weighted final states estimate target expectations. All
runs move together as one batch (one compiled log density and gradient call per leapfrog step).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy.special import expit, logsumexp

from pymc_tempering.base import Base, prepare_base
from pymc_tempering.kernels.hmc import (
    adapt_log_step_size,
    hmc_step,
    initial_state,
    whitened_density,
)
from pymc_tempering.driver import draws_to_datatree, progress_bar
from pymc_tempering.estimators import log_mean_exp
from pymc_tempering.results import build_result
from pymc_tempering.sampling import split_seed

__all__ = ["sample_ais", "temperature_schedule"]


def temperature_schedule(n_temperatures: int, schedule: str = "sigmoid") -> np.ndarray:
    """Inverse temperatures ``0 = beta_0 < ... < beta_N = 1`` (``n_temperatures`` values).

    ``"linear"`` spaces them evenly; ``"sigmoid"`` (Grosse et al. 2015, with ``delta = 4``)
    puts more of them near both ends, where ``log pi`` changes fastest when base and target
    differ; ``"geometric"`` spaces ``log beta`` evenly from ``1e-4`` (plus ``beta = 0``).
    """
    n = int(n_temperatures)
    if n < 2:
        raise ValueError(f"n_temperatures must be at least 2, got {n_temperatures}.")
    if schedule == "linear":
        betas = np.linspace(0.0, 1.0, n)
    elif schedule == "sigmoid":
        s = expit(4.0 * np.linspace(-1.0, 1.0, n))
        betas = (s - s[0]) / (s[-1] - s[0])
    elif schedule == "geometric":
        betas = np.concatenate([[0.0], np.geomspace(1e-4, 1.0, n - 1)])
    else:
        raise ValueError(f"Unknown schedule {schedule!r}; use 'sigmoid', 'linear' or 'geometric'.")
    betas[0], betas[-1] = 0.0, 1.0
    return betas


def _anneal(evaluate, ndim, betas, step_sizes, n_leapfrog, n_runs, rng, *, adapt=None, advance):
    """Run ``n_runs`` AIS runs; with ``adapt=(target_accept, initial)`` tune the step sizes.

    Returns the final state, the log weights, the mean acceptance per run and the step sizes used.
    """
    state = initial_state(evaluate, n_runs, ndim, rng)
    log_w = np.zeros(n_runs)
    accept_sum = np.zeros(n_runs)
    used = np.empty(len(betas) - 1)
    log_eps = None if adapt is None else np.log(adapt[1])
    for n in range(1, len(betas)):
        with np.errstate(invalid="ignore"):
            increment = (betas[n] - betas[n - 1]) * (state.log_target - state.log_base)
        log_w = log_w + np.where(np.isnan(increment), -np.inf, increment)
        eps = step_sizes[n - 1] if adapt is None else float(np.exp(log_eps))
        used[n - 1] = eps
        jitter = eps * rng.uniform(0.8, 1.2, size=n_runs)
        state, accept = hmc_step(state, betas[n], jitter, n_leapfrog, evaluate, rng)
        accept_sum += accept
        if adapt is not None:
            log_eps = adapt_log_step_size(log_eps, accept.mean(), adapt[0], gain=1.0)
        advance()
    return state, log_w, accept_sum / (len(betas) - 1), used


def sample_ais(
    draws: int = 1000,
    chains: int = 4,
    *,
    n_temperatures: int = 200,
    n_leapfrog: int = 10,
    step_size: float | None = None,
    target_accept: float = 0.8,
    schedule: str = "sigmoid",
    n_pilot: int = 64,
    base: Base | None = None,
    random_seed=None,
    progressbar: bool = True,
    model: pm.Model | None = None,
):
    """Annealed importance sampling with HMC transitions from a Gaussian base to the model.

    ``draws * chains`` independent runs; each chain's runs give its own estimate of log Z.

    Parameters
    ----------
    draws : int
        Runs per chain.
    chains : int
        Groups of runs (the ``chain`` dimension of the result); runs are independent anyway.
    n_temperatures : int
        Length of the schedule, both ends included (the paper uses 1000 to 10000).
    n_leapfrog : int
        Leapfrog steps of each HMC transition (one transition per temperature).
    step_size : float, optional
        Leapfrog step size in the base's whitened coordinates. Default: tuned per temperature
        by a pilot AIS run of ``n_pilot`` runs towards ``target_accept``; the main runs are
        independent of the pilot, so the weights stay unbiased.
    target_accept : float
    schedule : {"sigmoid", "linear", "geometric"}
        See :func:`temperature_schedule`.
    n_pilot : int
    base : Base, optional
        Default: the base :func:`~pymc_tempering.sample_ct` fits (through :func:`~pymc_tempering.base.prepare_base`).
    random_seed : int or Generator, optional
        Same seed, same result.
    progressbar : bool
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.

    Returns
    -------
    xarray.DataTree
        In the library's layout: ``posterior`` holds the final state of each run (the model's
        variables under their own names), ``sample_stats.log_weight`` the AIS log weights,
        ``sample_stats.accept_rate`` each run's mean HMC acceptance and
        ``sample_stats.log_marginal_likelihood`` each chain's estimate; root attrs hold the
        pooled ``log_marginal_likelihood`` and its ``log_marginal_likelihood_se`` (delta method
        over independent runs) and ``method = "ais"``.

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
    draws, chains, n_temperatures, n_leapfrog, n_pilot = (
        int(draws), int(chains), int(n_temperatures), int(n_leapfrog), int(n_pilot)
    )
    if draws < 1 or chains < 1:
        raise ValueError(f"draws and chains must be positive, got {draws} and {chains}.")
    if n_leapfrog < 1:
        raise ValueError(f"n_leapfrog must be positive, got {n_leapfrog}.")
    if step_size is not None and not (np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a positive number, got {step_size}.")
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}.")
    if step_size is None and n_pilot < 1:
        raise ValueError("n_pilot must be positive when the step size is tuned.")
    betas = temperature_schedule(n_temperatures, schedule)
    target, base, log_zeta, run_seed = prepare_base(model, base, None, random_seed, progressbar)
    pilot_seed, main_seed = split_seed(run_seed, 2)
    evaluate = whitened_density(target, base)
    n_runs = draws * chains
    total = (n_temperatures - 1) * (1 if step_size is not None else 2)
    with progress_bar(total, "AIS", progressbar) as advance:
        if step_size is None:
            _, _, _, step_sizes = _anneal(
                evaluate, target.ndim, betas, None, n_leapfrog, n_pilot,
                np.random.default_rng(pilot_seed),
                adapt=(target_accept, 1.0 / target.ndim**0.25), advance=advance,
            )
        else:
            step_sizes = np.full(n_temperatures - 1, float(step_size))
        state, log_w, accept, _ = _anneal(
            evaluate, target.ndim, betas, step_sizes, n_leapfrog, n_runs,
            np.random.default_rng(main_seed), advance=advance,
        )
    x = base.unwhiten(state.z)
    log_w = log_w.reshape(chains, draws)
    estimate, se = log_mean_exp(log_w)
    per_chain = logsumexp(log_w, axis=1) - np.log(draws)
    sampled = draws_to_datatree(
        target,
        x.reshape(chains, draws, target.ndim),
        sample_stats={"accept_rate": accept.reshape(chains, draws)},
    )
    return build_result(
        sampled,
        target,
        method="ais",
        log_weight=log_w,
        log_marginal_likelihood=(estimate, se, per_chain),
        attrs={
            "log_zeta": float(log_zeta),
            "base_method": base.method,
            "draws": draws,
            "chains": chains,
            "n_temperatures": n_temperatures,
            "n_leapfrog": n_leapfrog,
            "schedule": schedule,
            "step_size": None if step_size is None else float(step_size),
            "mean_step_size": float(np.mean(step_sizes)),
            "random_seed": random_seed if isinstance(random_seed, int | np.integer) else None,
        },
    )
