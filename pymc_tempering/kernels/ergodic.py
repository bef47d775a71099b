"""Hamiltonian ergodic inference (HEI) numerics: the tuned chain, its objective and its tuning.

The chain of the ergodic-inference paper is ``T`` HMC transitions started from a factorised
Gaussian ``P_0``; transition ``t`` has its own leapfrog step size and diagonal momentum
variance. Here it is built as one PyTensor graph over a batch of particles (rows), on the
model's batched log density :meth:`~pymc_tempering.Target.batched_logp_graph`:

- :func:`step`: one transition, eq. (8): the leapfrog proposal of Algorithm 1 and the
  Metropolis-Hastings *selection* ``x_t = x' 1(p_MH > u) + x_{t-1} (1 - 1(p_MH > u))``, which
  PyTensor differentiates almost everywhere (eq. 9). It is a kernel step, ``step(state, params,
  rng) -> (state, info)``, on symbolic variables: a :class:`ChainState`, the transition's
  :class:`TransitionParams` and, as its ``rng``, the :class:`TransitionNoise` the transition
  uses (the chain is differentiated through its noise, so the draws are inputs of the graph);
  it returns a :class:`ChainState` and a :class:`TransitionInfo` (acceptance probability,
  divergence flag, energy).
- :func:`hei_chain`: the ``T`` transitions as one ``scan``.
- :func:`emlbo`: the ergodic modified lower bound (eq. 4) and the surrogate whose gradient the
  fit follows; :func:`tuning_gradients` and :func:`constrained_adam` for the three ways of
  tuning ``P_0`` under the entropy bound of eq. (5); :func:`compile_training_step` and
  :func:`compile_chain_sampler` compile them.
- The optimisation as a NumPy kernel: :func:`fit_init` / :func:`fit_step` ``(state, params, rng)
  -> (state, FitInfo)``, one Adam iteration of the compiled training step per call.
- NumPy side: :func:`gaussian_entropy`, :func:`stein_terms` (the Stein gap),
  :func:`cycle_drift` (whether further cycles of the chain move its draws),
  :func:`initial_step_sizes`, :func:`polyak_add` (Polyak-Ruppert averaging).

``P_0`` itself (``initial="auto"``, the entropy bound ``h`` and the Stein calibration of its
scale) is built in :mod:`pymc_tempering.methods.ergodic.initial`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.variational.updates import adam
from pytensor.gradient import disconnected_grad
from scipy.stats import norm

from pymc_tempering.target import Target

__all__ = [
    "LOG_2PI_E",
    "ChainState",
    "TransitionParams",
    "TransitionNoise",
    "TransitionInfo",
    "ChainTrace",
    "FitParameters",
    "Objective",
    "gaussian_entropy",
    "stein_terms",
    "mean_and_se",
    "cycle_drift",
    "logp_and_grad",
    "step",
    "hei_chain",
    "initial_step_sizes",
    "init_parameters",
    "initial_entropy",
    "emlbo",
    "tuning_gradients",
    "constrained_adam",
    "compile_training_step",
    "compile_chain_sampler",
    "polyak_add",
    "FitState",
    "FitParams",
    "FitInfo",
    "fit_init",
    "fit_step",
]

LOG_2PI_E = float(np.log(2.0 * np.pi) + 1.0)


# ------------------------------------------------------------------------------ NumPy helpers
def gaussian_entropy(cov) -> float:
    """Entropy of a Gaussian with covariance ``cov`` (matrix, or vector of variances)."""
    cov = np.asarray(cov, dtype=float)
    if cov.ndim == 1:
        logdet = float(np.sum(np.log(cov)))
        d = cov.size
    else:
        sign, logdet = np.linalg.slogdet(cov)
        if sign <= 0:
            return -np.inf
        d = cov.shape[0]
    return 0.5 * (d * LOG_2PI_E + logdet)


def stein_terms(x, score):
    """Per-draw terms of the Stein gap: their mean is the gap of the draws ``x`` (rows).

    For a target ``pi`` whose density vanishes fast enough at the edges, integration by parts
    gives ``E_pi[(x - m) . grad log pi(x)] = -d`` for any constant ``m`` (the virial or
    equipartition identity). The gap ``1 + mean_i[(x_i - xbar) . score_i] / d`` is therefore about
    zero for draws of ``pi``, positive for draws that are too concentrated and negative for draws
    that are too dispersed: for ``pi = N(m, S)`` and draws with covariance ``c S`` it is
    ``1 - c``. ``score`` holds ``grad log pi*`` at the rows of ``x``. Works on NumPy arrays and on
    PyTensor variables alike.
    """
    return 1.0 + ((x - x.mean(axis=0)) * score).sum(axis=1) / x.shape[1]


def mean_and_se(values) -> tuple[float, float]:
    """Mean of independent values and its standard error."""
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


def cycle_drift(x_before, lp_before, x_after, lp_after) -> tuple[float, float]:
    """How far further cycles of the tuned chain moved the draws: the largest paired z-score.

    The rows of ``x_after`` (with log densities ``lp_after``) are the rows of ``x_before``
    carried through more cycles of the ``T`` transitions. Every transition leaves the
    target invariant, so for draws of the target the cycles change no expectation. The
    statistics compared are each coordinate, its squared deviation from ``x_before``'s mean and
    the log density; for each, the per-row differences (after minus before) give a paired
    z-score ``mean / (sd / sqrt(n))``, exact for the mean of a difference whatever the
    correlation between the cycles. Rows that are not finite in either are dropped; a statistic
    that did not change in any row scores 0.

    Returns
    -------
    z : float
        The largest ``|z|`` over the ``2 d + 1`` statistics.
    critical : float
        The two-sided Bonferroni bound for them at family-wise false-alarm rate
        ``CYCLE_DRIFT_ALPHA``: the draws drifted where ``z > critical``.
    """
    before = np.column_stack([x_before, lp_before])
    after = np.column_stack([x_after, lp_after])
    keep = np.isfinite(before).all(axis=1) & np.isfinite(after).all(axis=1)
    before, after = before[keep], after[keep]
    m = before[:, :-1].mean(axis=0)
    diff = np.column_stack([
        after - before, (after[:, :-1] - m) ** 2 - (before[:, :-1] - m) ** 2
    ])
    n = diff.shape[0]
    se = diff.std(axis=0, ddof=1) / np.sqrt(n)
    z = np.divide(np.abs(diff.mean(axis=0)), se, out=np.zeros(diff.shape[1]), where=se > 0)
    critical = float(norm.isf(CYCLE_DRIFT_ALPHA / (2 * diff.shape[1])))
    return float(z.max()), critical


#: :func:`cycle_drift`'s family-wise false-alarm rate (for draws of the target, more cycles are
#: run needlessly with about this probability).
CYCLE_DRIFT_ALPHA = 0.01


def initial_step_sizes(step_size, n_steps: int, rng: np.random.Generator) -> np.ndarray:
    """The ``T`` initial leapfrog step sizes: one value, or uniform draws from ``(low, high)``.

    Raises
    ------
    ValueError
        Unless every step size is positive and finite.
    """
    if np.ndim(step_size) == 0:
        steps = np.full(n_steps, float(step_size))
    else:
        low, high = (float(v) for v in step_size)
        steps = rng.uniform(low, high, size=n_steps)
    if not np.all((steps > 0) & np.isfinite(steps)):
        raise ValueError(f"step_size must be positive and finite, got {step_size!r}.")
    return steps


# ------------------------------------------------------------------------------ the chain graph
class ChainState(NamedTuple):
    """Symbolic particles: positions ``x`` (n, d) and ``log pi*(x)`` (n,).

    :func:`step` reads only ``x`` (it recomputes the log density there, after the optional
    stop-gradient), so a state handed to it may have ``logdensity`` ``None``; the state it
    returns has both.
    """

    x: pt.TensorVariable
    logdensity: pt.TensorVariable | None


class TransitionParams(NamedTuple):
    """Parameters of one :func:`step`.

    Attributes
    ----------
    target : Target
        The model's batched log density.
    log_step_size : symbolic scalar
        Log leapfrog step size of this transition.
    log_momentum_variance : symbolic vector (d,)
        Log diagonal momentum variance of this transition.
    n_leapfrog : int
    stop_gradient : bool
        Stop the gradient at the input ``x_{t-1}`` (section 3.2).
    """

    target: Target
    log_step_size: pt.TensorVariable
    log_momentum_variance: pt.TensorVariable
    n_leapfrog: int
    stop_gradient: bool


class TransitionNoise(NamedTuple):
    """The random numbers of one :func:`step`: the ``rng`` of this symbolic kernel.

    Attributes
    ----------
    momentum : symbolic matrix (n, d)
        Standard normal noise for the momentum ``r = sqrt(var) momentum``.
    uniform : symbolic vector (n,)
        Uniforms for the acceptance test.
    """

    momentum: pt.TensorVariable
    uniform: pt.TensorVariable


class TransitionInfo(NamedTuple):
    """What one symbolic transition reports per particle, shape (n,).

    Attributes
    ----------
    acceptance_rate
        The Metropolis-Hastings acceptance probability ``min(1, exp(log_accept))`` (0 for a
        non-finite proposal).
    is_accepted
        The selection indicator ``1(p_MH > u)`` of eq. (8).
    diverging
        Whether the proposal's or the start's energy is not finite.
    energy
        ``-log pi*`` at the returned state.
    """

    acceptance_rate: pt.TensorVariable
    is_accepted: pt.TensorVariable
    diverging: pt.TensorVariable
    energy: pt.TensorVariable


class ChainTrace(NamedTuple):
    """The ``T``-step chain's outputs, each with a leading axis of length ``T`` (steps 1..T)."""

    x: pt.TensorVariable
    logdensity: pt.TensorVariable
    is_accepted: pt.TensorVariable
    acceptance_rate: pt.TensorVariable
    diverging: pt.TensorVariable


