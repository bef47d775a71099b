"""TACT-HMC: thermostat-assisted continuously-tempered Hamiltonian Monte Carlo (Luo et al. 2018).

The sampler (:func:`sample_tact`) runs the Nosé-Hoover dynamics of
:mod:`pymc_tempering.kernels.thermostats` on the model's flat unconstrained space through the
thermostat driver (:func:`~pymc_tempering.driver.thermostat.run_thermostats`) as one replica
whose temperature moves with the tempering variable: one loop iteration is
``steps_per_sample`` Euler steps followed by a momentum refresh (Algorithm 1, line 18), and a
chain's state is kept as a draw when its effective temperature ``1 / lambda(xi)`` is exactly
one (Algorithm 1, line 16). The ``tune`` warm-up iterations run the same dynamics and are
discarded; with ``step_size="auto"`` they adapt the preconditioner (from the positions of the
chains at unit temperature) and the tempering variable's step. This module holds what is
TACT-HMC's own: the settings, the keep rule, the window's rule and the result's groups.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import xarray as xr
from pymc.model import modelcontext

from pymc_tempering import adaptation
from pymc_tempering.contract import check_sampler_args, reproducible, split_seed
from pymc_tempering.driver import driver_result
from pymc_tempering.driver.thermostat import Replicas, run_thermostats, starting_points
from pymc_tempering.kernels import thermostats
from pymc_tempering.kernels.thermostats import TemperingParams, ThermostatParams, coupling
from pymc_tempering.methods.tact import testing
from pymc_tempering.methods.tact.settings import TemperingSettings
from pymc_tempering.target import Target
from pymc_tempering.timing import timed

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

REMEDY = "reduce step_size, raise noise or lengthen the warm-up (tune)"
GRADIENT_REMEDY = (
    "a chain at a high effective temperature explores far into the posterior's tails: lower "
    "max_temperature, or write the model so that its gradient stays finite there (pm.Dirichlet "
    "for mixture weights rather than w and 1 - w)"
)


def _cold(loop, settings: ThermostatParams) -> np.ndarray:
    """The chains at unit effective temperature (the draws, and the warm-up's positions)."""
    return coupling(loop.dynamics.xi, settings)[0] == 1.0


def _window_scale(logp_and_grad, adapt_tempering: bool, xi_cap: float):
    """The preconditioner after a warm-up window: the within-chain spread of the
    unit-temperature positions, capped by the stability limits measured where the chains are
    (curvature and minibatch gradient noise,
    :func:`~pymc_tempering.adaptation.step_size.adapted_scale`); with
    ``adapt_tempering`` the tempering step is re-set from the energy noise there."""

    def window_scale(v, sds, olds, basis, settings: ThermostatParams):
        v, (sd,), (old,) = v[:, 0], sds, olds
        in_v = adaptation.whitened(logp_and_grad, 1.0, basis)
        grad_var, energy_var = adaptation.gradient_noise(in_v, v)
        curvature = adaptation.curvature_at(in_v, v, old)
        new_scale = adaptation.adapted_scale(sd, old, curvature, grad_var, settings.eta_theta)
        if adapt_tempering:
            eta_xi = adaptation.tempering_step_size(energy_var, cap=xi_cap)
            settings = settings._replace(tempering=settings.tempering._replace(eta_xi=eta_xi))
        return new_scale, settings

    return window_scale


def _record(settings: ThermostatParams):
    """TACT-HMC's stats beside the driver's (one replica: ``x`` and the energy per chain)."""

    def record(loop, info) -> dict:
        state = loop.dynamics
        lam, _ = coupling(state.xi, settings)
        return {
            "effective_temperature": 1.0 / lam,
            "tempering_variable": state.xi,
            # per chain: the mean of the coordinates' thermostats with one per coordinate
            "thermostat_theta": (
                state.z_theta.mean(-1) if state.z_theta.ndim == 2 else state.z_theta
            ),
            "thermostat_xi": state.z_xi,
            "kinetic_temperature": info.kinetic_temperature,
        }

    return record


def _trajectory_group(trajectory: dict) -> xr.Dataset:
    """Every post-warm-up iteration's stats ``(chain, interval)`` and whether it was kept."""
    data = {name: np.reshape(trajectory[name], trajectory["kept"].shape)
            for name in (*STATS, "kept")}
    chains, intervals = data["kept"].shape
    return xr.Dataset(
        {name: (("chain", "interval"), value) for name, value in data.items()},
        coords={"chain": np.arange(chains), "interval": np.arange(intervals)},
    )


def _abf_group(state: thermostats.TACTState, settings: ThermostatParams) -> xr.Dataset:
    """The biasing force per bin and chain at the end."""
    tempering = settings.tempering
    centres = (np.arange(tempering.abf_bins) + 0.5) / tempering.abf_bins
    lam_c, dlam_c = coupling(centres, settings)
    mean_energy = thermostats.abf_mean_energy(state, tempering)
    return xr.Dataset(
        {
            "mean_energy": (("chain", "abf_bin"), mean_energy),
            "mean_force": (("chain", "abf_bin"), dlam_c * mean_energy),
            "count": (("chain", "abf_bin"), state.abf_count),
        },
        coords={
            "chain": np.arange(mean_energy.shape[0]),
            "abf_bin": np.arange(tempering.abf_bins),
            "tempering_variable": ("abf_bin", centres),
            "effective_temperature": ("abf_bin", 1.0 / lam_c),
        },
    )


def _check_options(
    variant, step_size, thermal_inertia, thermostat, steps_per_sample, max_temperature,
    tempering: TemperingSettings,
) -> tuple[bool, bool, bool]:
    """Refuse bad options of :func:`sample_tact`; ``(auto, auto_tempering, per_coordinate)``:
    whether each step size is ``"auto"``, and the thermostat's form."""
    if not isinstance(tempering, TemperingSettings):
        raise ValueError(
            f"tempering must be a pmt.TemperingSettings or None, got {type(tempering).__name__}."
        )
    auto = isinstance(step_size, str)
    if auto and step_size != "auto":
        raise ValueError(f"step_size must be 'auto' or a positive number, got {step_size!r}.")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}.")
    auto_tempering = tempering.check()
    positive = {**({} if auto else {"step_size": step_size}), "thermal_inertia": thermal_inertia}
    for name, value in positive.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}.")
    if not max_temperature >= 1:
        raise ValueError(f"max_temperature must be at least 1, got {max_temperature}.")
    _, per_coordinate = thermostats.thermostat_option(thermostat)
    if int(steps_per_sample) != steps_per_sample or steps_per_sample < 1:
        raise ValueError(f"steps_per_sample must be an integer of at least 1, got {steps_per_sample}.")
    return auto, auto_tempering, per_coordinate


