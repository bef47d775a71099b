"""TACT-HMC: thermostat-assisted continuously-tempered Hamiltonian Monte Carlo (Luo et al. 2018).

The sampler (:func:`sample_tact`) runs the Nosé-Hoover dynamics of
:mod:`pymc_tempering.kernels.thermostats` on the model's flat unconstrained space through the one
driver loop (:func:`~pymc_tempering.driver.run_kernel`): one loop iteration is
``steps_per_sample`` Euler steps followed by a momentum refresh (Algorithm 1, line 18), and a
chain's state is kept as a draw when its effective temperature ``1 / lambda(xi)`` is exactly one
(Algorithm 1, line 16). The ``tune`` warm-up iterations run the same dynamics and are discarded;
with ``step_size="auto"`` they adapt the preconditioner through the state machines of
:mod:`pymc_tempering.adaptation`, whose records travel in the loop's state (:class:`_Loop`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pymc as pm
import xarray as xr
from pymc.model import modelcontext

from pymc_tempering import adaptation
from pymc_tempering.adaptation import blowup, windows
from pymc_tempering.driver import driver_result, run_kernel
from pymc_tempering.kernels import thermostats
from pymc_tempering.kernels.thermostats import TACTSettings, coupling
from pymc_tempering.contract import (
    DivergenceError,
    check_sampler_args,
    reproducible,
    split_seed,
)
from pymc_tempering.target import Target

__all__ = ["VARIANTS", "sample_tact"]

#: The variants of :func:`sample_tact`: (thermostats on, tempering on).
VARIANTS = {
    "tact": (True, True),  # the full method
    "sgnht": (True, False),  # thermostats without tempering (Ding et al. 2014)
    "tempering_only": (False, True),  # tempering with a constant friction, no thermostats
    "sghmc": (False, False),  # constant friction, no tempering (Chen et al. 2014)
}

# The stats of every kept draw (and of every trajectory record).
STATS = (
    "effective_temperature",
    "tempering_variable",
    "thermostat_theta",
    "thermostat_xi",
    "kinetic_temperature",
    "potential_energy",
    "step",
)


class _Loop(NamedTuple):
    """The driver's state: the chains' dynamics, the steps taken so far (warm-up included), the
    preconditioner (the dynamics run on ``u``, ``theta = in_model_units(u, scale, basis)``;
    ``scale`` all ones and ``basis`` None for an explicit ``step_size``, ``basis`` None for a
    diagonal preconditioner) and, with ``step_size="auto"``, the warm-up's records: the
    current window (:class:`~pymc_tempering.adaptation.windows.Windows`) and what was undone
    (:class:`~pymc_tempering.adaptation.blowup.Recovery`); both None otherwise."""

    dynamics: thermostats.TACTState
    n_steps: int
    scale: np.ndarray
    basis: adaptation.Basis | None = None
    window: windows.Windows | None = None
    recovery: blowup.Recovery | None = None


class _Info(NamedTuple):
    """One iteration's report: the last step's ``Info`` fields and the kinetic temperature
    before the momenta were refreshed."""

    acceptance_rate: np.ndarray
    diverging: np.ndarray
    energy: np.ndarray
    kinetic_temperature: np.ndarray


def _noisy(logp_and_grad, energy_sd, gradient_sd, rng):
    """``logp_and_grad`` with Gaussian noise the dynamics does not know about (a testing aid)."""
    if not energy_sd and not gradient_sd:
        return logp_and_grad

    def noisy(theta):
        lp, g = logp_and_grad(theta)
        return (
            lp - energy_sd * rng.standard_normal(lp.shape),  # U = -lp gets +sd * noise
            g + gradient_sd * rng.standard_normal(g.shape),
        )

    return noisy


def _iteration(logp_and_grad, steps_per_sample: int, resample_momenta: bool, callback):
    """One loop iteration: ``steps_per_sample`` kernel steps, then the momentum refresh.

    With the ``"auto"`` warm-up (``loop.recovery`` set), a blow-up is undone
    (:func:`~pymc_tempering.adaptation.blowup.update`): the iteration's start is kept; during
    the warm-up the preconditioner is halved (the steps with it), after it the iteration is a
    divergent draw (the chains stay where they were).
    """

    def iterate(loop: _Loop, settings: TACTSettings, rng: np.random.Generator):
        state, n_steps, scale = loop.dynamics, loop.n_steps, loop.scale
        evaluate = adaptation.whitened(logp_and_grad, scale, loop.basis)
        tamed = np.zeros(state.theta.shape[0], dtype=bool)
        try:
            for k in range(steps_per_sample):
                if callback is not None:
                    callback(n_steps)
                n_steps += 1
                state, info = thermostats.step(
                    state, settings, evaluate, rng,
                    where=f"TACT-HMC diverged at step {n_steps}",
                    remedy="reduce step_size, raise noise or lengthen the warm-up (tune)",
                    half_kick=k == 0 and resample_momenta,
                )
                tamed |= info.diverging
        except DivergenceError as err:
            recovery, state, scale = blowup.update(
                loop.recovery, err, loop.dynamics, settings, scale, rng,
                tempering=settings.tempering,
            )
            info = blowup.dropped_info(logp_and_grad, state, scale, loop.basis)
            kinetic = thermostats.kinetic_temperature(state, settings)
            loop = loop._replace(dynamics=state, n_steps=n_steps, scale=scale, recovery=recovery)
            return loop, _Info(*info, kinetic)
        kinetic = thermostats.kinetic_temperature(state, settings)
        if resample_momenta:
            state = thermostats.refresh_momenta(state, settings, rng)
        info = _Info(*info._replace(diverging=tamed), kinetic)
        return loop._replace(dynamics=state, n_steps=n_steps), info

    return iterate


def _warmup(logp_and_grad, tune: int, adapt_tempering: bool, rng: np.random.Generator,
            xi_cap: float = np.inf):
    """The ``step_size="auto"`` warm-up: a preconditioner re-estimated per window.

    After every warm-up iteration the positions of the chains at unit temperature are added to
    the window's sums (:func:`~pymc_tempering.adaptation.windows.update`). At a window's end
    (:func:`~pymc_tempering.adaptation.windows.final`; from the second window on, a model of
    at most :data:`~pymc_tempering.adaptation.windows.DENSE_MAX_DIM` coordinates first changes
    to coordinates that decorrelate the window's positions: a dense preconditioner) the scale
    becomes their within-chain standard deviation in those coordinates, capped by the
    stability limits measured where the chains are (curvature and minibatch gradient noise,
    :func:`~pymc_tempering.adaptation.step_size.adapted_scale`); the chains move to it
    (:func:`~pymc_tempering.adaptation.coordinates.rescale`) and the tempering step is re-set
    from the energy noise. The first window is a transit, whose spread is the chains' drift.
    After the last warm-up iteration blow-ups become divergent draws
    (:func:`~pymc_tempering.adaptation.blowup.final`); the kick bound follows
    :func:`~pymc_tempering.adaptation.blowup.warmup_kick_bound`.
    """

    def window_end(loop: _Loop, v, settings: TACTSettings, it: int):
        window, (sd,), (old,), basis, w_inv = windows.final(
            loop.window, it, [loop.scale], loop.basis, (logp_and_grad, v)
        )
        if w_inv is not None:
            v = v @ w_inv.T
        in_v = adaptation.whitened(logp_and_grad, 1.0, basis)
        grad_var, energy_var = adaptation.gradient_noise(in_v, v)
        curvature = adaptation.curvature_at(in_v, v, old)
        new_scale = adaptation.adapted_scale(sd, old, curvature, grad_var, settings.eta_theta)
        if adapt_tempering:
            settings = settings._replace(
                eta_xi=adaptation.tempering_step_size(energy_var, cap=xi_cap)
            )
        state = adaptation.rescale(
            loop.dynamics, settings, loop.scale, new_scale, rng, tempering=settings.tempering,
            w_inv=w_inv,
        )
        return loop._replace(dynamics=state, scale=new_scale, basis=basis, window=window), settings

    def warmup(loop: _Loop, info, settings: TACTSettings, it: int):
        v = loop.dynamics.theta * loop.scale
        cold = coupling(loop.dynamics.xi, settings)[0] == 1.0
        loop = loop._replace(window=windows.update(loop.window, [v], cold))
        if it in loop.window.ends:
            loop, settings = window_end(loop, v, settings, it)
        if it == tune - 1:
            loop = loop._replace(recovery=blowup.final(loop.recovery))
        return loop, blowup.warmup_kick_bound(settings, it, loop.window.first, tune)

    return warmup


def _record(settings: TACTSettings):
    def record(loop: _Loop, info: _Info) -> dict:
        state = loop.dynamics
        lam, _ = coupling(state.xi, settings)
        return {
            "x": adaptation.in_model_units(state.theta, loop.scale, loop.basis),
            "effective_temperature": 1.0 / lam,
            "tempering_variable": state.xi,
            # per chain: the mean of the coordinates' thermostats when there is one per coordinate
            "thermostat_theta": (
                state.z_theta.mean(-1) if state.z_theta.ndim == 2 else state.z_theta
            ),
            "thermostat_xi": state.z_xi,
            "kinetic_temperature": info.kinetic_temperature,
            "potential_energy": info.energy,
            "step": np.full(state.xi.shape, float(loop.n_steps)),
            "diverging": np.asarray(info.diverging, dtype=bool),
        }

    return record


def _trajectory_group(trajectory: dict) -> xr.Dataset:
    """Every post-warm-up iteration's stats ``(chain, interval)`` and whether it was kept."""
    data = {name: trajectory[name] for name in (*STATS, "kept")}
    chains, intervals = data["kept"].shape
    return xr.Dataset(
        {name: (("chain", "interval"), value) for name, value in data.items()},
        coords={"chain": np.arange(chains), "interval": np.arange(intervals)},
    )


def _abf_group(state: thermostats.TACTState, settings: TACTSettings) -> xr.Dataset:
    """The biasing force per bin and chain at the end."""
    centres = (np.arange(settings.abf_bins) + 0.5) / settings.abf_bins
    lam_c, dlam_c = coupling(centres, settings)
    mean_energy = thermostats.abf_mean_energy(state, settings)
    return xr.Dataset(
        {
            "mean_energy": (("chain", "abf_bin"), mean_energy),
            "mean_force": (("chain", "abf_bin"), dlam_c * mean_energy),
            "count": (("chain", "abf_bin"), state.abf_count),
        },
        coords={
            "chain": np.arange(mean_energy.shape[0]),
            "abf_bin": np.arange(settings.abf_bins),
            "tempering_variable": ("abf_bin", centres),
            "effective_temperature": ("abf_bin", 1.0 / lam_c),
        },
    )


def _check_options(
    variant, step_size, step_size_tempering, thermal_inertia, thermal_inertia_tempering,
    thermostat, steps_per_sample, max_temperature, unit_temperature_fraction,
) -> tuple[bool, bool, bool]:
    """Refuse bad options of :func:`sample_tact`; ``(auto, auto_tempering, per_coordinate)``:
    whether each step size is ``"auto"``, and the thermostat's form."""
    auto = isinstance(step_size, str)
    auto_tempering = isinstance(step_size_tempering, str)
    for name, value in (("step_size", step_size), ("step_size_tempering", step_size_tempering)):
        if isinstance(value, str) and value != "auto":
            raise ValueError(f"{name} must be 'auto' or a positive number, got {value!r}.")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}.")
    positive = {
        **({} if auto else {"step_size": step_size}),
        **({} if auto_tempering else {"step_size_tempering": step_size_tempering}),
        "thermal_inertia": thermal_inertia, "thermal_inertia_tempering": thermal_inertia_tempering,
    }
    for name, value in positive.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}.")
    if not max_temperature >= 1:
        raise ValueError(f"max_temperature must be at least 1, got {max_temperature}.")
    if not 0 < unit_temperature_fraction < 1:
        raise ValueError("unit_temperature_fraction must lie in (0, 1).")
    _, per_coordinate = thermostats.thermostat_option(thermostat)
    if int(steps_per_sample) != steps_per_sample or steps_per_sample < 1:
        raise ValueError(f"steps_per_sample must be an integer of at least 1, got {steps_per_sample}.")
    return auto, auto_tempering, per_coordinate


