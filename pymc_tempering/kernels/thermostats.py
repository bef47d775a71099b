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
:func:`init` and :func:`step` work on an immutable :class:`TACTState` whose arrays carry a
leading axis of ``n`` independent chains (or replicas): ``theta`` is ``(n, D)``, the scalars per
chain ``(n,)`` and the ABF bins ``(n, J)``. One step makes one call of the batched log density
and gradient; the rest is a fixed number of numpy operations on whole arrays, and it returns an
:class:`~pymc_tempering.driver.Info` (acceptance rate 1: there is no Metropolis test; the
energy is ``U`` where the gradient was taken). A non-finite position or energy raises
:class:`~pymc_tempering.contract.DivergenceError`. The moves shared by the drivers are kernels
too: :func:`refresh_momenta` (exact at every temperature) and :func:`jittered_positions`.
Replica exchange reuses :func:`step` with ``tempering=False`` and a per-replica
``inverse_temperature`` array.

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
fluctuations bend its mean below them (0.041 against ``c = 0.05`` at ``gamma_theta = 1`` on a
2-D Gaussian) while the positions stay right, and gradient noise still raises it by
``eta sigma_f^2 / 2``. With one thermostat per coordinate
(:attr:`TACTSettings.per_coordinate`), coordinate ``i`` settles at ``c_theta + eta_theta
sigma_i^2 / 2`` with variance ``eta_theta / gamma_theta``: each absorbs its own noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import scipy.linalg

from pymc_tempering.kernels import Info, check_finite
from pymc_tempering.contract import DivergenceError, NonFiniteGradientError, warn

__all__ = [
    "TACTSettings",
    "TACTState",
    "coupling",
    "abf_index",
    "abf_mean_energy",
    "abf_force",
    "abf_update",
    "kinetic_temperature",
    "jittered_positions",
    "refresh_momenta",
    "init",
    "step",
    "thermostat_reference",
    "thermostat_option",
    "AUTO_STEP_SIZE",
    "AUTO_STEP_SIZE_TEMPERING",
    "whitened",
    "Basis",
    "in_model_units",
    "in_dynamics_units",
    "DENSE_MAX_DIM",
    "decorrelating_basis",
    "curvature_scale",
    "gradient_noise",
    "tempering_step_size",
    "tempering_step_cap",
    "window_ends",
    "curvature_at",
    "stability_cap",
    "noise_rotation",
    "warmup_kick_bound",
    "NOISE_PAIRS_PER_DIM",
    "Spread",
    "spread_empty",
    "spread_add",
    "spread_sd",
    "spread_cov",
    "adapted_scale",
    "in_new_coordinates",
    "compose",
    "window_basis",
    "rescale",
    "start_preconditioner",
]


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
        Weight, in visits, of the chain's overall mean energy in each bin's estimate (see
        :func:`abf_mean_energy`).
    thermostat : bool
        Adaptive thermostats (True) or constant friction ``z = c`` (False).
    tempering : bool
        Move ``xi`` (True) or hold ``lambda = inverse_temperature`` fixed (False).
    inverse_temperature : float or ndarray, shape (n,)
        ``lambda`` of each chain when ``tempering`` is False (1 for plain sampling; one value per
        replica for replica exchange).
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
        ``step_size="auto"`` sets ``MAX_KICK`` at the end of the warm-up, whose blow-ups halve
        the preconditioner instead, which brings a far start to the posterior faster than a
        bounded kick: from ``theta = 50`` on the sign-flip model, bounded kicks had covered a
        quarter of the way after 100 warm-up iterations): a taming of the Euler step (Hutzenthaler,
        Jentzen and Kloeden 2012; the tamed Langevin algorithm of Brosse et al. 2019) that
        acts only where the force is far beyond its equilibrium size. Without it a chain thrown
        against a stiff wall (a hot replica's half-normal scale, whose log density has
        exponential walls on both sides) bounced to ``log s = -300`` in a few steps. A step
        whose kick was tamed reports ``diverging``.
    kick_raises : bool
        A kick beyond ``max_kick`` raises :class:`KickBeyondBound` instead of being tamed
        (default False). ``step_size="auto"`` sets it from the end of the warm-up's first
        window (the transit) to the end of the warm-up, where :func:`recover_blowup` undoes
        the iteration and halves the preconditioner of the chains whose kick it was: a kick
        that large means the chain met a region much stiffer than where its preconditioner
        was measured. Measured on a two-component normal mixture (10,000 data in minibatches
        of 200, replica exchange at its defaults, 2026-11-24): positions swapped in from hot
        replicas, where a component can empty and its mean follows the prior, had widened the
        preconditioners at a window's end; the first kick in the stiff region threw a mean to
        144 within one iteration (every value finite, so nothing was undone), the next windows
        shrank the preconditioners to where the chains sat, and all 4,000 draws were tamed,
        with means of order 1e4.
    per_coordinate : bool
        One thermostat per coordinate of ``theta`` (True) instead of the paper's one scalar
        (False, the default here). A scalar thermostat holds the mean kinetic temperature over
        the coordinates at one, so under gradient noise that differs between coordinates it
        leaves the noisier ones too hot and the others too cold: on a logistic regression with
        20,000 data and minibatches of 200, per-coordinate kinetic temperatures of 0.59 to
        1.54 and posterior sds 0.71 to 1.18 times the truth. One thermostat per coordinate
        absorbs each coordinate's own noise (Theorem 1 holds coordinate by coordinate, for
        noise uncorrelated between them).
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
    max_friction: float = np.inf
    max_kick: float = np.inf
    per_coordinate: bool = False
    kick_raises: bool = False


