"""Replica exchange with stochastic-gradient Nosé-Hoover thermostats and a noise-corrected
exchange test (the poster *Replica exchange with stochastic-gradient thermostats*).

A ladder of ``R`` replicas at temperatures ``T_1 = 1 < T_2 < ... < T_R`` is simulated with the
thermostat kernel of :mod:`pymc_tempering.kernels.thermostats` (``tempering=False``; one
batched call of the model's log density and gradient per step for all replicas). Replica ``j``
samples ``p(theta) L(theta)^(1 / T_j)``: the likelihood (observed variables and potentials) is
tempered, the prior is not (:func:`~pymc_tempering.kernels.exchange.likelihood_tempered`;
the poster tempers the whole posterior, see there why not here). Every ``exchange_every`` steps the exchange move of
:mod:`pymc_tempering.kernels.exchange` proposes to swap the positions of neighbouring replicas,
with the Metropolis test on exact energies and the noise-corrected logistic test (Seita et al.
2017) on minibatch energies; see that module for the test and the noise estimate. The driver
(:func:`sample_replica_exchange`) runs it through the one loop
(:func:`~pymc_tempering.driver.run_kernel`): one iteration is ``steps_per_sample`` steps (with
their exchange rounds) followed by a momentum refresh, and every iteration after the ``tune``
warm-up is a draw. With ``step_size="auto"`` the warm-up adapts every replica's
preconditioner and the exchange test's minibatch count through the state machines of
:mod:`pymc_tempering.adaptation`, whose records travel in the loop's state (:class:`_Loop`).
"""

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
from pymc_tempering.adaptation import blowup, exchange_batches, windows
from pymc_tempering.driver import driver_result, run_kernel
from pymc_tempering.results import constrained_draws
from pymc_tempering.kernels import exchange, thermostats
from pymc_tempering.kernels.exchange import (
    CORRECTION_SD,
    auto_n_temperatures,
    likelihood_tempered,
    temperature_ladder,
)
from pymc_tempering.kernels.thermostats import TACTSettings
from pymc_tempering.contract import (
    DivergenceError,
    check_sampler_args,
    reproducible,
    split_seed,
    warn,
)
from pymc_tempering.target import Target, per_datum_terms, full_data_energies

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


class _Loop(NamedTuple):
    """The driver's state: every replica's dynamics ``(chains * R, ...)``, the exchange
    bookkeeping, the steps so far (warm-up included), every replica's preconditioner (its
    dynamics run on ``u``, ``theta = in_model_units(u, scale, basis)``, its own ``scale``
    row, ones for an explicit ``step_size``, and one ``basis`` for the ladder, None when
    diagonal), the minibatches averaged per pair and, with ``step_size="auto"``, the warm-up's
    records (None otherwise): the window, the exchange counts at its start and what was
    undone (:mod:`pymc_tempering.adaptation`)."""

    dynamics: thermostats.TACTState
    exchange: exchange.ExchangeState
    n_steps: int
    scale: np.ndarray
    n_batches: np.ndarray
    basis: adaptation.Basis | None = None
    window: windows.Windows | None = None
    exchange_noise: exchange_batches.ExchangeNoise | None = None
    recovery: blowup.Recovery | None = None


class _Plan(NamedTuple):
    """The constants of one iteration. ``logp_and_grad`` is the model's log density (the
    ``T = 1`` replica's), ``prior_and_grad`` its prior's; :meth:`tempered` gives a replica's."""

    logp_and_grad: Callable
    prior_and_grad: Callable
    target: Target  # names the coordinate of a non-finite gradient
    energies: Callable
    exchange_rng: np.random.Generator
    betas: np.ndarray
    chains: int
    steps_per_sample: int
    exchange_every: int
    corrected: bool
    resample_momenta: bool
    exact_energies: Callable | None = None
    exact_from: int | None = None

    def tempered(self, beta) -> Callable:
        """The log density and gradient at inverse temperature(s) ``beta``
        (:func:`~pymc_tempering.kernels.exchange.likelihood_tempered`); one per row for the
        dynamics of every replica."""
        return likelihood_tempered(self.logp_and_grad, self.prior_and_grad, beta)


