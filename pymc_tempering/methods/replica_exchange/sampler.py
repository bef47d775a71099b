"""Replica exchange with stochastic-gradient Nosé-Hoover thermostats and a noise-corrected
exchange test (the poster *Replica exchange with stochastic-gradient thermostats*).

A ladder of ``R`` replicas at temperatures ``T_1 = 1 < T_2 < ... < T_R`` is simulated with the
thermostat kernel of :mod:`pymc_tempering.kernels.thermostats` (without a tempering variable;
one batched call of the model's log density and gradient per step for all replicas). Replica
``j`` samples ``p(theta) L(theta)^(1 / T_j)``: the likelihood (observed variables and
potentials) is tempered, the prior is not
(:func:`~pymc_tempering.kernels.exchange.likelihood_tempered`; the poster tempers the whole
posterior, see there why not here). Every ``exchange_every`` steps the exchange move of
:mod:`pymc_tempering.kernels.exchange` proposes to swap the positions of neighbouring
replicas, with the Metropolis test on exact energies and the noise-corrected logistic test
(Seita et al. 2017) on minibatch energies; see that module for the test and the noise
estimate. :func:`sample_replica_exchange` runs the ladder through the thermostat driver
(:func:`~pymc_tempering.driver.thermostat.run_thermostats`): one iteration is
``steps_per_sample`` steps (with their exchange rounds) followed by a momentum refresh, and
every iteration after the ``tune`` warm-up is a draw. With ``step_size="auto"`` the warm-up
adapts every replica's preconditioner and the exchange test's minibatch count
(:mod:`pymc_tempering.adaptation`). This module holds what is replica exchange's own: the
ladder, the exchange plan (:class:`_Plan`), the window's rule and the replica and exchange
groups of the result."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.model import modelcontext

from pymc_tempering import adaptation
from pymc_tempering.adaptation import exchange_batches
from pymc_tempering.contract import check_sampler_args, reproducible, split_seed, warn
from pymc_tempering.driver import driver_result
from pymc_tempering.driver.thermostat import Replicas, run_thermostats, starting_points
from pymc_tempering.kernels import exchange, thermostats
from pymc_tempering.kernels.exchange import (
    CORRECTION_SD,
    ExchangeParams,
    auto_n_temperatures,
    likelihood_tempered,
    temperature_ladder,
)
from pymc_tempering.kernels.thermostats import ThermostatParams
from pymc_tempering.results import constrained_draws
from pymc_tempering.target import Target, full_data_energies, per_datum_terms
from pymc_tempering.timing import timed

__all__ = ["minibatch_exchange_energies", "sample_replica_exchange"]


def minibatch_exchange_energies(
    target: Target, random_seed=None
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Compile ``theta (n, D) -> (U (n,), t (n, m))`` for the exchange test, once.

    ``U = -log L``, the tempered energy (the log density less the prior's, see
    :func:`~pymc_tempering.kernels.exchange.likelihood_tempered`), on one fresh minibatch
    shared by the ``n`` positions, and ``t`` the ``m`` per-datum log-likelihood terms of the minibatched observed variables on that minibatch
    (already scaled by ``total_size / batch size``), from which the noise of an energy
    difference is estimated. Uses its own seeded copy of the minibatch generators
    (:meth:`~pymc_tempering.target.Target.compile_batched`).
    """
    observed = target.minibatched_observed

    def build(x, values):
        logp = target.logp_graph(values) - target.prior_logp_graph(values)
        if not observed:
            return [logp, pt.zeros((0,), dtype="float64")]
        terms = per_datum_terms(target, observed, values)
        return [logp, pt.concatenate([pt.as_tensor(t).flatten() for t in terms])]

    fn = target.compile_batched(build, random_seed)

    def energies(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logp, terms = fn(theta)
        return -logp, terms.reshape(theta.shape[0], -1)

    return energies


def data_size(target: Target) -> int:
    """The number of observations ``N`` of the target's model: the ``total_size`` of each
    minibatched observed variable (the minibatch's own length along a dimension without one),
    the size of every other observed variable, summed; 0 for a model without observed
    variables."""
    total = 0
    minibatched = target.minibatched_observed
    for rv in target.model.observed_RVs:
        if any(rv is mb for mb in minibatched):
            sizes = rv.owner.inputs[1:]
            shape = [int(d) for d in rv.owner.inputs[0].shape.eval()]
            n = 1
            for dim, size in zip(shape, sizes, strict=True):
                value = None if size.type == pt.NoneConst.type else size.eval()
                n *= dim if value is None else int(value)
        else:
            n = int(np.prod([int(d) for d in rv.shape.eval()]))
        total += n
    return total


#: ``max_temperature="auto"``: the hottest temperature is the number of observations ``N``
#: (there the tempered likelihood carries about one observation's information, and a barrier
#: of ``b N`` nats is ``b`` nats high), and at least this.
MIN_AUTO_MAX_TEMPERATURE = 10.0


def auto_max_temperature(target: Target) -> float:
    """``max(MIN_AUTO_MAX_TEMPERATURE, N)`` with ``N`` the model's :func:`data_size`."""
    return float(max(MIN_AUTO_MAX_TEMPERATURE, data_size(target)))


class _Swaps(NamedTuple):
    """The exchange's record in the driver's loop: the swaps so far, the minibatches averaged
    per pair and, with ``step_size="auto"``, the noise measured for re-sizing them (None
    otherwise)."""

    state: exchange.ExchangeState
    n_batches: np.ndarray
    noise: exchange_batches.ExchangeNoise | None = None


class _Plan(NamedTuple):
    """The ladder's constants. ``logp_and_grad`` is the model's log density (the ``T = 1``
    replica's), ``prior_and_grad`` its prior's; :meth:`tempered` gives a replica's."""

    logp_and_grad: Callable
    prior_and_grad: Callable
    energies: Callable
    exchange_rng: np.random.Generator
    betas: np.ndarray
    chains: int
    corrected: bool
    exact_energies: Callable | None = None
    exact_from: int | None = None

    def tempered(self, beta) -> Callable:
        """The log density and gradient at inverse temperature(s) ``beta``
        (:func:`~pymc_tempering.kernels.exchange.likelihood_tempered`); one per row for the
        dynamics of every replica."""
        return likelihood_tempered(self.logp_and_grad, self.prior_and_grad, beta)


def _exchange_round(plan: _Plan):
    """One round of :func:`~pymc_tempering.kernels.exchange.step` on the positions ``theta
    (chains, R, D)``, with the record's minibatches per pair."""

    def round_(swaps: _Swaps, theta: np.ndarray):
        params = ExchangeParams(
            plan.betas, plan.energies, plan.corrected, swaps.n_batches, plan.exact_energies
        )
        state, _ = exchange.step(swaps.state._replace(theta=theta), params, plan.exchange_rng)
        return swaps._replace(state=state._replace(theta=None)), state.theta

    return round_


def _replica_group(target: Target, kept_x, kept_energy, ladder, tamed) -> xr.Dataset:
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
    data["diverging"] = (("chain", "draw", "replica"), np.asarray(tamed, dtype=bool))
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


def _exchange_group(ex: exchange.ExchangeState, ladder) -> xr.Dataset:
    """Per ``(chain, pair)``: swaps attempted, accepted, skipped, their rate, the largest noise."""
    tested = ex.attempted - ex.skipped
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(tested > 0, ex.accepted / np.maximum(tested, 1), np.nan)
    pair = ("chain", "pair")
    return xr.Dataset(
        {
            "swap_attempted": (pair, ex.attempted),
            "swap_accepted": (pair, ex.accepted),
            "swap_skipped": (pair, ex.skipped),
            "swap_acceptance_rate": (pair, rate),
            "exchange_noise_sd_max": (pair, ex.noise_max),
        },
        coords={
            "chain": np.arange(ex.attempted.shape[0]),
            "pair": np.arange(ladder.size - 1),
            "temperature_low": ("pair", ladder[:-1]),
            "temperature_high": ("pair", ladder[1:]),
        },
    )


def _ladder(n_temperatures, ladder, max_temperature, target: Target) -> np.ndarray:
    """The ladder from ``n_temperatures`` (default
    :func:`~pymc_tempering.kernels.exchange.auto_n_temperatures`) and
    ``max_temperature`` (``"auto"``: :func:`auto_max_temperature`), or an explicit ``ladder``."""
    if isinstance(max_temperature, str):
        if max_temperature != "auto":
            raise ValueError(
                f"max_temperature must be 'auto' or a number above 1, got {max_temperature!r}."
            )
        max_temperature = auto_max_temperature(target)
    if ladder is None:
        n = (
            auto_n_temperatures(max_temperature, target.ndim)
            if n_temperatures is None else n_temperatures
        )
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise ValueError(f"n_temperatures must be a positive integer, got {n!r}.")
        return temperature_ladder(int(n), max_temperature)
    if np.ndim(ladder) != 1:
        raise ValueError(f"A temperature ladder must be a non-empty 1-D sequence, got {ladder!r}.")
    ladder = temperature_ladder(ladder)
    if n_temperatures is not None and n_temperatures != ladder.size:
        raise ValueError(
            f"n_temperatures={n_temperatures} disagrees with the ladder's {ladder.size} rungs."
        )
    return ladder


def _check_options(exchange_every, step_size, thermal_inertia, noise, minibatch, steps_per_sample):
    if int(exchange_every) != exchange_every or exchange_every < 1:
        raise ValueError(f"exchange_every must be an integer of at least 1, got {exchange_every}.")
    if int(steps_per_sample) != steps_per_sample or steps_per_sample < 1:
        raise ValueError(f"steps_per_sample must be an integer of at least 1, got {steps_per_sample}.")
    for name, value in [("step_size", step_size), ("thermal_inertia", thermal_inertia)]:
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}.")
    if not noise >= 0:
        raise ValueError(f"noise must be non-negative, got {noise}.")
    if minibatch not in (True, False, "auto"):
        raise ValueError(f"minibatch must be True, False or 'auto', got {minibatch!r}.")


