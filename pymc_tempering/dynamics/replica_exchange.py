"""Replica exchange with stochastic-gradient Nosé-Hoover thermostats and a noise-corrected
exchange test (the poster in ``papers/replica-exchange-sg-thermostats-poster.md``).

A ladder of ``R`` replicas at temperatures ``T_1 = 1 < T_2 < ... < T_R`` is simulated with the
thermostat dynamics of :mod:`pymc_tempering.dynamics.thermostats` (``tact_step`` with
``tempering=False`` and one inverse temperature per replica: one batched call of the model's
potential and force per step for all replicas). Every ``exchange_every`` steps, neighbouring
replicas ``(j, j + 1)`` propose to swap positions; the even pairs and the odd pairs take turns,
so the swaps of one round are independent and run vectorised. With ``beta = 1 / T`` and
``U = -log p`` the log acceptance ratio of a swap is::

    Delta = (beta_j - beta_{j+1}) (U(theta_j) - U(theta_{j+1})).

Exact energies: the Metropolis test, accept with probability ``min(1, exp(Delta))``.

Minibatch energies: ``Delta`` is only known through a noisy estimate
``Delta_hat ~ N(Delta, sigma^2)``. The logistic (Barker) test accepts with probability
``1 / (1 + exp(-Delta))``, which is ``P(Delta + L > 0)`` for a standard logistic ``L``. Write
``L = Z + X`` with ``Z ~ N(0, 1)`` and ``X`` the *correction variable*; then
``Delta_hat + N(0, 1 - sigma^2) + X`` has the law of ``Delta + L`` whenever ``sigma <= 1``, and
accepting when it is positive is exactly the logistic test (Seita et al. 2017, "An efficient
minibatch acceptance test for Metropolis-Hastings"). The correction is therefore needed for one
noise level only (``sigma_0 = 1``, :data:`CORRECTION_SD`); the noise of each exchange is topped
up to it. When ``sigma > 1`` no top-up exists and the exchange is skipped (and counted).

The correction distribution is built here numerically, by deconvolution on a grid (in the spirit
of Seita et al.'s table; we do *not* use the poster's Hermite expansion): ``X`` is a discrete
symmetric distribution on the grid ``x_k = -10, -9.95, ..., 10`` whose weights ``w_k >= 0``,
``sum w_k = 1``, minimise by non-negative least squares the error of the acceptance function
``sum_k w_k Phi(Delta - x_k) - 1 / (1 + exp(-Delta))`` on ``Delta in [-25, 25]``. A point-mass
correction convolved with ``N(0, 1)`` is a Gaussian mixture, so the acceptance probability of the
corrected test is known in closed form (:func:`corrected_acceptance_probability`); its largest
error against the logistic is about ``5e-6`` (checked by the tests), far below any Monte Carlo
error. Its variance matches ``pi^2 / 3 - 1``, the only possible one.

The noise of ``Delta_hat`` is estimated from the minibatch itself: with ``t_i(theta)`` the
``m`` per-datum log-likelihood terms of the minibatched observed variables (PyMC already scales
them by ``total_size / m``), ``d_i = t_i(theta_j) - t_i(theta_{j+1})`` and
``sigma^2 = (beta_j - beta_{j+1})^2 m Var_i(d_i)`` (the variance of a sum of ``m`` independent
draws of a datum, ``N^2 / m`` times the variance of the unscaled per-datum differences).
Observed variables without ``pm.Minibatch`` and the prior contribute no noise.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.model import modelcontext
from pytensor.graph.replace import vectorize_graph
from scipy.optimize import nnls
from scipy.special import expit, ndtr

from pymc_tempering.driver import constrained_draws, draws_to_datatree, progress_bar
from pymc_tempering.dynamics.thermostats import (
    TACTSettings,
    checked_tact_step,
    compile_with_seeded_minibatches,
    initial_tact_state,
    minibatch_energy_and_force,
)
from pymc_tempering.results import build_result
from pymc_tempering.sampling import split_seed
from pymc_tempering.target import Target

__all__ = [
    "CORRECTION_SD",
    "temperature_ladder",
    "correction_distribution",
    "corrected_acceptance_probability",
    "metropolis_exchange",
    "corrected_exchange",
    "exchange_log_ratio",
    "minibatch_exchange_energies",
    "sample_replica_exchange",
]

#: The noise level ``sigma_0`` of the tabulated correction; exchanges with ``sigma > sigma_0``
#: are skipped.
CORRECTION_SD = 1.0


def temperature_ladder(temperatures=10, max_temperature: float = 10.0) -> np.ndarray:
    """The temperatures ``T_1 = 1 < ... < T_R``.

    Parameters
    ----------
    temperatures : int or array_like
        Number of rungs ``R`` (geometric ladder from 1 to ``max_temperature``) or the ladder.
    max_temperature : float
        ``T_R`` of a geometric ladder.

    Returns
    -------
    ndarray, shape (R,)

    Raises
    ------
    ValueError
        A ladder that does not start at 1, is not strictly increasing or not finite.
    """
    if np.ndim(temperatures) == 0:
        n = int(temperatures)
        if n != temperatures or n < 1:
            raise ValueError(f"temperatures must be a positive integer or a ladder, got {temperatures}.")
        if n == 1:
            return np.ones(1)
        if not (np.isfinite(max_temperature) and max_temperature > 1):
            raise ValueError(f"max_temperature must be finite and above 1, got {max_temperature}.")
        return np.geomspace(1.0, float(max_temperature), n)
    ladder = np.asarray(temperatures, dtype=float)
    if ladder.ndim != 1 or ladder.size < 1:
        raise ValueError("A temperature ladder must be a non-empty 1-D sequence.")
    if not np.all(np.isfinite(ladder)):
        raise ValueError(f"The temperature ladder must be finite, got {ladder}.")
    if ladder[0] != 1.0:
        raise ValueError(f"The temperature ladder must start at T = 1, got {ladder[0]}.")
    if np.any(np.diff(ladder) <= 0):
        raise ValueError(f"The temperature ladder must be strictly increasing, got {ladder}.")
    return ladder


@functools.lru_cache(maxsize=1)
def correction_distribution() -> tuple[np.ndarray, np.ndarray]:
    """The correction variable ``X``: ``N(0, 1) * X`` is (to about ``5e-6``) standard logistic.

    A discrete distribution on a grid, fitted once by non-negative least squares on the
    acceptance function (see the module docstring) and cached.

    Returns
    -------
    support, weights : ndarray, shape (K,)
        Grid points and their probabilities (non-negative, summing to one, symmetric).
    """
    support = np.linspace(-10.0, 10.0, 401)
    delta = np.linspace(-25.0, 25.0, 2001)
    design = ndtr(delta[:, None] - support[None, :])
    # one heavily weighted row asks the weights to sum to one
    design = np.vstack([design, np.full(support.size, 100.0)])
    rhs = np.append(expit(delta), 100.0)
    weights, _ = nnls(design, rhs, maxiter=50 * support.size)
    weights = 0.5 * (weights + weights[::-1])
    weights /= weights.sum()
    keep = weights > 0
    return support[keep], weights[keep]


def corrected_acceptance_probability(delta) -> np.ndarray:
    """Exact acceptance probability of :func:`corrected_exchange` for true log ratio ``delta``
    and any noise ``sigma <= CORRECTION_SD``: ``sum_k w_k Phi(delta - x_k)``."""
    support, weights = correction_distribution()
    delta = np.asarray(delta, dtype=float)
    return ndtr(delta[..., None] - support) @ weights


def exchange_log_ratio(beta_low, beta_high, energy_low, energy_high) -> np.ndarray:
    """``Delta = (beta_j - beta_{j+1}) (U_j - U_{j+1})``: the log acceptance ratio of swapping
    the positions of the colder replica ``j`` (``beta_low``, energy ``energy_low``) and the
    hotter replica ``j + 1``."""
    return (np.asarray(beta_low) - np.asarray(beta_high)) * (
        np.asarray(energy_low) - np.asarray(energy_high)
    )


def metropolis_exchange(delta, rng: np.random.Generator) -> np.ndarray:
    """The Metropolis test with exact log ratios: accept with probability ``min(1, exp(delta))``.

    Parameters
    ----------
    delta : array_like
        Exact log acceptance ratios.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of bool, shape of ``delta``
    """
    delta = np.asarray(delta, dtype=float)
    return np.log(rng.uniform(size=delta.shape)) < delta


def corrected_exchange(delta_hat, sigma, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The noise-corrected logistic (Barker) test on noisy log ratios.

    For ``delta_hat ~ N(delta, sigma^2)`` with ``sigma <= CORRECTION_SD`` the swap is accepted
    with probability ``1 / (1 + exp(-delta))`` (up to the correction's fitting error, about
    ``5e-6``): accept when ``delta_hat + N(0, 1 - sigma^2) + X > 0`` with ``X`` drawn from
    :func:`correction_distribution`.

    Parameters
    ----------
    delta_hat : array_like
        Noisy log acceptance ratios.
    sigma : array_like
        Their noise standard deviations (broadcast against ``delta_hat``).
    rng : numpy.random.Generator

    Returns
    -------
    accepted, skipped : ndarray of bool
        ``skipped`` where ``sigma > CORRECTION_SD`` (or not finite): no correction exists, the
        swap is neither tested nor accepted.
    """
    delta_hat = np.asarray(delta_hat, dtype=float)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=float), delta_hat.shape)
    skipped = ~(sigma <= CORRECTION_SD)
    top_up = np.sqrt(np.clip(CORRECTION_SD**2 - np.where(skipped, 0.0, sigma) ** 2, 0.0, None))
    support, weights = correction_distribution()
    correction = rng.choice(support, size=delta_hat.shape, p=weights)
    total = delta_hat + top_up * rng.standard_normal(delta_hat.shape) + correction
    return (total > 0) & ~skipped, skipped