def _iteration(plan: _Plan):
    """One loop iteration: ``steps_per_sample`` kernel steps, an exchange round every
    ``exchange_every`` steps (counted from the start), then the momentum refresh.

    With the ``"auto"`` warm-up (``loop.recovery`` set), a blow-up is undone
    (:func:`~pymc_tempering.adaptation.blowup.update`): the iteration's start is kept; during
    the warm-up the preconditioner is halved (the steps with it), after it the iteration is a
    divergent draw (the ladder's chains stay where they were).
    """
    n_rep = plan.betas.size
    temperatures = 1.0 / plan.betas
    logp_and_grad = thermostats.finite_gradient_guard(
        plan.tempered(np.tile(plan.betas, plan.chains)), plan.target,
        lambda i: f"chain {i // n_rep}, the replica at temperature {temperatures[i % n_rep]:.4g}",
        "a hot replica explores the prior times the likelihood tempered to its temperature, "
        "far into the posterior's tails: lower max_temperature, or write the model so that its "
        "gradient stays finite there (pm.Dirichlet for mixture weights rather than w and 1 - w)",
    )

    def iterate(loop: _Loop, settings: TACTSettings, rng: np.random.Generator):
        state, ex, n_steps, scale, basis = (
            loop.dynamics, loop.exchange, loop.n_steps, loop.scale, loop.basis
        )
        evaluate = adaptation.whitened(logp_and_grad, scale, basis)
        tamed = np.zeros(state.theta.shape[0], dtype=bool)
        try:
            for k in range(plan.steps_per_sample):
                n_steps += 1
                state, info = thermostats.step(
                    state, settings, evaluate, rng,
                    where=f"Replica exchange diverged at step {n_steps}",
                    remedy="reduce step_size or lengthen the warm-up (tune)",
                    half_kick=k == 0 and plan.resample_momenta,
                )
                tamed |= info.diverging
                if n_steps % plan.exchange_every == 0:
                    theta = adaptation.in_model_units(state.theta, scale, basis).reshape(
                        plan.chains, n_rep, -1
                    )
                    ex, swapped = exchange.step(
                        ex, theta, plan.betas, plan.energies, plan.exchange_rng,
                        corrected=plan.corrected, n_batches=loop.n_batches,
                        exact_energies=plan.exact_energies,
                    )
                    if swapped is not theta:  # positions swap; each keeps its replica's units
                        state = state._replace(theta=adaptation.in_dynamics_units(
                            swapped.reshape(state.theta.shape), scale, basis
                        ))
        except DivergenceError as err:
            recovery, state, scale = blowup.update(
                loop.recovery, err, loop.dynamics, settings, scale, rng, tempering=False
            )
            loop = loop._replace(dynamics=state, n_steps=n_steps, scale=scale, recovery=recovery)
            return loop, blowup.dropped_info(logp_and_grad, state, scale, basis)
        if plan.resample_momenta:
            state = thermostats.refresh_momenta(state, settings, rng, tempering=False)
        loop = loop._replace(dynamics=state, exchange=ex, n_steps=n_steps)
        return loop, info._replace(diverging=tamed)

    return iterate