def logp_and_grad(target: Target, xs):
    """``log pi*`` at the rows of the symbolic matrix ``xs`` and its gradient, (n,), (n, d)."""
    return target.batched_logp_and_grad_graph(xs)


def step(
    state: ChainState, params: TransitionParams, rng: TransitionNoise
) -> tuple[ChainState, TransitionInfo]:
    """One HMC transition, eq. (8): a leapfrog proposal, then the M-H selection.

    Parameters
    ----------
    state : ChainState
        The particles' states ``x_{t-1}``; only ``state.x`` is read.
    params : TransitionParams
        This transition's step size, momentum variances and leapfrog steps.
    rng : TransitionNoise
        The transition's standard normal and uniform draws (symbolic inputs).

    Returns
    -------
    ChainState, TransitionInfo
    """
    x_prev = disconnected_grad(state.x) if params.stop_gradient else state.x
    step_size = pt.exp(params.log_step_size)
    var = pt.exp(params.log_momentum_variance)
    r0 = pt.sqrt(var) * rng.momentum
    lp0, g = logp_and_grad(params.target, x_prev)
    x, r = x_prev, r0
    lp = lp0
    for _ in range(params.n_leapfrog):  # Algorithm 1, U = -log pi*
        r = r + 0.5 * step_size * g
        x = x + step_size / var * r
        lp, g = logp_and_grad(params.target, x)
        r = r + 0.5 * step_size * g
    log_accept = (lp - 0.5 * pt.sum(r**2 / var, axis=1)) - (
        lp0 - 0.5 * pt.sum(r0**2 / var, axis=1)
    )
    # NaN or -inf proposals are rejected (the comparison is False).
    accept = pt.lt(pt.log(rng.uniform), log_accept) & pt.isfinite(lp)
    x_new = pt.switch(accept[:, None], x, x_prev)
    lp_new = pt.switch(accept, lp, lp0)
    diverging = ~pt.isfinite(log_accept)
    prob = pt.switch(diverging, 0.0, pt.exp(pt.minimum(log_accept, 0.0)))
    info = TransitionInfo(prob, accept, diverging, -lp_new)
    return ChainState(x_new, lp_new), info


