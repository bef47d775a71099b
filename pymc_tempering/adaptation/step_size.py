"""Step sizes of the ``"auto"`` warm-up and the limits on them: where the Euler steps of the
thermostat dynamics are stable.

The parameters' step is fixed (:data:`AUTO_STEP_SIZE` in the preconditioned units) and the
preconditioner's widths adapt to it: the first from the curvature at the model's initial point
(:func:`start_preconditioner`), each later one from a window's spread (:func:`adapted_scale`),
always capped where the chains are by the curvature and by the thermostat's excess under the
minibatch gradient noise (:func:`stability_cap`, Theorem 1 of Luo et al. 2018). The tempering
variable's step is set from the energy noise (:func:`tempering_step_size`) and capped so that
its kicks stay small (:func:`tempering_step_cap`). Replica exchange gives every replica its
own widths, measured on its tempered density (:func:`replica_scales`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_tempering.adaptation.coordinates import Basis, whitened
from pymc_tempering.adaptation.noise import gradient_noise
from pymc_tempering.kernels.thermostats import ThermostatParams, coupling

__all__ = [
    "AUTO_STEP_SIZE",
    "AUTO_STEP_SIZE_TEMPERING",
    "XI_NOISE_BUDGET",
    "XI_KICK_BUDGET",
    "THETA_NOISE_BUDGET",
    "curvature_scale",
    "start_preconditioner",
    "curvature_at",
    "stability_cap",
    "adapted_scale",
    "LOCAL_WIDTHS",
    "replica_scales",
    "tempering_step_cap",
    "tempering_step_size",
]

#: ``step_size="auto"``: ``eta`` in the preconditioned units (moves of about 0.1 of the
#: preconditioner's scale per step).
AUTO_STEP_SIZE = 0.01
#: ``step_size_tempering="auto"``: ``eta_xi`` without energy noise, and the bound
#: ``eta_xi sigma_U^2 / 2 <= XI_NOISE_BUDGET`` on the thermostat's excess with it.
AUTO_STEP_SIZE_TEMPERING = 0.001
XI_NOISE_BUDGET = 0.05

#: The tempering variable's deterministic kick in one Euler step, ``eta_xi |lambda'| sigma_U``
#: with ``sigma_U`` the spread of the potential at the temperature, is held below this many
#: thermal momentum sds ``sqrt(eta_xi)`` (:func:`tempering_step_cap`).
XI_KICK_BUDGET = 0.4

#: The thermostat's excess from gradient noise, ``eta scale^2 sigma_f^2 / 2``, is held below this.
THETA_NOISE_BUDGET = 0.1


def curvature_scale(
    logp_and_grad: Callable, x: np.ndarray, n_refine: int = 3, chunk: int = 512
) -> np.ndarray:
    """A per-coordinate length scale at the point ``x (D,)``: ``1 / sqrt(|d^2 log p / dx_i^2|)``.

    The curvature comes from central differences of the gradient; the difference step starts at
    ``1e-4 (1 + |x_i|)`` and is refined ``n_refine`` times to ``1e-2`` of the scale found, so the
    result does not depend on the parameter's units. Rows are evaluated ``chunk`` at a time (with
    a ``pm.Minibatch``, each call's rows share one minibatch). Where the curvature is zero or not
    finite (a flat direction), the median of the other coordinates' scales is used, or 1.

    Returns
    -------
    ndarray, shape (D,)
    """
    x = np.asarray(x, dtype=float)
    d = x.size
    h = 1e-4 * (1.0 + np.abs(x))
    scale = np.ones(d)
    for _ in range(n_refine + 1):
        curvature = np.empty(d)
        for start in range(0, d, chunk):
            idx = np.arange(start, min(d, start + chunk))
            k = idx.size
            points = np.repeat(x[None], 2 * k, axis=0)
            points[np.arange(k), idx] += h[idx]
            points[k + np.arange(k), idx] -= h[idx]
            with np.errstate(all="ignore"):
                _, g = logp_and_grad(points)
                g = np.asarray(g, dtype=float)
                curvature[idx] = (g[np.arange(k), idx] - g[k + np.arange(k), idx]) / (2 * h[idx])
        ok = np.isfinite(curvature) & (np.abs(curvature) > 0)
        with np.errstate(divide="ignore"):
            found = 1.0 / np.sqrt(np.abs(curvature))
        fill = float(np.median(found[ok])) if ok.any() else 1.0
        scale = np.where(ok, found, fill)
        h = 1e-2 * scale
    return scale


def start_preconditioner(
    logp_and_grad: Callable, start: np.ndarray, jitter: float, shape, rng: np.random.Generator,
    initial_points: np.ndarray | None = None, eta: float = AUTO_STEP_SIZE, noise_cap: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """The warm-up's first preconditioner and the chains' starting points.

    ``scale`` is :func:`curvature_scale` at ``start (D,)`` (the model's initial point: a
    Laplace-like standard deviation), capped by the gradient noise measured at the starting
    points (:func:`stability_cap`) unless ``noise_cap`` is False; the starting points are
    ``start`` plus uniform noise of half-width ``jitter`` times the curvature scale (or the
    given ``initial_points``). Returns ``(scale, theta0)`` with ``theta0`` of ``shape``.
    """
    scale = curvature_scale(logp_and_grad, start)
    if initial_points is None:
        theta0 = start + scale * rng.uniform(-jitter, jitter, shape)
    else:
        theta0 = np.asarray(initial_points, dtype=float)
    if not noise_cap:
        return scale, theta0
    grad_var, _ = gradient_noise(logp_and_grad, theta0.reshape(-1, start.size))
    return np.fmin(scale, stability_cap(0.0, grad_var, eta)), theta0


def curvature_at(
    logp_and_grad: Callable, theta: np.ndarray, scale: np.ndarray, max_rows: int = 4096
) -> np.ndarray:
    """``|d^2 log p / dtheta_i^2|`` per coordinate, the largest over the chains ``theta (n, D)``.

    Central differences of the gradient with steps ``1e-2 scale``, as many chains as fit in
    ``max_rows`` rows (at least one), one batched call per chain.
    """
    n, d = theta.shape
    h = 1e-2 * scale
    use = max(1, min(n, max_rows // (2 * d)))
    out = np.zeros(d)
    for row in theta[:use]:
        for start in range(0, d, max_rows // 2):
            idx = np.arange(start, min(d, start + max_rows // 2))
            k = idx.size
            points = np.repeat(row[None], 2 * k, axis=0)
            points[np.arange(k), idx] += h[idx]
            points[k + np.arange(k), idx] -= h[idx]
            with np.errstate(all="ignore"):
                g = np.asarray(logp_and_grad(points)[1], dtype=float)
                c = np.abs(g[np.arange(k), idx] - g[k + np.arange(k), idx]) / (2 * h[idx])
            out[idx] = np.fmax(out[idx], np.where(np.isfinite(c), c, 0.0))
    return out


def stability_cap(curvature: np.ndarray, grad_var: np.ndarray, eta: float) -> np.ndarray:
    """The widest preconditioner scale the Euler steps of size ``eta`` take safely.

    Two limits per coordinate: the curvature in the preconditioned units,
    ``eta scale^2 |curvature| <= 1``, and the thermostat's excess from the gradient noise,
    ``eta scale^2 sigma_f^2 / 2 <= THETA_NOISE_BUDGET`` (Theorem 1). Infinite where neither
    binds.
    """
    with np.errstate(divide="ignore"):
        by_curvature = 1.0 / np.sqrt(eta * np.asarray(curvature, dtype=float))
        by_noise = np.sqrt(2.0 * THETA_NOISE_BUDGET / (eta * np.asarray(grad_var, dtype=float)))
    return np.fmin(by_curvature, by_noise)


def adapted_scale(
    sd: np.ndarray | None, old_scale: np.ndarray, curvature: np.ndarray, grad_var: np.ndarray,
    eta: float,
) -> np.ndarray:
    """The preconditioner after a warm-up window: the draws' within-chain spread ``sd``
    (:func:`~pymc_tempering.adaptation.windows.spread_sd`; None keeps ``old_scale``), shrinking by at most half per window, so a
    chain slowed by small steps is not slowed further, capped by :func:`stability_cap`
    measured where the chains are."""
    target = old_scale if sd is None else np.fmax(sd, 0.5 * old_scale)
    target = np.where(np.isfinite(target) & (target > 0), target, old_scale)
    return np.fmin(target, stability_cap(curvature, grad_var, eta))


#: At the end of a warm-up window a replica's preconditioner is at most this many local
#: widths ``1 / sqrt(|curvature| / T_j)`` (the curvature measured where its chains are; the
#: largest over them). The spread of a replica's positions counts the positions swapped in
#: from other modes: on a sign-flip posterior (two modes with quartic walls) it made a hot
#: replica's scale 9 local widths, at the stability cap, and its chains, overshooting into
#: the walls, blew up in one iteration. At 5 they held; at 3 the hot replicas (whose density
#: spans both modes) were held below their spread, and the mode indicator's ESS at ``T = 1``
#: fell.
LOCAL_WIDTHS = 5.0


def replica_scales(
    tempered: Callable, betas: np.ndarray, chains: int, base: np.ndarray | None,
    theta: np.ndarray, eta: float, olds=None, sds=None, basis: Basis | None = None,
) -> np.ndarray:
    """Every replica's preconditioner ``(chains * R, D)``, ladder after ladder.

    ``tempered(beta)`` is the log density and gradient of the replica at inverse temperature
    ``beta`` (one of ``betas``). At the start (``olds`` None), replica ``j`` gets the
    curvature scale of its tempered density (:func:`curvature_scale`) at ``base (D,)``, the
    model's initial point, capped by the gradient noise measured at its starting points. At
    the end of a warm-up window it gets, as the ``T = 1`` chains do in TACT-HMC, the
    within-chain spread of its own positions over the window (``sds[j]``, swapped-in positions
    included: the tempered density's spread; :func:`adapted_scale`), capped by the stability
    limits of its tempered density measured where its chains are (:func:`stability_cap` with
    that density's curvature and gradient noise) and by :data:`LOCAL_WIDTHS`.
    ``theta (chains, R, D)`` are the replicas' positions in the coordinates ``v`` of ``basis``
    (the model's without one), ``olds[j]`` replica ``j``'s current scale in them.
    """
    out = np.empty((betas.size, theta.shape[-1]))
    for j, beta in enumerate(betas):
        rows = theta[:, j]
        density = whitened(tempered(beta), 1.0, basis)
        grad_var, _ = gradient_noise(density, rows)
        if olds is None:
            width = curvature_scale(density, base)
            out[j] = np.fmin(width, stability_cap(0.0, grad_var, eta))
            continue
        curvature = curvature_at(density, rows, olds[j])
        out[j] = adapted_scale(sds[j], olds[j], curvature, grad_var, eta)
        with np.errstate(divide="ignore"):  # the local width's cap (LOCAL_WIDTHS)
            out[j] = np.fmin(out[j], LOCAL_WIDTHS / np.sqrt(curvature))
    return np.tile(out, (chains, 1))


def tempering_step_cap(settings: ThermostatParams, ndim: int) -> float:
    """The largest ``eta_xi`` whose kicks stay within :data:`XI_KICK_BUDGET` thermal sds.

    The force on the tempering variable is ``-lambda'(xi) (U - <U | xi>)`` (the biasing force
    cancels the mean), and at temperature ``T = 1 / lambda`` the potential spreads by about
    ``sigma_U = T sqrt(C)`` with ``C = max(ndim, 1) / 2`` the heat capacity of a Gaussian (as the
    replica-exchange ladder assumes). Kicks of ``eta_xi |lambda'| sigma_U`` at most ``b
    sqrt(eta_xi)`` give ``eta_xi <= b^2 / (C max_xi (lambda' / lambda)^2)``. Larger kicks
    leave the draws too wide on a hierarchical model of many parameters (the tempering
    variable's Euler step is then far from its continuous dynamics), whatever the parameters'
    own step size. Infinite where ``xi`` does not move.
    """
    if not settings.moves_xi:
        return np.inf
    a = settings.tempering.unit_temperature_fraction
    xi = np.linspace(a, 1.0, 2001)
    lam, dlam = coupling(xi, settings)
    worst = float(np.max((dlam / lam) ** 2))
    if worst <= 0:
        return np.inf
    return XI_KICK_BUDGET**2 / (max(ndim, 1) / 2.0 * worst)


def tempering_step_size(
    energy_var: float, default: float = AUTO_STEP_SIZE_TEMPERING, cap: float = np.inf
) -> float:
    """``eta_xi`` for the tempering variable given the energy noise ``sigma_U^2``.

    The thermostat of ``xi`` settles at ``c + eta_xi sigma_U^2 / 2`` (Theorem 1); the step is
    capped so that the excess stays below ``XI_NOISE_BUDGET``, and at ``cap``
    (:func:`tempering_step_cap`).
    """
    step = min(default, cap)
    if not np.isfinite(energy_var) or energy_var <= 0:
        return float(step)
    return float(min(step, 2.0 * XI_NOISE_BUDGET / energy_var))