def _use_corrected(target: Target, minibatch) -> bool:
    has_minibatch = bool(target.minibatched_observed)
    corrected = has_minibatch if minibatch == "auto" else bool(minibatch)
    if has_minibatch and not corrected:
        warn(
            "The model uses pm.Minibatch but minibatch=False: the Metropolis exchange test on "
            "noisy energies is biased."
        )
    return corrected


def _less_prior(energy: Callable, prior_and_grad: Callable) -> Callable:
    """``theta -> -log L``: an exact energy ``-log p - log L`` less the prior's."""

    def likelihood_energy(theta):
        return energy(theta) + prior_and_grad(theta)[0]

    return likelihood_energy


def _plan(target, ladder, chains, corrected, seeds) -> _Plan:
    """Compile the log density (and the exchange energies) and fix the ladder's constants."""
    _, _, seed_batch, seed_exch_batch, seed_exch = seeds
    logp_and_grad = target.batched_logp_and_grad(seed_batch)
    if target.model.observed_RVs or target.model.potentials:
        prior_and_grad = target.batched_logp_and_grad(prior=True)
    else:  # no likelihood to temper (a density written as priors alone): temper all of it

        def prior_and_grad(points):
            return np.zeros(points.shape[0]), np.zeros(points.shape)

    exact, exact_from = None, None
    if corrected:
        energies = minibatch_exchange_energies(target, seed_exch_batch)
        full = full_data_energies(target) if ladder.size > 1 else None
        if full is not None:
            full_energy, length, m = full
            exact_from = exchange_batches.exact_from(length, m)
            exact = _less_prior(full_energy, prior_and_grad)
    else:  # exact energies, from the dynamics' own function

        def energies(theta):
            return prior_and_grad(theta)[0] - logp_and_grad(theta)[0], None

    return _Plan(
        logp_and_grad, prior_and_grad, energies, np.random.default_rng(seed_exch),
        1.0 / ladder, chains, corrected, exact, exact_from,
    )