def hei_chain(
    target: Target, x0, eps_r, u, log_steps, log_vars, n_leapfrog: int, stop_gradient: bool
) -> ChainTrace:
    """The ``T``-step chain as one ``scan`` over :func:`step`.

    ``eps_r`` (T, n, d), ``u`` (T, n), ``log_steps`` (T,) and ``log_vars`` (T, d) hold each
    transition's noise and parameters; ``x0`` (n, d) the start states.
    """

    def step_fn(eps_r_t, u_t, log_step_t, log_var_t, x_prev):
        params = TransitionParams(target, log_step_t, log_var_t, n_leapfrog, stop_gradient)
        state, info = step(ChainState(x_prev, None), params, TransitionNoise(eps_r_t, u_t))
        accepted = pt.cast(info.is_accepted, "float64")
        return state.x, state.logdensity, accepted, info.acceptance_rate, info.diverging

    outputs = pytensor.scan(
        step_fn,
        sequences=[eps_r, u, log_steps, log_vars],
        outputs_info=[x0, None, None, None, None],
        strict=False,
        return_updates=False,  # the step has no random variables of its own: no updates
    )
    return ChainTrace(*outputs)


def compile_chain_sampler(target: Target, n_leapfrog: int) -> Callable:
    """Compile the tuned chain for sampling.

    The function maps ``(x0 (n, d), eps_r (T, n, d), u (T, n), log_steps (T,), log_vars (T, d))``
    to ``(x_T, log pi*(x_0), log pi*(x_{1..T}), accepted, acceptance_rate, diverging,
    grad log pi*(x_T))``, the per-transition arrays with a leading axis ``T``.
    """
    x0 = pt.matrix("x0", dtype="float64")
    eps_r = pt.tensor3("eps_r", dtype="float64")
    u = pt.matrix("u", dtype="float64")
    log_steps = pt.vector("log_steps", dtype="float64")
    log_vars = pt.matrix("log_vars", dtype="float64")
    trace = hei_chain(target, x0, eps_r, u, log_steps, log_vars, n_leapfrog, stop_gradient=True)
    lp0 = target.batched_logp_graph(x0)
    score = logp_and_grad(target, trace.x[-1])[1]
    outputs = [trace.x[-1], lp0, trace.logdensity, trace.is_accepted, trace.acceptance_rate,
               trace.diverging, score]
    return pm.compile([x0, eps_r, u, log_steps, log_vars], outputs)