#: ``TACTSettings.max_kick`` of ``step_size="auto"``: ten thermal momentum standard deviations.
#: At equilibrium a kick is about ``eta |force|`` with ``|force|`` of order one in the
#: preconditioner's units (0.1 of a thermal sd at ``eta = 0.01``), and the warm-up's noise cap
#: keeps the minibatch noise's share below 0.5 of one, so the bound acts only far from
#: equilibrium: on a minibatched regression (30,000 data, 2026-11-24) in the first warm-up
#: windows and, after them, 7 to 24 times in 10,000 steps, all at the hottest replica of
#: replica exchange (measured with the bound from the start).
MAX_KICK = 10.0


def warmup_kick_bound(settings: TACTSettings, it: int, first: int, tune: int) -> TACTSettings:
    """The kick bound of the ``step_size="auto"`` warm-up after its iteration ``it``: none in
    the first window (the transit, ending at ``first``, whose kicks are large by design), then
    ``MAX_KICK`` with ``kick_raises`` (a kick beyond it undone, :func:`recover_blowup`) to the
    end of the warm-up (``tune``), then ``MAX_KICK`` tamed (see :class:`TACTSettings`)."""
    if it == first:
        settings = settings._replace(max_kick=MAX_KICK, kick_raises=True)
    if it == tune - 1:
        settings = settings._replace(max_kick=MAX_KICK, kick_raises=False)
    return settings


class KickBeyondBound(DivergenceError):
    """A kick beyond ``TACTSettings.max_kick`` with ``kick_raises`` set (the warm-up after its
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
        coordinate (:attr:`TACTSettings.per_coordinate`).
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
    u = np.minimum(np.maximum((xi - a) / (1.0 - a), 0.0), 1.0)  # np.clip, at 2/5 of its cost
    lam = 1.0 - drop * u * u * (3.0 - 2.0 * u)
    dlam = -drop * 6.0 * u * (1.0 - u) / (1.0 - a)
    return lam, dlam


def abf_index(xi, n_bins: int) -> np.ndarray:
    """The ABF bin of each ``xi`` in ``[0, 1]``."""
    return np.minimum(np.maximum((np.asarray(xi) * n_bins).astype(int), 0), n_bins - 1)


def abf_mean_energy(state: TACTState, settings: TACTSettings, bins=None) -> np.ndarray:
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
    ramp = settings.abf_ramp
    if bins is not None:
        rows = np.arange(state.xi.shape[0])
        return (state.abf_sum[rows, bins] + ramp * overall) / (state.abf_count[rows, bins] + ramp)
    return (state.abf_sum + ramp * overall[:, None]) / (state.abf_count + ramp)


def abf_force(state: TACTState, settings: TACTSettings, bins, dlam) -> np.ndarray:
    """The adaptive biasing force ``A'(xi) = <dH/dxi | xi>`` (eq. 11) each chain feels now.

    Inside the well ``dH/dxi = lambda'(xi) U``, so ``A'(xi) = lambda'(xi) <U | xi>`` with the
    conditional mean of :func:`abf_mean_energy` in ``xi``'s bin. Shape (n,). ``bins``
    (:func:`abf_index`) and ``dlam`` (:func:`coupling`) are those of ``state.xi``, which the
    step has already.
    """
    return dlam * abf_mean_energy(state, settings, bins)


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


def kinetic_temperature(state: TACTState, settings: TACTSettings) -> np.ndarray:
    """``|r_theta|^2 / (D eta_theta)`` per chain: one at equilibrium (momenta are ``N(0, eta)``)."""
    return np.sum(state.r_theta**2, axis=-1) / (state.theta.shape[-1] * settings.eta_theta)


def jittered_positions(start: np.ndarray, jitter: float, shape, rng: np.random.Generator):
    """Starting points: the flat point ``start (D,)`` plus uniform noise on ``[-jitter, jitter]``.

    ``shape`` is the shape of the result, ending in ``D`` (``(chains, D)``, or
    ``(chains, replicas, D)``).
    """
    return start + rng.uniform(-jitter, jitter, shape)


def refresh_momenta(
    state: TACTState, settings: TACTSettings, rng: np.random.Generator, *, tempering: bool = True
) -> TACTState:
    """Redraw the momenta from ``N(0, eta)`` (Algorithm 1, line 18).

    Exact at every temperature (the kinetic energy is not tempered), so it leaves the joint
    distribution invariant. It also restarts a tempering variable idling on a flat part of
    ``lambda``, where nothing else acts on it. ``r_theta`` is drawn first, then (with
    ``tempering``) ``r_xi``; without, ``r_xi`` is left as it is.
    """
    n, dim = state.theta.shape
    r_theta = np.sqrt(settings.eta_theta) * rng.standard_normal((n, dim))
    r_xi = np.sqrt(settings.eta_xi) * rng.standard_normal(n) if tempering else state.r_xi
    return state._replace(r_theta=r_theta, r_xi=r_xi)


def init(theta: np.ndarray, settings: TACTSettings, rng: np.random.Generator) -> TACTState:
    """Chains at ``theta (n, D)`` with ``xi`` uniform on the flat part of the well (when
    tempering), momenta ``N(0, eta)``, thermostats at ``c`` (Algorithm 1, line 1) and empty ABF
    bins."""
    theta = np.array(theta, dtype=float)
    n, _ = theta.shape
    s = settings
    xi = rng.uniform(0.0, s.unit_temperature_fraction, n) if s.tempering else np.zeros(n)
    state = TACTState(
        theta=theta,
        r_theta=np.zeros_like(theta),
        xi=xi,
        r_xi=np.zeros(n),
        z_theta=_thermostat_start(theta.shape, s),
        z_xi=np.full(n, float(s.c_xi)),
        abf_sum=np.zeros((n, s.abf_bins)),
        abf_count=np.zeros((n, s.abf_bins)),
        energy_sum=np.zeros(n),
        energy_count=np.zeros(n),
    )
    return refresh_momenta(state, s, rng)


def thermostat_option(thermostat, constant_friction: bool = False) -> tuple[bool, bool]:
    """``(thermostat, per_coordinate)`` of :class:`TACTSettings` from a sampler's ``thermostat``
    argument: ``"diagonal"`` (one per coordinate), ``"scalar"`` (one per chain) or, where
    ``constant_friction`` allows it, False (no thermostat: the constant friction ``c``)."""
    off = constant_friction and thermostat is False
    if not off and thermostat not in ("diagonal", "scalar"):
        allowed = "'diagonal', 'scalar' or False" if constant_friction else "'diagonal' or 'scalar'"
        raise ValueError(f"thermostat must be {allowed}, got {thermostat!r}.")
    return not off, thermostat == "diagonal"


def _thermostat_start(shape, s: TACTSettings) -> np.ndarray:
    """The parameters' thermostats at ``c``: ``(n,)``, or ``(n, D)`` per coordinate."""
    return np.full(shape if s.per_coordinate else shape[:1], float(s.c_theta))