def _replicas(plan: _Plan, target: Target, steps, resample_momenta, max_batches) -> Replicas:
    """The driver's view of the ladder: every replica's tempered density (with the guard that
    names a non-finite gradient's replica), the exchange round, and the warm-up's rules. At a
    window's end every replica moves to its own scale in the window's coordinates
    (:func:`~pymc_tempering.adaptation.step_size.replica_scales`) and, with the corrected
    test, the minibatches per pair are re-sized from the window's noise
    (:func:`~pymc_tempering.adaptation.exchange_batches.final`, at most ``max_batches``)."""
    n_rep, chains = plan.betas.size, plan.chains
    temperatures = 1.0 / plan.betas
    logp_and_grad = thermostats.finite_gradient_guard(
        plan.tempered(np.tile(plan.betas, chains)), target,
        lambda i: f"chain {i // n_rep}, the replica at temperature {temperatures[i % n_rep]:.4g}",
        "a hot replica explores the prior times the likelihood tempered to its temperature, "
        "far into the posterior's tails: lower max_temperature, or write the model so that its "
        "gradient stays finite there (pm.Dirichlet for mixture weights rather than w and 1 - w)",
    )

    def window_scale(v, sds, olds, basis, settings: ThermostatParams):
        return adaptation.replica_scales(
            plan.tempered, plan.betas, chains, None, v, settings.eta_theta, olds, sds, basis
        ), settings

    def after_window(loop):
        if not (plan.corrected and n_rep > 1):
            return loop
        noise, n_batches = exchange_batches.final(
            loop.exchange.noise, loop.exchange.state, max_batches, plan.exact_from
        )
        return loop._replace(exchange=loop.exchange._replace(noise=noise, n_batches=n_batches))

    return Replicas(
        "Replica exchange", "reduce step_size or lengthen the warm-up (tune)", logp_and_grad,
        plan.tempered(1.0), chains, n_rep, steps[0], bool(resample_momenta),
        window_mask=lambda loop, settings: np.ones(chains, bool), window_scale=window_scale,
        exchange=_exchange_round(plan), exchange_every=steps[1], after_window=after_window,
    )