# ------------------------------------------------------------------------------ the objective
class FitParameters(NamedTuple):
    """The fit's parameters as shared variables (the optimiser's state lives beside them).

    ``P_0 = N(mean, diag(exp(log_std + log_scale))^2)``; transition ``t`` has step size
    ``exp(log_step_size[t])`` and momentum variances ``exp(log_momentum_variance[t])``.
    """

    mean: pytensor.compile.SharedVariable
    log_std: pytensor.compile.SharedVariable
    log_scale: pytensor.compile.SharedVariable
    log_step_size: pytensor.compile.SharedVariable
    log_momentum_variance: pytensor.compile.SharedVariable


def init_parameters(mean0, std0, steps0, momentum_variance0=1.0) -> FitParameters:
    """Shared variables for the fit, from ``P_0``'s mean and sds and the initial step sizes.

    Momentum variances start at ``momentum_variance0`` (a number or one value per coordinate;
    the paper's 1 by default) and the common log scale of ``P_0`` at 0.
    """
    log_var0 = np.broadcast_to(np.log(np.asarray(momentum_variance0, dtype=float)), (len(mean0),))
    return FitParameters(
        pytensor.shared(np.array(mean0, dtype=float), name="initial_mean"),
        pytensor.shared(np.log(std0), name="initial_log_std"),
        pytensor.shared(np.float64(0.0), name="initial_log_scale"),
        pytensor.shared(np.log(steps0), name="log_step_size"),
        pytensor.shared(np.tile(log_var0, (len(steps0), 1)), name="log_momentum_variance"),
    )


