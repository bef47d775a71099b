"""Gaussian mixture relaxations of Boltzmann machines (section 7.2 and appendix B of the
continuous tempering paper), with log Z, mean and covariance by exact enumeration."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.special import logsumexp
from scipy.stats import special_ortho_group

from pymc_tempering import Base
from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "RELAXATION_SEED",
    "boltzmann_machine",
    "boltzmann_relaxation",
    "boltzmann_relaxation_model",
    "boltzmann_relaxation_proper_model",
    "boltzmann_relaxation_truth",
    "boltzmann_variational_base",
    "problems",
    "relaxation_machine",
    "relaxation_machines",
]

#: The seed of the benchmark's machines (``benchmarks/boltzmann_relaxation.py``).
RELAXATION_SEED = 20170328


# ------------------------------------------------------------------ Boltzmann machine relaxations
def boltzmann_machine(n_units: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A random Boltzmann machine as in appendix B of the continuous tempering paper: weights
    ``W`` with eigenvalues ``6 tanh(2 n)``, ``n ~ N(0, 1)``, a Haar rotation and a zero
    diagonal, and biases ``b ~ N(0, 0.1^2)``.

    Parameters
    ----------
    n_units : int
    rng : numpy.random.Generator

    Returns
    -------
    (W, b) : ndarray, shapes (n_units, n_units) and (n_units,)
    """
    rot = special_ortho_group.rvs(n_units, random_state=rng)
    eig = 6.0 * np.tanh(2.0 * rng.standard_normal(n_units))
    w = rot @ np.diag(eig) @ rot.T
    np.fill_diagonal(w, 0.0)
    return 0.5 * (w + w.T), 0.1 * rng.standard_normal(n_units)


def _solve_sdp(w: np.ndarray, iters: int = 3000) -> np.ndarray:
    """``min lambda_max(W + diag d)`` s.t. ``W + diag d >= 0`` (eq. 46 of the paper).

    The optimum has ``lambda_min = 0`` (else lower every ``d_i``), so minimise the convex
    ``lambda_max - lambda_min`` by subgradient descent (subgradient ``v_max^2 - v_min^2``) with
    diminishing steps, keep the best, and shift ``d`` so that ``lambda_min = 0``.
    """
    d = np.zeros(len(w))
    best, best_d = np.inf, d
    for k in range(iters):
        vals, vecs = np.linalg.eigh(w + np.diag(d))
        spread = vals[-1] - vals[0]
        if spread < best:
            best, best_d = spread, d.copy()
        g = vecs[:, -1] ** 2 - vecs[:, 0] ** 2
        d = d - (0.5 / np.sqrt(k + 1)) * g / max(np.linalg.norm(g), 1e-12)
    vals = np.linalg.eigvalsh(w + np.diag(best_d))
    return best_d - vals[0]