def _euler_kinetic(r_sq, friction):
    """``r^2 (1 - f / 2)``: the kinetic energy of momenta ``r`` under an Euler friction ``f``
    per step, as the thermostats read it.

    The Euler step damps by ``r (1 - f)`` and adds noise of variance ``2 eta D`` (injected plus
    gradient noise), so the momenta settle at ``E[r^2] = eta D / (f (1 - f / 2))``, not at
    ``eta D / f``. A thermostat that held ``E[r^2]`` at ``eta`` would settle at
    ``f = 1 - sqrt(1 - 2 D)``, above Theorem 1's ``D``, and the positions would be cold by
    ``D / f``: a harmonic well's variance 2.6% low at ``D = c = 0.05`` and 8% low at the warm-up's
    noise budget (``D = 0.15``). Holding ``E[r^2] (1 - f / 2)`` at ``eta`` instead puts the
    fixed point at ``f = D``, where the positions' variance is right up to ``O(eta
    curvature)``: on a 6-D standard normal (4 chains of 4,000 draws, seeds 2 and 3) the sds went
    from 0.987-0.995 to 0.993-0.998 of the truth for both samplers, and on the minibatched
    example of ``docs/tact_hmc.md`` ``z_theta`` from 0.25 to Theorem 1's 0.22.
    """
    return r_sq * (1.0 - 0.5 * friction)


def _thermostats(state: TACTState, s: TACTSettings, lam, dlam):
    """The thermostats' update (eq. 5): each moves by the excess of its kinetic energy (the
    mean over the coordinates for a scalar ``z_theta``, each coordinate's own otherwise), as
    the Euler step's friction leaves it (:func:`_euler_kinetic`)."""
    if not s.thermostat:
        return state.z_theta, state.z_xi
    z_xi = state.z_xi + dlam**2 * (
        _euler_kinetic(state.r_xi**2, dlam**2 * state.z_xi) - s.eta_xi
    ) / s.gamma_xi
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


def _move_xi(state: TACTState, s: TACTSettings, energy, dlam, z_xi, noise) -> TACTState:
    """The tempering variable's step: force, friction, biasing force, then the well's walls.
    ``dlam``: :func:`coupling`'s ``lambda'`` at ``state.xi``."""
    bins = abf_index(state.xi, s.abf_bins)
    bias = abf_force(state, s, bins, dlam)
    r_xi = (
        state.r_xi
        - dlam * (s.eta_xi * energy + np.sqrt(2.0 * s.c_xi * s.eta_xi) * noise)
        - dlam**2 * z_xi * state.r_xi
        + s.eta_xi * bias
    )
    state = abf_update(state, energy, bins)
    moved = state.xi + r_xi
    out = (moved < 0.0) | (moved > 1.0)
    r_xi = np.where(out, -r_xi, r_xi)  # elastic bounce off the infinite well
    xi = np.minimum(np.maximum(np.where(out, state.xi + r_xi, moved), 0.0), 1.0)
    return state._replace(xi=xi, r_xi=r_xi)