def initial_entropy(log_std, log_scale, d: int):
    """``H(P_0)`` of the factorised Gaussian ``N(mean, diag(exp(log_std + log_scale))^2)``."""
    return 0.5 * d * LOG_2PI_E + pt.sum(log_std) + d * log_scale


class Objective(NamedTuple):
    """Symbolic quantities of one training iteration.

    Attributes
    ----------
    objective
        The EMLBO of eq. (4), ``E_{p_T}[log pi*] + E_{p_0}[log pi*] + H(P_0)``.
    surrogate
        What the transitions' gradient ascends (the EMLBO, or its stop-gradient form).
    expected_log_density
        ``E_{p_T}[log pi*]``.
    acceptance
        Mean M-H acceptance of each transition, (T,).
    entropy
        ``H(P_0)``.
    stein_gap
        The Stein gap of the particles' last states (no gradient flows through it).
    """

    objective: pt.TensorVariable
    surrogate: pt.TensorVariable
    expected_log_density: pt.TensorVariable
    acceptance: pt.TensorVariable
    entropy: pt.TensorVariable
    stein_gap: pt.TensorVariable


def emlbo(
    target: Target, params: FitParameters, eps0, eps_r, u, n_leapfrog: int, stop_gradient: bool
) -> Objective:
    """The EMLBO of eq. (4) on reparameterised draws (eqs. 7-9), and the surrogate to ascend.

    ``eps0`` (n, d) is the standard normal noise of ``x_0 = mean + exp(log_std + log_scale) eps0``.
    With ``stop_gradient`` (section 3.2) the gradient stops at the input ``x_{t-1}`` of every
    transition, so the parameters of step ``t`` get the gradient of eq. (9) one step at a time,
    ``d/dphi_t E_{p_t}[log pi*]``: the surrogate sums ``E_{p_t}[log pi*]`` over ``t`` (with
    ``E_{p_T}`` alone only the last step would get a gradient); the value reported stays the
    EMLBO. Without it the surrogate is the EMLBO itself, back-propagated through the chain.
    """
    d = target.ndim
    x0 = params.mean + pt.exp(params.log_std + params.log_scale) * eps0
    trace = hei_chain(
        target, x0, eps_r, u, params.log_step_size, params.log_momentum_variance, n_leapfrog,
        stop_gradient,
    )
    e_log_T = pt.mean(trace.logdensity[-1])
    e_log_0 = pt.mean(target.batched_logp_graph(x0))
    entropy0 = initial_entropy(params.log_std, params.log_scale, d)
    x_last = disconnected_grad(trace.x[-1])
    gap = pt.mean(stein_terms(x_last, logp_and_grad(target, x_last)[1]))
    objective = e_log_T + e_log_0 + entropy0
    if stop_gradient:
        surrogate = pt.sum(pt.mean(trace.logdensity, axis=1)) + e_log_0 + entropy0
    else:
        surrogate = objective
    acceptance = pt.mean(trace.is_accepted, axis=1)
    return Objective(objective, surrogate, e_log_T, acceptance, entropy0, gap)