def boltzmann_relaxation(w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian mixture relaxation of a Boltzmann machine (section 7.2 of the continuous
    tempering paper): ``Q`` (``n_units x D``) with ``Q Q^T = W + diag(d)``, ``d`` from the
    semidefinite programme (46), solved by subgradient descent.

    Returns
    -------
    (Q, d) : ndarray
    """
    d = _solve_sdp(w)
    vals, vecs = np.linalg.eigh(w + np.diag(d))
    keep = vals > 1e-6 * vals[-1]
    return vecs[:, keep] * np.sqrt(vals[keep]), d


def _enumerate_boltzmann(w, b, chunk_bits: int = 18):
    """log Z_B, E[s] and E[s s^T] of a Boltzmann machine by enumerating its ``2^n`` states.

    One pass over the states of the high ``n - chunk_bits`` units; for each, the energies of
    all ``2^chunk_bits`` states of the low units are one matrix-vector product, and the sums
    of the moments are accumulated against a running maximum of the energy, so memory stays
    at one chunk (30 units: 2^12 chunks of 2^18 states).
    """
    n = len(b)
    low = min(n, chunk_bits)
    s_low = 1 - 2 * ((np.arange(2**low)[:, None] >> np.arange(low)) & 1).astype(float)
    w_ll, w_lh, w_hh = w[:low, :low], w[:low, low:], w[low:, low:]
    e_low = 0.5 * np.einsum("ij,jk,ik->i", s_low, w_ll, s_low) + s_low @ b[:low]
    top = -np.inf  # the running maximum energy; every sum below is relative to exp(top)
    total, p_low = 0.0, np.zeros(2**low)
    first_high, cross = np.zeros(n - low), np.zeros((low, n - low))
    second_high = np.zeros((n - low, n - low))
    for high in range(2 ** (n - low)):
        s_h = 1 - 2 * ((high >> np.arange(n - low)) & 1).astype(float)
        energy = e_low + s_low @ (w_lh @ s_h) + (0.5 * s_h @ w_hh @ s_h + b[low:] @ s_h)
        peak = energy.max()
        if peak > top:
            scale = np.exp(top - peak)
            total, p_low, first_high, cross, second_high = (
                total * scale, p_low * scale, first_high * scale, cross * scale,
                second_high * scale)
            top = peak
        p = np.exp(energy - top)
        mass = p.sum()
        total += mass
        p_low += p
        first_high += mass * s_h
        cross += np.outer(s_low.T @ p, s_h)
        second_high += mass * np.outer(s_h, s_h)
    first = np.concatenate([s_low.T @ p_low, first_high]) / total
    second = np.empty((n, n))
    second[:low, :low] = (s_low * p_low[:, None]).T @ s_low
    second[:low, low:] = cross
    second[low:, :low] = cross.T
    second[low:, low:] = second_high
    return top + np.log(total), first, second / total


def boltzmann_relaxation_truth(w, b, q, d) -> tuple[float, np.ndarray, np.ndarray]:
    """The exact log normalizing constant (eq. 52), mean (53) and covariance (54) of
    :func:`boltzmann_relaxation_model`, by enumerating the machine's ``2^n_units`` states."""
    log_zb, es, ess = _enumerate_boltzmann(w, b)
    dim = q.shape[1]
    log_z = log_zb + 0.5 * d.sum() + 0.5 * dim * np.log(2 * np.pi) - len(b) * np.log(2)
    mean = q.T @ es
    cov = q.T @ ess @ q + np.eye(dim) - np.outer(mean, mean)
    return float(log_z), mean, cov


def boltzmann_relaxation_model(q: np.ndarray, b: np.ndarray) -> pm.Model:
    """The relaxation's unnormalized density (eq. 51) as a PyMC user writes one: ``x``
    (``pm.Flat``, ``D``-vector) and ``-|x|^2 / 2 + sum log cosh(Q x + b)`` as a
    ``pm.Potential``. Its normalizing constant
    (:func:`~pymc_tempering.log_normalizing_constant`) is
    :func:`boltzmann_relaxation_truth`'s ``log_z``."""
    with pm.Model() as model:
        x = pm.Flat("x", shape=q.shape[1])
        a = pt.dot(pt.constant(q), x) + pt.constant(b)
        log_cosh = pt.logaddexp(a, -a) - np.log(2.0)
        pm.Potential("minus_phi", -0.5 * pt.sum(x**2) + pt.sum(log_cosh))
    return model


def boltzmann_relaxation_proper_model(q, b) -> tuple[pm.Model, float]:
    """Eq. (51) with its Gaussian factor as a proper prior, ``x ~ N(0, I)``, and the cosh terms
    as a potential: the same density as :func:`boltzmann_relaxation_model`, written as a PyMC user who
    wants its evidence would (the flat form is no evidence, only a normalizing constant).
    Returns the model and what its log Z differs from eq. (52)'s by: the Gaussian's normaliser,
    ``-D/2 log(2 pi)``."""
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0, shape=q.shape[1])
        a = pt.dot(pt.constant(q), x) + pt.constant(b)
        pm.Potential("log_cosh", pt.sum(pt.logaddexp(a, -a) - np.log(2.0)))
    return model, -0.5 * q.shape[1] * np.log(2 * np.pi)