def step(
    state: TACTState,
    settings: TACTSettings,
    logp_and_grad: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    rng: np.random.Generator,
    *,
    where: str = "The thermostat dynamics diverged",
    remedy: str = "reduce step_size or raise noise",
    half_kick: bool = False,
) -> tuple[TACTState, Info]:
    """One Euler step of the Nosé-Hoover dynamics (eq. 5 with eq. 10), as in Algorithm 1.

    Parameters
    ----------
    state : TACTState
    settings : TACTSettings
    logp_and_grad : callable
        ``theta (n, D) -> (log p (n,), grad log p (n, D))``, possibly a noisy (minibatch)
        estimate (:meth:`~pymc_tempering.target.Target.batched_logp_and_grad`).
    rng : numpy.random.Generator
        Draws the injected noise, ``(n, D + 1)`` standard normals (last column for ``xi``).
    where, remedy : str
        The message of the error on a blow-up: where it happened and what to change.
    half_kick : bool
        Kick ``theta``'s momenta by half a step's force: for the first step after
        :func:`refresh_momenta`. The Euler step's momenta are leapfrog's, half a step after
        the positions, while a refresh draws the momenta of the positions' own time; the first
        kick brings them to the half step. With a full first kick the draws came out 4% narrow
        on a 6-D standard normal (replica exchange, 10 steps between refreshes, exact
        gradients; 2% with 50), and 1 to 2% with the half kick.

    Returns
    -------
    new_state : TACTState
    info : Info
        ``acceptance_rate`` 1, ``diverging`` where a kick was tamed (``max_kick``), ``energy``
        the potential ``U = -log p`` at the old ``theta`` (where the gradient was taken).

    Raises
    ------
    DivergenceError
        When the new position or the energy is not finite.
    """
    s = settings
    normals = rng.standard_normal((state.theta.shape[0], state.theta.shape[-1] + 1))
    lam, dlam = coupling(state.xi, s)
    z_theta, z_xi = _thermostats(state, s, lam, dlam)
    logp, force = logp_and_grad(state.theta)
    energy = -np.asarray(logp, dtype=float)
    new = state._replace(z_theta=z_theta, z_xi=z_xi)
    if s.tempering:
        new = _move_xi(new, s, energy, dlam, z_xi, normals[:, -1])
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
    check_finite([new.theta, energy], where, remedy)
    n = energy.shape[0]
    return new, Info(np.ones(n), tamed.any(axis=-1), energy)


def thermostat_reference(
    settings: TACTSettings, ndim: int, gradient_noise_sd: float = 0.0, energy_noise_sd: float = 0.0
) -> dict[str, tuple[float, float]]:
    """Mean and standard deviation of each thermostat at equilibrium (Theorem 1).

    Returns
    -------
    dict
        ``{"thermostat_theta": (mean, sd), "thermostat_xi": (mean, sd)}`` in rescaled units.
        Under constant friction (no thermostats) the value is ``c`` exactly. With one
        thermostat per coordinate, ``thermostat_theta`` is that of their mean over the ``ndim``
        coordinates (each has the mean shown and ``sqrt(ndim)`` times the sd; they are
        independent at equilibrium).
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


# ------------------------------------------------------------------------------ the warm-up
#: ``step_size="auto"``: ``eta`` in the preconditioned units (moves of about 0.1 of the
#: preconditioner's scale per step).
AUTO_STEP_SIZE = 0.01
#: ``step_size_tempering="auto"``: ``eta_xi`` without energy noise, and the bound
#: ``eta_xi sigma_U^2 / 2 <= XI_NOISE_BUDGET`` on the thermostat's excess with it.
AUTO_STEP_SIZE_TEMPERING = 0.001
XI_NOISE_BUDGET = 0.05
#: The warm-up's adaptation windows end at these fractions of ``tune``; the last quarter runs
#: with the final settings.
WINDOW_ENDS = (0.15, 0.3, 0.5, 0.75)


def finite_gradient_guard(
    logp_and_grad: Callable, target, describe_row: Callable[[int], str], remedy: str
) -> Callable:
    """``logp_and_grad`` that raises :class:`~pymc_tempering.contract.NonFiniteGradientError`
    where a finite position has a finite log density but a non-finite gradient.

    Without it the next position is NaN and the warm-up halves its step again and again to no
    avail (measured: a two-component mixture written with ``w`` and ``1 - w``, whose replica at
    ``T = 5412`` reached ``w_logodds__ = 42.6``; above 37 ``1 - w`` rounds to 0).
    ``describe_row(i)`` says which chain or replica row ``i`` is; ``remedy`` what to change.
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


class Basis(NamedTuple):
    """A linear change of the dynamics' coordinates: ``theta = v @ to_model.T`` and
    ``v = theta @ from_model.T`` (``from_model`` the inverse of ``to_model``), both ``(D, D)``.

    The dense part of the ``"auto"`` preconditioner (:func:`decorrelating_basis`): the diagonal
    ``scale`` then acts on ``v``, so the dynamics run on ``u = v / scale``. The map is linear,
    so its Jacobian is a constant and the density of ``u`` is the model's up to that constant.
    """

    to_model: np.ndarray
    from_model: np.ndarray


def in_model_units(u: np.ndarray, scale: np.ndarray, basis: Basis | None = None) -> np.ndarray:
    """The positions ``theta`` of the dynamics' coordinates ``u (n, D)``: ``(u * scale)``
    mapped by ``basis`` (the identity when None)."""
    v = u * scale
    return v if basis is None else v @ basis.to_model.T


def in_dynamics_units(theta: np.ndarray, scale: np.ndarray, basis: Basis | None = None):
    """The inverse of :func:`in_model_units`: ``u`` of the positions ``theta (n, D)``."""
    v = theta if basis is None else theta @ basis.from_model.T
    return v / scale