def tuning_gradients(objective: Objective, params: FitParameters, tune_initial):
    """The parameters to tune and the directions Adam descends, for each way of tuning ``P_0``.

    The transitions (log step sizes, log momentum variances) always descend ``-surrogate``.
    ``P_0``: ``True`` (the paper) adds its mean and log sds under the same gradient; ``False``
    keeps it fixed; ``"stein"`` tunes its common log scale along ``-gap``, which is no gradient
    but the direction that drives the Stein gap of ``P_T`` to zero (a positive gap, ``P_T`` too
    concentrated, widens ``P_0``): a Robbins-Monro root search run by Adam.

    Returns
    -------
    tuned : list of shared variables
    grads : list of symbolic variables, one per entry of ``tuned``
    """
    phi = [params.log_step_size, params.log_momentum_variance]
    if not isinstance(tune_initial, str) and tune_initial:  # True (1, np.True_): the paper's
        initial = [params.mean, params.log_std]
        return phi + initial, pt.grad(-objective.surrogate, phi + initial)  # one backward pass
    # False and "stein" are one graph, so that one compiled step serves both: the common log
    # scale moves along -gap, or along 0 for False (Adam then leaves it at 0 exactly). The
    # switch is a shared flag, not a constant, so the two compile to the same function.
    tune_scale = pytensor.shared(np.int8(tune_initial == "stein"), name="tune_scale")
    direction = pt.switch(tune_scale, -objective.stein_gap, 0.0)
    return [*phi, params.log_scale], [*pt.grad(-objective.surrogate, phi), direction]


def constrained_adam(
    grads, tuned, params: FitParameters, learning_rate: float, h: float, d: int
):
    """Adam updates of ``tuned``, leaving ``P_0`` unchanged where a step breaks eq. (5).

    When the update would take ``H(P_0)`` below the bound ``h``, ``P_0``'s tuned parameters keep
    their values for that iteration (the transitions' are still updated). When any gradient
    entry is not finite (a particle's leapfrog trajectory left the region where the log density
    and its derivatives are finite, so ``0 * inf`` reached the gradient through the rejected
    branch of the M-H selection), the whole iteration is skipped: every parameter and Adam's
    own state keep their values. Returns the updates and the symbolic flag "gradient finite".
    """
    finite = pt.all([pt.all(pt.isfinite(g)) for g in grads])
    grads = [pt.switch(finite, g, pt.zeros_like(g)) for g in grads]
    updates = adam(grads, tuned, learning_rate=learning_rate)
    p0 = (params.mean, params.log_std, params.log_scale)
    of_p0 = [p for p in tuned if any(p is q for q in p0)]
    if of_p0:
        new_entropy = initial_entropy(
            updates.get(params.log_std, params.log_std),
            updates.get(params.log_scale, params.log_scale),
            d,
        )
        keep = pt.ge(new_entropy, h)
        for p in of_p0:
            updates[p] = pt.switch(keep, updates[p], p)
    for p in list(updates):
        updates[p] = pt.switch(finite, updates[p], p)
    return updates, finite


def compile_training_step(
    target: Target,
    params: FitParameters,
    *,
    n_leapfrog: int,
    stop_gradient: bool,
    tune_initial,
    learning_rate: float,
    h: float,
) -> tuple[Callable, list]:
    """Compile one Adam iteration of the fit.

    Returns the function ``(eps0 (n, d), eps_r (T, n, d), u (T, n)) -> (objective,
    E_{p_T}[log pi*], acceptance (T,), H(P_0), Stein gap, gradient finite)``, which updates the
    shared ``params`` in place (not at all when the gradient is not finite), and the list of the
    tuned shared variables.
    """
    eps0 = pt.matrix("eps0", dtype="float64")
    eps_r = pt.tensor3("eps_r", dtype="float64")
    u = pt.matrix("u", dtype="float64")
    obj = emlbo(target, params, eps0, eps_r, u, n_leapfrog, stop_gradient)
    tuned, grads = tuning_gradients(obj, params, tune_initial)
    # Shared, not constants: fits that differ only in these reuse the compiled step (numba's
    # cache is keyed by the graph, constants included, and a first compile is slow).
    learning_rate = pytensor.shared(np.float64(learning_rate), name="learning_rate")
    h = pytensor.shared(np.float64(h), name="entropy_lower_bound")
    updates, finite = constrained_adam(grads, tuned, params, learning_rate, h, target.ndim)
    outputs = [obj.objective, obj.expected_log_density, obj.acceptance, obj.entropy,
               obj.stein_gap, finite]
    return pm.compile([eps0, eps_r, u], outputs, updates=updates), tuned


# ------------------------------------------------------------------------------ averaging
def polyak_add(sums: tuple, values) -> tuple:
    """One term of the Polyak-Ruppert average: ``sums + values``, entry by entry (pure)."""
    return tuple(total + value for total, value in zip(sums, values, strict=True))