def _settings(variant, step_size, noise, thermal_inertia, per_coordinate, max_temperature,
              tempering: TemperingSettings, auto: bool, auto_tempering: bool) -> ThermostatParams:
    """The kernel's settings at the start (the ``"auto"`` step sizes at their defaults)."""
    thermostat_on, moves = VARIANTS[variant]
    return ThermostatParams(
        adaptation.AUTO_STEP_SIZE if auto else float(step_size), float(noise),
        float(thermal_inertia), thermostat_on, per_coordinate,
        tempering=TemperingParams(
            adaptation.AUTO_STEP_SIZE_TEMPERING if auto_tempering else float(tempering.step_size),
            float(tempering.noise), float(tempering.thermal_inertia),
            float(tempering.unit_temperature_fraction), 1.0 / float(max_temperature),
            int(tempering.abf_bins), float(tempering.abf_ramp), moves,
        ),
    )


def _warmup_group(loop) -> xr.Dataset:
    """The final preconditioner: ``scale`` per coordinate of ``v`` and, for a dense one, the
    basis ``theta = v @ preconditioner_basis.T``."""
    data = {"preconditioner_scale": ("flat", loop.scale)}
    if loop.basis is not None:
        data["preconditioner_basis"] = (("flat", "basis"), loop.basis.to_model)
    return xr.Dataset(data)