def boltzmann_variational_base(w, b, q, d, rng, n_fits: int = 20):
    """Moment-matched mixture of mean-field fits of the Boltzmann machine (section 6)."""
    n, dim = len(b), q.shape[1]
    fits = []
    for _ in range(n_fits):
        m = np.tanh(rng.standard_normal(n))
        for _ in range(500):
            m_new = np.tanh(w @ m + b)
            m = 0.5 * m + 0.5 * m_new
        p = np.clip((1 + m) / 2, 1e-12, 1 - 1e-12)
        entropy = -np.sum(p * np.log(p) + (1 - p) * np.log(1 - p))
        elbo = 0.5 * m @ w @ m + b @ m + entropy  # lower bound on log Z_B
        if not any(np.allclose(m, m_old, atol=1e-3) for _, m_old in fits):  # distinct modes
            fits.append((elbo, m))
    elbos = np.array([f[0] for f in fits])
    weights = np.exp(elbos - logsumexp(elbos))
    means = np.array([q.T @ m for _, m in fits])
    covs = np.array([q.T @ np.diag(1 - m**2) @ q + np.eye(dim) for _, m in fits])
    mean = weights @ means
    cov = np.einsum("k,kij->ij", weights, covs + np.einsum("ki,kj->kij", means, means))
    cov -= np.outer(mean, mean)
    log_zb = logsumexp(elbos)  # distinct mean-field modes: an approximation of log Z_B
    log_zeta = log_zb + 0.5 * d.sum() + 0.5 * dim * np.log(2 * np.pi) - n * np.log(2)
    return Base.from_moments(mean, cov, log_zeta=float(log_zeta))


def relaxation_machines(n_units: int = 22, n_machines: int = 5, seed: int = RELAXATION_SEED,
                        truths: bool = True) -> Iterator[dict]:
    """The benchmark's machines, in its order and from its random stream.

    Each machine draws, from one generator: the machine, its variational base (which draws its
    mean-field starts) and the seed of its runs; so machine ``k`` is the same whoever asks.

    Parameters
    ----------
    n_units, n_machines, seed : int
    truths : bool
        Enumerate each machine's ``2^n_units`` states for its truth (about a minute at 22).

    Yields
    ------
    dict
        ``w, b, q, d``, ``truth`` (``(log_z, mean, cov)`` of the flat form, or None), ``base``
        (the moment-matched mean-field base) and ``run_seed``.
    """
    rng = np.random.default_rng(seed)
    for _ in range(n_machines):
        w, b = boltzmann_machine(n_units, rng)
        q, d = boltzmann_relaxation(w, b)
        truth = boltzmann_relaxation_truth(w, b, q, d) if truths else None
        base = boltzmann_variational_base(w, b, q, d, rng)
        yield {"w": w, "b": b, "q": q, "d": d, "truth": truth, "base": base,
               "run_seed": int(rng.integers(2**31))}


def relaxation_machine(k: int, n_units: int = 22) -> dict:
    """Machine ``k`` of :func:`relaxation_machines` (without its truth)."""
    for i, m in enumerate(relaxation_machines(n_units, n_machines=k + 1, truths=False)):
        if i == k:
            return m
    raise AssertionError(k)


def _relaxation_problem(k: int, n_units: int = 22) -> Problem:
    """Machine ``k`` of :func:`relaxation_machines` in its proper-prior form (a marginal
    likelihood), with the variational base's errors among its moments (``base_*``)."""

    def build():
        m = relaxation_machine(k, n_units)
        return boltzmann_relaxation_proper_model(m["q"], m["b"])[0]

    def truth():
        m = relaxation_machine(k, n_units)
        log_z_flat, mean, cov = boltzmann_relaxation_truth(m["w"], m["b"], m["q"], m["d"])
        shift = boltzmann_relaxation_proper_model(m["q"], m["b"])[1]
        base = m["base"]
        return Truth(log_z=float(log_z_flat + shift), moments={
            "mean": mean, "cov": cov,
            "base_log_z_error": float(abs(base.log_zeta - log_z_flat)),
            "base_mean_rmse": float(np.sqrt(np.mean((base.mean - mean) ** 2))),
            "base_cov_rmse": float(np.sqrt(np.mean((base.cov - cov) ** 2))),
        })

    name = f"relaxation_{k}" if n_units == 22 else f"relaxation{n_units}_{k}"
    return Problem(name, "boltzmann", build, truth,
                   f"Boltzmann machine relaxation {k}: {n_units} units, x ~ N(0, I) and the "
                   "cosh terms")


def problems() -> list[Problem]:
    """``relaxation_0`` to ``relaxation_4``: the benchmark's five 22-unit machines; and
    ``relaxation30_0`` to ``relaxation30_4``: five 30-unit machines, the paper's size (their
    truths enumerate 2^30 states, about a minute each)."""
    return ([_relaxation_problem(k) for k in range(5)]
            + [_relaxation_problem(k, 30) for k in range(5)])