def _start(target: Target, plan: _Plan, auto: bool, initial_points, jitter, shape, seed):
    """``(scale, start)``: every replica's first preconditioner ``(chains * R, D)`` (ones for
    an explicit step size; :func:`~pymc_tempering.adaptation.step_size.replica_scales` for
    ``"auto"``, the jitter in the ``T = 1`` replica's curvature units) and the starting points
    ``(chains * R, D)`` in the model's units
    (:func:`~pymc_tempering.driver.thermostat.starting_points`)."""
    chains, n_rep, ndim = shape
    _, start = starting_points(
        target, plan.logp_and_grad, auto, initial_points, jitter, shape, seed
    )
    if not auto:
        return np.ones((chains * n_rep, ndim)), start
    scale = adaptation.replica_scales(
        plan.tempered, plan.betas, plan.chains, target.ravel(target.model.initial_point()),
        start.reshape(shape), adaptation.AUTO_STEP_SIZE,
    )
    return scale, start


def _result(target, trace, ladder, attrs, random_seed):
    x, energy, tamed = trace.draws["x"], trace.draws["potential_energy"], trace.draws["diverging"]
    swaps = trace.state.exchange
    ex = swaps.state
    stats = {
        "potential_energy": energy[:, :, 0],
        "step": trace.draws["step"],
        "lp": -energy[:, :, 0],
        "diverging": tamed[:, :, 0].astype(bool),
        "acceptance_rate": np.ones(energy.shape[:2]),
    }
    attrs = {**attrs, "n_steps": trace.state.n_steps, "swaps_skipped": int(ex.skipped.sum())}
    groups = {
        "replicas": _replica_group(target, x, energy, ladder, tamed),
        "replica_exchange": _exchange_group(ex, ladder),
        "warmup": xr.Dataset(
            {
                "preconditioner_scale": ("flat", trace.state.scale[0]),
                "replica_preconditioner_scale": (
                    ("replica", "flat"), trace.state.scale[: ladder.size]
                ),
                "exchange_batches": ("pair", swaps.n_batches),
                **({} if trace.state.basis is None else {
                    "preconditioner_basis": (("flat", "basis"), trace.state.basis.to_model)
                }),
            },
            coords={"temperature": ("replica", ladder)},
        ),
    }
    return driver_result(
        target, x[:, :, 0], method="replica_exchange", sample_stats=stats,
        random_seed=random_seed, attrs=attrs, extra_groups=groups, convergence=True,
    )