def _initial_points(target: Target, initial_points, jitter, chains, seed) -> np.ndarray:
    if initial_points is None:
        start = target.ravel(target.model.initial_point())
        initial_points = thermostats.jittered_positions(
            start, jitter, (chains, target.ndim), np.random.default_rng(seed)
        )
    initial_points = np.asarray(initial_points, dtype=float)
    if initial_points.shape != (chains, target.ndim):
        raise ValueError(
            f"initial_points must have shape {(chains, target.ndim)}, got {initial_points.shape}."
        )
    return initial_points


def _warmup_group(loop: _Loop) -> xr.Dataset:
    """The final preconditioner: ``scale`` per coordinate of ``v`` and, for a dense one, the
    basis ``theta = v @ preconditioner_basis.T``."""
    data = {"preconditioner_scale": ("flat", loop.scale)}
    if loop.basis is not None:
        data["preconditioner_basis"] = (("flat", "basis"), loop.basis.to_model)
    return xr.Dataset(data)


def _start(target: Target, logp_and_grad, auto: bool, initial_points, jitter, chains, seed):
    """``(scale, start)``: the first preconditioner (ones for an explicit step size) and the
    chains' starting points ``(chains, ndim)`` in the model's units.

    With ``"auto"`` the first window is a transit: its scale is capped by the curvature alone
    (:func:`~pymc_tempering.adaptation.step_size.start_preconditioner` without the noise
    cap), not by the gradient noise, which only the stationary draws must absorb (the window's
    end caps by both, where the chains are); with the noise cap a chain started far from the
    posterior moves too slowly (its velocity goes as ``scale^2``) to reach it in the warm-up.
    """
    if not auto:
        return np.ones(target.ndim), _initial_points(target, initial_points, jitter, chains, seed)
    scale, start = adaptation.start_preconditioner(
        logp_and_grad, target.ravel(target.model.initial_point()), jitter,
        (chains, target.ndim), np.random.default_rng(seed), initial_points, noise_cap=False,
    )
    return scale, _initial_points(target, start, jitter, chains, seed)