def _warmup(plan: _Plan, tune: int, rng: np.random.Generator, max_batches: int):
    """The ``step_size="auto"`` warm-up, TACT-HMC's with every replica's positions.

    After every warm-up iteration each replica's positions are added to the window's sums
    (:func:`~pymc_tempering.adaptation.windows.update`). At a window's end
    (:func:`~pymc_tempering.adaptation.windows.final`: from the second window on, a dense
    basis from the ``T = 1`` replica's positions and gradient noise) every replica moves to
    its own scale in the new coordinates
    (:func:`~pymc_tempering.adaptation.step_size.replica_scales`) and, with the corrected
    test, the minibatches per pair are re-sized from the window's noise
    (:func:`~pymc_tempering.adaptation.exchange_batches.final`, at most ``max_batches``).
    After the last warm-up iteration blow-ups become divergent draws
    (:func:`~pymc_tempering.adaptation.blowup.final`).
    """
    n_rep = plan.betas.size

    def window_end(loop: _Loop, v, settings: TACTSettings, it: int) -> _Loop:
        window, sds, olds, basis, w_inv = windows.final(
            loop.window, it, list(loop.scale.reshape(plan.chains, n_rep, -1)[0]), loop.basis,
            (plan.tempered(1.0), v[:, 0]),  # the noise at the T = 1 replicas
        )
        if w_inv is not None:
            v = v @ w_inv.T
        new_scale = adaptation.replica_scales(
            plan.tempered, plan.betas, plan.chains, None, v, settings.eta_theta, olds, sds, basis
        )
        state = adaptation.rescale(
            loop.dynamics, settings, loop.scale, new_scale, rng, tempering=False, w_inv=w_inv
        )
        loop = loop._replace(dynamics=state, scale=new_scale, basis=basis, window=window)
        if plan.corrected and n_rep > 1:
            noise, n_batches = exchange_batches.final(
                loop.exchange_noise, loop.exchange, max_batches, plan.exact_from
            )
            loop = loop._replace(exchange_noise=noise, n_batches=n_batches)
        return loop

    def warmup(loop: _Loop, info, settings: TACTSettings, it: int):
        v = (loop.dynamics.theta * loop.scale).reshape(plan.chains, n_rep, -1)
        every = np.ones(plan.chains, bool)
        window = windows.update(loop.window, [v[:, j] for j in range(n_rep)], every)
        loop = loop._replace(window=window)
        if it in window.ends:
            loop = window_end(loop, v, settings, it)
        if it == tune - 1:
            loop = loop._replace(recovery=blowup.final(loop.recovery))
        return loop, blowup.warmup_kick_bound(settings, it, window.first, tune)

    return warmup


def _record(chains: int, n_rep: int):
    def record(loop: _Loop, info) -> dict:
        theta = adaptation.in_model_units(loop.dynamics.theta, loop.scale, loop.basis)
        return {
            "x": theta.reshape(chains, n_rep, theta.shape[-1]),
            "energy": info.energy.reshape(chains, n_rep),
            # a replica's iteration with a tamed kick (TACTSettings.max_kick) or dropped after
            # a blow-up; the draws (the T = 1 replica's) diverge where it did
            "tamed": info.diverging.reshape(chains, n_rep),
            "step": np.full(chains, float(loop.n_steps)),
        }

    return record


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


def _initial_points(target: Target, initial_points, jitter, shape, seed) -> np.ndarray:
    """``(chains, R, ndim)`` starting points; a ``(chains, ndim)`` array is used for every replica."""
    chains, n_rep, ndim = shape
    if initial_points is None:
        start = target.ravel(target.model.initial_point())
        initial_points = thermostats.jittered_positions(
            start, jitter, shape, np.random.default_rng(seed)
        )
    initial_points = np.asarray(initial_points, dtype=float)
    if initial_points.shape == (chains, ndim):
        initial_points = np.repeat(initial_points[:, None, :], n_rep, axis=1)
    if initial_points.shape != shape:
        raise ValueError(
            f"initial_points must have shape {shape} or {(chains, ndim)}, got "
            f"{initial_points.shape}."
        )
    return initial_points.reshape(chains * n_rep, ndim)


def _less_prior(energy: Callable, prior_and_grad: Callable) -> Callable:
    """``theta -> -log L``: an exact energy ``-log p - log L`` less the prior's."""

    def likelihood_energy(theta):
        return energy(theta) + prior_and_grad(theta)[0]

    return likelihood_energy


def _plan(target, ladder, chains, corrected, seeds, steps, resample_momenta) -> _Plan:
    """Compile the log density (and the exchange energies) and fix an iteration's constants."""
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
        logp_and_grad, prior_and_grad, target, energies, np.random.default_rng(seed_exch),
        1.0 / ladder, chains, *steps, corrected, bool(resample_momenta), exact, exact_from,
    )