def whitened(
    logp_and_grad: Callable, scale: np.ndarray | float, basis: Basis | None = None
) -> Callable:
    """``logp_and_grad`` in the preconditioned coordinates ``u``, ``theta = in_model_units(u)``.

    Running the dynamics on ``u`` is running them on ``theta`` with the mass matrix
    ``(B diag(scale)^2 B^T)^-1`` (``B = basis.to_model``, the identity without a basis):
    ``log p`` is unchanged and the force is ``scale * (grad log p @ B)``.
    """
    if basis is None and np.all(scale == 1.0):
        return logp_and_grad
    if basis is None:

        def in_u(u):
            lp, g = logp_and_grad(u * scale)
            return lp, np.asarray(g) * scale

        return in_u

    def in_rotated_u(u):
        lp, g = logp_and_grad((u * scale) @ basis.to_model.T)
        return lp, (np.asarray(g) @ basis.to_model) * scale

    return in_rotated_u


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


def gradient_noise(
    logp_and_grad: Callable, x: np.ndarray, n_pairs: int = 50, covariance: bool = False
) -> tuple[np.ndarray, float]:
    """The minibatch noise at the points ``x (n, D)``: ``n_pairs`` pairs of calls there.

    Returns the variance of one gradient evaluation per coordinate and of one log density
    evaluation (means over the rows and pairs), both zero for an exact (full-batch) model:
    ``Var = E[(a - b)^2] / 2`` for two independent evaluations ``a``, ``b``. The rows of one
    call share a minibatch, so the pairs, not the rows, are the independent replicates.
    Fifty pairs: the estimate caps the preconditioner (:func:`stability_cap`), and with ten
    (a chi-square of 10 degrees of freedom, below a third of the truth 2.5% of the time) one
    of eight seeds on a 5,000-point regression left the noisy coefficient's thermostat at 0.8
    against its budget of 0.15 and the posterior sd 23% narrow; with fifty, 0.91 to 1.01 of
    the truth over the eight. An exact model stops after the first pair (no difference).
    With ``covariance``, the first result is the gradient noise's ``(D, D)`` covariance
    (mean over the rows and pairs of ``(a - b)(a - b)^T / 2``), whose diagonal is the variance.
    """
    grad_var, energy_var = 0.0, 0.0
    for k in range(n_pairs):
        lp1, g1 = logp_and_grad(x)
        lp2, g2 = logp_and_grad(x)
        with np.errstate(all="ignore"):
            diff = np.asarray(g1) - np.asarray(g2)
            if covariance:
                grad_var = grad_var + 0.5 * diff.T @ diff / diff.shape[0]
            else:
                grad_var = grad_var + 0.5 * np.mean(diff**2, axis=0)
            energy_var += 0.5 * float(np.mean((np.asarray(lp1) - np.asarray(lp2)) ** 2))
        if k == 0 and energy_var == 0 and not np.any(grad_var):
            d = np.shape(x)[-1]  # deterministic: a full-batch density
            return (np.zeros((d, d)) if covariance else np.zeros(d)), 0.0
    return grad_var / n_pairs, energy_var / n_pairs


#: The tempering variable's deterministic kick in one Euler step, ``eta_xi |lambda'| sigma_U``
#: with ``sigma_U`` the spread of the potential at the temperature, is held below this many
#: thermal momentum sds ``sqrt(eta_xi)`` (:func:`tempering_step_cap`).
XI_KICK_BUDGET = 0.4


def tempering_step_cap(settings: TACTSettings, ndim: int) -> float:
    """The largest ``eta_xi`` whose kicks stay within :data:`XI_KICK_BUDGET` thermal sds.

    The force on the tempering variable is ``-lambda'(xi) (U - <U | xi>)`` (the biasing force
    cancels the mean), and at temperature ``T = 1 / lambda`` the potential spreads by about
    ``sigma_U = T sqrt(C)`` with ``C = max(ndim, 1) / 2`` the heat capacity of a Gaussian (as the
    replica-exchange ladder assumes). Kicks of ``eta_xi |lambda'| sigma_U`` at most ``b
    sqrt(eta_xi)`` give ``eta_xi <= b^2 / (C max_xi (lambda' / lambda)^2)``. Measured on the
    non-centred radon intercepts (89 parameters, full batch, ``max_temperature = 10``): with
    kicks of 1.4 thermal sds (``eta_xi = 0.001``) the draws' sd of ``sigma_alpha`` came out 1.30
    times NUTS's, 1.23 with kicks of 0.7 (``max_temperature = 4``), and 0.99 with 0.3 and 0.4
    (``max_temperature = 2``; ``eta_xi = 1e-4``); the parameters' own step size did not matter.
    Infinite without tempering.
    """
    if not settings.tempering:
        return np.inf
    a = settings.unit_temperature_fraction
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


def window_ends(tune: int) -> set[int]:
    """The warm-up iterations (0-based) after which the preconditioner is re-estimated."""
    return {int(np.ceil(f * tune)) - 1 for f in WINDOW_ENDS if np.ceil(f * tune) >= 1}


#: The thermostat's excess from gradient noise, ``eta scale^2 sigma_f^2 / 2``, is held below this.
THETA_NOISE_BUDGET = 0.1
#: Blow-ups during the warm-up that are undone (the iteration repeated with a preconditioner
#: half as wide) before the run gives up.
MAX_WARMUP_BLOWUPS = 12


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


class Spread(NamedTuple):
    """Running sums of the positions of each chain, for the within-chain spread; ``outer``
    (the sum of their outer products over the chains, ``(D, D)``) only for a dense
    preconditioner."""

    total: np.ndarray
    total_sq: np.ndarray
    count: np.ndarray
    outer: np.ndarray | None = None