def _attrs(settings: TACTSettings, recovery, **given) -> dict:
    """The result's attrs: the options ``given`` and the settings as the warm-up left them."""
    return {
        "variant": given["variant"], "step_size": settings.eta_theta,
        "step_size_tempering": settings.eta_xi,
        "step_size_mode": "fixed" if recovery is None else "auto",
        "warmup_blowups": 0 if recovery is None else recovery.blowups,
        "warmup_kicks_undone": 0 if recovery is None else int(recovery.kicks),
        "noise": settings.c_theta, "noise_tempering": settings.c_xi,
        "thermal_inertia": settings.gamma_theta, "thermal_inertia_tempering": settings.gamma_xi,
        "thermostat": given["thermostat"], "steps_per_sample": given["steps_per_sample"],
        "max_temperature": given["max_temperature"],
        "unit_temperature_fraction": settings.unit_temperature_fraction,
        "abf_bins": settings.abf_bins, "abf_ramp": settings.abf_ramp, "tune": given["tune"],
        "gradient_noise_sd": given["gradient_sd"], "energy_noise_sd": given["energy_sd"],
    }


def _result(target, trace, settings, attrs, random_seed):
    stats = {name: trace.draws[name] for name in STATS}
    energy = stats["potential_energy"]
    stats["diverging"] = trace.draws["diverging"].astype(bool)
    stats["acceptance_rate"] = np.ones(energy.shape)
    stats["lp"] = -energy
    groups = {
        "tact_trajectory": _trajectory_group(trace.trajectory),
        "abf": _abf_group(trace.state.dynamics, settings),
        "warmup": _warmup_group(trace.state),
    }
    attrs = {**attrs, "n_steps": trace.state.n_steps}
    return driver_result(
        target, trace.draws["x"], method="tact_hmc", sample_stats=stats,
        random_seed=random_seed, attrs=attrs, extra_groups=groups, convergence=True,
    )