def _start(target: Target, plan: _Plan, auto: bool, initial_points, jitter, shape, seed):
    """``(scale, start)``: every replica's first preconditioner ``(chains * R, D)`` (ones for
    an explicit step size; :func:`~pymc_tempering.adaptation.step_size.replica_scales` for
    ``"auto"``, the jitter in the ``T = 1`` replica's curvature units) and the starting points
    ``(chains * R, D)`` in the model's units."""
    chains, n_rep, ndim = shape
    if not auto:
        start = _initial_points(target, initial_points, jitter, shape, seed)
        return np.ones((chains * n_rep, ndim)), start
    point = target.ravel(target.model.initial_point())
    _, start = adaptation.start_preconditioner(
        plan.logp_and_grad, point, jitter, shape, np.random.default_rng(seed), initial_points,
        noise_cap=False,
    )
    start = _initial_points(target, start, jitter, shape, seed)
    scale = adaptation.replica_scales(
        plan.tempered, plan.betas, plan.chains, point, start.reshape(shape),
        adaptation.AUTO_STEP_SIZE,
    )
    return scale, start


def _result(target, trace, ladder, attrs, random_seed):
    x, energy = trace.draws["x"], trace.draws["energy"]
    ex = trace.state.exchange
    stats = {
        "potential_energy": energy[:, :, 0],
        "step": trace.draws["step"],
        "lp": -energy[:, :, 0],
        "diverging": trace.draws["tamed"][:, :, 0].astype(bool),
        "acceptance_rate": np.ones(energy.shape[:2]),
    }
    attrs = {**attrs, "n_steps": trace.state.n_steps, "swaps_skipped": int(ex.skipped.sum())}
    groups = {
        "replicas": _replica_group(target, x, energy, ladder, trace.draws["tamed"]),
        "replica_exchange": _exchange_group(ex, ladder),
        "warmup": xr.Dataset(
            {
                "preconditioner_scale": ("flat", trace.state.scale[0]),
                "replica_preconditioner_scale": (
                    ("replica", "flat"), trace.state.scale[: ladder.size]
                ),
                "exchange_batches": ("pair", trace.state.n_batches),
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
    settings = TACTSettings(
        eta_theta=adaptation.AUTO_STEP_SIZE if auto else float(step_size), eta_xi=1.0,
        c_theta=float(noise), c_xi=0.0, gamma_theta=float(thermal_inertia), gamma_xi=1.0,
        thermostat=thermostat_on,
        tempering=False,  # each replica's density is its own (plan.tempered), not U / T
        per_coordinate=per_coordinate,
    )
    seeds = split_seed(random_seed, 5)
    rng = np.random.default_rng(seeds[1])
    steps = (int(steps_per_sample), int(exchange_every))
    plan = _plan(target, ladder, chains, corrected, seeds, steps, resample_momenta)
    scale, start = _start(
        target, plan, auto, initial_points, jitter, (chains, n_rep, target.ndim), seeds[0]
    )
    if auto:  # see TACTSettings.max_friction and max_kick (from the end of the warm-up)
        settings = blowup.start_bounds(settings, tune)
    warmup_rng = np.random.default_rng(rng.integers(2**63)) if auto else None
    # until the first warm-up window sizes the test, every pair takes exact energies if it can
    # (with one minibatch the noise near T = 1 skips nearly every swap, and the ladder would
    # start carrying crossings down only after that window)
    n_batches = np.full(max(n_rep - 1, 0), 0 if auto and plan.exact_energies else 1, dtype=int)
    state = _Loop(
        thermostats.init(start / scale, settings, rng), exchange.init(chains, n_rep), 0, scale,
        n_batches, window=windows.init(tune, target.ndim) if auto else None,
        exchange_noise=exchange_batches.init() if auto else None,
        recovery=blowup.init(tune) if auto else None,
    )
    warmup = None
    if auto:  # the corrected test's most minibatches per pair (one energies call gives m)
        most = 1
        if corrected:
            most = exchange_batches.max_batches(plan.energies, start, data_size(target))
        warmup = _warmup(plan, tune, warmup_rng, most)
    label = "corrected" if corrected else "Metropolis"
    trace = run_kernel(
        _iteration(plan), state, settings, draws=draws, tune=tune, chains=chains,
        rng=rng, record=_record(chains, n_rep), progressbar=progressbar, warmup=warmup,
        description=f"Replica exchange ({n_rep} replicas, {label} test)",
    )
    recovery = trace.state.recovery
    blowup.warn_blowups("Replica exchange", recovery)
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