def spread_empty(n: int, d: int, dense: bool = False) -> Spread:
    return Spread(np.zeros((n, d)), np.zeros((n, d)), np.zeros(n),
                  np.zeros((d, d)) if dense else None)


def spread_add(spread: Spread, theta: np.ndarray, mask: np.ndarray) -> Spread:
    """Add the positions ``theta (n, D)`` of the chains where ``mask (n,)`` holds."""
    m = np.asarray(mask, dtype=float)[:, None]
    outer = None if spread.outer is None else spread.outer + (m * theta).T @ theta
    return Spread(
        spread.total + m * theta, spread.total_sq + m * theta**2, spread.count + m[:, 0], outer
    )


def spread_sd(spread: Spread, min_count: int = 5) -> np.ndarray | None:
    """The pooled within-chain standard deviation per coordinate (chains with at least
    ``min_count`` positions), or None when no chain has that many."""
    ok = spread.count >= min_count
    if not ok.any():
        return None
    c = spread.count[ok][:, None]
    mean = spread.total[ok] / c
    var = (spread.total_sq[ok] / c - mean**2) * c / (c - 1)
    return np.sqrt(np.maximum(np.mean(var, axis=0), 0.0))


def spread_cov(spread: Spread, min_count: int = 5) -> tuple[np.ndarray, float] | None:
    """The pooled within-chain covariance ``(D, D)``, each chain's positions about their own
    mean, and the number of positions it pools; None without ``outer`` sums or when no chain
    has ``min_count`` positions."""
    if spread.outer is None or not (spread.count >= min_count).any():
        return None
    seen = spread.count > 0
    c = spread.count[seen]
    mean = spread.total[seen] / c[:, None]
    scatter = spread.outer - (mean.T * c) @ mean
    return scatter / (c.sum() - c.size), float(c.sum())


#: ``step_size="auto"`` preconditions models of at most this many flat coordinates with a
#: dense matrix (:func:`decorrelating_basis`); larger ones keep the diagonal one.
DENSE_MAX_DIM = 100
#: The correlation matrix of the warm-up's positions is shrunk towards the identity with the
#: weight of this many positions per coordinate (as Stan shrinks its dense metric).
DENSE_SHRINKAGE = 5.0


def decorrelating_basis(spread: Spread) -> tuple[np.ndarray, np.ndarray] | None:
    """A change of coordinates that decorrelates the window's positions, or None.

    With ``C`` the pooled within-chain covariance of the positions ``v`` (:func:`spread_cov`),
    ``D`` its standard deviations and ``R = D^-1 C D^-1 = L L^T`` the Cholesky factorisation of
    its correlation matrix (shrunk towards the identity by :data:`DENSE_SHRINKAGE` positions per
    coordinate), the new coordinates are ``v' = v @ W_inv.T`` with ``W = D L``,
    ``W_inv = L^-1 D^-1``: uncorrelated, with unit variances. The correlation matrix keeps the
    factor independent of the coordinates' units, and the triangular factor, unlike an
    eigenbasis, stays near the identity where the correlations are small: the eigenvectors of a
    correlation matrix near the identity are arbitrary, and a 45-degree turn mixed a
    prior-only coordinate with a minibatch-noisy one (``tests/test_tact_minibatch.py``), whose
    thermostats could then no longer absorb each its own noise (the quiet one's sd 0.62 of
    the truth). Returns ``(W, W_inv)``; None when there are fewer than two coordinates, no
    ``outer`` sums, fewer positions than coordinates, or a degenerate spread.
    """
    found = spread_cov(spread)
    d = spread.total.shape[-1]
    if found is None or d < 2:
        return None
    cov, n = found
    sd = np.sqrt(np.diag(cov))
    if n < d or not np.all(np.isfinite(cov)) or not np.all(sd > 0):
        return None
    corr = cov / np.outer(sd, sd)
    w = n / (n + DENSE_SHRINKAGE * d)
    corr = w * corr + (1.0 - w) * np.eye(d)
    try:
        chol = np.linalg.cholesky(corr)
    except np.linalg.LinAlgError:
        return None
    chol_inv = scipy.linalg.solve_triangular(chol, np.eye(d), lower=True)
    return sd[:, None] * chol, chol_inv / sd[None, :]


def compose(basis: Basis | None, w: np.ndarray, w_inv: np.ndarray) -> Basis:
    """The basis after a further change ``v = v' @ w.T`` (:func:`decorrelating_basis`)."""
    if basis is None:
        return Basis(w, w_inv)
    return Basis(basis.to_model @ w, w_inv @ basis.from_model)


#: Pairs of minibatch calls per coordinate for the noise covariance of :func:`noise_rotation`
#: (at least 50): the rows of a call share a minibatch, so the pairs are its samples.
NOISE_PAIRS_PER_DIM = 4