def _attrs(settings: ThermostatParams, recovery, aids: testing.Aids, **given) -> dict:
    """The result's attrs: the options ``given`` and the settings as the warm-up left them."""
    t = settings.tempering
    return {
        "variant": given["variant"], "step_size": settings.eta_theta,
        "step_size_tempering": t.eta_xi,
        "step_size_mode": "fixed" if recovery is None else "auto",
        "warmup_blowups": 0 if recovery is None else recovery.blowups,
        "warmup_kicks_undone": 0 if recovery is None else int(recovery.kicks),
        "noise": settings.c_theta, "noise_tempering": t.c_xi,
        "thermal_inertia": settings.gamma_theta, "thermal_inertia_tempering": t.gamma_xi,
        "thermostat": given["thermostat"], "steps_per_sample": given["steps_per_sample"],
        "max_temperature": given["max_temperature"],
        "unit_temperature_fraction": t.unit_temperature_fraction,
        "abf_bins": t.abf_bins, "abf_ramp": t.abf_ramp, "tune": given["tune"],
        "gradient_noise_sd": aids.gradient_sd, "energy_noise_sd": aids.energy_sd,
    }


def _result(target, trace, attrs, random_seed):
    draws = trace.draws
    stats = {name: draws[name] for name in STATS}
    energy = stats["potential_energy"] = draws["potential_energy"][:, :, 0]
    stats["diverging"] = draws["diverging"][:, :, 0]
    stats["acceptance_rate"] = np.ones(energy.shape)
    stats["lp"] = -energy
    groups = {
        "tact_trajectory": _trajectory_group(trace.trajectory),
        "abf": _abf_group(trace.state.dynamics, trace.params),
        "warmup": _warmup_group(trace.state),
    }
    attrs = {**attrs, "n_steps": trace.state.n_steps}
    return driver_result(
        target, draws["x"][:, :, 0], method="tact_hmc", sample_stats=stats,
        random_seed=random_seed, attrs=attrs, extra_groups=groups, convergence=True,
    )