@reproducible
@timed
def sample_replica_exchange(
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    n_temperatures: int | None = None,
    max_temperature: float | str = "auto",
    ladder=None,
    exchange_every: int = 10,
    minibatch: bool | str = "auto",
    step_size: float | str = "auto",
    noise: float = 0.05,
    thermal_inertia: float = 1.0,
    thermostat: str | bool = "diagonal",
    steps_per_sample: int = 10,
    resample_momenta: bool = True,
    initial_points: np.ndarray | None = None,
    jitter: float = 1.0,
) -> xr.DataTree:
    """Sample a (minibatched) PyMC model by replica exchange with Nosé-Hoover thermostats.

    ``R`` replicas at temperatures ``1 = T_1 < ... < T_R`` (of each of ``chains`` independent
    ladders) run the thermostat dynamics of :func:`pymc_tempering.kernels.thermostats.step` at
    fixed inverse temperature ``1 / T_j``, all in one array; every ``exchange_every`` steps
    neighbouring replicas propose to swap positions (even and odd pairs in turn). The swap test
    is Metropolis with exact energies, and the noise-corrected logistic test of Seita et al.
    (2017) with minibatch energies (see :mod:`pymc_tempering.kernels.exchange`).

    Parameters
    ----------
    draws, tune, chains : int
        Draws kept per chain (one per iteration of ``steps_per_sample`` steps); warm-up
        iterations, discarded; independent ladders, simulated together.
    model : pymc.Model, optional
        Taken from the context when omitted; never modified. Discrete free variables are refused.
    random_seed : int, numpy.random.Generator, optional
        The same seed gives the same result, minibatches included.
    progressbar : bool
    n_temperatures : int, optional
        Number of replicas ``R``, on a geometric ladder from 1 to ``max_temperature``; default
        :func:`~pymc_tempering.kernels.exchange.auto_n_temperatures` (one rung per ``0.8 / sqrt(d / 2)`` e-folds of temperature,
        at most one per e-fold, for ``d`` parameters), or the length of ``ladder``.
    max_temperature : "auto" or float
        Highest temperature of the geometric ladder. ``"auto"`` (default): the number of
        observations ``N`` (:func:`data_size`; at least 10), where the tempered likelihood
        carries about one observation's information and a barrier of ``b N`` nats is ``b``
        nats high.
    ladder : array_like, optional
        The temperatures themselves, starting at 1 and strictly increasing (instead of the
        geometric ladder).
    exchange_every : int
        Steps between two rounds of exchanges (at least 1).
    minibatch : bool or "auto"
        Use the corrected test with noise estimated from the minibatch (True) or the Metropolis
        test (False). ``"auto"``: True when an observed variable uses ``pm.Minibatch``.
    step_size : "auto" or float
        ``eta = dt^2 / m`` of the parameters (moves of about ``sqrt(eta)`` per step).
        ``"auto"`` (default): the warm-up (:mod:`pymc_tempering.adaptation`) adapts a mass
        matrix per replica: replica ``j`` runs on ``u``, ``theta = (u * scale_j) @ B.T``, with
        ``scale_j`` from the curvature of its tempered density at the model's initial point,
        then at each window's end the within-chain spread of its positions capped by its
        curvature and minibatch gradient noise there, and ``B``, shared by the ladder, the
        identity until, from the second window on, a model of at most 100 coordinates
        decorrelates the ``T = 1`` replica's positions; ``eta`` is 0.01 in those units and a
        blow-up during the warm-up repeats the iteration with the scales halved (with a
        warning). With the corrected test it also sets the minibatches averaged per pair
        (:mod:`~pymc_tempering.adaptation.exchange_batches`; exact energies from one pass over
        the data with the Metropolis test where they would cover an eighth of it or more, and
        for every pair until the first window's end). A number is used as it is, in the
        model's units, for every replica, with no preconditioner.
    noise, thermal_inertia : float
        Level ``c`` of the injected noise ``N(0, 2 c eta)`` (the friction the thermostats settle
        at); ``gamma`` of the thermostats.
    thermostat : {"diagonal", "scalar", False}
        Adaptive Nosé-Hoover thermostats, one per coordinate of each replica (default) or one
        per replica (``"scalar"``, the poster's), or constant friction ``noise`` (False). A
        scalar thermostat holds only the mean kinetic temperature at one, so under minibatch
        gradient noise that differs between coordinates the noisier ones run hot and the
        others cold (see :func:`~pymc_tempering.sample_tact`).
    steps_per_sample : int
        Steps per iteration, i.e. between two kept draws.
    resample_momenta : bool
        Redraw the momenta after every iteration (exact: they are ``N(0, eta)`` at every
        temperature).
    initial_points : ndarray, shape (chains, R, ndim) or (chains, ndim), optional
        Flat unconstrained starting points (the second form is used for every replica); default
        the model's initial point plus uniform ``jitter`` (half-width).
    jitter : float
        Half-width of the uniform jitter of the default starting points (model units for an
        explicit ``step_size``, the starting preconditioner's units for ``"auto"``).

    Returns
    -------
    xarray.DataTree
        ``posterior``: the ``T = 1`` replica's draws of the model's variables. ``sample_stats``:
        ``potential_energy`` of the ``T = 1`` replica, ``lp`` (its negative), ``step``,
        ``diverging``, ``acceptance_rate`` (1: the dynamics has no test) and ``log_weight``
        (zeros). ``replicas``: every replica's draws with dims ``(chain, draw, replica, ...)``
        and a ``temperature`` coord. ``replica_exchange``: per ``(chain, pair)`` of neighbours
        ``(j, j + 1)``: ``swap_attempted``, ``swap_accepted``, ``swap_skipped`` (noise above the
        correction's range), ``swap_acceptance_rate`` (accepted / tested, skipped excluded) and
        ``exchange_noise_sd_max`` (largest estimated ``sigma``). ``warmup``:
        ``preconditioner_scale`` (the ``T = 1`` replica's, per flat coordinate of
        ``v = theta @ inv(B).T``), ``replica_preconditioner_scale`` ``(replica, flat)``,
        ``preconditioner_basis`` (``B``, for a dense preconditioner) and ``exchange_batches``
        (per pair: the minibatches averaged, 0 for exact energies from one pass over the data).
        attrs: the settings (``max_temperature`` and ``n_replicas`` as used), the test used,
        the total skipped swaps, what the warm-up undid and the seed.

    Raises
    ------
    ValueError
        Discrete free variables, a bad ladder, ``exchange_every < 1`` or other bad settings.
    DivergenceError
        When the dynamics diverge (non-finite position or energy) after the warm-up, or during
        it with an explicit ``step_size`` or after ``MAX_WARMUP_BLOWUPS`` halvings; the message
        names the step.
    """
    draws, tune, chains = check_sampler_args(draws, tune, chains)
    thermostat_on, per_coordinate = thermostats.thermostat_option(
        thermostat, constant_friction=True
    )
    auto = isinstance(step_size, str)
    if auto and step_size != "auto":
        raise ValueError(f"step_size must be 'auto' or a positive number, got {step_size!r}.")
    _check_options(exchange_every, 1.0 if auto else step_size, thermal_inertia, noise, minibatch,
                   steps_per_sample)
    target = Target(modelcontext(model))  # refuses discrete models
    ladder = _ladder(n_temperatures, ladder, max_temperature, target)
    corrected = _use_corrected(target, minibatch)
    n_rep = ladder.size
    # each replica's density is its own (plan.tempered): no tempering variable
    settings = ThermostatParams(
        adaptation.AUTO_STEP_SIZE if auto else float(step_size), float(noise),
        float(thermal_inertia), thermostat_on, per_coordinate,
    )
    seeds = split_seed(random_seed, 5)
    rng = np.random.default_rng(seeds[1])
    steps = (int(steps_per_sample), int(exchange_every))
    plan = _plan(target, ladder, chains, corrected, seeds)
    scale, start = _start(
        target, plan, auto, initial_points, jitter, (chains, n_rep, target.ndim), seeds[0]
    )
    # until the first warm-up window sizes the test, every pair takes exact energies if it can
    # (with one minibatch the noise near T = 1 skips nearly every swap, and the ladder would
    # start carrying crossings down only after that window)
    n_batches = np.full(max(n_rep - 1, 0), 0 if auto and plan.exact_energies else 1, dtype=int)
    swaps = _Swaps(exchange.init(chains, n_rep), n_batches,
                   exchange_batches.init() if auto else None)
    most = 1  # the corrected test's most minibatches per pair (one energies call gives m)
    if auto and corrected:
        most = exchange_batches.max_batches(plan.energies, start, data_size(target))
    label = "corrected" if corrected else "Metropolis"
    trace = run_thermostats(
        _replicas(plan, target, steps, resample_momenta, most), settings, scale=scale,
        start=start, draws=draws, tune=tune, rng=rng, auto=auto, exchange=swaps,
        description=f"Replica exchange ({n_rep} replicas, {label} test)", progressbar=progressbar,
    )
    recovery = trace.state.recovery
    attrs = {
        "n_replicas": int(n_rep), "max_temperature": float(ladder[-1]),
        "exchange_every": steps[1], "correction_sd": CORRECTION_SD,
        "exchange_test": "corrected_logistic" if corrected else "metropolis",
        "step_size": float(trace.params.eta_theta), "noise": float(noise),
        "step_size_mode": "auto" if auto else "fixed",
        "warmup_blowups": recovery.blowups if auto else 0,
        "warmup_kicks_undone": int(recovery.kicks) if auto else 0,
        "thermal_inertia": float(thermal_inertia), "thermostat": str(thermostat),
        "steps_per_sample": steps[0], "tune": tune,
    }
    return _result(target, trace, ladder, attrs, random_seed)