def noise_rotation(logp_and_grad: Callable, x: np.ndarray) -> np.ndarray | None:
    """The rotation of the coordinates that makes the minibatch gradient noise uncorrelated
    between them, or None for an exact density.

    ``logp_and_grad`` in coordinates where the positions are decorrelated
    (:func:`decorrelating_basis`), ``x (n, D)`` the chains there. Returns the orthogonal ``Q``
    of the eigenvectors of the noise covariance ``S`` measured there
    (:func:`gradient_noise`), ``S = Q diag(s) Q^T``: in the coordinates ``v' = v @ Q`` each
    coordinate's noise is its own, so one thermostat per coordinate absorbs all of it
    (Theorem 1 holds coordinate by coordinate), and the positions, whose covariance is near
    the identity, stay decorrelated under the turn. Without it, the noise of a sum of
    coordinates is not the sum of their noises: in a minibatched hierarchical model the
    group mean's gradient is the sum of the group members' (the same residuals), while along
    the posterior's long direction (the mean up, the members' offsets down) the noises cancel.
    Each thermostat then sets its friction to its own coordinate's noise, too much along that
    direction, and the draws come out cold there. On the non-centred radon intercepts (89
    parameters, 919 observations in batches of 100; SGNHT, 4 chains of 4,000 draws, seed 3)
    the sds of ``mu_alpha``, ``sigma_alpha``, ``beta`` and ``sigma`` over full-data NUTS's were
    0.89, 0.85, 0.99 and 1.09 without the turn and 0.96, 0.89, 0.97 and 0.99 with it. The
    covariance takes :data:`NOISE_PAIRS_PER_DIM` pairs of calls per coordinate: from 50 pairs
    it has rank 50 at most, the turn is arbitrary in the rest, and ``beta`` and ``sigma`` came
    out 6% and 15-18% wide with it (400 and 1,000 pairs gave what 4 per coordinate, 356, give,
    within a few percent).
    """
    d = np.shape(x)[-1]
    pairs = max(50, NOISE_PAIRS_PER_DIM * d)
    cov, _ = gradient_noise(logp_and_grad, x, n_pairs=pairs, covariance=True)
    if not np.any(cov) or not np.all(np.isfinite(cov)):
        return None
    return np.linalg.eigh(0.5 * (cov + cov.T))[1]


def window_basis(
    spreads: list[Spread], olds: list[np.ndarray], basis: Basis | None, allowed: bool,
    noise: tuple[Callable, np.ndarray] | None = None,
) -> tuple[list, list, Basis | None, np.ndarray | None]:
    """The change of coordinates at a warm-up window's end, and the spreads in the coordinates
    after it.

    With ``allowed`` (from the second window on) and the ``outer`` sums of a dense warm-up, the
    coordinates change to those that decorrelate ``spreads[0]``'s positions (the chains' or the
    ``T = 1`` replica's; :func:`decorrelating_basis`). Returns ``(sds, olds, basis, w_inv)``:
    each spread's standard deviations and each old scale in the coordinates after the window
    (:func:`in_new_coordinates`), the basis after it (:func:`compose`), and the change
    ``v' = v @ w_inv.T`` (None where the coordinates stay). With ``noise = (logp_and_grad,
    x)``, the model's density (in its own units) and positions ``x (n, D)`` in the coordinates
    ``v``, the change also turns the decorrelated coordinates to those in which the gradient
    noise measured at ``x`` is uncorrelated (:func:`noise_rotation`).
    """
    found = decorrelating_basis(spreads[0]) if allowed else None
    if found is None:
        return [spread_sd(sp) for sp in spreads], list(olds), basis, None
    w, w_inv = found
    q = None
    if noise is not None:
        density, x = noise
        q = noise_rotation(whitened(density, 1.0, compose(basis, w, w_inv)), x @ w_inv.T)
    if q is not None:
        w, w_inv = w @ q, q.T @ w_inv
    moved = [in_new_coordinates(sp, old, w_inv) for sp, old in zip(spreads, olds)]
    return [m[0] for m in moved], [m[1] for m in moved], compose(basis, w, w_inv), w_inv


def adapted_scale(
    sd: np.ndarray | None, old_scale: np.ndarray, curvature: np.ndarray, grad_var: np.ndarray,
    eta: float,
) -> np.ndarray:
    """The preconditioner after a warm-up window: the draws' within-chain spread ``sd``
    (:func:`spread_sd`; None keeps ``old_scale``), shrinking by at most half per window, so a
    chain slowed by small steps is not slowed further, capped by :func:`stability_cap`
    measured where the chains are."""
    target = old_scale if sd is None else np.fmax(sd, 0.5 * old_scale)
    target = np.where(np.isfinite(target) & (target > 0), target, old_scale)
    return np.fmin(target, stability_cap(curvature, grad_var, eta))


def in_new_coordinates(spread: Spread, old_scale: np.ndarray, w_inv: np.ndarray):
    """The window's spread and the old preconditioner's widths in the coordinates
    ``v' = v @ w_inv.T`` (:func:`decorrelating_basis`): ``(sd', old_scale')``, the square roots
    of the diagonals of ``w_inv C w_inv^T`` and ``w_inv diag(old_scale^2) w_inv^T``; ``sd'`` None
    without enough positions (:func:`spread_cov`)."""
    found = spread_cov(spread)
    old = np.sqrt(old_scale**2 @ (w_inv**2).T)
    if found is None:
        return None, old
    cov = w_inv @ found[0] @ w_inv.T
    return np.sqrt(np.maximum(np.diag(cov), 0.0)), old