@reproducible
@timed
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
    noise: float = 0.05,
    thermal_inertia: float = 1.0,
    thermostat: str = "diagonal",
    steps_per_sample: int = 50,
    max_temperature: float = 10.0,
    resample_momenta: bool = True,
    initial_points: np.ndarray | None = None,
    jitter: float = 1.0,
    max_iterations: int | None = None,
    tempering: TemperingSettings | None = None,
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
        ``"tempering_only"`` tempering with the constant friction ``noise`` in place of the
        thermostats; ``"sghmc"`` constant friction, no tempering.
    step_size : "auto" or float
        ``eta = dt^2 / m`` of the parameters (``eta_theta`` of Algorithm 1): they move about
        ``sqrt(eta)`` per step.
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
        with ``scale`` halved (with a warning, at most 12 times). A number is used as it is,
        in the model's units, with no preconditioner and no restart.
    noise : float
        Level ``c`` of the noise ``N(0, 2 c eta)`` injected into the parameters; also the
        friction their thermostats settle at without gradient noise, and the constant friction
        of the ablations.
    thermal_inertia : float
        ``gamma_theta`` of Algorithm 1: larger is a slower, smoother thermostat.
    thermostat : {"diagonal", "scalar"}
        One Nosé-Hoover thermostat per coordinate of the parameters (default), or the paper's
        one per chain. A scalar thermostat holds only the mean kinetic temperature at one:
        where the minibatch gradient noise differs between coordinates it leaves the noisier
        ones too hot and the others too cold (see ``docs/tact_hmc.md``). The ablations without
        thermostats ignore it.
    steps_per_sample : int
        ``K``: steps between two candidate draws (one loop iteration).
    max_temperature : float
        Highest effective temperature ``1 / lambda(1)``.
    resample_momenta : bool
        Redraw the momenta after every iteration (exact: they are ``N(0, eta)`` at every
        temperature); False is the ablation that never redraws them.
    initial_points : ndarray, shape (chains, ndim), optional
        Flat unconstrained starting points; default the model's initial point plus uniform
        ``jitter`` (half-width).
    jitter : float
        Half-width of the uniform jitter of the default starting points: in the model's units
        for an explicit ``step_size``, in the starting preconditioner's units for ``"auto"``.
    max_iterations : int, optional
        Give up (``RuntimeError``) when a chain has not kept ``draws`` after this many
        iterations past the warm-up; default ``100 * draws``.
    tempering : TemperingSettings, optional
        Expert options of the tempering variable (its step size, noise and thermal inertia,
        the part of the well at unit temperature and the adaptive biasing force's bins); the
        defaults of :class:`~pymc_tempering.methods.tact.TemperingSettings` when omitted.

    See Also
    --------
    pymc_tempering.methods.tact.testing.hooks : the testing aids (gradient noise unknown
        to the dynamics, a function called before every step).

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
        (``preconditioner_basis``); attrs: the settings (``step_size`` in the preconditioned
        units for ``"auto"``; the tempering settings as ``step_size_tempering``,
        ``noise_tempering``, ``thermal_inertia_tempering``, ``unit_temperature_fraction``,
        ``abf_bins``, ``abf_ramp``), ``warmup_blowups``, ``warmup_kicks_undone``, the variant
        and the seed.

    Raises
    ------
    ValueError
        Discrete free variables, an unknown variant or bad settings.
    DivergenceError
        When the dynamics diverge (non-finite position or energy) after the warm-up, or during
        it with an explicit ``step_size`` or after the last restart; the message names the step.
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    tempering = TemperingSettings() if tempering is None else tempering
    auto, auto_tempering, per_coordinate = _check_options(
        variant, step_size, thermal_inertia, thermostat, steps_per_sample, max_temperature,
        tempering,
    )
    target = Target(modelcontext(model))  # refuses discrete models
    settings = _settings(variant, step_size, noise, thermal_inertia, per_coordinate,
                         max_temperature, tempering, auto, auto_tempering)
    seed_init, seed_dyn, seed_batch, seed_noise = split_seed(random_seed, 4)
    rng = np.random.default_rng(seed_dyn)
    aids = testing.AIDS.get()
    logp_and_grad = testing.noisy(
        target.batched_logp_and_grad(seed_batch), aids, np.random.default_rng(seed_noise)
    )
    scale, start = starting_points(
        target, logp_and_grad, auto, initial_points, jitter, (chains, 1, target.ndim), seed_init
    )
    xi_cap = adaptation.tempering_step_cap(settings, target.ndim)
    adapt_tempering = auto_tempering and settings.moves_xi
    if adapt_tempering:
        eta_xi = adaptation.tempering_step_size(
            adaptation.gradient_noise(logp_and_grad, start)[1], cap=xi_cap
        )
        settings = settings._replace(tempering=settings.tempering._replace(eta_xi=eta_xi))
    plan = Replicas(
        "TACT-HMC", REMEDY,
        thermostats.finite_gradient_guard(
            logp_and_grad, target, lambda i: f"chain {i}", GRADIENT_REMEDY
        ),
        logp_and_grad, chains, 1, int(steps_per_sample), bool(resample_momenta),
        window_mask=_cold, window_scale=_window_scale(logp_and_grad, adapt_tempering, xi_cap),
    )
    trace = run_thermostats(
        plan, settings, scale=scale, start=start, draws=draws, tune=tune, rng=rng, auto=auto,
        record=_record(settings), keep=lambda loop, info: _cold(loop, settings),
        description=f"TACT-HMC ({variant})", progressbar=progressbar,
        max_iterations=max_iterations, trajectory=STATS, _before_step=aids.callback,
    )
    attrs = _attrs(
        trace.params, trace.state.recovery, aids, variant=variant, thermostat=thermostat,
        steps_per_sample=int(steps_per_sample), max_temperature=float(max_temperature),
        tune=tune,
    )
    return _result(target, trace, attrs, random_seed)
