"""Simulated tempering (Marinari & Parisi 1992) with the Rao-Blackwellised estimator of Carlson et al.

A discrete ladder ``0 = beta_0 < ... < beta_N = 1`` and the joint (eq. 7 of the CT paper)::

    p(x, beta_n) ∝ p(x)^beta_n q(x)^(1 - beta_n) exp(w_n),    w_n = -beta_n log zeta,

the discrete analogue of the continuous tempering joint (16). Each iteration makes one HMC
transition of ``x`` given ``beta`` and an independent draw of ``beta`` given ``x`` from::

    P(beta_n | x) ∝ exp(-beta_n Delta(x)),    Delta(x) = log zeta + log q(x) - log p(x).

With ``P(beta_n)`` estimated by averaging ``P(beta_n | x)`` over the draws (eq. 9),
``Z = exp(w_0 - w_N) P(beta_N) / P(beta_0) = zeta P(beta_N) / P(beta_0)`` (eq. 8), and target
expectations are weighted by ``P(beta_N | x)``. Many chains move together as one batch.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy.special import logsumexp

from pymc_tempering.base import Base, prepare_base
from pymc_tempering.dynamics.ais import temperature_schedule
from pymc_tempering.kernels.hmc import adapt_log_step_size, hmc_step, initial_state, whitened_density
from pymc_tempering.driver import draws_to_datatree, progress_bar
from pymc_tempering.estimators import log_ratio_of_means
from pymc_tempering.results import INVERSE_TEMPERATURE, build_result
from pymc_tempering.sampling import split_seed

__all__ = ["sample_simulated_tempering", "ladder_log_conditional", "draw_ladder_index"]


def ladder_log_conditional(delta, betas) -> np.ndarray:
    """``log P(beta_n | x)`` for each ``Delta(x)``: shape ``delta.shape + (len(betas),)``.

    ``P(beta_n | x) = exp(-beta_n Delta) / sum_m exp(-beta_m Delta)``, computed with
    ``logsumexp`` (stable for any sign and size of ``Delta``).
    """
    d = np.asarray(delta, dtype=float)[..., None]
    logits = -np.asarray(betas, dtype=float) * d
    return logits - logsumexp(logits, axis=-1, keepdims=True)


def draw_ladder_index(log_prob: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws of a ladder index from rows of ``log_prob`` and uniforms ``u``."""
    cdf = np.cumsum(np.exp(log_prob), axis=-1)
    cdf = cdf / cdf[..., -1:]
    idx = (np.asarray(u)[..., None] > cdf).sum(axis=-1)
    return np.minimum(idx, log_prob.shape[-1] - 1)


