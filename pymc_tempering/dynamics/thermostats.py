"""TACT-HMC: thermostat-assisted continuously-tempered Hamiltonian Monte Carlo (Luo et al. 2018).

The extended Hamiltonian (eq. 4 of the paper, at reference temperature ``T = 1``)::

    H = lambda(xi) U(theta) + W(xi) + |p_theta|^2 / 2 m_theta + p_xi^2 / 2 m_xi

with ``U = -log p`` the model's (minibatch) potential, is simulated with the Nosé-Hoover
dynamics of eq. (5) with the scalar thermostats ``s_theta``, ``s_xi`` of section 3.3, the
adaptive biasing force of section 3.2 (a binned running average of ``dH/dxi``, eqs. 10-11) and
the reflecting walls of the infinite well ``W``. Everything is written, as in Algorithm 1, in the
rescaled variables::

    r_theta = p_theta dt / m_theta,  r_xi = p_xi dt / m_xi,  z = s dt,
    eta_theta = dt^2 / m_theta,      eta_xi = dt^2 / m_xi,
    gamma_theta = kappa_theta / (m_theta D),  gamma_xi = kappa_xi / m_xi.

Draws are kept every ``steps_per_sample`` steps when the effective temperature
``1 / lambda(xi)`` is exactly one (Algorithm 1, line 16).

Coupling function
-----------------
The tempering variable lives in the well ``[0, 1]``. ``lambda(xi) = 1`` on ``[0, a]``
(``a = unit_temperature_fraction``) and falls smoothly (a cubic smoothstep, so ``lambda'`` is
continuous) to ``1 / max_temperature`` at ``xi = 1``. On the flat part ``lambda' = 0``: there the
tempering variable feels no force and the draws are taken.

Numerics
--------
:func:`tact_step` is a pure function of an immutable :class:`TACTState` whose arrays carry a
leading axis of ``n`` independent chains (or replicas): ``theta`` is ``(n, D)``, the scalars per
chain ``(n,)`` and the ABF bins ``(n, J)``. One step makes one call of the batched potential
and force; the rest is a fixed number of numpy operations on whole arrays. A replica-exchange
driver can reuse it with ``tempering=False`` and a per-replica ``inverse_temperature`` array.

Reference values (Theorem 1, Fig. 1b-II)
----------------------------------------
At equilibrium the thermostats are Gaussian, independent of the rest of the state, with, in the
rescaled units above and for gradient noise of variance ``sigma_f^2`` per component (energy noise
``sigma_U^2``)::

    E[z_theta] = c_theta + eta_theta sigma_f^2 / 2,   Var[z_theta] = eta_theta / (gamma_theta D),
    E[z_xi]    = c_xi + eta_xi sigma_U^2 / 2,         Var[z_xi]    = eta_xi / gamma_xi,

where ``c`` is the level of the injected noise (:func:`thermostat_reference`). Euler
discretisation adds ``O(c^2)`` to the means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import xarray as xr
from pymc.model import modelcontext
from pytensor.graph.traversal import graph_inputs
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.tensor.random.type import RandomGeneratorType

from pymc_tempering.driver import draws_to_datatree, progress_bar
from pymc_tempering.results import build_result
from pymc_tempering.sampling import split_seed
from pymc_tempering.target import Target

__all__ = [
    "VARIANTS",
    "TACTSettings",
    "TACTState",
    "coupling",
    "abf_index",
    "abf_force",
    "tact_step",
    "initial_tact_state",
    "thermostat_reference",
    "minibatch_energy_and_force",
    "sample_tact",
]

#: The variants of :func:`sample_tact`: (thermostats on, tempering on).
VARIANTS = {
    "tact": (True, True),  # the full method
    "sgnht": (True, False),  # thermostats without tempering (Ding et al. 2014)
    "tempering_only": (False, True),  # tempering with a constant friction, no thermostats
    "sghmc": (False, False),  # constant friction, no tempering (Chen et al. 2014)
}


class TACTSettings(NamedTuple):
    """The constants of the dynamics, in the rescaled units of Algorithm 1.

    Attributes
    ----------
    eta_theta, eta_xi : float
        ``dt^2 / m`` for the parameters and the tempering variable.
    c_theta, c_xi : float
        Level of injected noise, ``N(0, 2 c eta)`` per step (and the constant friction when
        thermostats are off).
    gamma_theta, gamma_xi : float
        Thermal inertia of the thermostats.
    unit_temperature_fraction : float
        The part ``[0, a]`` of the well ``[0, 1]`` where ``lambda = 1``.
    lambda_min : float
        ``lambda(1) = 1 / max_temperature``.
    abf_bins : int
        Number of equal bins of ``[0, 1]`` for the adaptive biasing force.
    abf_ramp : float
        A bin's estimate is applied with weight ``min(1, count / abf_ramp)`` (the usual ABF
        ramp, so a bin's first noisy values do not kick ``xi``).
    thermostat : bool
        Adaptive thermostats (True) or constant friction ``z = c`` (False).
    tempering : bool
        Move ``xi`` (True) or hold ``lambda = inverse_temperature`` fixed (False).
    inverse_temperature : float or ndarray, shape (n,)
        ``lambda`` of each chain when ``tempering`` is False (1 for plain sampling; one value per
        replica for replica exchange).
    """

    eta_theta: float
    eta_xi: float
    c_theta: float
    c_xi: float
    gamma_theta: float
    gamma_xi: float
    unit_temperature_fraction: float = 0.3
    lambda_min: float = 0.1
    abf_bins: int = 20
    abf_ramp: float = 100.0
    thermostat: bool = True
    tempering: bool = True
    inverse_temperature: float | np.ndarray = 1.0


class TACTState(NamedTuple):
    """The state of ``n`` chains. Never modified in place: :func:`tact_step` returns a new one.

    Attributes
    ----------
    theta, r_theta : ndarray, shape (n, D)
        Positions on the model's flat unconstrained space, and rescaled momenta.
    xi, r_xi : ndarray, shape (n,)
        Tempering variable in ``[0, 1]`` and its rescaled momentum.
    z_theta, z_xi : ndarray, shape (n,)
        The scalar thermostats (``s dt``).
    abf_sum, abf_count : ndarray, shape (n, J)
        Per bin of ``xi``, the sum of the potential ``U`` and the number of visits.
    energy_sum, energy_count : ndarray, shape (n,)
        Sum of ``U`` over all steps and their number.
    """

    theta: np.ndarray
    r_theta: np.ndarray
    xi: np.ndarray
    r_xi: np.ndarray
    z_theta: np.ndarray
    z_xi: np.ndarray
    abf_sum: np.ndarray
    abf_count: np.ndarray
    energy_sum: np.ndarray
    energy_count: np.ndarray


def coupling(xi, settings: TACTSettings) -> tuple[np.ndarray, np.ndarray]:
    """``lambda(xi)`` and ``lambda'(xi)``.

    With tempering, ``lambda = 1`` on ``[0, a]`` and a smoothstep down to ``lambda_min`` at 1.
    Without, ``lambda = settings.inverse_temperature`` and ``lambda' = 0``.
    """
    xi = np.asarray(xi, dtype=float)
    if not settings.tempering:
        lam = np.broadcast_to(np.asarray(settings.inverse_temperature, dtype=float), xi.shape)
        return lam, np.zeros_like(xi)
    a, drop = settings.unit_temperature_fraction, 1.0 - settings.lambda_min
    u = np.clip((xi - a) / (1.0 - a), 0.0, 1.0)
    lam = 1.0 - drop * u * u * (3.0 - 2.0 * u)
    dlam = -drop * 6.0 * u * (1.0 - u) / (1.0 - a)
    return lam, dlam


def abf_index(xi, n_bins: int) -> np.ndarray:
    """The ABF bin of each ``xi`` in ``[0, 1]``."""
    return np.clip((np.asarray(xi) * n_bins).astype(int), 0, n_bins - 1)


def abf_force(state: TACTState, settings: TACTSettings) -> np.ndarray:
    """The adaptive biasing force ``A'(xi) = <dH/dxi | xi>`` (eq. 11) each chain feels now.

    Inside the well ``dH/dxi = lambda'(xi) U``, so ``A'(xi) = lambda'(xi) <U | xi>``; the
    conditional mean of ``U`` is the running time average over ``xi``'s bin (eq. 11), shrunk
    towards the chain's running mean of ``U`` over all steps with the weight of ``abf_ramp``
    visits: ``(sum_j + ramp * mean_all) / (count_j + ramp)``. The shrinkage stands in for the
    usual ABF ramp; it also cancels at once the arbitrary constant in ``U`` (which only
    reweights ``xi`` and which ABF removes anyway), so a model whose log density is far from
    zero (a neural network on many data) does not throw ``xi`` against the wall before the bins
    fill. Shape (n,).
    """
    rows = np.arange(state.xi.shape[0])
    j = abf_index(state.xi, settings.abf_bins)
    overall = state.energy_sum / np.maximum(state.energy_count, 1.0)
    ramp = settings.abf_ramp
    mean = (state.abf_sum[rows, j] + ramp * overall) / (state.abf_count[rows, j] + ramp)
    _, dlam = coupling(state.xi, settings)
    return dlam * mean


def tact_step(
    state: TACTState,
    energy_and_force: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    settings: TACTSettings,
    normals: np.ndarray,
) -> tuple[TACTState, np.ndarray]:
    """One Euler step of the Nosé-Hoover dynamics (eq. 5 with eq. 10), as in Algorithm 1.

    Parameters
    ----------
    state : TACTState
    energy_and_force : callable
        ``theta (n, D) -> (U (n,), f (n, D))``: the (minibatch) potential ``-log p`` and force
        ``grad log p``, possibly noisy.
    settings : TACTSettings
    normals : ndarray, shape (n, D + 1)
        Standard normal draws for the injected noise (last column for ``xi``).

    Returns
    -------
    new_state : TACTState
    energy : ndarray, shape (n,)
        ``U`` at the old ``theta``.
    """
    s = settings
    theta, r_theta, xi, r_xi = state.theta, state.r_theta, state.xi, state.r_xi
    z_theta, z_xi = state.z_theta, state.z_xi
    lam, dlam = coupling(xi, s)
    if s.thermostat:
        dim = theta.shape[-1]
        z_xi = z_xi + dlam**2 * (r_xi**2 - s.eta_xi) / s.gamma_xi
        z_theta = z_theta + lam**2 * (np.sum(r_theta**2, axis=-1) / dim - s.eta_theta) / s.gamma_theta
    energy, force = energy_and_force(theta)
    abf_sum, abf_count = state.abf_sum, state.abf_count
    energy_sum, energy_count = state.energy_sum, state.energy_count
    if s.tempering:
        bias = abf_force(state, s)
        r_xi = (
            r_xi
            - dlam * (s.eta_xi * energy + np.sqrt(2.0 * s.c_xi * s.eta_xi) * normals[:, -1])
            - dlam**2 * z_xi * r_xi
            + s.eta_xi * bias
        )
        rows = np.arange(xi.shape[0])
        j = abf_index(xi, s.abf_bins)
        abf_sum, abf_count = abf_sum.copy(), abf_count.copy()
        abf_sum[rows, j] += energy
        abf_count[rows, j] += 1.0
        energy_sum, energy_count = energy_sum + energy, energy_count + 1.0
        moved = xi + r_xi
        out = (moved < 0.0) | (moved > 1.0)
        r_xi = np.where(out, -r_xi, r_xi)  # elastic bounce off the infinite well
        xi = np.clip(np.where(out, xi + r_xi, moved), 0.0, 1.0)
    r_theta = (
        r_theta
        + lam[:, None] * (s.eta_theta * force + np.sqrt(2.0 * s.c_theta * s.eta_theta) * normals[:, :-1])
        - (lam**2 * z_theta)[:, None] * r_theta
    )
    theta = theta + r_theta
    new = TACTState(
        theta, r_theta, xi, r_xi, z_theta, z_xi, abf_sum, abf_count, energy_sum, energy_count
    )
    return new, energy


def checked_tact_step(state, energy_and_force, settings, normals, where: str, remedy: str):
    """:func:`tact_step`, raising ``FloatingPointError`` on a non-finite position or energy.

    The drivers that loop over steps (TACT-HMC, replica exchange) share this check; ``where``
    and ``remedy`` name the step and what to change in the message.
    """
    state, energy = tact_step(state, energy_and_force, settings, normals)
    if not (np.all(np.isfinite(state.theta)) and np.all(np.isfinite(energy))):
        raise FloatingPointError(f"{where} (non-finite position or energy); {remedy}.")
    return state, energy


def initial_tact_state(
    theta: np.ndarray, settings: TACTSettings, rng: np.random.Generator
) -> TACTState:
    """Chains at ``theta (n, D)`` with momenta ``N(0, eta)``, ``xi`` uniform on the flat part
    of the well, thermostats at ``c`` (Algorithm 1, line 1) and empty ABF bins."""
    theta = np.array(theta, dtype=float)
    n, dim = theta.shape
    s = settings
    xi = rng.uniform(0.0, s.unit_temperature_fraction, n) if s.tempering else np.zeros(n)
    return TACTState(
        theta=theta,
        r_theta=np.sqrt(s.eta_theta) * rng.standard_normal((n, dim)),
        xi=xi,
        r_xi=np.sqrt(s.eta_xi) * rng.standard_normal(n),
        z_theta=np.full(n, float(s.c_theta)),
        z_xi=np.full(n, float(s.c_xi)),
        abf_sum=np.zeros((n, s.abf_bins)),
        abf_count=np.zeros((n, s.abf_bins)),
        energy_sum=np.zeros(n),
        energy_count=np.zeros(n),
    )


def thermostat_reference(
    settings: TACTSettings, ndim: int, gradient_noise_sd: float = 0.0, energy_noise_sd: float = 0.0
) -> dict[str, tuple[float, float]]:
    """Mean and standard deviation of each thermostat at equilibrium (Theorem 1).

    Returns
    -------
    dict
        ``{"thermostat_theta": (mean, sd), "thermostat_xi": (mean, sd)}`` in rescaled units.
        Under constant friction (no thermostats) the value is ``c`` exactly.
    """
    s = settings
    return {
        "thermostat_theta": (
            s.c_theta + s.eta_theta * gradient_noise_sd**2 / 2.0,
            float(np.sqrt(s.eta_theta / (s.gamma_theta * ndim))),
        ),
        "thermostat_xi": (
            s.c_xi + s.eta_xi * energy_noise_sd**2 / 2.0,
            float(np.sqrt(s.eta_xi / s.gamma_xi)),
        ),
    }


def compile_with_seeded_minibatches(inputs, outputs, seed):
    """Compile ``outputs`` with their shared random generators (a ``pm.Minibatch``'s) replaced
    by fresh copies seeded by ``seed``: compiling and running never touches the user's model,
    and the same seed draws the same minibatches. ``random_seed=False`` stops ``pm.compile``
    from reseeding the copies with fresh entropy."""
    rngs = [
        v
        for v in graph_inputs(outputs)
        if isinstance(v, pytensor.compile.sharedvalue.SharedVariable)
        and isinstance(v.type, RandomGeneratorType)
    ]
    if rngs:
        seeds = np.random.SeedSequence(seed).spawn(len(rngs))
        replace = {
            r: pytensor.shared(np.random.default_rng(sq), name=r.name)
            for r, sq in zip(rngs, seeds)
        }
        outputs = graph_replace(outputs, replace=replace, strict=False)
    return pm.compile(inputs, outputs, random_seed=False)


def minibatch_energy_and_force(
    target: Target, random_seed=None
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Compile ``theta (n, D) -> (U (n,), f (n, D))`` from the model, once.

    ``U = -log p`` (with Jacobians; with ``total_size`` PyMC already scales a minibatch's
    likelihood by ``|D| / |S|``), ``f = grad log p``. A ``pm.Minibatch`` in the model draws a
    new minibatch at every call (shared by the ``n`` chains of that call), from a generator
    copied from the model's and seeded by ``random_seed``; ``pm.Data`` is read at every call,
    so a callback may change it between steps.
    """
    x = pt.vector("x", dtype="float64")
    logp = target.logp_graph(target.unravel_graph(x))
    grad = pytensor.grad(logp, x)
    xs = pt.matrix("xs", dtype="float64")
    outs = vectorize_graph([logp, grad], replace={x: xs})
    fn = compile_with_seeded_minibatches([xs], [-outs[0], outs[1]], random_seed)

    def energy_and_force(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u, f = fn(np.ascontiguousarray(theta, dtype=float))
        return np.asarray(u, dtype=float), np.asarray(f, dtype=float)

    return energy_and_force


def _noisy(energy_and_force, energy_sd, gradient_sd, rng):
    if not energy_sd and not gradient_sd:
        return energy_and_force

    def noisy(theta):
        u, f = energy_and_force(theta)
        return (
            u + energy_sd * rng.standard_normal(u.shape),
            f + gradient_sd * rng.standard_normal(f.shape),
        )

    return noisy


def sample_tact(
    draws: int = 1000,
    *,
    model: pm.Model | None = None,
    chains: int = 4,
    variant: str = "tact",
    step_size_theta: float = 0.01,
    step_size_xi: float = 0.001,
    noise_theta: float = 0.05,
    noise_xi: float = 0.05,
    thermal_inertia_theta: float = 1.0,
    thermal_inertia_xi: float = 1.0,
    steps_per_sample: int = 50,
    max_temperature: float = 10.0,
    unit_temperature_fraction: float = 0.3,
    abf_bins: int = 20,
    abf_ramp: float = 100.0,
    burn_in: int | None = None,
    resample_momenta: bool = True,
    initial_points: np.ndarray | None = None,
    jitter: float = 1.0,
    max_steps: int | None = None,
    callback: Callable[[int], None] | None = None,
    gradient_noise: float | tuple[float, float] = 0.0,
    random_seed=None,
    progressbar: bool = True,
) -> xr.DataTree:
    """Sample a (minibatched) PyMC model with TACT-HMC (Luo et al. 2018, Algorithm 1).

    Runs the thermostat-assisted continuously-tempered Nosé-Hoover dynamics on the model's flat
    unconstrained space and keeps, every ``steps_per_sample`` steps, the position of each chain
    whose effective temperature is one. The potential and its gradient come from the model
    (compiled once); a ``pm.Minibatch`` in it draws a fresh minibatch at every step, and the
    thermostats absorb the minibatch noise.

    Parameters
    ----------
    draws : int
        Draws kept per chain (at unit effective temperature, after ``burn_in``).
    model : pymc.Model, optional
        Taken from the context when omitted; never modified.
    chains : int
        Independent chains, simulated together (one batched gradient call per step).
    variant : {"tact", "sgnht", "tempering_only", "sghmc"}
        ``"tact"``: the method. Ablations: ``"sgnht"`` thermostats without tempering;
        ``"tempering_only"`` tempering with the constant friction ``noise_*`` in place of the
        thermostats; ``"sghmc"`` constant friction, no tempering.
    step_size_theta, step_size_xi : float
        ``eta = dt^2 / m`` for the parameters and the tempering variable (``eta_theta``,
        ``eta_xi`` of Algorithm 1). The parameters move about ``sqrt(eta)`` per step.
    noise_theta, noise_xi : float
        Level ``c`` of the injected noise ``N(0, 2 c eta)``; also the friction the thermostats
        settle at without gradient noise, and the constant friction of the ablations.
    thermal_inertia_theta, thermal_inertia_xi : float
        ``gamma`` of Algorithm 1: larger is a slower, smoother thermostat.
    steps_per_sample : int
        ``K``: steps between two candidate draws.
    max_temperature : float
        Highest effective temperature, ``1 / lambda(1)``.
    unit_temperature_fraction : float
        Part of the tempering well where the temperature is one (draws are kept there).
    abf_bins, abf_ramp : int, float
        Bins of the adaptive biasing force, and the visits after which a bin's estimate is
        applied in full.
    burn_in : int, optional
        Steps run before any draw is kept (default ``20 * steps_per_sample``).
    resample_momenta : bool
        Redraw the momenta every ``steps_per_sample`` steps (Algorithm 1, line 18). Exact: the
        momenta are ``N(0, eta)`` at every temperature. It also restarts a tempering variable
        idling on a flat part of ``lambda``, where nothing else acts on it.
    initial_points : ndarray, shape (chains, ndim), optional
        Flat unconstrained starting points; default the model's initial point plus uniform
        ``jitter``.
    jitter : float
        Half-width of the uniform jitter of the default starting points.
    max_steps : int, optional
        Give up (``RuntimeError``) when a chain has not collected ``draws`` by then; default
        ``100 * draws * steps_per_sample + burn_in``.
    callback : callable, optional
        ``callback(step)`` before each gradient evaluation, e.g. to set a ``pm.Data`` minibatch.
    gradient_noise : float or (float, float)
        **Testing aid.** Standard deviations of Gaussian noise added to the potential and to each
        gradient component, unknown to the dynamics, as in section 5.1 of the paper. A single
        number is used for both.
    random_seed : int, numpy.random.Generator, optional
    progressbar : bool

    Returns
    -------
    xarray.DataTree
        ``posterior``: the model's variables; ``sample_stats``: ``effective_temperature``,
        ``thermostat_theta``, ``thermostat_xi``, ``tempering_variable``, ``kinetic_temperature``,
        ``potential_energy`` and ``step`` of each kept draw; ``tact_trajectory``: the same (and
        ``kept``) at every ``steps_per_sample`` steps, kept or not; ``abf``: the biasing force
        per bin and chain at the end; attrs: the settings and the variant.

    Raises
    ------
    ValueError
        Discrete free variables, an unknown variant or bad settings.
    FloatingPointError
        When the dynamics diverge (reduce ``step_size_theta``).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}.")
    for name, value in [
        ("step_size_theta", step_size_theta),
        ("step_size_xi", step_size_xi),
        ("thermal_inertia_theta", thermal_inertia_theta),
        ("thermal_inertia_xi", thermal_inertia_xi),
    ]:
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}.")
    if not max_temperature >= 1:
        raise ValueError(f"max_temperature must be at least 1, got {max_temperature}.")
    if not 0 < unit_temperature_fraction < 1:
        raise ValueError("unit_temperature_fraction must lie in (0, 1).")
    draws, chains, steps_per_sample = int(draws), int(chains), int(steps_per_sample)
    model = modelcontext(model)
    target = Target(model)  # refuses discrete models
    thermostat, tempering = VARIANTS[variant]
    settings = TACTSettings(
        eta_theta=float(step_size_theta),
        eta_xi=float(step_size_xi),
        c_theta=float(noise_theta),
        c_xi=float(noise_xi),
        gamma_theta=float(thermal_inertia_theta),
        gamma_xi=float(thermal_inertia_xi),
        unit_temperature_fraction=float(unit_temperature_fraction),
        lambda_min=1.0 / float(max_temperature),
        abf_bins=int(abf_bins),
        abf_ramp=float(abf_ramp),
        thermostat=thermostat,
        tempering=tempering,
    )
    burn_in = 20 * steps_per_sample if burn_in is None else int(burn_in)
    if max_steps is None:
        max_steps = 100 * draws * steps_per_sample + burn_in
    seed_init, seed_dyn, seed_batch, seed_noise = split_seed(random_seed, 4)
    rng = np.random.default_rng(seed_dyn)
    energy_sd, gradient_sd = (
        (float(gradient_noise),) * 2 if np.isscalar(gradient_noise) else map(float, gradient_noise)
    )
    evaluate = _noisy(
        minibatch_energy_and_force(target, seed_batch),
        energy_sd,
        gradient_sd,
        np.random.default_rng(seed_noise),
    )

    if initial_points is None:
        start = target.ravel(model.initial_point())
        init_rng = np.random.default_rng(seed_init)
        initial_points = start + init_rng.uniform(-jitter, jitter, (chains, target.ndim))
    initial_points = np.asarray(initial_points, dtype=float)
    if initial_points.shape != (chains, target.ndim):
        raise ValueError(
            f"initial_points must have shape {(chains, target.ndim)}, got {initial_points.shape}."
        )
    state = initial_tact_state(initial_points, settings, rng)

    ndim = target.ndim
    kept_x = np.empty((chains, draws, ndim))
    stat_names = [
        "effective_temperature",
        "tempering_variable",
        "thermostat_theta",
        "thermostat_xi",
        "kinetic_temperature",
        "potential_energy",
        "step",
    ]
    kept_stats = {name: np.empty((chains, draws)) for name in stat_names}
    trajectory = {name: [] for name in stat_names + ["kept"]}
    n_kept = np.zeros(chains, dtype=int)
    rows = np.arange(chains)
    step = 0
    energy = np.zeros(chains)
    with progress_bar(draws, f"TACT-HMC ({variant})", progressbar) as advance:
        while n_kept.min() < draws:
            if step >= max_steps:
                raise RuntimeError(
                    f"After {step} steps a chain has only {n_kept.min()} of {draws} draws at unit "
                    "temperature; raise max_steps or unit_temperature_fraction, or lower "
                    "max_temperature."
                )
            if callback is not None:
                callback(step)
            step += 1
            state, energy = checked_tact_step(
                state, evaluate, settings, rng.standard_normal((chains, ndim + 1)),
                f"TACT-HMC diverged at step {step}", "reduce step_size_theta or raise noise_theta",
            )
            if step % steps_per_sample:
                continue
            if step > burn_in:
                lam, _ = coupling(state.xi, settings)
                keep = (lam == 1.0) & (n_kept < draws)
                values = {
                    "effective_temperature": 1.0 / lam,
                    "tempering_variable": state.xi,
                    "thermostat_theta": state.z_theta,
                    "thermostat_xi": state.z_xi,
                    "kinetic_temperature": np.sum(state.r_theta**2, axis=-1)
                    / (ndim * settings.eta_theta),
                    "potential_energy": energy,
                    "step": np.full(chains, float(step)),
                }
                for name, v in values.items():
                    trajectory[name].append(np.array(v, dtype=float))
                trajectory["kept"].append(keep.copy())
                if keep.any():
                    idx, slot = rows[keep], n_kept[keep]
                    kept_x[idx, slot] = state.theta[keep]
                    for name, v in values.items():
                        kept_stats[name][idx, slot] = np.asarray(v)[keep]
                    before = n_kept.min()
                    n_kept = n_kept + keep
                    advance(int(n_kept.min() - before))
            if resample_momenta:
                # Momenta are N(0, eta) at every temperature (the kinetic energy is not
                # tempered), so redrawing them leaves the joint distribution invariant.
                state = state._replace(
                    r_theta=np.sqrt(settings.eta_theta) * rng.standard_normal((chains, ndim)),
                    r_xi=np.sqrt(settings.eta_xi) * rng.standard_normal(chains),
                )

    sampled = draws_to_datatree(target, kept_x, sample_stats=kept_stats)
    intervals = np.arange(len(trajectory["kept"]))
    traj = xr.Dataset(
        {
            name: (("chain", "interval"), np.stack(v, axis=1))
            for name, v in trajectory.items()
        },
        coords={"chain": np.arange(chains), "interval": intervals},
    )
    centres = (np.arange(settings.abf_bins) + 0.5) / settings.abf_bins
    lam_c, dlam_c = coupling(centres, settings)
    mean_energy = (state.abf_sum + settings.abf_ramp * (state.energy_sum / np.maximum(state.energy_count, 1.0))[:, None]) / (
        state.abf_count + settings.abf_ramp
    )
    abf = xr.Dataset(
        {
            "mean_energy": (("chain", "abf_bin"), mean_energy),
            "mean_force": (("chain", "abf_bin"), dlam_c * mean_energy),
            "count": (("chain", "abf_bin"), state.abf_count),
        },
        coords={
            "chain": np.arange(chains),
            "abf_bin": np.arange(settings.abf_bins),
            "tempering_variable": ("abf_bin", centres),
            "effective_temperature": ("abf_bin", 1.0 / lam_c),
        },
    )
    attrs = {
        "variant": variant,
        "step_size_theta": settings.eta_theta,
        "step_size_xi": settings.eta_xi,
        "noise_theta": settings.c_theta,
        "noise_xi": settings.c_xi,
        "thermal_inertia_theta": settings.gamma_theta,
        "thermal_inertia_xi": settings.gamma_xi,
        "steps_per_sample": steps_per_sample,
        "max_temperature": float(max_temperature),
        "unit_temperature_fraction": settings.unit_temperature_fraction,
        "abf_bins": settings.abf_bins,
        "burn_in": burn_in,
        "n_steps": step,
        "gradient_noise_sd": gradient_sd,
        "energy_noise_sd": energy_sd,
    }
    return build_result(
        sampled,
        target,
        method="tact_hmc",
        attrs=attrs,
        extra_groups={"tact_trajectory": traj, "abf": abf},
    )
