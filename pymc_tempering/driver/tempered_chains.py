"""Continuously tempered chains batched through one compiled density: the batched path of
joint and Gibbs continuous tempering.

PyMC's NUTS (nutpie, PyMC's own) runs a handful of chains, each calling the model's log density
at one point at a time. Here hundreds of chains move together through the one driver loop
(:func:`~pymc_tempering.driver.run_kernel`), every leapfrog step one vectorised call of the
model's log density and gradient on all of them (:meth:`Target.batched_logp_and_grad
<pymc_tempering.target.Target.batched_logp_and_grad>`, as AIS's runs make), with the kernels of
:mod:`pymc_tempering.kernels.continuous`: fixed-length HMC in the base's whitened coordinates
(the base's covariance as inverse mass matrix) and, for Gibbs continuous tempering, the exact
draw of ``beta`` given ``x``. The warm-up is shared: one step size for all chains, adapted from
their mean acceptance (a per-chain adaptation would let a chain's step size follow its own
temperature and mode).

:func:`sample_tempered_chains` returns what :func:`pymc.sample` returns for the continuously
tempered model (the value variables under their value names and the temperature variable in
the posterior; ``diverging``, ``acceptance_rate``, ``step_size`` and ``lp`` in
``sample_stats``), so the one weighing of continuous tempering
(:func:`~pymc_tempering.extended.tempered.ct_result`) weighs both paths' draws. Written by hand
because no sampler that PyMC drives batches chains through one NumPy-level density call (JAX's
``vmap`` does, on the JAX backend).

How many chains, how long: every chain starts from a draw of the base and carries a warm-up
bias (section 7.3 of the CT paper). Measured on the five 22-unit Boltzmann machine relaxations
with the paper's variational base (joint, three runs per machine, the three machines whose
base covers the target): at an equal number of gradients, 32 chains of 4000 draws gave a log Z
RMSE of 0.036 nats, 128 of 1000 0.059, and 512 of 250 0.27 with a bias of -0.22 (short chains
end before their excursions to the target have equilibrated); 128 chains of 1000 draws after
100, 250 and 1000 warm-up iterations gave 0.063, 0.059 and 0.078, and after none (the initial
step size) 4.5. Fewer, longer chains are the more accurate per gradient, but 32 chains took
2.2 times as long as 128 for those gradients (each call's overhead), so per second they are
level; 128 keeps 8 batches of 16 chains for the calibration check
(:func:`~pymc_tempering.checks.calibrated`) at an evaluation cost per gradient near the lowest
(64 to 256 chains per call).
"""

from __future__ import annotations

import importlib.util
from typing import NamedTuple

import numpy as np
import xarray as xr
from xarray import DataTree

from pymc_tempering.bases import Base
from pymc_tempering.checks import search_incomplete
from pymc_tempering.driver.loop import run_kernel
from pymc_tempering.kernels import hmc
from pymc_tempering.kernels.continuous import (
    JointState,
    TemperingParams,
    gibbs_init,
    gibbs_step,
    joint_init,
    joint_step,
)
from pymc_tempering.results import INVERSE_TEMPERATURE, TEMPERATURE_CONTROL
from pymc_tempering.target import Target

__all__ = [
    "KINDS",
    "BATCH_BOOTSTRAP",
    "BATCH_CHAINS",
    "BATCH_MAX_DIM",
    "BATCH_TUNE",
    "JAX_MIN_CHAINS",
    "compile_mode",
    "batched_chain_count",
    "check_batched_chains",
    "batched_sampling",
    "sample_tempered_chains",
]

KINDS = ("gibbs", "joint")
#: Chains of the batched path where :func:`batched_chain_count` chooses it.
BATCH_CHAINS = 128
#: Bootstrap rounds before the final run of batched chains, where the call gives none: each
#: refits the base and log zeta to the weighted draws of its chains. Measured on Boltzmann
#: machine relaxations: with joint CT on 22 units, the final run's standard error of log Z
#: was 0.07 to 0.20 after one round and 0.06 to 0.08 after two, in about the same time; with
#: Gibbs CT on 30 units (3 machines x 2 seeds), log Z's RMSE was 0.27 nats (errors -0.54 to
#: -0.05) after one round in a median 10 s, and 0.075 (-0.10 to +0.14) after two in 13 s.
BATCH_BOOTSTRAP = 2
#: The most warm-up iterations of a run of batched chains: the warm-up adapts one step size,
#: and each chain starts from a draw of the base, already near equilibrium at beta = 0
#: (measured on 22-unit Boltzmann machine relaxations: 100, 250 and 1000 iterations gave
#: the same errors; without a warm-up, at the initial step size, they were 4.5 nats).
BATCH_TUNE = 250
#: Parameters above which the batched path is not chosen by default: its draws are kept for
#: every chain (chains x draws x parameters), and fixed-length HMC in the base's coordinates
#: has no per-parameter adaptation.
BATCH_MAX_DIM = 100
#: Chains from which the batched density is compiled for JAX where it is installed: on two
#: CPU cores JAX's vectorised call and PyTensor's default (numba) cost the same at 128 chains,
#: and JAX's is 4.9 times faster at 1024 (a 22-unit Boltzmann machine relaxation); on a GPU,
#: JAX's default device, the same path runs there unchanged.
JAX_MIN_CHAINS = 512