def rescale(
    state: TACTState,
    settings: TACTSettings,
    old_scale: np.ndarray,
    new_scale: np.ndarray,
    rng: np.random.Generator,
    *,
    tempering: bool = True,
    w_inv: np.ndarray | None = None,
) -> TACTState:
    """Move the chains to a new preconditioner: the same ``theta``, ``u = v / new_scale``.

    ``v = u * old_scale``, mapped to new coordinates ``v @ w_inv.T`` when ``w_inv`` is given
    (a new :class:`Basis`). The momenta are redrawn (exact) and the thermostats restarted at
    ``c`` (their equilibrium without gradient noise), since both were in the old units; ``xi``
    and the ABF bins (energies, which do not depend on the coordinates) are kept.
    """
    n = state.theta.shape[0]
    if w_inv is None:
        theta = state.theta * (old_scale / new_scale)
    else:
        theta = ((state.theta * old_scale) @ w_inv.T) / new_scale
    state = state._replace(
        theta=theta,
        z_theta=_thermostat_start(state.theta.shape, settings),
        z_xi=np.full(n, float(settings.c_xi)) if tempering else state.z_xi,
    )
    return refresh_momenta(state, settings, rng, tempering=tempering)


def recover_blowup(
    err: Exception,
    phase: dict | None,
    state: TACTState,
    settings: TACTSettings,
    scale: np.ndarray,
    rng: np.random.Generator,
    *,
    tempering: bool,
) -> tuple[TACTState, np.ndarray]:
    """Undo a blow-up of the ``"auto"`` step size: ``(state, scale)`` to repeat from.

    ``state`` is the iteration's start. During the warm-up the chains move to a preconditioner
    half as wide (:func:`rescale`), and the blow-up is counted in ``phase["blowups"]``; more
    than ``MAX_WARMUP_BLOWUPS`` raise a :class:`DivergenceError`. After the warm-up the
    iteration is dropped as a divergent transition is in NUTS: the chains stay where it began,
    with fresh momenta and the same preconditioner, and ``phase["divergences"]`` counts it
    (the driver marks the draw ``diverging``, and the run's checks report it), a non-finite
    gradient (:class:`NonFiniteGradientError`) too: a chain thrown far out by a stiff wall (a
    hot replica of a half-normal scale reached ``log s = -300`` on a regression) meets one.
    Re-raises ``err`` with an explicit step size (``phase`` None), and a non-finite gradient
    during the warm-up, where it names the model's arithmetic as the cause (``1 - w == 0``):
    no step size cures that. A :class:`KickBeyondBound` during the warm-up halves the
    preconditioner of the chains it names only (every chain's when ``scale`` is shared), is
    counted in ``phase["kicks"]`` (the result's ``attrs["warmup_kicks_undone"]``) and not
    against ``MAX_WARMUP_BLOWUPS``, and is not warned about: the warm-up's window ends
    re-estimate those preconditioners, and at the hottest replicas of replica exchange such
    kicks are routine (2 to 6 in the warm-up of three of six runs of a minibatched regression,
    whose draws matched Laplace's as before).
    """
    if phase is None or (phase["warm"] and isinstance(err, NonFiniteGradientError)):
        raise err
    if not phase["warm"]:
        phase["divergences"] = phase.get("divergences", 0) + 1
        phase["last_divergence"] = str(err)
        return refresh_momenta(state, settings, rng, tempering=tempering), scale
    if isinstance(err, KickBeyondBound):
        # one chain's preconditioner, not everyone's: the next window's end re-estimates them
        phase["kicks"] = phase.get("kicks", 0) + 1
        per_row = np.ndim(scale) == 2 and len(scale) == err.rows.size
        new_scale = np.where(err.rows[:, None], 0.5 * scale, scale) if per_row else 0.5 * scale
        return rescale(state, settings, scale, new_scale, rng, tempering=tempering), new_scale
    phase["blowups"] += 1
    if phase["blowups"] > MAX_WARMUP_BLOWUPS:
        raise DivergenceError(
            f"{err} The warm-up halved the step {MAX_WARMUP_BLOWUPS} times "
            "after blow-ups and still diverges: check the model for regions where its "
            "log density is not finite, or pass a smaller step_size."
        ) from err
    phase["last_error"] = str(err)
    return rescale(state, settings, scale, 0.5 * scale, rng, tempering=tempering), 0.5 * scale


def dropped_info(logp_and_grad, state: TACTState, scale, basis) -> Info:
    """The report of an iteration :func:`recover_blowup` undid: every chain marked diverging,
    acceptance 1 (the dynamics has no test) and the potential energy where the chains stay
    (``state``, the iteration's start), non-finite values left as they are."""
    n = state.theta.shape[0]
    with np.errstate(all="ignore"):
        energy = -whitened(logp_and_grad, scale, basis)(state.theta)[0]
    return Info(np.ones(n), np.ones(n, bool), energy)


def warn_blowups(method: str, phase: dict | None) -> None:
    """Warn about what :func:`recover_blowup` undid in a run of ``method`` (its name)."""
    if phase is None:
        return
    if phase["blowups"]:
        warn(
            f"{method} blew up {phase['blowups']} times during the warm-up (last: "
            f"{phase['last_error']}); each time the warm-up repeated the iteration with a "
            "preconditioner (so a step) half as wide. The draws come after the warm-up."
        )
    if phase.get("divergences"):
        warn(
            f"{method} blew up {phase['divergences']} times after the warm-up (last: "
            f"{phase['last_divergence']}); each time the iteration was dropped and its draw "
            "marked diverging (sample_stats['diverging']): the chains reached a region stiffer "
            "than their step, and the draws miss what lies there. A longer tune, or a lower "
            "max_temperature for replica exchange, may avoid it."
        )


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