def _is_minibatched(rv) -> bool:
    from pymc.variational.minibatch_rv import MinibatchRandomVariable

    return rv.owner is not None and isinstance(rv.owner.op, MinibatchRandomVariable)


def minibatch_exchange_energies(
    target: Target, random_seed=None
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Compile ``theta (n, D) -> (U (n,), t (n, m))`` for the exchange test, once.

    ``U = -log p`` on one fresh minibatch shared by the ``n`` positions, and ``t`` the ``m``
    per-datum log-likelihood terms of the minibatched observed variables on that minibatch
    (already scaled by ``total_size / batch size``), from which the noise of an energy
    difference is estimated. Uses its own seeded copy of the minibatch generators.
    """
    model = target.model
    observed = [rv for rv in model.observed_RVs if _is_minibatched(rv)]
    x = pt.vector("x", dtype="float64")
    values = target.unravel_graph(x)
    logp = target.logp_graph(values)
    if observed:
        terms = model.logp(vars=observed, sum=False, jacobian=True)
        terms = target.replace_values(terms, values)
        terms = pt.concatenate([pt.as_tensor(t).flatten() for t in terms])
    else:
        terms = pt.zeros((0,), dtype="float64")
    xs = pt.matrix("xs", dtype="float64")
    outs = vectorize_graph([logp, terms], replace={x: xs})
    fn = compile_with_seeded_minibatches([xs], [-outs[0], outs[1]], random_seed)

    def energies(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u, t = fn(np.ascontiguousarray(theta, dtype=float))
        t = np.asarray(t, dtype=float)
        return np.asarray(u, dtype=float), t.reshape(theta.shape[0], -1)

    return energies


def _has_minibatch(model) -> bool:
    return any(_is_minibatched(rv) for rv in model.observed_RVs)


def sample_replica_exchange(
    draws: int = 1000,
    *,
    model: pm.Model | None = None,
    temperatures=10,
    max_temperature: float = 10.0,
    exchange_every: int = 10,
    minibatch: bool | str = "auto",
    chains: int = 2,
    step_size: float = 0.01,
    noise: float = 0.05,
    thermal_inertia: float = 1.0,
    thermostat: bool = True,
    steps_per_sample: int = 10,
    burn_in: int | None = None,
    resample_momenta: bool = True,
    initial_points: np.ndarray | None = None,
    jitter: float = 1.0,
    random_seed=None,
    progressbar: bool = True,
) -> xr.DataTree:
    """Sample a (minibatched) PyMC model by replica exchange with Nosé-Hoover thermostats.

    ``R`` replicas at temperatures ``1 = T_1 < ... < T_R`` (of each of ``chains`` independent
    ladders) run the thermostat dynamics of :func:`~pymc_tempering.dynamics.thermostats.tact_step`
    at fixed inverse temperature ``1 / T_j``, all in one array; every ``exchange_every`` steps
    neighbouring replicas propose to swap positions (even and odd pairs in turn). The swap test
    is Metropolis with exact energies, and the noise-corrected logistic test of Seita et al.
    (2017) with minibatch energies (see the module docstring).

    Parameters
    ----------
    draws : int
        Draws kept per chain, one every ``steps_per_sample`` steps after ``burn_in``.
    model : pymc.Model, optional
        Taken from the context when omitted; never modified. Discrete free variables are refused.
    temperatures : int or array_like
        Number of replicas (a geometric ladder from 1 to ``max_temperature``) or the ladder
        itself, starting at 1 and strictly increasing.
    max_temperature : float
        Highest temperature of a geometric ladder.
    exchange_every : int
        Steps between two rounds of exchanges (at least 1).
    minibatch : bool or "auto"
        Use the corrected test with noise estimated from the minibatch (True) or the Metropolis
        test (False). ``"auto"``: True when an observed variable uses ``pm.Minibatch``.
    chains : int
        Independent ladders, simulated together.
    step_size : float
        ``eta = dt^2 / m`` of the parameters (moves of about ``sqrt(eta)`` per step).
    noise : float
        Level ``c`` of the injected noise ``N(0, 2 c eta)``, the friction the thermostats settle at.
    thermal_inertia : float
        ``gamma`` of the thermostats.
    thermostat : bool
        Adaptive Nosé-Hoover thermostats (True) or constant friction ``noise`` (False).
    steps_per_sample : int
        Steps between two kept draws.
    burn_in : int, optional
        Steps before the first kept draw (default ``20 * steps_per_sample``).
    resample_momenta : bool
        Redraw the momenta every ``steps_per_sample`` steps (exact: they are ``N(0, eta)`` at
        every temperature).
    initial_points : ndarray, shape (chains, R, ndim) or (chains, ndim), optional
        Flat unconstrained starting points (the second form is used for every replica); default
        the model's initial point plus uniform ``jitter``.
    jitter : float
        Half-width of the uniform jitter of the default starting points.
    random_seed : int, numpy.random.Generator, optional
        The same seed gives the same result.
    progressbar : bool

    Returns
    -------
    xarray.DataTree
        ``posterior``: the ``T = 1`` replica's draws of the model's variables. ``sample_stats``:
        ``potential_energy`` of the ``T = 1`` replica and ``step``. ``replicas``: every
        replica's draws with dims ``(chain, draw, replica, ...)`` and a ``temperature`` coord.
        ``replica_exchange``: per ``(chain, pair)`` of neighbours ``(j, j + 1)``:
        ``swap_attempted``, ``swap_accepted``, ``swap_skipped`` (noise above the correction's
        range) and ``swap_acceptance_rate`` (accepted / tested, skipped excluded), and
        ``exchange_noise_sd_max`` (largest estimated ``sigma``). attrs: the settings, the test
        used and the total skipped swaps.

    Raises
    ------
    ValueError
        Discrete free variables, a bad ladder, ``exchange_every < 1`` or other bad settings.
    FloatingPointError
        When the dynamics diverge (reduce ``step_size``).
    """
    ladder = temperature_ladder(temperatures, max_temperature)
    if int(exchange_every) != exchange_every or exchange_every < 1:
        raise ValueError(f"exchange_every must be an integer of at least 1, got {exchange_every}.")
    for name, value in [("step_size", step_size), ("thermal_inertia", thermal_inertia)]:
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}.")
    if not noise >= 0:
        raise ValueError(f"noise must be non-negative, got {noise}.")
    if minibatch not in (True, False, "auto"):
        raise ValueError(f"minibatch must be True, False or 'auto', got {minibatch!r}.")
    draws, chains, steps_per_sample = int(draws), int(chains), int(steps_per_sample)
    exchange_every = int(exchange_every)
    if draws < 1 or chains < 1 or steps_per_sample < 1:
        raise ValueError("draws, chains and steps_per_sample must be at least 1.")
    model = modelcontext(model)
    target = Target(model)  # refuses discrete models
    has_minibatch = _has_minibatch(model)
    use_corrected = has_minibatch if minibatch == "auto" else bool(minibatch)
    if has_minibatch and not use_corrected:
        warnings.warn(
            "The model uses pm.Minibatch but minibatch=False: the Metropolis exchange test on "
            "noisy energies is biased.",
            stacklevel=2,
        )
    n_rep, ndim = ladder.size, target.ndim
    n = chains * n_rep
    betas = 1.0 / ladder
    settings = TACTSettings(
        eta_theta=float(step_size),
        eta_xi=1.0,
        c_theta=float(noise),
        c_xi=0.0,
        gamma_theta=float(thermal_inertia),
        gamma_xi=1.0,
        thermostat=bool(thermostat),
        tempering=False,
        inverse_temperature=np.tile(betas, chains),
    )
    burn_in = 20 * steps_per_sample if burn_in is None else int(burn_in)
    seed_init, seed_dyn, seed_batch, seed_exch_batch, seed_exch = split_seed(random_seed, 5)
    rng = np.random.default_rng(seed_dyn)
    exch_rng = np.random.default_rng(seed_exch)
    evaluate = minibatch_energy_and_force(target, seed_batch)
    exchange_energies = minibatch_exchange_energies(target, seed_exch_batch) if use_corrected else None

    if initial_points is None:
        start = target.ravel(model.initial_point())
        init_rng = np.random.default_rng(seed_init)
        initial_points = start + init_rng.uniform(-jitter, jitter, (chains, n_rep, ndim))
    initial_points = np.asarray(initial_points, dtype=float)
    if initial_points.shape == (chains, ndim):
        initial_points = np.repeat(initial_points[:, None, :], n_rep, axis=1)
    if initial_points.shape != (chains, n_rep, ndim):
        raise ValueError(
            f"initial_points must have shape {(chains, n_rep, ndim)} or {(chains, ndim)}, got "
            f"{initial_points.shape}."
        )
    state = initial_tact_state(initial_points.reshape(n, ndim), settings, rng)

    n_pairs = n_rep - 1
    attempted = np.zeros((chains, n_pairs), dtype=int)
    accepted = np.zeros((chains, n_pairs), dtype=int)
    skipped = np.zeros((chains, n_pairs), dtype=int)
    noise_max = np.zeros((chains, n_pairs))
    kept_x = np.empty((chains, draws, n_rep, ndim))
    kept_energy = np.empty((chains, draws, n_rep))
    kept_step = np.empty((chains, draws))
    n_kept, step, rounds = 0, 0, 0
    last_energy = np.zeros(n)
    label = "corrected" if use_corrected else "Metropolis"
    with progress_bar(draws, f"Replica exchange ({n_rep} replicas, {label} test)", progressbar) as advance:
        while n_kept < draws:
            step += 1
            state, last_energy = checked_tact_step(
                state, evaluate, settings, rng.standard_normal((n, ndim + 1)),
                f"Replica exchange diverged at step {step}", "reduce step_size",
            )
            if n_pairs and step % exchange_every == 0:
                low = np.arange(rounds % 2, n_pairs, 2)  # the colder replica of each pair
                rounds += 1
                if low.size:
                    theta = state.theta.reshape(chains, n_rep, ndim)
                    if use_corrected:
                        u, terms = exchange_energies(state.theta)
                        u = u.reshape(chains, n_rep)
                        terms = terms.reshape(chains, n_rep, -1)
                        d = terms[:, low] - terms[:, low + 1]  # (chains, pairs, m)
                        m = d.shape[-1]
                        var = m * d.var(axis=-1, ddof=1) if m > 1 else np.zeros(d.shape[:2])
                        dbeta = betas[low] - betas[low + 1]
                        sigma = np.abs(dbeta) * np.sqrt(var)
                        delta = exchange_log_ratio(betas[low], betas[low + 1], u[:, low], u[:, low + 1])
                        acc, skip = corrected_exchange(delta, sigma, exch_rng)
                        noise_max[:, low] = np.maximum(noise_max[:, low], sigma)
                    else:
                        u, _ = evaluate(state.theta)
                        u = u.reshape(chains, n_rep)
                        delta = exchange_log_ratio(betas[low], betas[low + 1], u[:, low], u[:, low + 1])
                        acc = metropolis_exchange(delta, exch_rng)
                        skip = np.zeros_like(acc)
                    attempted[:, low] += 1
                    accepted[:, low] += acc
                    skipped[:, low] += skip
                    if acc.any():
                        theta = theta.copy()
                        c_idx, p_idx = np.nonzero(acc)
                        j = low[p_idx]
                        a, b = theta[c_idx, j].copy(), theta[c_idx, j + 1].copy()
                        theta[c_idx, j], theta[c_idx, j + 1] = b, a
                        state = state._replace(theta=theta.reshape(n, ndim))
            if step % steps_per_sample:
                continue
            if step > burn_in:
                kept_x[:, n_kept] = state.theta.reshape(chains, n_rep, ndim)
                kept_energy[:, n_kept] = last_energy.reshape(chains, n_rep)
                kept_step[:, n_kept] = step
                n_kept += 1
                advance(1)
            if resample_momenta:
                state = state._replace(
                    r_theta=np.sqrt(settings.eta_theta) * rng.standard_normal((n, ndim))
                )

    sampled = draws_to_datatree(
        target,
        kept_x[:, :, 0],
        sample_stats={"potential_energy": kept_energy[:, :, 0], "step": kept_step},
    )
    replicas = _replica_group(target, kept_x, kept_energy, ladder)
    tested = attempted - skipped
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(tested > 0, accepted / np.maximum(tested, 1), np.nan)
    pair_coords = {
        "chain": np.arange(chains),
        "pair": np.arange(n_pairs),
        "temperature_low": ("pair", ladder[:-1]),
        "temperature_high": ("pair", ladder[1:]),
    }
    exchange = xr.Dataset(
        {
            "swap_attempted": (("chain", "pair"), attempted),
            "swap_accepted": (("chain", "pair"), accepted),
            "swap_skipped": (("chain", "pair"), skipped),
            "swap_acceptance_rate": (("chain", "pair"), rate),
            "exchange_noise_sd_max": (("chain", "pair"), noise_max),
        },
        coords=pair_coords,
    )
    attrs = {
        "n_replicas": int(n_rep),
        "max_temperature": float(ladder[-1]),
        "exchange_every": exchange_every,
        "exchange_test": "corrected_logistic" if use_corrected else "metropolis",
        "correction_sd": CORRECTION_SD,
        "step_size": float(step_size),
        "noise": float(noise),
        "thermal_inertia": float(thermal_inertia),
        "thermostat": int(bool(thermostat)),
        "steps_per_sample": steps_per_sample,
        "burn_in": burn_in,
        "n_steps": step,
        "swaps_skipped": int(skipped.sum()),
    }
    return build_result(
        sampled,
        target,
        method="replica_exchange",
        attrs=attrs,
        extra_groups={"replicas": replicas, "replica_exchange": exchange},
    )


def _replica_group(target: Target, kept_x, kept_energy, ladder) -> xr.Dataset:
    """All replicas' draws ``(chain, draw, replica, ...)`` of the model's variables."""
    chains, draws, n_rep, _ = kept_x.shape
    values = constrained_draws(target, kept_x)
    data = {}
    for name, v in values.items():
        model_dims = target.dims(name) or ()
        extra = v.ndim - 3
        if len(model_dims) != extra:
            model_dims = tuple(f"{name}_dim_{k}" for k in range(extra))
        data[name] = (("chain", "draw", "replica", *model_dims), v)
    data["potential_energy"] = (("chain", "draw", "replica"), kept_energy)
    coords = {
        "chain": np.arange(chains),
        "draw": np.arange(draws),
        "replica": np.arange(n_rep),
        "temperature": ("replica", ladder),
    }
    for dim, vals in (target.model.coords or {}).items():
        if vals is not None and any(dim in d[0] for d in data.values()):
            coords[dim] = np.asarray(vals)
    return xr.Dataset(data, coords=coords)
