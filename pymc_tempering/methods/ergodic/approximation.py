"""Ergodic inference: tune a finite HMC chain by optimisation, draw from its last state.

Hamiltonian ergodic inference (HEI) of the ergodic-inference paper. The approximation ``P_T`` is
the marginal of the last state of a ``T``-step HMC chain started from a factorised Gaussian
``P_0`` (eq. 3). Its parameters -- the mean and scales of ``P_0``, and per HMC step a leapfrog step
size and a diagonal momentum variance -- maximise the ergodic modified lower bound (EMLBO, eq. 4)

    L = E_{p_T}[log pi*(x)] + E_{p_0}[log pi*(x)] + H(P_0)

subject to ``H(P_0) > h`` (eq. 5). Gradients use the reparameterisation of eqs. (7)-(9): the chain
``x_T = g^T(x_0, r_{1:T}; u_{1:T})`` with the Metropolis-Hastings step written as the selection
of eq. (8), differentiated by PyTensor through the whole chain. With ``stop_gradient`` (section
3.2) the gradient is stopped at the input ``x_{t-1}`` of every transition.

The numerics (the chain graph, the objective, the ways of tuning ``P_0``, the averaging) are in
:mod:`pymc_tempering.kernels.ergodic`, and ``P_0`` itself (its construction, the bound ``h`` and
the Stein calibration of its scale) in :mod:`pymc_tempering.methods.ergodic.initial`; this
module validates the settings, runs the optimisation through
:func:`~pymc_tempering.driver.run_kernel` (one Adam iteration per step, PyMC's
:func:`pymc.variational.updates.adam`) and holds the result, :class:`ErgodicApproximation`, whose
:meth:`~ErgodicApproximation.sample` returns the library's layout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from xarray import DataTree

from pymc_tempering.driver import driver_result, run_kernel
from pymc_tempering.kernels import ergodic as hei
from pymc_tempering.kernels.ergodic import gaussian_entropy
from pymc_tempering.methods.ergodic.initial import calibrate_scale, initial_and_bound
from pymc_tempering.contract import (
    DivergenceError,
    check_sampler_args,
    reproducible,
    seed_attrs,
    split_seed,
    warn,
)
from pymc_tempering.target import Target, target_of

__all__ = ["ErgodicApproximation", "fit_ergodic", "gaussian_entropy"]


class _ChainRun(NamedTuple):
    """Outputs of :meth:`ErgodicApproximation._run` for ``n`` chains.

    ``x`` (n, d) last states; ``log_density`` (T + 1, n); ``accepted``, ``acceptance_rate`` and
    ``diverging`` (T, n) per transition; ``score`` (n, d) ``grad log pi*`` at the last states.
    """

    x: np.ndarray
    log_density: np.ndarray
    accepted: np.ndarray
    acceptance_rate: np.ndarray
    diverging: np.ndarray
    score: np.ndarray


# ---------------------------------------------------------------------------------- result
#: :meth:`ErgodicApproximation.sample`: the most cycles of the ``T`` tuned transitions run
#: (the checks come after 2, 4, 8, 16, 32 and 64 cycles).
MAX_CYCLES = 64

#: :meth:`ErgodicApproximation.sample`: a chain that accepted no proposal in the last batch of
#: cycles, with a mean M-H acceptance probability there below this, is stuck (the tuned
#: transitions accept far more where the posterior's mass is).
STUCK_ACCEPTANCE = 0.01


def _mean_acceptance(run) -> np.ndarray:
    """Each chain's mean M-H acceptance probability over the transitions of ``run`` (a
    non-finite energy counts as 0)."""
    return np.nan_to_num(np.asarray(run.acceptance_rate, dtype=float), nan=0.0).mean(axis=0)


@dataclass(eq=False)
class ErgodicApproximation:
    """A tuned ergodic approximation ``P_T``: a factorised Gaussian ``P_0`` and ``T`` HMC steps.

    Returned by :func:`fit_ergodic`. Draw from it with :meth:`sample`.

    Attributes
    ----------
    initial_mean, initial_std : ndarray, shape (ndim,)
        Mean and standard deviations of the factorised Gaussian ``P_0`` on the flat
        unconstrained space.
    step_size : ndarray, shape (n_steps,)
        Leapfrog step size of each HMC transition.
    momentum_variance : ndarray, shape (n_steps, ndim)
        Diagonal variance of the momentum of each HMC transition (the leapfrog moves the state by
        ``step_size / momentum_variance * r``).
    n_leapfrog : int
        Leapfrog steps per transition.
    entropy_lower_bound : float
        The bound ``h`` of eq. (5) that ``H(P_0)`` was held above.
    objective : ndarray, shape (n_iterations,)
        The EMLBO (eq. 4) estimated at each iteration (before that iteration's update).
    expected_log_density : ndarray, shape (n_iterations,)
        The estimate of ``E_{p_T}[log pi*]`` at each iteration (the training curve of Fig. 2).
    acceptance_rate : ndarray, shape (n_iterations, n_steps)
        Mean M-H acceptance of each transition at each iteration.
    initial_entropy : ndarray, shape (n_iterations,)
        ``H(P_0)`` at each iteration.
    training_stein_gap : ndarray, shape (n_iterations,)
        The Stein gap of the particles' last states at each iteration (see :meth:`stein_gap`):
        near zero when ``P_T`` has the target's spread, positive when it is too concentrated.
    settings : dict
        Scalar settings of the fit.
    """

    target: Target = field(repr=False)
    initial_mean: np.ndarray
    initial_std: np.ndarray
    step_size: np.ndarray
    momentum_variance: np.ndarray
    n_leapfrog: int
    entropy_lower_bound: float
    objective: np.ndarray = field(repr=False)
    expected_log_density: np.ndarray = field(repr=False)
    acceptance_rate: np.ndarray = field(repr=False)
    initial_entropy: np.ndarray = field(repr=False)
    training_stein_gap: np.ndarray = field(repr=False)
    settings: dict = field(default_factory=dict, repr=False)
    _sampler: object = field(default=None, init=False, repr=False)

    @property
    def n_steps(self) -> int:
        """Number of HMC transitions ``T``."""
        return int(self.step_size.size)

    @property
    def ndim(self) -> int:
        """Dimension of the flat unconstrained space."""
        return int(self.initial_mean.size)

    @reproducible
    def run_chain(self, n: int, random_seed=None, chunk_size: int = 10_000, *, x0=None):
        """Run the tuned chain from ``n`` fresh draws of ``P_0`` (or from given states).

        Parameters
        ----------
        n : int
            Number of independent chains (draws).
        random_seed : int, numpy.random.Generator or None
        chunk_size : int
            Chains run together in one compiled call.
        x0 : array_like, shape (n, ndim), optional
            Start states (flat, unconstrained) instead of draws of ``P_0``. Started from draws
            of the target, the chain must stay at the target (every transition leaves it
            invariant); the tests use this to tell a wrong kernel from a biased objective.

        Returns
        -------
        x : ndarray, shape (n, ndim)
            Last states ``x_T`` (flat, unconstrained).
        log_density : ndarray, shape (n_steps + 1, n)
            ``log pi*(x_t)`` for ``t = 0, ..., T``.
        accepted : ndarray, shape (n_steps, n)
            M-H acceptance indicators of each transition.
        """
        run = self._run(n, np.random.default_rng(random_seed), chunk_size, x0)
        return run.x, run.log_density, run.accepted

    def _run(self, n, rng, chunk_size=10_000, x0=None) -> _ChainRun:
        """``run_chain`` on a Generator, with every output of the compiled chain."""
        if self._sampler is None:
            self._sampler = hei.compile_chain_sampler(self.target, self.n_leapfrog)
        log_steps, log_vars = np.log(self.step_size), np.log(self.momentum_variance)
        if x0 is not None:
            x0 = np.asarray(x0, dtype=float)
            if x0.shape != (int(n), self.ndim):
                raise ValueError(f"x0 must have shape ({int(n)}, {self.ndim}), got {x0.shape}.")
        out = []
        for start in range(0, int(n), int(chunk_size)):
            m = min(int(chunk_size), int(n) - start)
            if x0 is None:
                noise = rng.standard_normal((m, self.ndim))
                start_states = self.initial_mean + self.initial_std * noise
            else:
                start_states = x0[start : start + m]
            eps_r = rng.standard_normal((self.n_steps, m, self.ndim))
            u = rng.uniform(size=(self.n_steps, m))
            x_t, lp0, lp, *rest, score = self._sampler(start_states, eps_r, u, log_steps, log_vars)
            out.append((x_t, np.concatenate([lp0[None], lp], axis=0), *rest, score))
        axes = [0, 1, 1, 1, 1, 0]  # chains are the rows of x and score, the columns otherwise
        return _ChainRun(
            *(np.concatenate(parts, axis=axis) for parts, axis in zip(zip(*out), axes, strict=True))
        )

    def stein_gap(self, n: int = 10_000, random_seed=None) -> tuple[float, float]:
        """How far ``P_T`` is from the target's spread: the Stein gap and its MCSE.

        Runs the chain from ``n`` fresh draws of ``P_0`` and checks the Stein (equipartition)
        identity ``E_pi[(x - m) . grad log pi*(x)] = -d`` at the last states. The gap
        ``1 + mean[(x - xbar) . grad log pi*(x)] / d`` is about zero when ``P_T`` is the
        target, positive when ``P_T`` is too concentrated, negative when it is too dispersed
        (for a Gaussian target, a gap ``g`` means covariances ``1 - g`` times the target's).

        Returns
        -------
        gap, mcse : float
        """
        run = self._run(int(n), np.random.default_rng(random_seed))
        return hei.mean_and_se(hei.stein_terms(run.x, run.score))

    def _cycled_run(self, n: int, rng, max_cycles: int):
        """:meth:`_run`, then more cycles of the ``T`` transitions until the draws stop moving.

        After ``k`` cycles in all, the chains run ``k`` more (doubling) and
        :func:`~pymc_tempering.kernels.ergodic.cycle_drift` compares the draws after ``2 k``
        with those after ``k``; the run stops at the first comparison that finds no move beyond
        chance, or at ``max_cycles`` cycles in all (the last batch shortened to reach it).
        Doubling lets a slow drift add up over the cycles it is compared across: one cycle
        against the next would pass a chain that creeps. Returns the last run, the divergence
        flags over every cycle, the number of cycles, the last drift statistic with its
        critical value (NaN for one cycle), the stuck flags (the chains that accepted no
        proposal in the last batch of cycles, or in the one cycle, while their mean M-H
        acceptance probability there was below ``STUCK_ACCEPTANCE``) and that batch's cycles.
        """
        run = self._run(n, rng)
        diverging = run.diverging.any(axis=0)
        moved, acceptance = run.accepted.any(axis=0), _mean_acceptance(run)
        cycles, drift, critical, batch = 1, np.nan, np.nan, 1
        while cycles < max_cycles:
            before, batch = run, min(cycles, max_cycles - cycles)
            moved, acceptance = np.zeros(n, dtype=bool), np.zeros(n)
            for _ in range(batch):
                run = self._run(n, rng, x0=run.x)
                diverging = diverging | run.diverging.any(axis=0)
                moved = moved | run.accepted.any(axis=0)
                acceptance = acceptance + _mean_acceptance(run) / batch
            cycles += batch
            drift, critical = hei.cycle_drift(
                before.x, before.log_density[-1], run.x, run.log_density[-1]
            )
            if drift <= critical:
                break
        stuck = ~moved & (acceptance < STUCK_ACCEPTANCE)
        return run, diverging, cycles, drift, critical, stuck, batch

    def sample(
        self, draws: int = 1000, chains: int = 4, random_seed=None, max_cycles: int = MAX_CYCLES
    ) -> DataTree:
        """Independent draws from ``P_T``, refined until more transitions no longer move them.

        Each draw is the last state of its own chain, started from a fresh draw of ``P_0``, so
        the draws are independent and equally weighted (``log_weight`` is zero). The fitted
        ``P_T`` is only near the posterior (a finite chain from a Gaussian start). Every tuned
        transition leaves the posterior invariant, so carrying the draws through the ``T``
        transitions once more can only bring them closer to it: by default the chains run
        further cycles of the ``T`` transitions, doubling their number (2, 4, 8, ...), until
        the last doubling changed no coordinate's mean, no coordinate's spread and not the mean
        log density beyond chance (:func:`~pymc_tempering.kernels.ergodic.cycle_drift`, paired
        z-scores against a Bonferroni bound at family-wise rate 0.01), up to ``max_cycles``
        cycles in all. A chain that approaches the posterior by steps too small to show over the
        cycles compared can pass the check while still off; no number of cycles moves mass
        between modes that the transitions cannot cross (``P_0`` sets those weights); and a
        chain that ``P_0`` started where the tuned transitions reject every proposal (far in a
        tail) stays there: such draws are marked ``stuck`` and the run warns.

        Parameters
        ----------
        draws : int
            Draws per chain.
        chains : int
            Number of ``chain`` entries (all draws are independent).
        random_seed : int, numpy.random.Generator or None
        max_cycles : int
            The most cycles of the ``T`` transitions run; ``1`` gives draws of the fitted
            ``P_T`` itself (the paper's). Default ``MAX_CYCLES`` (64); a run that still moves
            at the last cycle warns.

        Returns
        -------
        xarray.DataTree
            ``posterior`` with the model's variables (constrained) and deterministics;
            ``unconstrained_posterior`` with the transformed value variables; ``sample_stats``
            with ``log_weight`` (zeros), ``lp`` (the model's log density at the draw, with
            Jacobians), ``acceptance_rate`` (the M-H acceptance probability of the last
            transition of the draw's chain) and ``diverging`` (a non-finite energy anywhere in
            the draw's chain, in any cycle) and ``stuck`` (the draw's chain accepted no
            proposal in the last batch of cycles, with a mean acceptance probability there
            below ``STUCK_ACCEPTANCE``, 0.01: a chain stuck where ``P_0`` started it; the run
            warns); attrs hold the fit's settings, the seed, ``cycles`` (the cycles run),
            ``cycle_drift`` and ``cycle_drift_critical`` (the last comparison's largest z-score
            and its bound) and ``stuck_draws`` (how many are stuck).

        Raises
        ------
        ValueError
            For ``draws``, ``chains`` or ``max_cycles`` that are not positive integers.
        """
        draws, _, chains = check_sampler_args(draws, 0, chains)
        if int(max_cycles) != max_cycles or max_cycles < 1:
            raise ValueError(f"max_cycles must be a positive integer, got {max_cycles!r}.")
        run, diverging, cycles, drift, critical, stuck, last = self._cycled_run(
            draws * chains, np.random.default_rng(random_seed), int(max_cycles)
        )
        if stuck.any():
            warn(
                f"Ergodic inference: {int(stuck.sum())} of {stuck.size} draws did not move in "
                f"the last {last} cycle(s) of the {self.n_steps} tuned transitions (mean "
                f"acceptance probability below {STUCK_ACCEPTANCE:g}): their chains are stuck "
                "where P_0 started them, for example far in a tail where the tuned step sizes "
                "reject every proposal. They are not draws of the posterior, more cycles will "
                "not move them, and they can dominate its spread (sample_stats['stuck'] marks "
                "them). Refit with a P_0 that puts less mass there (initial=pmt.Base(...))."
            )
        if cycles > 1 and drift > critical:
            warn(
                f"Ergodic inference: after {cycles} cycles of the {self.n_steps} tuned "
                f"transitions the draws still move as the chains run on (largest paired "
                f"z-score {drift:.3g}, bound {critical:.3g}): they are not yet draws of the "
                "posterior. Pass a larger max_cycles, or refit with more n_steps or n_iterations."
            )
        lp = run.log_density[-1]
        diverging = diverging | ~np.isfinite(lp) | ~np.isfinite(run.x).all(axis=1)
        stats = {
            "lp": lp.reshape(chains, draws),
            "acceptance_rate": run.acceptance_rate[-1].reshape(chains, draws),
            "diverging": diverging.reshape(chains, draws),
            "stuck": stuck.reshape(chains, draws),
        }
        x = run.x.reshape(chains, draws, self.ndim)
        attrs = {**self._attrs(), "cycles": cycles, "cycle_drift": float(drift),
                 "cycle_drift_critical": float(critical), "stuck_draws": int(stuck.sum())}
        return driver_result(
            self.target, x, method="ergodic_inference", sample_stats=stats,
            random_seed=random_seed, attrs=attrs,
        )

    def _attrs(self) -> dict:
        """Scalar settings of the fit for a result's attrs."""
        attrs = {
            "n_steps": self.n_steps,
            "n_leapfrog": self.n_leapfrog,
            "entropy_lower_bound": float(self.entropy_lower_bound),
            **{k: v for k, v in self.settings.items() if k not in ("n_steps", "n_leapfrog")},
        }
        if self.objective.size:
            tail = self.objective[-max(1, self.objective.size // 10) :]
            attrs["final_objective"] = float(np.mean(tail))
        return attrs


# ---------------------------------------------------------------------------------- fitting
def _check_options(n_steps, n_leapfrog, n_particles, n_iterations, learning_rate, tune_initial,
                   calibration_draws, step_size="auto") -> None:
    """Refuse invalid settings of :func:`fit_ergodic` with a clear ``ValueError``."""
    if n_steps < 1 or n_leapfrog < 1:
        raise ValueError(
            f"n_steps and n_leapfrog must be at least 1, got {n_steps} and {n_leapfrog}."
        )
    if n_particles < 1 or n_iterations < 0:
        raise ValueError(
            f"n_particles must be positive and n_iterations non-negative, got {n_particles} "
            f"and {n_iterations}."
        )
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be positive, got {learning_rate}.")
    if isinstance(step_size, str) and step_size != "auto":
        raise ValueError(f"step_size must be 'auto', a number or (low, high), got {step_size!r}.")
    if tune_initial not in (True, False, "stein"):
        raise ValueError(f"tune_initial must be True, False or 'stein', got {tune_initial!r}.")
    if int(calibration_draws) != calibration_draws or not (
        calibration_draws == 0 or calibration_draws >= 2
    ):
        raise ValueError(
            f"calibration_draws must be 0 (no calibration) or an integer >= 2, got "
            f"{calibration_draws!r}."
        )


#: ``step_size="auto"``: the initial step sizes, in units of P_0's standard deviations.
AUTO_STEP_RANGE = (0.1, 0.25)


_PARAMETER_NAMES = {  # FitParameters field -> what the user knows it as
    "mean": "mean of P_0",
    "log_std": "scale of P_0",
    "log_scale": "scale of P_0",
    "log_step_size": "leapfrog step sizes",
    "log_momentum_variance": "momentum variances",
}
MAX_SKIPPED_IN_A_ROW = 50  # non-finite gradients in a row before the fit gives up
_REMEDY = (
    "lower learning_rate or step_size, or start from a narrower P_0 inside the model's support"
)


def _check_fit_finite(iteration, n_iterations, objective, expected, params) -> None:
    """Raise :class:`DivergenceError` for a non-finite objective or parameter after an update."""
    where = f"at iteration {iteration} of {n_iterations}"
    if not np.isfinite(objective):
        raise DivergenceError(
            f"Ergodic inference: the objective (EMLBO) became {float(objective)} {where} "
            f"(E_pT[log pi*] = {float(expected)}): the chain reached a region where the model's "
            f"log density or its gradient is not finite; {_REMEDY}."
        )
    with np.errstate(over="ignore"):
        for name, p in params._asdict().items():
            value = p.get_value(borrow=True)
            exp_value = value if name == "mean" else np.exp(value)  # the others are logs
            if not (np.all(np.isfinite(value)) and np.all(np.isfinite(exp_value))):
                raise DivergenceError(
                    f"Ergodic inference: the {_PARAMETER_NAMES[name]} became non-finite "
                    f"{where} (an Adam step too large, or a non-finite gradient); {_REMEDY}."
                )


def _optimise(train, params, tuned, *, n_iterations, shape, rng, progressbar):
    """Run ``n_iterations`` Adam iterations (:func:`~pymc_tempering.kernels.ergodic.fit_step`)
    through :func:`run_kernel`, checking after each that the fit stayed finite.

    Returns the training history (dict of arrays with a leading iteration axis), the
    Polyak-Ruppert average of the tuned parameters over the second half of the iterations
    (``None`` without iterations), the seconds per iteration after the first and the number of
    iterations skipped for a non-finite gradient.
    """
    n_particles, n_steps, d = shape
    kernel = hei.FitParams(train, tuned, n_particles, n_steps, d, n_iterations // 2)
    names = ["objective", "expected_log_density", "acceptance_rate", "initial_entropy",
             "training_stein_gap"]
    fields = {"training_stein_gap": "stein_gap"}  # the FitInfo field of a history entry

    def step(state, kernel, rng):
        new, info = hei.fit_step(state, kernel, rng)
        _check_fit_finite(
            state.iteration, n_iterations, info.objective, info.expected_log_density, params
        )
        if new.skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW:
            raise DivergenceError(
                f"Ergodic inference: the gradient was non-finite in {new.skipped_in_a_row} "
                f"iterations in a row (up to iteration {state.iteration} of {n_iterations}): "
                "leapfrog trajectories leave the region where the model's log density and its "
                f"gradient are finite; {_REMEDY}."
            )
        return new, info

    def record(state, info):
        values = {name: np.asarray(getattr(info, fields.get(name, name)))[None] for name in names}
        return {**values, "time": np.array([time.perf_counter()])}

    trace = run_kernel(
        step, hei.fit_init(tuned), kernel, draws=n_iterations, tune=0, chains=1, rng=rng,
        record=record, description="Ergodic inference",
        progressbar=progressbar and n_iterations > 0,
    )
    history = {name: trace.draws[name][0] for name in names} if n_iterations else {
        "acceptance_rate": np.full((0, n_steps), np.nan),
        **{name: np.full(0, np.nan) for name in names if name != "acceptance_rate"},
    }
    n_average = n_iterations - kernel.first_averaged
    average = [total / n_average for total in trace.state.sums] if n_average else None
    seconds = (np.ptp(trace.draws["time"]) / (n_iterations - 1)) if n_iterations > 1 else np.nan
    skipped = int(trace.state.skipped)
    if skipped > 0.1 * n_iterations:
        warn(
            f"Ergodic inference: {skipped} of {n_iterations} Adam iterations were skipped "
            "because the gradient was not finite (leapfrog trajectories leaving the region where "
            f"the log density is finite); {_REMEDY}."
        )
    return history, average, float(seconds), skipped


def _approximation(target, params, average, tuned, n_leapfrog, h, history):
    """The :class:`ErgodicApproximation` at the averaged (or, untrained, initial) parameters."""
    values = {name: p.get_value() for name, p in params._asdict().items()}
    for p, value in zip(tuned, average or [], strict=True):
        values[next(name for name, q in params._asdict().items() if q is p)] = value
    return ErgodicApproximation(
        target=target,
        initial_mean=np.asarray(values["mean"], dtype=float),
        initial_std=np.exp(
            np.asarray(values["log_std"], dtype=float) + float(values["log_scale"])
        ),
        step_size=np.exp(np.asarray(values["log_step_size"], dtype=float)),
        momentum_variance=np.exp(np.asarray(values["log_momentum_variance"], dtype=float)),
        n_leapfrog=n_leapfrog,
        entropy_lower_bound=h,
        **history,
    )


@reproducible
def fit_ergodic(
    *,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    n_steps: int = 10,
    n_leapfrog: int = 5,
    initial="auto",
    entropy_lower_bound: float | None = None,
    n_particles: int = 200,
    n_iterations: int = 1000,
    learning_rate: float = 0.01,
    stop_gradient: bool = True,
    tune_initial: bool | str = "stein",
    calibration_draws: int = 10_000,
    step_size="auto",
    n_prior_draws: int = 4000,
) -> ErgodicApproximation:
    """Fit an ergodic approximation (Hamiltonian ergodic inference) to a PyMC model.

    Maximises the EMLBO of eq. (4) of the ergodic-inference paper,
    ``E_{p_T}[log pi*] + E_{p_0}[log pi*] + H(P_0)``, subject to ``H(P_0) > h`` (eq. 5), by Adam
    on reparameterised gradients (eqs. 7-9) through the ``T``-step HMC chain, and returns the
    average of the second half of the iterates (Polyak-Ruppert). Every argument is a keyword,
    as in :func:`pymc.fit`; ``docs/ergodic_inference.md`` explains each option at length.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the context when omitted; never modified. Discrete variables are refused.
    random_seed : int, numpy.random.Generator or None
        Makes the fit reproducible (an int is kept in ``settings["fit_random_seed"]``).
    progressbar : bool
    n_steps : int
        Number ``T`` of HMC transitions in the chain.
    n_leapfrog : int
        Leapfrog steps per transition.
    initial : "auto", "prior" or Base
        ``P_0``. ``"auto"``: from the optima of the library's base,
        ``fit_base(method="laplace")``, whose mode search (:func:`~pymc_tempering.find_modes`)
        runs L-BFGS from 32 prior draws (for an improper prior such as ``pm.Flat``, from 32
        points jittered by ``U(-1, 1)`` around the model's initial point): the Laplace Gaussian
        of each optimum found (marginal sds capped at twice the profile half-width along each
        axis), and ``P_0`` centred at the mean of the Gaussian moment-matched to their mixture
        with ``AUTO_WIDEN`` (2) times its marginal standard deviations: for one optimum, the
        mode and twice its Laplace sds; for several, a diagonal wide enough to cover every
        optimum. Where the search finds no optimum (the funnel of a centred hierarchical model,
        whose density is unbounded at its neck), or, on a model with proper priors, the optima's
        Laplace mixture fails the importance-sampling check of ``fit_base(method="laplace")``
        (its log Z estimate more than a nat from the Laplace mass, as for a joint mode far from
        the posterior's mass), the ADVI fits with which that base then replaces them take the
        optima's place (``settings["initial_source"]`` is ``"advi"``, else ``"modes"``). The
        fit does not depend on the units or location of the parameters;
        ``settings["initial_modes"]`` counts the optima (or ADVI fits). ``"prior"``: the
        diagonal of the Gaussian moment-matched to prior draws on the unconstrained space. Or a
        :class:`~pymc_tempering.Base`'s mean and marginal standard deviations.
    entropy_lower_bound : float, optional
        The bound ``h`` of eq. (5). Default: with ``initial="auto"``, an upper bound on the
        entropy of the mixture of the optima's factorised Laplace Gaussians, ``sum_k w_k H_k +
        H(w)`` (for one optimum, its factorised Laplace entropy: ``P_0`` may shrink to the
        Laplace fit's width, not below);
        otherwise the entropy of the Gaussian moment-matched to ``n_prior_draws`` prior draws
        (section 3.3). Pass it where neither is available.
    n_particles : int
        Monte Carlo samples per gradient estimate.
    n_iterations : int
        Adam iterations; ``0`` gives the untuned chain.
    learning_rate : float
        Adam's learning rate (on ``P_0``'s mean and log sds, log step sizes, log momentum
        variances).
    stop_gradient : bool
        Stop the gradient at each transition's input ``x_{t-1}`` (section 3.2).
    tune_initial : "stein", True or False
        ``"stein"`` (default, beyond the paper): ``P_0``'s common scale makes ``P_T`` satisfy
        the Stein identity (see :meth:`ErgodicApproximation.stein_gap`), which removes the
        over-concentration the EMLBO rewards. ``True`` (the paper): ``P_0``'s mean and scales
        maximise ``ELBO(P_0)`` under eq. (5); ``False``: ``P_0`` fixed.
    calibration_draws : int
        For ``"stein"``: chains of the Brent root search that sets ``P_0``'s scale after
        training (its precision: ``settings["calibration_gap_mcse"]``); ``0`` skips it.
    step_size : "auto", float or (low, high)
        Initial leapfrog step sizes. ``"auto"``: the leapfrog runs in ``P_0``'s units (momentum
        variances start at ``1 / initial_std**2``, a diagonal mass matrix) with step sizes drawn
        per transition from ``AUTO_STEP_RANGE`` (0.1, 0.25) in those units; with
        ``initial="auto"`` and several optima, in the units of one optimum's Laplace sds
        (root-mean-square over the optima) instead, since ``P_0``'s spread is then the distance
        between the modes. A number or a range
        ``(low, high)`` (the paper's (0.01, 0.025)) is in the model's units, with momentum
        variances starting at 1.
    n_prior_draws : int
        Prior draws for ``initial="prior"`` and the default bound.

    Returns
    -------
    ErgodicApproximation

    Raises
    ------
    ValueError
        For invalid settings, for ``H(P_0) <= h`` at the start (widen ``initial`` or lower
        ``entropy_lower_bound``), or when the prior is needed but cannot be drawn.
    DivergenceError
        When the objective or a parameter (step sizes, momentum variances, ``P_0``) becomes
        non-finite, or the gradient is non-finite in ``MAX_SKIPPED_IN_A_ROW`` (50) iterations in
        a row; the message names it and the iteration. An iteration whose gradient is not finite
        (a particle's trajectory left the finite region) is skipped, counted in
        ``settings["skipped_iterations"]``, with a warning when more than 10% were.
    """
    model = modelcontext(model)
    target = target_of(model)
    target.require_exact("Ergodic inference")
    n_steps, n_leapfrog = int(n_steps), int(n_leapfrog)
    n_particles, n_iterations = int(n_particles), int(n_iterations)
    _check_options(n_steps, n_leapfrog, n_particles, n_iterations, learning_rate, tune_initial,
                   calibration_draws, step_size)
    prior_seed, init_seed, noise_seed, calibration_seed = split_seed(random_seed, 4)
    mean0, std0, h, bound_source, auto = initial_and_bound(
        model, target, initial, entropy_lower_bound, n_prior_draws, prior_seed
    )
    if isinstance(step_size, str):  # "auto": leapfrog in P_0's units
        steps0 = hei.initial_step_sizes(AUTO_STEP_RANGE, n_steps, np.random.default_rng(init_seed))
        # P_0's units; with several optima (initial="auto"), P_0's spread is the distance
        # between them, and the units are one optimum's Laplace sds (root-mean-square over
        # the optima), not P_0's widened ones.
        unit = std0 if auto is None or auto.n_modes == 1 else auto.local_std
        momentum_variance0 = 1.0 / unit**2
    else:
        steps0 = hei.initial_step_sizes(step_size, n_steps, np.random.default_rng(init_seed))
        momentum_variance0 = 1.0
    params = hei.init_parameters(mean0, std0, steps0, momentum_variance0)
    train, tuned = None, []
    if n_iterations:
        train, tuned = hei.compile_training_step(
            target, params, n_leapfrog=n_leapfrog, stop_gradient=stop_gradient,
            tune_initial=tune_initial, learning_rate=learning_rate, h=h,
        )
    history, average, seconds, skipped = _optimise(
        train, params, tuned, n_iterations=n_iterations, shape=(n_particles, n_steps, target.ndim),
        rng=np.random.default_rng(noise_seed), progressbar=progressbar,
    )
    approx = _approximation(target, params, average, tuned, n_leapfrog, h, history)
    if n_iterations:
        tail = history["acceptance_rate"][-max(1, n_iterations // 10) :].mean(axis=0)
        if np.any(tail < 0.05):
            warn(
                f"Ergodic inference: transitions {np.flatnonzero(tail < 0.05).tolist()} accepted "
                f"under 5% of their proposals over the last iterations (lowest "
                f"{float(tail.min()):.3g}): the chain barely moves there, so P_T is close to "
                "P_0, not to the posterior. Check approx.stein_gap(); pass a P_0 closer to the "
                "posterior (initial=pmt.Base(...)) or more n_iterations."
            )
    if tune_initial == "stein" and calibration_draws:
        def last_states(x0, rng):  # the tuned chain from given starts: x_T and the score
            run = approx._run(len(x0), rng, x0=x0)
            return run.x, run.score

        scale, gap_mcse = calibrate_scale(
            last_states, approx.initial_mean, approx.initial_std, approx.entropy_lower_bound,
            int(calibration_draws), calibration_seed,
        )
        approx.initial_std = approx.initial_std * scale
        approx.settings.update(calibration_scale=scale, calibration_gap_mcse=gap_mcse)
    approx.settings.update(
        seconds_per_iteration=seconds,  # the optimisation loop after its first iteration
        skipped_iterations=skipped,  # Adam iterations skipped for a non-finite gradient
        initial=initial if isinstance(initial, str) else "base",
        step_size=step_size if isinstance(step_size, str) else repr(step_size),
        n_particles=n_particles,
        n_iterations=n_iterations,
        learning_rate=float(learning_rate),
        stop_gradient=bool(stop_gradient),
        tune_initial=tune_initial,
        calibration_draws=int(calibration_draws) if tune_initial == "stein" else 0,
        entropy_lower_bound_source=bound_source,
        **({} if auto is None else {"initial_modes": auto.n_modes, "initial_source": auto.source}),
        **{f"fit_{k}": v for k, v in seed_attrs(random_seed).items()},
    )
    return approx