def compile_mode(chains: int) -> str | None:
    """The PyTensor mode of the batched density for ``chains`` chains: ``"JAX"`` from
    ``JAX_MIN_CHAINS`` on where JAX is installed, else None (PyTensor's default)."""
    if chains < JAX_MIN_CHAINS:
        return None
    return "JAX" if importlib.util.find_spec("jax") is not None else None


class _Params(NamedTuple):
    kernel: TemperingParams
    log_step_size: float  # shared by the chains, jittered per chain at each step
    adaptation: hmc.StepSizeAdaptation
    target_accept: float
    tune: int


def _stepper(kind: str):
    kernel_step = gibbs_step if kind == "gibbs" else joint_step

    def step(state, params: _Params, rng):
        eps = hmc.jittered(np.exp(params.log_step_size), state.position.z.shape[0], rng)
        return kernel_step(state, params.kernel._replace(step_size=eps), rng)

    return step


def _warmup(state, info, params: _Params, iteration: int):
    """One step size for all chains, from their mean acceptance; its average after warm-up."""
    adaptation = hmc.step_size_adaptation_update(
        params.adaptation, np.mean(info.acceptance_rate), params.target_accept, iteration,
        params.tune,
    )
    last = iteration == params.tune - 1
    log_eps = adaptation.log_step_size_avg if last else adaptation.log_step_size
    return state, params._replace(log_step_size=float(log_eps), adaptation=adaptation)


def _record(state, info) -> dict:
    out = {
        "z": state.position.z, "acceptance_rate": info.acceptance_rate,
        "diverging": info.diverging, "lp": state.position.log_target,
    }
    # the joint chains' free variable is the control u, the Gibbs chains' beta itself
    out["temperature"] = state.u if isinstance(state, JointState) else state.beta
    return out


def _sampled(target: Target, x: np.ndarray, temperature: dict, stats: dict) -> DataTree:
    """``pm.sample``'s layout for the tempered model's free variables: the value variables
    under their value names, the temperature variable, and the stats."""
    chains, draws = x.shape[:2]
    dims = ("chain", "draw")
    coords = {"chain": np.arange(chains), "draw": np.arange(draws)}
    post = {
        name: (dims + tuple(f"{name}_dim_{i}" for i in range(value.ndim - 2)), value)
        for name, value in target.unravel(x).items()
    }
    post.update({name: (dims, value) for name, value in temperature.items()})
    return DataTree.from_dict({
        "/posterior": xr.Dataset(post, coords=coords),
        "/sample_stats": xr.Dataset({k: (dims, v) for k, v in stats.items()}, coords=coords),
    })


