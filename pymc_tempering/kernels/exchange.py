"""The replica-exchange move: the ladder, the swap tests (Metropolis and noise-corrected), the swap.

A ladder of ``R`` replicas at temperatures ``T_1 = 1 < T_2 < ... < T_R`` (:func:`temperature_ladder`,
:func:`auto_n_temperatures`), each sampling the prior times the likelihood tempered to its
temperature (:func:`likelihood_tempered`), proposes, in each round, to swap the positions of neighbouring replicas ``(j, j + 1)``; the even
pairs and the odd pairs take turns, so the swaps of one round are independent and run
vectorised over pairs and chains (:func:`step`, over the small :class:`ExchangeState` that
counts the rounds and the swaps). With ``beta = 1 / T`` and ``U = -log p`` the log acceptance
ratio of a swap is::

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

The correction distribution is built numerically, by deconvolution on a grid (in the spirit of
Seita et al.'s table; we do *not* use the poster's Hermite expansion): ``X`` is a discrete
symmetric distribution on the grid ``x_k = -10, -9.95, ..., 10`` whose weights ``w_k >= 0``,
``sum w_k = 1``, minimise by non-negative least squares the error of the acceptance function
``sum_k w_k Phi(Delta - x_k) - 1 / (1 + exp(-Delta))`` on ``Delta in [-25, 25]``. A point-mass
correction convolved with ``N(0, 1)`` is a Gaussian mixture, so the acceptance probability of the
corrected test is known in closed form (:func:`corrected_acceptance_probability`); its largest
error against the logistic is about ``5e-6`` (checked by the tests), far below any Monte Carlo
error. Its variance matches ``pi^2 / 3 - 1``, the only possible one.

The noise of ``Delta_hat`` is estimated from the minibatch itself (:func:`pair_noise_sd`): with
``t_i(theta)`` the ``m`` per-datum log-likelihood terms of the minibatched observed variables
(PyMC already scales them by ``total_size / m``), ``d_i = t_i(theta_j) - t_i(theta_{j+1})`` and
``sigma^2 = (beta_j - beta_{j+1})^2 m Var_i(d_i)`` (the variance of a sum of ``m`` independent
draws of a datum, ``N^2 / m`` times the variance of the unscaled per-datum differences).
Observed variables without ``pm.Minibatch`` and the prior contribute no noise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.optimize import nnls
from scipy.special import expit, ndtr

from pymc_tempering.kernels import Info

__all__ = [
    "CORRECTION_SD",
    "temperature_ladder",
    "auto_n_temperatures",
    "likelihood_tempered",
    "correction_distribution",
    "corrected_acceptance_probability",
    "exchange_log_ratio",
    "metropolis_exchange",
    "corrected_exchange",
    "pair_noise_sd",
    "swap_pairs",
    "ExchangeState",
    "ExchangeParams",
    "TARGET_NOISE_SD",
    "batches_for_noise",
    "averaged_energies",
    "init",
    "step",
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
            raise ValueError(f"n_temperatures must be a positive integer, got {temperatures}.")
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


def auto_n_temperatures(max_temperature: float, ndim: int) -> int:
    """Rungs of the automatic geometric ladder from 1 to ``max_temperature``.

    For a ``d``-dimensional Gaussian the energy's variance at temperature ``T`` is
    ``C T^2`` with heat capacity ``C = d / 2``, and neighbours ``T, r T`` swap with probability
    about ``erfc(sqrt(C) log(r) / 2)`` under Metropolis. The ratio is ``log r =
    min(1, 0.8 / sqrt(C))`` (with ``C >= 1/2``): about 0.6 under Metropolis, 0.45 under the
    logistic test of minibatched models, in the Gaussian case.
    """
    heat = max(0.5, ndim / 2.0)
    log_ratio = min(1.0, 0.8 / np.sqrt(heat))
    return int(1 + np.ceil(np.log(max_temperature) / log_ratio))


def likelihood_tempered(
    logp_and_grad: Callable, prior_and_grad: Callable, beta
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``theta (n, D) -> (log p_beta, its gradient)`` with ``log p_beta = log p(theta) + beta
    log L(theta)``: the likelihood tempered, the prior not.

    ``logp_and_grad`` gives the model's log density ``log p + log L`` (minibatched where the
    model is) and ``prior_and_grad`` the prior's (with Jacobians); ``beta`` is a scalar or one
    inverse temperature per row. The poster tempers the whole posterior, ``U / T`` with ``U``
    of its eq. (1). With the hottest temperature at the number of observations
    (``max_temperature="auto"``) that makes the prior ``N`` times flatter too, nearly improper,
    and the hottest replica of a minibatched regression wanders until its dynamics blow up.
    Tempering the likelihood alone keeps every replica a proper density where the prior is proper, and
    at ``T = N`` it carries about one observation's information, which is what the automatic
    ladder assumes. With a flat prior (``pm.Flat``) the two are the same. A model without
    observed variables or potentials (a density written as priors alone) has no likelihood to
    temper: there ``prior_and_grad`` is zero and the whole density is tempered. Modes written
    into a proper prior beside a likelihood are not flattened (the poster's five-mode ring
    written as a mixture prior with a noise likelihood keeps every chain in its starting mode);
    write such a density as a potential, as ``pm.sample_smc``, which tempers the likelihood
    too, needs.
    """

    def tempered(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logp, grad = logp_and_grad(points)
        prior, prior_grad = prior_and_grad(points)
        b = np.asarray(beta, dtype=float)
        with np.errstate(invalid="ignore"):
            return (
                prior + b * (np.asarray(logp) - prior),
                prior_grad + np.reshape(b, (-1, 1) if b.ndim else ()) * (grad - prior_grad),
            )

    return tempered


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


def pair_noise_sd(terms: np.ndarray, betas: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The noise sd ``sigma`` of each pair's ``Delta_hat`` from the per-datum terms.

    Parameters
    ----------
    terms : ndarray, shape (chains, R, m)
        The ``m`` per-datum log-likelihood terms of the minibatch at each replica's position.
    betas : ndarray, shape (R,)
    low : ndarray of int
        The colder replica ``j`` of each pair ``(j, j + 1)``.

    Returns
    -------
    ndarray, shape (chains, len(low))
        ``|beta_j - beta_{j+1}| sqrt(m Var_i(d_i))``; zero with fewer than two terms.
    """
    d = terms[:, low] - terms[:, low + 1]  # (chains, pairs, m)
    m = d.shape[-1]
    var = m * d.var(axis=-1, ddof=1) if m > 1 else np.zeros(d.shape[:2])
    return np.abs(betas[low] - betas[low + 1]) * np.sqrt(var)


def swap_pairs(theta: np.ndarray, accepted: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Swap the positions of the accepted pairs.

    ``theta (chains, R, D)``; ``accepted (chains, len(low))`` says which pair ``(low[k],
    low[k] + 1)`` of which chain swaps. Returns a new array (``theta`` itself when none swaps).
    """
    if not accepted.any():
        return theta
    theta = theta.copy()
    c_idx, p_idx = np.nonzero(accepted)
    j = low[p_idx]
    a, b = theta[c_idx, j].copy(), theta[c_idx, j + 1].copy()
    theta[c_idx, j], theta[c_idx, j + 1] = b, a
    return theta


class ExchangeState(NamedTuple):
    """The exchange rounds so far and, per ``(chain, pair)``, what became of the swaps.

    Attributes
    ----------
    rounds : int
        Rounds run (even rounds try the pairs ``(0, 1), (2, 3), ...``, odd ones the others).
    attempted, accepted, skipped : ndarray of int, shape (chains, R - 1)
        Swaps proposed, accepted, and skipped (noise above :data:`CORRECTION_SD`).
    noise_max : ndarray, shape (chains, R - 1)
        The largest estimated noise sd of the corrected test (zero for Metropolis).
    single_noise_sq : ndarray, shape (chains, R - 1)
        Sum over the attempted swaps of the estimated noise variance of one minibatch's
        ``Delta_hat`` (``sigma^2`` times the number of minibatches averaged): what
        :func:`batches_for_noise` sizes the number of minibatches from.
    theta : ndarray, shape (chains, R, D), optional
        Every replica's position: what :func:`step` swaps (the driver sets it before a round
        and reads it after).
    """

    rounds: int
    attempted: np.ndarray
    accepted: np.ndarray
    skipped: np.ndarray
    noise_max: np.ndarray
    single_noise_sq: np.ndarray
    theta: np.ndarray | None = None


class ExchangeParams(NamedTuple):
    """The constants of an exchange round (:func:`step`).

    Attributes
    ----------
    betas : ndarray, shape (R,)
        Inverse temperatures, decreasing.
    energies : callable
        ``theta (chains * R, D) -> (U (chains * R,), terms (chains * R, m) or None)``: the
        potential (one minibatch for all positions) and, for the corrected test, the per-datum
        log-likelihood terms it is made of. Not called in a round without pairs.
    corrected : bool
        The noise-corrected logistic test (True) or the Metropolis test (False).
    n_batches : ndarray of int, shape (R - 1,), optional
        For the corrected test: the number of independent minibatches whose energies are
        averaged for the replicas of each pair (default one). ``energies`` is called again on
        those replicas' rows only, and ``sigma`` is estimated from all the terms. 0: the pair's
        energies come from ``exact_energies`` and it takes the Metropolis test (``sigma`` is
        still estimated from the first minibatch, for :func:`batches_for_noise`).
    exact_energies : callable, optional
        ``theta (n, D) -> U (n,)`` exact (for example one pass over the data set), for the
        pairs with ``n_batches`` 0.
    """

    betas: np.ndarray
    energies: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]
    corrected: bool
    n_batches: np.ndarray | None = None
    exact_energies: Callable[[np.ndarray], np.ndarray] | None = None


def init(chains: int, n_replicas: int) -> ExchangeState:
    """No round run yet, for ``chains`` ladders of ``n_replicas`` replicas."""
    pairs = (chains, n_replicas - 1)
    zeros = np.zeros(pairs, dtype=int)
    return ExchangeState(0, zeros, zeros.copy(), zeros.copy(), np.zeros(pairs), np.zeros(pairs))


#: The noise sd that :func:`batches_for_noise` aims the corrected test's ``sigma`` at (on
#: average); swaps whose estimated ``sigma`` exceeds :data:`CORRECTION_SD` are skipped.
TARGET_NOISE_SD = 0.5


def batches_for_noise(
    single_noise_var, max_batches: int, exact_from: int | None = None
) -> np.ndarray:
    """Minibatches to average per exchange so that ``sigma`` is about :data:`TARGET_NOISE_SD`.

    ``single_noise_var`` is the mean noise variance of one minibatch's ``Delta_hat`` per pair;
    averaging ``k`` independent minibatches divides it by ``k``. Returns integers in
    ``[1, max_batches]`` (1 where the variance is not finite), or 0 (exact energies, see
    :func:`step`) where ``exact_from`` is given and ``k >= exact_from``.
    """
    v = np.asarray(single_noise_var, dtype=float)
    need = np.ceil(np.where(np.isfinite(v), v, 0.0) / TARGET_NOISE_SD**2)
    k = np.clip(need, 1, max(1, int(max_batches)))
    if exact_from is not None:
        k = np.where(need >= exact_from, 0, k)
    return k.astype(int)


def averaged_energies(energies, theta, low, n_batches, first):
    """``U`` averaged over ``n_batches[p]`` minibatches for the replicas of each pair ``p``
    (``first``: the first minibatch's ``(U, terms)`` for every replica), and per pair the
    variance of one minibatch's ``Delta_hat / (beta_j - beta_{j+1})`` (``m Var_i(d_i)``)."""
    chains, n_rep, dim = theta.shape
    u1, terms = first
    m = terms.shape[-1]
    d = terms[:, low] - terms[:, low + 1]  # (chains, pairs, m)
    # the sums are of d minus the first minibatch's mean, against the cancellation of
    # d_sq - d_sum^2 / count when the spread is small beside the mean
    shift = d.mean(-1)
    d = d - shift[..., None]
    u_sum = u1.copy()
    d_sum, d_sq, count = d.sum(-1), (d**2).sum(-1), np.full(d.shape[:2], float(m))
    k = np.ones(low.size, dtype=int) if n_batches is None else np.asarray(n_batches)[low]
    k = np.maximum(k, 1)  # 0: exact energies (step), one minibatch here for the noise
    rounds = np.ones(low.size, dtype=int)
    for b in range(2, int(k.max()) + 1):
        more = np.nonzero(k >= b)[0]  # the pairs still averaging
        rows = np.concatenate([low[more], low[more] + 1])
        u_b, t_b = energies(theta[:, rows].reshape(-1, dim))
        u_b = np.asarray(u_b).reshape(chains, rows.size)
        t_b = t_b.reshape(chains, rows.size, -1)
        npair = more.size
        u_sum[:, low[more]] += u_b[:, :npair]
        u_sum[:, low[more] + 1] += u_b[:, npair:]
        db = t_b[:, :npair] - t_b[:, npair:] - shift[:, more, None]
        d_sum[:, more] += db.sum(-1)
        d_sq[:, more] += (db**2).sum(-1)
        count[:, more] += m
        rounds[more] += 1
    u = u_sum.copy()
    u[:, low] = u_sum[:, low] / rounds
    u[:, low + 1] = u_sum[:, low + 1] / rounds
    with np.errstate(invalid="ignore", divide="ignore"):
        # rounding can still leave a variance of nothing slightly negative: it is 0
        var = np.maximum((d_sq - d_sum**2 / count) / (count - 1), 0.0)
    single = np.where(count > 1, m * var, 0.0)
    return u, single, rounds


def _test(delta, single, rounds, betas, low, rng, corrected: bool, exact=None):
    """Accepted, skipped and noise sd of each pair of this round, and one minibatch's noise
    variance. ``exact`` (bool per pair): with the corrected test, the pairs whose ``delta`` is
    exact, tested by Metropolis."""
    if not corrected:
        accepted = metropolis_exchange(delta, rng)
        zeros = np.zeros(delta.shape)
        return accepted, np.zeros_like(accepted), zeros, zeros
    single = (betas[low] - betas[low + 1]) ** 2 * single
    sigma = np.sqrt(single / rounds)
    if exact is not None and exact.any():
        sigma = np.where(exact, 0.0, sigma)
    accepted, skipped = corrected_exchange(delta, sigma, rng)
    if exact is not None and exact.any():
        accepted[:, exact] = metropolis_exchange(delta[:, exact], rng)
    return accepted, skipped, sigma, single


def _probability(delta, corrected: bool, skipped, exact) -> np.ndarray:
    """The acceptance probability each tested pair's test had given its ``delta`` (the
    Metropolis ``min(1, exp(delta))``, the logistic ``1 / (1 + exp(-delta))`` of the corrected
    test, 0 where skipped)."""
    metropolis = np.exp(np.minimum(delta, 0.0))
    if not corrected:
        return metropolis
    logistic = np.where(skipped, 0.0, expit(delta))
    return logistic if exact is None else np.where(exact[None, :], metropolis, logistic)


def step(
    state: ExchangeState, params: ExchangeParams, rng: np.random.Generator
) -> tuple[ExchangeState, Info]:
    """One round of exchanges between neighbouring replicas (even or odd pairs, in turn).

    Parameters
    ----------
    state : ExchangeState
        With ``theta``, every replica's position ``(chains, R, D)``.
    params : ExchangeParams
        The ladder, the energies and the test.
    rng : numpy.random.Generator
        Draws the tests' randomness.

    Returns
    -------
    new_state : ExchangeState
        The counts after the round, ``theta`` the positions after the accepted swaps (the
        same array when none swaps).
    info : Info
        ``acceptance_rate`` ``(chains, R - 1)``: the acceptance probability of each pair's test
        this round (NaN for the pairs not tested); ``diverging`` False; ``energy``
        ``(chains, R)``: the energies the test used (NaN in a round without pairs).
    """
    theta, betas = state.theta, params.betas
    chains, n_rep, dim = theta.shape
    untested = Info(
        np.full((chains, max(n_rep - 1, 0)), np.nan), np.zeros(chains, dtype=bool),
        np.full((chains, n_rep), np.nan),
    )
    if n_rep < 2:
        return state, untested
    low = np.arange(state.rounds % 2, n_rep - 1, 2)  # the colder replica of each pair
    state = state._replace(rounds=state.rounds + 1)
    if not low.size:
        return state, untested
    energies, corrected, n_batches = params.energies, params.corrected, params.n_batches
    u, terms = energies(theta.reshape(chains * n_rep, dim))
    u = np.asarray(u).reshape(chains, n_rep)
    single, rounds = np.zeros((chains, low.size)), np.ones(low.size, dtype=int)
    if corrected and terms is not None:
        u, single, rounds = averaged_energies(
            energies, theta, low, n_batches, (u, terms.reshape(chains, n_rep, -1))
        )
    exact = None
    if corrected and n_batches is not None and params.exact_energies is not None:
        exact = np.asarray(n_batches)[low] == 0
        if exact.any():
            rows = np.concatenate([low[exact], low[exact] + 1])
            u_exact = np.asarray(params.exact_energies(theta[:, rows].reshape(-1, dim)))
            u = u.copy()
            u[:, rows] = u_exact.reshape(chains, rows.size)
    delta = exchange_log_ratio(betas[low], betas[low + 1], u[:, low], u[:, low + 1])
    accepted, skipped, sigma, single = _test(
        delta, single, rounds, betas, low, rng, corrected, exact
    )
    counts = [
        c.copy()
        for c in (state.attempted, state.accepted, state.skipped, state.noise_max,
                  state.single_noise_sq)
    ]
    counts[0][:, low] += 1
    counts[1][:, low] += accepted
    counts[2][:, low] += skipped
    counts[3][:, low] = np.maximum(counts[3][:, low], sigma)
    counts[4][:, low] += np.where(np.isfinite(single), single, 0.0)
    probability = untested.acceptance_rate.copy()
    probability[:, low] = _probability(delta, corrected, skipped, exact)
    info = Info(probability, untested.diverging, u)
    return ExchangeState(state.rounds, *counts, swap_pairs(theta, accepted, low)), info
