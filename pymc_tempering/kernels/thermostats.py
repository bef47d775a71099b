"""Nosé-Hoover thermostat dynamics (TACT-HMC, SGNHT, SGHMC): a kernel over a small state.

The extended Hamiltonian of TACT-HMC (eq. 4 of Luo et al. 2018, at reference temperature
``T = 1``)::

    H = lambda(xi) U(theta) + W(xi) + |p_theta|^2 / 2 m_theta + p_xi^2 / 2 m_xi

with ``U = -log p`` the model's (minibatch) potential, is simulated with the Nosé-Hoover
dynamics of eq. (5) with the scalar thermostats ``s_theta``, ``s_xi`` of section 3.3, the
adaptive biasing force of section 3.2 (a binned running average of ``dH/dxi``, eqs. 10-11) and
the reflecting walls of the infinite well ``W``. Everything is written, as in Algorithm 1, in the
rescaled variables::

    r_theta = p_theta dt / m_theta,  r_xi = p_xi dt / m_xi,  z = s dt,
    eta_theta = dt^2 / m_theta,      eta_xi = dt^2 / m_xi,
    gamma_theta = kappa_theta / (m_theta D),  gamma_xi = kappa_xi / m_xi.

Coupling function
-----------------
The tempering variable lives in the well ``[0, 1]``. ``lambda(xi) = 1`` on ``[0, a]``
(``a = unit_temperature_fraction``) and falls smoothly (a cubic smoothstep, so ``lambda'`` is
continuous) to ``1 / max_temperature`` at ``xi = 1``. On the flat part ``lambda' = 0``: there the
tempering variable feels no force and the draws are taken.

Kernel
------
This module holds the kernel only; the ``step_size="auto"`` warm-up that tunes its settings and
preconditions its coordinates is :mod:`pymc_tempering.adaptation`.
:func:`init` and :func:`step` work on an immutable :class:`TACTState` whose arrays carry a
leading axis of ``n`` independent chains (or replicas): ``theta`` is ``(n, D)``, the scalars per
chain ``(n,)`` and the ABF bins ``(n, J)``. One step makes one call of the batched log density
and gradient; the rest is a fixed number of numpy operations on whole arrays, and it returns an
:class:`~pymc_tempering.kernels.Info` (acceptance rate 1: there is no Metropolis test; the
energy is ``U`` where the gradient was taken). A non-finite position or energy raises
:class:`~pymc_tempering.contract.DivergenceError`. The moves shared by the drivers are kernels
too: :func:`refresh_momenta` (exact at every temperature) and :func:`jittered_positions`.
Replica exchange reuses :func:`step` without a tempering variable
(:attr:`ThermostatParams.tempering` None) and with a per-replica ``inverse_temperature`` array.

Reference values (Theorem 1, Fig. 1b-II)
----------------------------------------
At equilibrium the thermostats are Gaussian, independent of the rest of the state, with, in the
rescaled units above and for gradient noise of variance ``sigma_f^2`` per component (energy noise
``sigma_U^2``)::

    E[z_theta] = c_theta + eta_theta sigma_f^2 / 2,   Var[z_theta] = eta_theta / (gamma_theta D),
    E[z_xi]    = c_xi + eta_xi sigma_U^2 / 2,         Var[z_xi]    = eta_xi / gamma_xi,

where ``c`` is the level of the injected noise (:func:`thermostat_reference`). The thermostats
read the kinetic energy as the Euler step's friction leaves it (:func:`_euler_kinetic`), so a
slow thermostat settles at these means in the discrete dynamics too; a fast one's own
fluctuations bend its mean somewhat below them while the positions stay right, and gradient
noise still raises it by ``eta sigma_f^2 / 2``. With one thermostat per coordinate
(:attr:`ThermostatParams.per_coordinate`), coordinate ``i`` settles at ``c_theta + eta_theta
sigma_i^2 / 2`` with variance ``eta_theta / gamma_theta``: each absorbs its own noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pymc_tempering.kernels import Info, check_finite
from pymc_tempering.contract import DivergenceError, NonFiniteGradientError

__all__ = [
    "TemperingParams",
    "ThermostatParams",
    "StepParams",
    "TACTState",
    "KickBeyondBound",
    "coupling",
    "abf_index",
    "abf_mean_energy",
    "abf_force",
    "abf_update",
    "kinetic_temperature",
    "jittered_positions",
    "refresh_momenta",
    "thermostat_start",
    "init",
    "step",
    "thermostat_reference",
    "thermostat_option",
    "finite_gradient_guard",
]


class TemperingParams(NamedTuple):
    """The tempering variable ``xi`` of TACT-HMC, in the rescaled units of Algorithm 1.

    Attributes
    ----------
    eta_xi : float
        ``dt^2 / m_xi``.
    c_xi : float
        Level of the injected noise, ``N(0, 2 c eta)`` per step (and the constant friction when
        thermostats are off); the tempering thermostat starts there.
    gamma_xi : float
        Thermal inertia of its thermostat.
    unit_temperature_fraction : float
        The part ``[0, a]`` of the well ``[0, 1]`` where ``lambda = 1``.
    lambda_min : float
        ``lambda(1) = 1 / max_temperature``.
    abf_bins : int
        Number of equal bins of ``[0, 1]`` for the adaptive biasing force.
    abf_ramp : float
        Weight, in visits, of the chain's overall mean energy in each bin's estimate (see
        :func:`abf_mean_energy`).
    moves : bool
        Move ``xi`` (True) or hold it at 0, so that ``lambda`` is
        :attr:`ThermostatParams.inverse_temperature` (False: the ablations of TACT-HMC without
        tempering; ``xi``'s momentum is still redrawn by :func:`refresh_momenta` and its
        thermostat stays at ``c_xi``).
    """

    eta_xi: float
    c_xi: float
    gamma_xi: float
    unit_temperature_fraction: float = 0.3
    lambda_min: float = 0.1
    abf_bins: int = 20
    abf_ramp: float = 100.0
    moves: bool = True


class ThermostatParams(NamedTuple):
    """The constants of the dynamics, in the rescaled units of Algorithm 1.

    Attributes
    ----------
    eta_theta : float
        ``dt^2 / m`` for the parameters.
    c_theta : float
        Level of injected noise, ``N(0, 2 c eta)`` per step (and the constant friction when
        thermostats are off).
    gamma_theta : float
        Thermal inertia of the thermostats.
    thermostat : bool
        Adaptive thermostats (True) or constant friction ``z = c`` (False).
    per_coordinate : bool
        One thermostat per coordinate of ``theta`` (True) instead of the paper's one scalar
        (False, the default here). A scalar thermostat holds the mean kinetic temperature over
        the coordinates at one, so under gradient noise that differs between coordinates it
        leaves the noisier ones too hot (their posterior sds too wide) and the others too cold.
        One thermostat per coordinate absorbs each coordinate's own noise (Theorem 1 holds
        coordinate by coordinate, for noise uncorrelated between them).
    inverse_temperature : float or ndarray, shape (n,)
        ``lambda`` of each chain where ``xi`` does not move (1 for plain sampling; one value per
        replica for replica exchange).
    tempering : TemperingParams, optional
        The tempering variable (TACT-HMC); None for dynamics at fixed temperatures (replica
        exchange), whose ``xi`` stays at 0 and its thermostat at 0.
    max_friction : float
        Upper bound on both thermostats (default no bound). ``step_size="auto"`` sets 1: a
        chain falling into a deep mode releases energy faster than a Nosé-Hoover thermostat
        can follow, and an Euler friction ``z > 2`` flips and amplifies the momenta; at ``z = 1``
        a step forgets its momentum entirely. At equilibrium the thermostats sit near
        ``c + eta sigma_f^2 / 2`` (at most 0.15 with the warm-up's noise cap), so the bound
        acts only in such transients.
    max_kick : float
        Upper bound on each coordinate's deterministic kick ``eta_theta * force`` in one step,
        in thermal momentum standard deviations ``sqrt(eta_theta)`` (default no bound;
        ``step_size="auto"`` sets :data:`~pymc_tempering.adaptation.blowup.MAX_KICK` from the
        end of its first window, undoing larger kicks until the warm-up's end and taming them
        after it; during the first window the warm-up's blow-ups halve the preconditioner
        instead, which brings a far start to the posterior faster than a bounded kick): a
        taming of the Euler step (Hutzenthaler, Jentzen and Kloeden 2012; the tamed Langevin
        algorithm of Brosse et al. 2019) that acts only where the force is far beyond its
        equilibrium size. Without it a chain thrown against a stiff wall (a hot replica's
        half-normal scale, whose log density has exponential walls on both sides) bounces far
        out in a few steps. A step whose kick was tamed reports ``diverging``.
    kick_raises : bool
        A kick beyond ``max_kick`` raises :class:`KickBeyondBound` instead of being tamed
        (default False). ``step_size="auto"`` sets it from the end of the warm-up's first
        window (the transit) to the end of the warm-up, where
        :func:`~pymc_tempering.adaptation.blowup.update` undoes the iteration and halves the
        preconditioner of the chains whose kick it was: a kick that large means the chain met
        a region much stiffer than where its preconditioner was measured (in replica exchange,
        positions swapped in from hot replicas can widen the preconditioners at a window's
        end; a kick in the stiff region then throws a chain far out with every value finite,
        so that nothing else would undo it).
    """

    eta_theta: float
    c_theta: float
    gamma_theta: float
    thermostat: bool = True
    per_coordinate: bool = False
    inverse_temperature: float | np.ndarray = 1.0
    tempering: TemperingParams | None = None
    max_friction: float = np.inf
    max_kick: float = np.inf
    kick_raises: bool = False

    @property
    def moves_xi(self) -> bool:
        """Whether the tempering variable moves (a :class:`TemperingParams` with ``moves``)."""
        return self.tempering is not None and self.tempering.moves


class StepParams(NamedTuple):
    """What one :func:`step` needs beside the state.

    Attributes
    ----------
    settings : ThermostatParams
    logp_and_grad : callable
        ``theta (n, D) -> (log p (n,), grad log p (n, D))``, possibly a noisy (minibatch)
        estimate (:meth:`~pymc_tempering.target.Target.batched_logp_and_grad`).
    half_kick : bool
        Kick ``theta``'s momenta by half a step's force: for the first step after
        :func:`refresh_momenta`. The Euler step's momenta are leapfrog's, half a step after
        the positions, while a refresh draws the momenta of the positions' own time; the first
        kick brings them to the half step (a full first kick leaves the draws too narrow, the
        more so the fewer steps between refreshes).
    where, remedy : str
        The message of the error on a blow-up: where it happened (the driver names the method
        and the step) and what to change.
    """

    settings: ThermostatParams
    logp_and_grad: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    half_kick: bool = False
    where: str = "The thermostat dynamics diverged"
    remedy: str = "reduce step_size or raise noise"


class KickBeyondBound(DivergenceError):
    """A kick beyond ``ThermostatParams.max_kick`` with ``kick_raises`` set (the warm-up after its
    first window); ``rows`` marks the chains (rows of ``theta``) whose kick it was."""

    def __init__(self, message: str, rows: np.ndarray):
        super().__init__(message)
        self.rows = np.asarray(rows, dtype=bool)


class TACTState(NamedTuple):
    """The state of ``n`` chains. Never modified in place: :func:`step` returns a new one.

    Attributes
    ----------
    theta, r_theta : ndarray, shape (n, D)
        Positions on the model's flat unconstrained space, and rescaled momenta.
    xi, r_xi : ndarray, shape (n,)
        Tempering variable in ``[0, 1]`` and its rescaled momentum.
    z_theta, z_xi : ndarray, shape (n,)
        The thermostats (``s dt``); ``z_theta`` is ``(n, D)`` with one thermostat per
        coordinate (:attr:`ThermostatParams.per_coordinate`).
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


def coupling(xi, settings: ThermostatParams) -> tuple[np.ndarray, np.ndarray]:
    """``lambda(xi)`` and ``lambda'(xi)``.

    Where ``xi`` moves (:attr:`ThermostatParams.moves_xi`), ``lambda = 1`` on ``[0, a]`` and a
    smoothstep down to ``lambda_min`` at 1. Elsewhere ``lambda = settings.inverse_temperature``
    and ``lambda' = 0``.
    """
    xi = np.asarray(xi, dtype=float)
    if not settings.moves_xi:
        lam = np.broadcast_to(np.asarray(settings.inverse_temperature, dtype=float), xi.shape)
        return lam, np.zeros_like(xi)
    t = settings.tempering
    a, drop = t.unit_temperature_fraction, 1.0 - t.lambda_min
    u = np.minimum(np.maximum((xi - a) / (1.0 - a), 0.0), 1.0)  # np.clip, at 2/5 of its cost
    lam = 1.0 - drop * u * u * (3.0 - 2.0 * u)
    dlam = -drop * 6.0 * u * (1.0 - u) / (1.0 - a)
    return lam, dlam


def abf_index(xi, n_bins: int) -> np.ndarray:
    """The ABF bin of each ``xi`` in ``[0, 1]``."""
    return np.minimum(np.maximum((np.asarray(xi) * n_bins).astype(int), 0), n_bins - 1)


def abf_mean_energy(state: TACTState, tempering: TemperingParams, bins=None) -> np.ndarray:
    """The estimate of ``<U | xi>`` in every ABF bin, shape (n, J), or with ``bins`` (n,) in
    bin ``bins[i]`` of chain ``i`` only, shape (n,).

    The running time average over the bin (eq. 11), shrunk towards the chain's running mean of
    ``U`` over all steps with the weight of ``abf_ramp`` visits:
    ``(sum_j + ramp * mean_all) / (count_j + ramp)``. The shrinkage stands in for the usual ABF
    ramp (a bin's first noisy values do not kick ``xi``); it also cancels at once the arbitrary
    constant in ``U`` (which only reweights ``xi`` and which ABF removes anyway), so a model whose
    log density is far from zero (a neural network on many data) does not throw ``xi`` against
    the wall before the bins fill.
    """
    overall = state.energy_sum / np.maximum(state.energy_count, 1.0)
    ramp = tempering.abf_ramp
    if bins is not None:
        rows = np.arange(state.xi.shape[0])
        return (state.abf_sum[rows, bins] + ramp * overall) / (state.abf_count[rows, bins] + ramp)
    return (state.abf_sum + ramp * overall[:, None]) / (state.abf_count + ramp)


def abf_force(state: TACTState, tempering: TemperingParams, bins, dlam) -> np.ndarray:
    """The adaptive biasing force ``A'(xi) = <dH/dxi | xi>`` (eq. 11) each chain feels now.

    Inside the well ``dH/dxi = lambda'(xi) U``, so ``A'(xi) = lambda'(xi) <U | xi>`` with the
    conditional mean of :func:`abf_mean_energy` in ``xi``'s bin. Shape (n,). ``bins``
    (:func:`abf_index`) and ``dlam`` (:func:`coupling`) are those of ``state.xi``, which the
    step has already.
    """
    return dlam * abf_mean_energy(state, tempering, bins)


def abf_update(state: TACTState, energy: np.ndarray, bins) -> TACTState:
    """Add this step's potential ``energy (n,)`` to the bin of each chain's ``xi`` (eq. 11);
    ``bins``: :func:`abf_index` of ``state.xi``."""
    rows = np.arange(state.xi.shape[0])
    abf_sum, abf_count = state.abf_sum.copy(), state.abf_count.copy()
    abf_sum[rows, bins] += energy
    abf_count[rows, bins] += 1.0
    return state._replace(
        abf_sum=abf_sum,
        abf_count=abf_count,
        energy_sum=state.energy_sum + energy,
        energy_count=state.energy_count + 1.0,
    )


def kinetic_temperature(state: TACTState, settings: ThermostatParams) -> np.ndarray:
    """``|r_theta|^2 / (D eta_theta)`` per chain: one at equilibrium (momenta are ``N(0, eta)``)."""
    return np.sum(state.r_theta**2, axis=-1) / (state.theta.shape[-1] * settings.eta_theta)


def jittered_positions(start: np.ndarray, jitter: float, shape, rng: np.random.Generator):
    """Starting points: the flat point ``start (D,)`` plus uniform noise on ``[-jitter, jitter]``.

    ``shape`` is the shape of the result, ending in ``D`` (``(chains, D)``, or
    ``(chains, replicas, D)``).
    """
    return start + rng.uniform(-jitter, jitter, shape)


def refresh_momenta(
    state: TACTState, settings: ThermostatParams, rng: np.random.Generator, *,
    tempering: bool = True,
) -> TACTState:
    """Redraw the momenta from ``N(0, eta)`` (Algorithm 1, line 18).

    Exact at every temperature (the kinetic energy is not tempered), so it leaves the joint
    distribution invariant. It also restarts a tempering variable idling on a flat part of
    ``lambda``, where nothing else acts on it. ``r_theta`` is drawn first, then (with
    ``tempering``) ``r_xi``, from ``N(0, eta_xi)``, or ``N(0, 1)`` where the settings have no
    tempering variable (nothing reads it there); without, ``r_xi`` is left as it is.
    """
    n, dim = state.theta.shape
    r_theta = np.sqrt(settings.eta_theta) * rng.standard_normal((n, dim))
    eta_xi = 1.0 if settings.tempering is None else settings.tempering.eta_xi
    r_xi = np.sqrt(eta_xi) * rng.standard_normal(n) if tempering else state.r_xi
    return state._replace(r_theta=r_theta, r_xi=r_xi)


def init(theta: np.ndarray, settings: ThermostatParams, rng: np.random.Generator) -> TACTState:
    """Chains at ``theta (n, D)`` with ``xi`` uniform on the flat part of the well (where it
    moves; 0 elsewhere), momenta ``N(0, eta)`` (:func:`refresh_momenta`), thermostats at ``c``
    (Algorithm 1, line 1; the tempering one at 0 without a tempering variable) and empty ABF
    bins (none without a tempering variable)."""
    theta = np.array(theta, dtype=float)
    n, _ = theta.shape
    s, t = settings, settings.tempering
    xi = rng.uniform(0.0, t.unit_temperature_fraction, n) if s.moves_xi else np.zeros(n)
    bins = 0 if t is None else t.abf_bins
    state = TACTState(
        theta=theta,
        r_theta=np.zeros_like(theta),
        xi=xi,
        r_xi=np.zeros(n),
        z_theta=thermostat_start(theta.shape, s),
        z_xi=np.full(n, 0.0 if t is None else float(t.c_xi)),
        abf_sum=np.zeros((n, bins)),
        abf_count=np.zeros((n, bins)),
        energy_sum=np.zeros(n),
        energy_count=np.zeros(n),
    )
    return refresh_momenta(state, s, rng)


def thermostat_option(thermostat, constant_friction: bool = False) -> tuple[bool, bool]:
    """``(thermostat, per_coordinate)`` of :class:`ThermostatParams` from a sampler's ``thermostat``
    argument: ``"diagonal"`` (one per coordinate), ``"scalar"`` (one per chain) or, where
    ``constant_friction`` allows it, False (no thermostat: the constant friction ``c``)."""
    off = constant_friction and thermostat is False
    if not off and thermostat not in ("diagonal", "scalar"):
        allowed = "'diagonal', 'scalar' or False" if constant_friction else "'diagonal' or 'scalar'"
        raise ValueError(f"thermostat must be {allowed}, got {thermostat!r}.")
    return not off, thermostat == "diagonal"


def thermostat_start(shape, s: ThermostatParams) -> np.ndarray:
    """The parameters' thermostats at ``c``: ``(n,)``, or ``(n, D)`` per coordinate."""
    return np.full(shape if s.per_coordinate else shape[:1], float(s.c_theta))


def _euler_kinetic(r_sq, friction):
    """``r^2 (1 - f / 2)``: the kinetic energy of momenta ``r`` under an Euler friction ``f``
    per step, as the thermostats read it.

    The Euler step damps by ``r (1 - f)`` and adds noise of variance ``2 eta D`` (injected plus
    gradient noise), so the momenta settle at ``E[r^2] = eta D / (f (1 - f / 2))``, not at
    ``eta D / f``. A thermostat that held ``E[r^2]`` at ``eta`` would settle at
    ``f = 1 - sqrt(1 - 2 D)``, above Theorem 1's ``D``, and the positions would be cold by
    ``D / f`` (a harmonic well's variance 2.6% low at ``D = c = 0.05``, 8% low at the warm-up's
    noise budget ``D = 0.15``). Holding ``E[r^2] (1 - f / 2)`` at ``eta`` instead puts the
    fixed point at ``f = D``, Theorem 1's, where the positions' variance is right up to
    ``O(eta curvature)``.
    """
    return r_sq * (1.0 - 0.5 * friction)


def _thermostats(state: TACTState, s: ThermostatParams, lam, dlam):
    """The thermostats' update (eq. 5): each moves by the excess of its kinetic energy (the
    mean over the coordinates for a scalar ``z_theta``, each coordinate's own otherwise), as
    the Euler step's friction leaves it (:func:`_euler_kinetic`). The tempering thermostat
    moves only with ``xi`` (its update is ``lambda'^2`` times the excess, zero elsewhere)."""
    if not s.thermostat:
        return state.z_theta, state.z_xi
    z_xi = state.z_xi
    if s.moves_xi:
        t = s.tempering
        z_xi = z_xi + dlam**2 * (
            _euler_kinetic(state.r_xi**2, dlam**2 * state.z_xi) - t.eta_xi
        ) / t.gamma_xi
    if s.per_coordinate:
        weight = (lam**2)[:, None]
        kinetic = _euler_kinetic(state.r_theta**2, weight * state.z_theta)
    else:
        weight = lam**2
        kinetic = np.mean(_euler_kinetic(state.r_theta**2, (weight * state.z_theta)[:, None]), -1)
    z_theta = state.z_theta + weight * (kinetic - s.eta_theta) / s.gamma_theta
    if s.max_friction < np.inf:
        z_theta, z_xi = np.minimum(z_theta, s.max_friction), np.minimum(z_xi, s.max_friction)
    return z_theta, z_xi


def _move_xi(state: TACTState, t: TemperingParams, energy, dlam, z_xi, noise) -> TACTState:
    """The tempering variable's step: force, friction, biasing force, then the well's walls.
    ``dlam``: :func:`coupling`'s ``lambda'`` at ``state.xi``."""
    bins = abf_index(state.xi, t.abf_bins)
    bias = abf_force(state, t, bins, dlam)
    r_xi = (
        state.r_xi
        - dlam * (t.eta_xi * energy + np.sqrt(2.0 * t.c_xi * t.eta_xi) * noise)
        - dlam**2 * z_xi * state.r_xi
        + t.eta_xi * bias
    )
    state = abf_update(state, energy, bins)
    moved = state.xi + r_xi
    out = (moved < 0.0) | (moved > 1.0)
    r_xi = np.where(out, -r_xi, r_xi)  # elastic bounce off the infinite well
    xi = np.minimum(np.maximum(np.where(out, state.xi + r_xi, moved), 0.0), 1.0)
    return state._replace(xi=xi, r_xi=r_xi)


def step(state: TACTState, params: StepParams, rng: np.random.Generator) -> tuple[TACTState, Info]:
    """One Euler step of the Nosé-Hoover dynamics (eq. 5 with eq. 10), as in Algorithm 1.

    Parameters
    ----------
    state : TACTState
    params : StepParams
        The settings, the log density and its gradient, whether the kick is a half one and
        what the error of a blow-up says.
    rng : numpy.random.Generator
        Draws the injected noise, ``(n, D + 1)`` standard normals (last column for ``xi``).

    Returns
    -------
    new_state : TACTState
    info : Info
        ``acceptance_rate`` 1, ``diverging`` where a kick was tamed (``max_kick``), ``energy``
        the potential ``U = -log p`` at the old ``theta`` (where the gradient was taken).

    Raises
    ------
    DivergenceError
        When the new position or the energy is not finite (the message is
        ``params.where`` and ``params.remedy``); :class:`KickBeyondBound` for a kick beyond
        ``max_kick`` with ``kick_raises``.
    """
    s, where, half_kick = params.settings, params.where, params.half_kick
    normals = rng.standard_normal((state.theta.shape[0], state.theta.shape[-1] + 1))
    lam, dlam = coupling(state.xi, s)
    z_theta, z_xi = _thermostats(state, s, lam, dlam)
    logp, force = params.logp_and_grad(state.theta)
    energy = -np.asarray(logp, dtype=float)
    new = state._replace(z_theta=z_theta, z_xi=z_xi)
    if s.moves_xi:
        new = _move_xi(new, s.tempering, energy, dlam, z_xi, normals[:, -1])
    kick = (0.5 * s.eta_theta if half_kick else s.eta_theta) * np.asarray(force, dtype=float)
    limit = s.max_kick * np.sqrt(s.eta_theta)
    with np.errstate(invalid="ignore"):
        tamed = np.abs(kick) > limit
    if tamed.any():  # only there, so that runs the bound does not touch keep their bits
        if s.kick_raises:
            raise KickBeyondBound(
                f"{where}: a kick of {np.nanmax(np.abs(kick) / np.sqrt(s.eta_theta)):.3g} thermal "
                f"momentum sds, beyond max_kick ({s.max_kick:g}).",
                rows=tamed.any(axis=-1),
            )
        kick = np.where(tamed, np.clip(kick, -limit, limit), kick)
    r_theta = (
        state.r_theta
        + lam[:, None] * (kick + np.sqrt(2.0 * s.c_theta * s.eta_theta) * normals[:, :-1])
        - (lam**2)[:, None] * (z_theta if s.per_coordinate else z_theta[:, None])
        * state.r_theta
    )
    new = new._replace(theta=state.theta + r_theta, r_theta=r_theta)
    check_finite([new.theta, energy], where, params.remedy)
    n = energy.shape[0]
    return new, Info(np.ones(n), tamed.any(axis=-1), energy)


def thermostat_reference(
    settings: ThermostatParams, ndim: int, gradient_noise_sd: float = 0.0,
    energy_noise_sd: float = 0.0,
) -> dict[str, tuple[float, float]]:
    """Mean and standard deviation of each thermostat at equilibrium (Theorem 1).

    Returns
    -------
    dict
        ``{"thermostat_theta": (mean, sd), "thermostat_xi": (mean, sd)}`` in rescaled units
        (``thermostat_xi`` only where the settings have a tempering variable). Under constant
        friction (no thermostats) the value is ``c`` exactly. With one thermostat per
        coordinate, ``thermostat_theta`` is that of their mean over the ``ndim`` coordinates
        (each has the mean shown and ``sqrt(ndim)`` times the sd; they are independent at
        equilibrium).
    """
    s, t = settings, settings.tempering
    out = {
        "thermostat_theta": (
            s.c_theta + s.eta_theta * gradient_noise_sd**2 / 2.0,
            float(np.sqrt(s.eta_theta / (s.gamma_theta * ndim))),
        ),
    }
    if t is not None:
        out["thermostat_xi"] = (
            t.c_xi + t.eta_xi * energy_noise_sd**2 / 2.0,
            float(np.sqrt(t.eta_xi / t.gamma_xi)),
        )
    return out


def finite_gradient_guard(
    logp_and_grad: Callable, target, describe_row: Callable[[int], str], remedy: str
) -> Callable:
    """``logp_and_grad`` that raises :class:`~pymc_tempering.contract.NonFiniteGradientError`
    where a finite position has a finite log density but a non-finite gradient.

    Without it the next position is NaN and the warm-up halves its step again and again to no
    avail (a mixture weight written as ``w`` and ``1 - w``, whose hot replicas reach
    ``w_logodds__`` above 37, where ``1 - w`` rounds to 0). ``describe_row(i)`` says which chain or replica row ``i`` is; ``remedy`` what to change.
    """

    def guarded(theta):
        lp, grad = logp_and_grad(theta)
        grad = np.asarray(grad)
        bad = ~np.isfinite(grad)
        if bad.any():
            ok_rows = np.isfinite(np.asarray(lp)) & np.all(np.isfinite(theta), axis=-1)
            bad &= ok_rows[:, None]
            if bad.any():
                row, k = (int(i) for i in np.argwhere(bad)[0])
                raise NonFiniteGradientError(
                    "The model's log density is finite but its gradient is not at "
                    f"{target.flat_label(k)} = {theta[row, k]:.6g} (unconstrained; "
                    f"{describe_row(row)}): no step size cures that, the model's arithmetic "
                    f"breaks down there (an underflow such as 1 - w == 0, or a log of 0); "
                    f"{remedy}."
                )
        return lp, grad

    return guarded