def sample_tempered_chains(
    target: Target, base: Base, log_zeta: float, *, kind: str, draws: int, tune: int,
    chains: int, seed, n_leapfrog: int = 10, target_accept: float = 0.8,
    progressbar: bool = True,
) -> DataTree:
    """Run ``chains`` continuously tempered chains as one batch; ``pm.sample``'s layout.

    Parameters
    ----------
    target : Target
        The model's flat log density (an exact one: no ``pm.Minibatch``).
    base : Base
        The Gaussian base of eq. (16); the chains move in its whitened coordinates and start
        from its draws.
    log_zeta : float
    kind : {"gibbs", "joint"}
        Gibbs continuous tempering (HMC on ``x`` given ``beta``, an exact draw of ``beta``) or
        joint (HMC on ``x`` and the temperature control together).
    draws, tune, chains : int
        Per chain, as in :func:`pymc.sample`: ``tune`` warm-up iterations (the shared step
        size's adaptation; discarded) and ``draws`` kept.
    seed
        The loop's seed.
    n_leapfrog : int
        Leapfrog steps per transition.
    target_accept : float
        The chains' mean acceptance rate the warm-up aims for.
    progressbar : bool

    Returns
    -------
    xarray.DataTree
        ``posterior``: the value variables under their value names and
        ``inverse_temperature`` (Gibbs) or ``temperature_control`` (joint), shapes
        ``(chains, draws, ...)``; ``sample_stats``: ``diverging``, ``acceptance_rate``,
        ``step_size`` and ``lp`` (the model's log density at the draw).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    rng = np.random.default_rng(seed)
    evaluate = hmc.whitened_density(target, base, mode=compile_mode(chains))
    position = hmc.init(rng.standard_normal((chains, target.ndim)), evaluate)
    kernel = TemperingParams(float(log_zeta), 1.0, int(n_leapfrog), evaluate)
    state = gibbs_init(position, kernel, rng) if kind == "gibbs" else joint_init(position, rng)
    eps0 = 1.0 / target.ndim**0.25
    params = _Params(kernel, float(np.log(eps0)), hmc.step_size_adaptation_init(eps0),
                     float(target_accept), int(tune))
    trace = run_kernel(
        _stepper(kind), state, params, draws=draws, tune=tune, chains=chains, rng=rng,
        record=_record, warmup=_warmup if tune > 0 else None,
        description=f"{kind.capitalize()} CT, {chains} chains", progressbar=progressbar,
    )
    out = trace.draws
    name = INVERSE_TEMPERATURE if kind == "gibbs" else TEMPERATURE_CONTROL
    stats = {k: out[k] for k in ("diverging", "acceptance_rate", "lp")}
    stats["step_size"] = np.full((chains, draws), float(np.exp(trace.params.log_step_size)))
    return _sampled(target, base.unwhiten(out["z"]), {name: out["temperature"]}, stats)


def batched_sampling(target: Target, kind: str, chains: int, progressbar: bool = True):
    """The ``sample`` of an :class:`~pymc_tempering.extended.runner.ExtendedSampling` that runs
    :func:`sample_tempered_chains`: ``sample(state, draws, tune, seed, target_accept)`` for a
    state with ``base`` and ``log_zeta``
    (a :class:`~pymc_tempering.extended.tempered.Tempering`)."""

    def sample(state, draws, tune, seed, target_accept):
        return sample_tempered_chains(
            target, state.base, state.log_zeta, kind=kind, draws=draws, tune=min(tune, BATCH_TUNE),
            chains=chains, seed=seed, progressbar=progressbar,
            target_accept=0.8 if target_accept is None else target_accept,
        )

    return sample


def check_batched_chains(batched_chains, nuts_sampler=None, sample_kwargs=None) -> int | None:
    """``batched_chains`` as a user gave it, checked before any fit: ``None`` or a whole number
    >= 0, and a positive number only without a ``nuts_sampler`` or :func:`pymc.sample`
    keywords, which ask for NUTS.

    Raises
    ------
    ValueError
        Otherwise.
    """
    if batched_chains is None:
        return None
    count = int(batched_chains)
    if count < 0 or count != batched_chains:
        raise ValueError(f"batched_chains must be a whole number >= 0, got {batched_chains!r}.")
    if count and (nuts_sampler is not None or sample_kwargs):
        raise ValueError("batched_chains runs chains of its own, not PyMC's NUTS: pass either "
                         "batched_chains or nuts_sampler and pm.sample keywords.")
    return count


def batched_chain_count(target: Target, base: Base, batched_chains: int | None,
                        nuts_sampler=None, sample_kwargs=None) -> int:
    """How many batched chains a continuous tempering call runs; 0: PyMC's NUTS instead.

    ``batched_chains`` as :func:`check_batched_chains` passed it: a number is used as it is (0
    for NUTS); ``None`` chooses ``BATCH_CHAINS`` where the batched path pays, else 0, and 0
    where the call asks for NUTS (a ``nuts_sampler`` or :func:`pymc.sample` keywords in
    ``sample_kwargs``). It pays where the base's mode search is far from complete (the Good-Turing
    chance that another of its runs finds a new optimum above
    :data:`~pymc_tempering.checks.UNSEEN_OPTIMA_LIMIT`): there the search cannot vouch for a
    run, and many independent chains can (:func:`~pymc_tempering.checks.calibrated`). Models
    of more than ``BATCH_MAX_DIM`` parameters are not batched by default.
    """
    if batched_chains is not None:
        return int(batched_chains)
    asks_nuts = nuts_sampler is not None or bool(sample_kwargs)
    if asks_nuts or not search_incomplete(base.modes) or target.ndim > BATCH_MAX_DIM:
        return 0
    return BATCH_CHAINS