@reproducible
def sample_tact(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    variant: str = "tact",
    step_size: float | str = "auto",
    step_size_tempering: float | str = "auto",
    noise: float = 0.05,
    noise_tempering: float = 0.05,
    thermal_inertia: float = 1.0,
    thermal_inertia_tempering: float = 1.0,
    thermostat: str = "diagonal",
    steps_per_sample: int = 50,
    max_temperature: float = 10.0,
    unit_temperature_fraction: float = 0.3,
    abf_bins: int = 20,
    abf_ramp: float = 100.0,
    resample_momenta: bool = True,
    initial_points: np.ndarray | None = None,
    jitter: float = 1.0,
    max_iterations: int | None = None,
    callback: Callable[[int], None] | None = None,
    gradient_noise: float | tuple[float, float] = 0.0,
) -> xr.DataTree:
    """Sample a (minibatched) PyMC model with TACT-HMC (Luo et al. 2018, Algorithm 1).

    Runs the thermostat-assisted continuously-tempered Nosé-Hoover dynamics on the model's flat
    unconstrained space and keeps, every ``steps_per_sample`` steps, the position of each chain
    whose effective temperature is one. The log density and its gradient come from the model
    (compiled once); a ``pm.Minibatch`` in it draws a fresh minibatch at every step, and the
    thermostats absorb the minibatch noise.

    Parameters
    ----------
    draws, tune, chains : int
        Draws kept per chain (at unit effective temperature); warm-up iterations of
        ``steps_per_sample`` steps each, discarded; independent chains, simulated together.
    model : pymc.Model, optional
        Taken from the context when omitted; never modified.
    random_seed : int, numpy.random.Generator, optional
        The same seed gives the same result, minibatches included.
    progressbar : bool
    variant : {"tact", "sgnht", "tempering_only", "sghmc"}
        ``"tact"``: the method. Ablations: ``"sgnht"`` thermostats without tempering;
        ``"tempering_only"`` tempering with the constant friction ``noise*`` in place of the
        thermostats; ``"sghmc"`` constant friction, no tempering.
    step_size, step_size_tempering : "auto" or float
        ``eta = dt^2 / m`` of the parameters and of the tempering variable (``eta_theta``,
        ``eta_xi`` of Algorithm 1). The parameters move about ``sqrt(eta)`` per step.
        ``step_size="auto"`` (default): the warm-up (:mod:`pymc_tempering.adaptation`) adapts
        a mass matrix (the dynamics run on ``u``, ``theta = (u * scale) @ B.T``): ``scale``
        starts at ``1 / sqrt(|curvature|)`` of the log density at the model's initial point
        and is re-estimated at the ends of the warm-up's windows as the within-chain spread of
        the unit-temperature chains, capped where they are by the curvature and the minibatch
        gradient noise (the first window is capped by the curvature only, so that chains
        started far from the posterior reach it); ``B`` is the identity (a diagonal mass
        matrix) until, from the second window on, a model of at most 100 coordinates changes
        to coordinates that decorrelate the window's positions (a dense mass matrix; see
        ``docs/tact_hmc.md``); ``eta`` is ``AUTO_STEP_SIZE`` (0.01) in those units,
        ``jitter`` is in those units, and a blow-up during the warm-up repeats the iteration
        with ``scale`` halved (with a warning, at most 12 times).
        ``step_size_tempering="auto"``: 0.001, capped so that the tempering thermostat's excess
        ``eta_xi sigma_U^2 / 2`` from the minibatch energy noise ``sigma_U^2`` (measured at the
        start and at every window) stays below 0.05, and so that its kicks stay within 0.4
        thermal sds for a model of this many parameters
        (:func:`~pymc_tempering.adaptation.step_size.tempering_step_cap`: 8.7e-5 at 89
        parameters, no cap below 8). A number is used as it is, in the model's units, with no
        preconditioner and no restart.
    noise, noise_tempering : float
        Level ``c`` of the injected noise ``N(0, 2 c eta)``; also the friction the thermostats
        settle at without gradient noise, and the constant friction of the ablations.
    thermal_inertia, thermal_inertia_tempering : float
        ``gamma`` of Algorithm 1: larger is a slower, smoother thermostat.
    thermostat : {"diagonal", "scalar"}
        One Nosé-Hoover thermostat per coordinate of the parameters (default), or the paper's
        one per chain. A scalar thermostat holds only the mean kinetic temperature at one:
        where the minibatch gradient noise differs between coordinates it leaves the noisier
        ones too hot and the others too cold (see ``docs/tact_hmc.md``). The ablations without
        thermostats ignore it.
    steps_per_sample : int
        ``K``: steps between two candidate draws (one loop iteration).
    max_temperature, unit_temperature_fraction : float
        Highest effective temperature ``1 / lambda(1)``; part of the tempering well where the
        temperature is one (draws are kept there).
    abf_bins, abf_ramp : int, float
        Bins of the adaptive biasing force, and the weight in visits of the overall mean energy
        in each bin's estimate.
    resample_momenta : bool
        Redraw the momenta after every iteration (exact: they are ``N(0, eta)`` at every
        temperature).
    initial_points : ndarray, shape (chains, ndim), optional
        Flat unconstrained starting points; default the model's initial point plus uniform
        ``jitter`` (half-width).
    jitter : float
        Half-width of the uniform jitter of the default starting points: in the model's units
        for an explicit ``step_size``, in the starting preconditioner's units for ``"auto"``.
    max_iterations : int, optional
        Give up (``RuntimeError``) when a chain has not kept ``draws`` after this many
        iterations past the warm-up; default ``100 * draws``.
    callback : callable, optional
        ``callback(step)`` before each gradient evaluation, e.g. to set a ``pm.Data`` minibatch.
    gradient_noise : float or (float, float)
        **Testing aid.** Standard deviations of Gaussian noise added to the potential and to each
        gradient component, unknown to the dynamics (section 5.1). One number is used for both.

    Returns
    -------
    xarray.DataTree
        ``posterior``: the model's variables; ``sample_stats``: ``effective_temperature``,
        ``thermostat_theta``, ``thermostat_xi``, ``tempering_variable``, ``kinetic_temperature``,
        ``potential_energy``, ``step``, ``lp`` (``-potential_energy``), ``diverging``,
        ``acceptance_rate`` and ``log_weight`` (zeros) of each kept draw; ``tact_trajectory``: the
        stats (and ``kept``) of every iteration after the warm-up; ``abf``: the biasing force
        per bin and chain at the end; ``warmup``: the preconditioner's ``scale`` per flat
        coordinate (of ``v = theta @ inv(B).T``) and, for a dense one, ``B``
        (``preconditioner_basis``); attrs: the settings (``step_size`` in the preconditioned units for
        ``"auto"``), ``warmup_restarts``, the variant and the seed.

    Raises
    ------
    ValueError
        Discrete free variables, an unknown variant or bad settings.
    DivergenceError
        When the dynamics diverge (non-finite position or energy) after the warm-up, or during
        it with an explicit ``step_size`` or after the last restart; the message names the step.
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    auto, auto_tempering, per_coordinate = _check_options(
        variant, step_size, step_size_tempering, thermal_inertia, thermal_inertia_tempering,
        thermostat, steps_per_sample, max_temperature, unit_temperature_fraction,
    )
    target = Target(modelcontext(model))  # refuses discrete models
    thermostat_on, tempering = VARIANTS[variant]
    settings = TACTSettings(
        adaptation.AUTO_STEP_SIZE if auto else float(step_size),
        adaptation.AUTO_STEP_SIZE_TEMPERING if auto_tempering else float(step_size_tempering),
        float(noise), float(noise_tempering),
        float(thermal_inertia), float(thermal_inertia_tempering), float(unit_temperature_fraction),
        1.0 / float(max_temperature), int(abf_bins), float(abf_ramp), thermostat_on, tempering,
        per_coordinate=per_coordinate,
    )
    seed_init, seed_dyn, seed_batch, seed_noise = split_seed(random_seed, 4)
    rng = np.random.default_rng(seed_dyn)
    energy_sd, gradient_sd = (float(gradient_noise),) * 2 if np.isscalar(gradient_noise) else map(
        float, gradient_noise
    )
    logp_and_grad = _noisy(
        target.batched_logp_and_grad(seed_batch), energy_sd, gradient_sd,
        np.random.default_rng(seed_noise),
    )
    scale, start = _start(target, logp_and_grad, auto, initial_points, jitter, chains, seed_init)
    xi_cap = adaptation.tempering_step_cap(settings, target.ndim)
    if auto_tempering and tempering:
        settings = settings._replace(eta_xi=adaptation.tempering_step_size(
            adaptation.gradient_noise(logp_and_grad, start)[1], cap=xi_cap
        ))
    if auto:  # see TACTSettings.max_friction and max_kick (from the end of the warm-up)
        settings = blowup.start_bounds(settings, tune)
    warmup_rng = np.random.default_rng(rng.integers(2**63)) if auto else None
    state = _Loop(
        thermostats.init(start / scale, settings, rng), 0, scale,
        window=windows.init(tune, target.ndim) if auto else None,
        recovery=blowup.init(tune) if auto else None,
    )
    trace = run_kernel(
        _iteration(
            thermostats.finite_gradient_guard(
                logp_and_grad, target, lambda i: f"chain {i}",
                "a chain at a high effective temperature explores far into the posterior's "
                "tails: lower max_temperature, or write the model so that its gradient stays "
                "finite there (pm.Dirichlet for mixture weights rather than w and 1 - w)",
            ),
            int(steps_per_sample), resample_momenta, callback,
        ),
        state, settings, draws=draws, tune=tune, chains=chains, rng=rng,
        record=_record(settings),
        keep=lambda loop, info: coupling(loop.dynamics.xi, settings)[0] == 1.0,
        warmup=_warmup(logp_and_grad, tune, auto_tempering and tempering, warmup_rng, xi_cap)
        if auto else None,
        description=f"TACT-HMC ({variant})", progressbar=progressbar,
        max_iterations=max_iterations, trajectory=STATS,
    )
    blowup.warn_blowups("TACT-HMC", trace.state.recovery)
    attrs = _attrs(
        trace.params, trace.state.recovery, variant=variant, thermostat=thermostat,
        steps_per_sample=int(steps_per_sample), max_temperature=float(max_temperature),
        tune=tune, gradient_sd=gradient_sd, energy_sd=energy_sd,
    )
    return _result(target, trace, trace.params, attrs, random_seed)