# ------------------------------------------------------------------------------ the fit's kernel
class FitState(NamedTuple):
    """The optimisation between two Adam iterations.

    The fit's parameters themselves are shared variables (:class:`FitParameters`) that the
    compiled training step updates in place; this record holds what the loop adds to them.

    Attributes
    ----------
    iteration : int
        Iterations run so far.
    sums : tuple of ndarray
        Polyak-Ruppert sums of the tuned parameters (:func:`polyak_add`) over the iterations
        from ``FitParams.first_averaged`` on.
    skipped : int
        Iterations skipped because the gradient was not finite.
    skipped_in_a_row : int
        Of those, how many came last in a row.
    """

    iteration: int
    sums: tuple
    skipped: int
    skipped_in_a_row: int


class FitParams(NamedTuple):
    """Parameters of :func:`fit_step`.

    Attributes
    ----------
    train : callable
        The compiled training step of :func:`compile_training_step`.
    tuned : list of shared variables
        The parameters it tunes (averaged into ``FitState.sums``).
    n_particles, n_steps, ndim : int
        The noise's shape: particles, transitions ``T``, dimension.
    first_averaged : int
        The first iteration that enters the Polyak-Ruppert average.
    """

    train: Callable
    tuned: list
    n_particles: int
    n_steps: int
    ndim: int
    first_averaged: int


class FitInfo(NamedTuple):
    """What one Adam iteration reports (values before its update).

    Attributes
    ----------
    acceptance_rate : ndarray, shape (n_steps,)
        The fraction of the particles whose proposal each transition accepted.
    diverging : bool
        The gradient was not finite (a particle's trajectory left the region where the log
        density and its derivatives are finite): the iteration left every parameter unchanged.
    energy : ndarray, shape ()
        ``-E_{p_T}[log pi*]``, the particles' mean potential energy at their last states.
    objective, expected_log_density, initial_entropy, stein_gap : ndarray, shape ()
        The EMLBO, ``E_{p_T}[log pi*]``, ``H(P_0)`` and the Stein gap of the last states
        (:class:`Objective`).
    """

    acceptance_rate: np.ndarray
    diverging: bool
    energy: np.ndarray
    objective: np.ndarray
    expected_log_density: np.ndarray
    initial_entropy: np.ndarray
    stein_gap: np.ndarray


def fit_init(tuned) -> FitState:
    """The optimisation before its first iteration: zero sums shaped as the ``tuned`` values."""
    return FitState(0, tuple(np.zeros_like(p.get_value()) for p in tuned), 0, 0)


def fit_step(
    state: FitState, params: FitParams, rng: np.random.Generator
) -> tuple[FitState, FitInfo]:
    """One Adam iteration: fresh noise, the compiled training step, the running average.

    ``rng`` draws the start noise ``(n_particles, ndim)``, the momentum noise
    ``(n_steps, n_particles, ndim)`` and the uniforms ``(n_steps, n_particles)``, in that order.
    The training step updates the shared parameters in place (not at all when the gradient is
    not finite); from iteration ``first_averaged`` on their new values are added to the sums.
    """
    objective, expected, acceptance, entropy, gap, finite = params.train(
        rng.standard_normal((params.n_particles, params.ndim)),
        rng.standard_normal((params.n_steps, params.n_particles, params.ndim)),
        rng.uniform(size=(params.n_steps, params.n_particles)),
    )
    sums = state.sums
    if state.iteration >= params.first_averaged:
        sums = polyak_add(sums, [p.get_value() for p in params.tuned])
    new = FitState(
        state.iteration + 1, sums, state.skipped + (not finite),
        0 if finite else state.skipped_in_a_row + 1,
    )
    info = FitInfo(
        acceptance_rate=acceptance, diverging=not finite, energy=-expected, objective=objective,
        expected_log_density=expected, initial_entropy=entropy, stein_gap=gap,
    )
    return new, info