def sample_simulated_tempering(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    n_temperatures: int = 101,
    schedule: str = "linear",
    n_leapfrog: int = 10,
    step_size: float | None = None,
    target_accept: float = 0.8,
    base: Base | None = None,
    log_zeta: float | None = None,
    random_seed=None,
    progressbar: bool = True,
    model: pm.Model | None = None,
):
    """Simulated tempering with HMC on x | beta and independent draws of beta | x.

    Parameters
    ----------
    draws, tune, chains : int
        Draws kept per chain, tuning iterations per chain (step-size adaptation; discarded),
        and independent chains, all moving together as one batch.
    n_temperatures : int
        Rungs of the ladder, both ends included (the paper uses 1000).
    schedule : {"linear", "sigmoid", "geometric"}
        Spacing of the ladder (see :func:`~pymc_tempering.dynamics.ais.temperature_schedule`).
        ``"linear"`` is the discrete analogue of the uniform prior on beta in continuous
        tempering.
    n_leapfrog : int
        Leapfrog steps per HMC transition of x.
    step_size : float, optional
        Leapfrog step size in the base's whitened coordinates. Default: adapted per chain during
        ``tune`` towards ``target_accept``, then fixed.
    target_accept : float
    base : Base, optional
        Default: the base :func:`~pymc_tempering.sample_ct` fits (through :func:`~pymc_tempering.base.prepare_base`).
    log_zeta : float, optional
        Sets the ladder weights ``w_n = -beta_n log zeta``; the default is chosen as in
        :func:`~pymc_tempering.sample_ct`.
    random_seed : int or Generator, optional
    progressbar : bool
    model : pymc.Model, optional
        Taken from the context when omitted; it is not modified.

    Returns
    -------
    xarray.DataTree
        In the library's layout: ``posterior`` holds the model's variables and
        ``inverse_temperature`` (the rung each draw was at); ``sample_stats`` holds
        ``log_weight = log P(beta = 1 | x)`` (the Rao-Blackwellised weight for the target),
        ``accept_rate``, ``step_size`` and ``log_marginal_likelihood`` per chain; root attrs the
        pooled estimate of eqs. (8)-(9) and its standard error (delta method with the
        multi-chain ESS) and ``method = "simulated_tempering"``.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, a base of the wrong dimension, or
        bad settings.
    """
    draws, tune, chains = int(draws), int(tune), int(chains)
    n_leapfrog = int(n_leapfrog)
    if draws < 4 or chains < 1 or tune < 0:
        raise ValueError(
            f"Need draws >= 4, chains >= 1 and tune >= 0; got {draws}, {chains}, {tune}."
        )
    if n_leapfrog < 1:
        raise ValueError(f"n_leapfrog must be positive, got {n_leapfrog}.")
    if step_size is not None and not (np.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a positive number, got {step_size}.")
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}.")
    betas = temperature_schedule(n_temperatures, schedule)
    target, base, log_zeta, run_seed = prepare_base(model, base, log_zeta, random_seed, progressbar)
    (seed,) = split_seed(run_seed, 1)
    rng = np.random.default_rng(seed)
    evaluate = whitened_density(target, base)

    state = initial_state(evaluate, chains, target.ndim, rng)
    level = rng.integers(len(betas), size=chains)
    log_eps = np.full(chains, np.log(1.0 / target.ndim**0.25 if step_size is None else step_size))
    mean_log_eps = np.zeros(chains)
    n_avg = 0
    z = np.empty((chains, draws, target.ndim))
    beta_draws = np.empty((chains, draws))
    log_p1 = np.empty((chains, draws))
    log_p0 = np.empty((chains, draws))
    accept_rate = np.empty((chains, draws))
    with progress_bar(tune + draws, "Simulated tempering", progressbar) as advance:
        for it in range(tune + draws):
            tuning = it < tune
            eps = np.exp(log_eps if tuning or step_size is not None else mean_log_eps)
            jitter = eps * rng.uniform(0.8, 1.2, size=chains)
            state, accept = hmc_step(state, betas[level], jitter, n_leapfrog, evaluate, rng)
            if tuning and step_size is None:
                log_eps = adapt_log_step_size(
                    log_eps, accept, target_accept, gain=1.0 / np.sqrt(it + 1.0) + 0.05
                )
                if it >= tune // 2:  # average the second half of tuning
                    n_avg += 1
                    mean_log_eps += (log_eps - mean_log_eps) / n_avg
            if not tuning and step_size is None and n_avg == 0:
                mean_log_eps, n_avg = log_eps.copy(), 1
            delta = log_zeta + state.delta_no_zeta
            log_cond = ladder_log_conditional(delta, betas)
            level = draw_ladder_index(log_cond, rng.random(chains))
            if not tuning:
                k = it - tune
                z[:, k] = state.z
                beta_draws[:, k] = betas[level]
                log_p1[:, k] = log_cond[:, -1]
                log_p0[:, k] = log_cond[:, 0]
                accept_rate[:, k] = accept
            advance()

    estimate, se = log_ratio_of_means(log_p1, log_p0)
    per_chain = log_zeta + logsumexp(log_p1, axis=1) - logsumexp(log_p0, axis=1)
    x = base.unwhiten(z)
    final_eps = np.exp(mean_log_eps) if step_size is None else np.full(chains, step_size)
    sampled = draws_to_datatree(
        target,
        x,
        extra_posterior={INVERSE_TEMPERATURE: beta_draws},
        sample_stats={
            "accept_rate": accept_rate,
            "step_size": np.broadcast_to(final_eps[:, None], (chains, draws)).copy(),
        },
    )
    return build_result(
        sampled,
        target,
        method="simulated_tempering",
        log_weight=log_p1,
        log_marginal_likelihood=(log_zeta + estimate, se, per_chain),
        attrs={
            "log_zeta": float(log_zeta),
            "base_method": base.method,
            "draws": draws,
            "tune": tune,
            "chains": chains,
            "n_temperatures": int(n_temperatures),
            "schedule": schedule,
            "n_leapfrog": n_leapfrog,
            "random_seed": random_seed if isinstance(random_seed, int | np.integer) else None,
        },
    )
