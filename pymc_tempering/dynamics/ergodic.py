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

The chain is one PyTensor graph: a ``scan`` over the ``T`` HMC steps, each with ``leapfrog_steps``
leapfrog steps (Algorithm 1 of the paper), on a batch of particles, using the model's own log
density from :class:`~pymc_tempering.Target` vectorised over particles with
:func:`pytensor.graph.replace.vectorize_graph`. The optimiser is PyMC's Adam
(:func:`pymc.variational.updates.adam`). Everything is compiled once.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.variational.updates import adam
from pytensor.gradient import disconnected_grad
from pytensor.graph.replace import vectorize_graph
from scipy.optimize import brentq
from xarray import DataTree

from pymc_tempering.base import Base, fit_base
from pymc_tempering.driver import draws_to_datatree, progress_bar
from pymc_tempering.results import build_result
from pymc_tempering.sampling import split_seed
from pymc_tempering.target import Target

__all__ = ["ErgodicApproximation", "fit_ergodic", "gaussian_entropy"]

_LOG_2PI_E = float(np.log(2.0 * np.pi) + 1.0)


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
    return 0.5 * (d * _LOG_2PI_E + logdet)


# ---------------------------------------------------------------------------------- the graph
class _ChainGraph:
    """Symbolic pieces of the HEI chain for one target, built once.

    ``batch_logp(X)`` is the model's log density at the rows of a matrix ``X`` (particles), and
    ``logp_and_grad(X)`` adds its gradient with respect to ``X``.
    """

    def __init__(self, target: Target):
        self.target = target
        self._x = pt.vector("x_flat", dtype="float64")
        self._logp = target.logp_graph(target.unravel_graph(self._x))

    def batch_logp(self, xs):
        return vectorize_graph(self._logp, replace={self._x: xs})

    def logp_and_grad(self, xs):
        lp = self.batch_logp(xs)
        return lp, pt.grad(pt.sum(lp), xs)

    def transition(self, x_prev, eps_r, u, log_step, log_var, leapfrog_steps, stop_gradient):
        """One HMC transition, eq. (8): leapfrog proposal, then the M-H selection.

        ``eps_r`` (n, d) standard normal noise for the momentum ``r = sqrt(var) eps_r``, ``u``
        (n,) uniforms for the acceptance test. Returns the new state, its log density and the
        acceptance indicators.
        """
        if stop_gradient:
            x_prev = disconnected_grad(x_prev)
        step = pt.exp(log_step)
        var = pt.exp(log_var)
        r0 = pt.sqrt(var) * eps_r
        lp0, g = self.logp_and_grad(x_prev)
        x, r = x_prev, r0
        lp = lp0
        for _ in range(leapfrog_steps):  # Algorithm 1, U = -log pi*
            r = r + 0.5 * step * g
            x = x + step / var * r
            lp, g = self.logp_and_grad(x)
            r = r + 0.5 * step * g
        log_accept = (lp - 0.5 * pt.sum(r**2 / var, axis=1)) - (
            lp0 - 0.5 * pt.sum(r0**2 / var, axis=1)
        )
        # NaN or -inf proposals are rejected (the comparison is False).
        accept = pt.lt(pt.log(u), log_accept) & pt.isfinite(lp)
        x_new = pt.switch(accept[:, None], x, x_prev)
        lp_new = pt.switch(accept, lp, lp0)
        return x_new, lp_new, accept

    def chain(self, x0, eps_r, u, log_steps, log_vars, leapfrog_steps, stop_gradient):
        """The ``T``-step chain as one ``scan``; returns states, log densities and acceptances
        of steps 1..T (each with a leading axis of length T)."""

        def step_fn(eps_r_t, u_t, log_step_t, log_var_t, x_prev):
            x_new, lp_new, accept = self.transition(
                x_prev, eps_r_t, u_t, log_step_t, log_var_t, leapfrog_steps, stop_gradient
            )
            return x_new, lp_new, pt.cast(accept, "float64")

        (xs, lps, accepts), _ = pytensor.scan(
            step_fn,
            sequences=[eps_r, u, log_steps, log_vars],
            outputs_info=[x0, None, None],
            strict=False,
        )
        return xs, lps, accepts


def _stein_terms(x, score):
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


def _mean_and_se(values) -> tuple[float, float]:
    """Mean of independent values and its standard error."""
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


# ---------------------------------------------------------------------------------- result
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
    leapfrog_steps : int
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
    leapfrog_steps: int
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
        return int(self.initial_mean.size)

    def _compiled_sampler(self):
        if self._sampler is None:
            graph = _ChainGraph(self.target)
            x0 = pt.matrix("x0", dtype="float64")
            eps_r = pt.tensor3("eps_r", dtype="float64")
            u = pt.matrix("u", dtype="float64")
            log_steps = pt.vector("log_steps", dtype="float64")
            log_vars = pt.matrix("log_vars", dtype="float64")
            xs, lps, accepts = graph.chain(
                x0, eps_r, u, log_steps, log_vars, self.leapfrog_steps, stop_gradient=True
            )
            lp0 = graph.batch_logp(x0)
            score = graph.logp_and_grad(xs[-1])[1]
            self._sampler = pm.compile(
                [x0, eps_r, u, log_steps, log_vars], [xs[-1], lp0, lps, accepts, score]
            )
        return self._sampler

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
        x, lp, acc, _ = self._run(n, np.random.default_rng(random_seed), chunk_size, x0)
        return x, lp, acc

    def _run(self, n, rng, chunk_size=10_000, x0=None):
        """``run_chain`` on a Generator, also returning ``grad log pi*`` at the last states."""
        fn = self._compiled_sampler()
        log_steps = np.log(self.step_size)
        log_vars = np.log(self.momentum_variance)
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
            x_t, lp0, lp, acc, score = fn(start_states, eps_r, u, log_steps, log_vars)
            out.append((x_t, np.concatenate([lp0[None], lp], axis=0), acc, score))
        x, lp, acc, score = zip(*out)
        return (np.concatenate(x), np.concatenate(lp, axis=1), np.concatenate(acc, axis=1),
                np.concatenate(score))

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
        x, _, _, score = self._run(int(n), np.random.default_rng(random_seed))
        return _mean_and_se(_stein_terms(x, score))

    def sample(self, n: int, random_seed=None, *, chains: int = 1) -> DataTree:
        """Independent draws from ``P_T`` in the library's result layout.

        Each draw is the last state of its own chain, started from a fresh draw of ``P_0``, so
        the draws are independent and carry no weights (there is no ``log_weight``).

        Parameters
        ----------
        n : int
            Draws per chain.
        random_seed : int, numpy.random.Generator or None
        chains : int
            Number of ``chain`` entries to split the draws into (all are independent).

        Returns
        -------
        xarray.DataTree
            ``posterior`` with the model's variables (constrained) and deterministics;
            ``unconstrained_posterior`` with the transformed value variables; ``sample_stats``
            with ``lp`` (the model's log density at the draw, with Jacobians) and
            ``acceptance_rate`` (the fraction of the ``T`` transitions that accepted).
        """
        n, chains = int(n), int(chains)
        if n < 1 or chains < 1:
            raise ValueError(f"n and chains must be positive, got n={n}, chains={chains}.")
        x, lp, acc = self.run_chain(n * chains, random_seed)
        stats = {
            "lp": lp[-1].reshape(chains, n),
            "acceptance_rate": acc.mean(axis=0).reshape(chains, n),
        }
        sampled = draws_to_datatree(
            self.target, x.reshape(chains, n, self.ndim), sample_stats=stats
        )
        attrs = {
            "n_steps": self.n_steps,
            "leapfrog_steps": self.leapfrog_steps,
            "entropy_lower_bound": float(self.entropy_lower_bound),
            **{k: v for k, v in self.settings.items() if k not in ("n_steps", "leapfrog_steps")},
        }
        if self.objective.size:
            attrs["final_objective"] = float(np.mean(self.objective[-max(1, self.objective.size // 10) :]))
        return build_result(sampled, self.target, method="ergodic_inference", attrs=attrs)


# ---------------------------------------------------------------------------------- fitting
def _initial_gaussian(target: Target, initial, prior_base: Base | None):
    if isinstance(initial, Base):
        if initial.ndim != target.ndim:
            raise ValueError(
                f"The initial Base has dimension {initial.ndim}; the model's flat unconstrained "
                f"space has {target.ndim}."
            )
        return np.array(initial.mean, dtype=float), np.array(initial.std, dtype=float)
    if isinstance(initial, str) and initial == "prior":
        return np.array(prior_base.mean, dtype=float), np.array(prior_base.std, dtype=float)
    raise ValueError(f"initial must be 'prior' or a pymc_tempering.Base, got {initial!r}.")


def fit_ergodic(
    model: pm.Model | None = None,
    *,
    n_steps: int = 10,
    leapfrog_steps: int = 5,
    initial="prior",
    entropy_lower_bound: float | None = None,
    n_particles: int = 200,
    n_iterations: int = 1000,
    learning_rate: float = 0.01,
    stop_gradient: bool = True,
    tune_initial: bool | str = True,
    calibration_draws: int = 10_000,
    initial_step_size=(0.01, 0.025),
    n_prior_draws: int = 4000,
    random_seed=None,
    progressbar: bool = True,
) -> ErgodicApproximation:
    """Fit an ergodic approximation (Hamiltonian ergodic inference) to a PyMC model.

    Maximises the EMLBO of eq. (4) of the ergodic-inference paper,
    ``E_{p_T}[log pi*] + E_{p_0}[log pi*] + H(P_0)``, subject to ``H(P_0) > h`` (eq. 5), by Adam
    on reparameterised Monte Carlo gradients (eqs. 7-9) through the ``T``-step HMC chain. The
    returned parameters are the average of the iterates of the second half of the iterations
    (Polyak-Ruppert averaging), which removes most of the jitter of a constant learning rate.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the context when omitted. It is never modified. Discrete free variables are
        refused (see :class:`~pymc_tempering.Target`).
    n_steps : int
        Number ``T`` of HMC transitions in the chain.
    leapfrog_steps : int
        Leapfrog steps per HMC transition.
    initial : "prior" or Base
        The starting ``P_0``: ``"prior"`` uses the Gaussian moment-matched to prior draws on the
        unconstrained space (its diagonal: ``P_0`` is factorised); a :class:`~pymc_tempering.Base`
        gives its mean and marginal standard deviations.
    entropy_lower_bound : float, optional
        The bound ``h`` of eq. (5). Default (section 3.3): the prior's entropy on the
        unconstrained space, taken as the entropy of the Gaussian moment-matched to
        ``n_prior_draws`` prior draws (full covariance). Where the prior cannot be drawn, pass it.
    n_particles : int
        Monte Carlo samples ``N`` per gradient estimate.
    n_iterations : int
        Adam iterations. ``0`` returns the untuned chain (initial parameters).
    learning_rate : float
        Adam's learning rate. The parameters are the mean and log standard deviations of
        ``P_0``, and per step the log step size and log momentum variances.
    stop_gradient : bool
        Stop the gradient at the input ``x_{t-1}`` of every transition (section 3.2): much
        cheaper, and on the paper's examples as good.
    tune_initial : True, False or "stein"
        How ``P_0`` is tuned while the transitions maximise ``E_{p_T}[log pi*]``. ``True`` (the
        paper): its mean and scales maximise ``ELBO(P_0)`` under eq. (5). ``False``: kept fixed
        (section 3.3, the paper's DGM example). ``"stein"`` (beyond the paper): its mean and
        shape are kept and one common scale is tuned so that ``P_T`` satisfies the Stein
        identity ``E[(x - m) . grad log pi*(x)] = -d`` (see
        :meth:`ErgodicApproximation.stein_gap`), then calibrated after training (see
        ``calibration_draws``). The EMLBO rewards a ``P_T`` that is too concentrated (its
        optimum is not the target); the Stein identity pins the spread of ``P_T`` down, in the
        spirit of the authors' follow-up (Campbell et al. 2021), which picks ``P_0``'s scale by
        a kernel Stein discrepancy. Every mode keeps ``H(P_0) >= h``.
    calibration_draws : int
        For ``tune_initial="stein"``: after training, the transitions are held fixed and the
        scale of ``P_0`` is set by a root search (Brent, common random numbers) so that the Stein
        gap of this many chains is zero. Its precision is recorded in
        ``settings["calibration_gap_mcse"]``. ``0`` skips the calibration.
    initial_step_size : float or (low, high)
        Initial leapfrog step sizes: one value, or drawn uniformly per step from ``(low, high)``
        (the paper's default range is (0.01, 0.025)). Initial momentum variances are 1.
    n_prior_draws : int
        Prior draws used for ``initial="prior"`` and the default bound.
    random_seed : int, numpy.random.Generator or None
        Makes the fit reproducible.
    progressbar : bool

    Returns
    -------
    ErgodicApproximation

    Raises
    ------
    ValueError
        If ``H(P_0) <= h`` at the start (widen ``initial`` or lower ``entropy_lower_bound``), if
        the prior cannot be drawn and no bound is given, for invalid settings, or if the
        objective becomes NaN (the message names the iteration).
    """
    model = modelcontext(model)
    target = Target(model)
    d = target.ndim
    n_steps, leapfrog_steps = int(n_steps), int(leapfrog_steps)
    n_particles, n_iterations = int(n_particles), int(n_iterations)
    if n_steps < 1 or leapfrog_steps < 1:
        raise ValueError(
            f"n_steps and leapfrog_steps must be at least 1, got {n_steps} and {leapfrog_steps}."
        )
    if n_particles < 1 or n_iterations < 0:
        raise ValueError(
            f"n_particles must be positive and n_iterations non-negative, got {n_particles} "
            f"and {n_iterations}."
        )
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be positive, got {learning_rate}.")
    if tune_initial not in (True, False, "stein"):
        raise ValueError(f"tune_initial must be True, False or 'stein', got {tune_initial!r}.")
    if int(calibration_draws) != calibration_draws or not (
        calibration_draws == 0 or calibration_draws >= 2
    ):
        raise ValueError(
            f"calibration_draws must be 0 (no calibration) or an integer >= 2, got "
            f"{calibration_draws!r}."
        )
    prior_seed, init_seed, noise_seed, calibration_seed = split_seed(random_seed, 4)

    prior_base = None
    if (isinstance(initial, str) and initial == "prior") or entropy_lower_bound is None:
        try:
            prior_base = fit_base(model, method="prior", n=n_prior_draws, random_seed=prior_seed)
        except ValueError as err:
            raise ValueError(
                "The prior cannot be drawn from on the unconstrained space, so neither "
                "initial='prior' nor the default entropy_lower_bound is available. Pass "
                "initial=pmt.Base(...) and an entropy_lower_bound (an upper estimate of the "
                "posterior's entropy on the unconstrained space)."
            ) from err
    mean0, std0 = _initial_gaussian(target, initial, prior_base)
    if entropy_lower_bound is None:
        entropy_lower_bound = gaussian_entropy(prior_base.cov)
        bound_source = "prior_gaussian_entropy"
    else:
        bound_source = "user"
    h = float(entropy_lower_bound)
    if not np.isfinite(h):
        raise ValueError(
            f"The entropy lower bound is {h}; pass a finite entropy_lower_bound (the prior's "
            "unconstrained entropy could not be estimated)."
        )
    h0 = gaussian_entropy(std0**2)
    if not h0 >= h - 1e-12 * max(1.0, abs(h)):
        raise ValueError(
            f"The initial distribution P_0 has entropy {h0:.4g}, below the bound "
            f"h = {h:.4g} of eq. (5) ({bound_source}). Ergodic inference needs a P_0 wider than "
            "the target: widen `initial` (scale its standard deviations by at least "
            f"{np.exp((h - h0) / d):.3g}) or lower `entropy_lower_bound`."
        )

    rng_init = np.random.default_rng(init_seed)
    if np.ndim(initial_step_size) == 0:
        steps0 = np.full(n_steps, float(initial_step_size))
    else:
        low, high = (float(v) for v in initial_step_size)
        steps0 = rng_init.uniform(low, high, size=n_steps)
    if not np.all(steps0 > 0):
        raise ValueError(f"Initial step sizes must be positive, got {initial_step_size!r}.")

    # Shared parameters (the optimiser's state lives beside them).
    mu = pytensor.shared(mean0.copy(), name="initial_mean")
    log_sigma = pytensor.shared(np.log(std0), name="initial_log_std")
    log_scale = pytensor.shared(np.float64(0.0), name="initial_log_scale")
    log_steps = pytensor.shared(np.log(steps0), name="log_step_size")
    log_vars = pytensor.shared(np.zeros((n_steps, d)), name="log_momentum_variance")

    graph = _ChainGraph(target)
    eps0 = pt.matrix("eps0", dtype="float64")
    eps_r = pt.tensor3("eps_r", dtype="float64")
    u = pt.matrix("u", dtype="float64")
    x0 = mu + pt.exp(log_sigma + log_scale) * eps0
    xs, lps, accepts = graph.chain(x0, eps_r, u, log_steps, log_vars, leapfrog_steps, stop_gradient)
    e_log_T = pt.mean(lps[-1])
    e_log_0 = pt.mean(graph.batch_logp(x0))
    entropy0 = 0.5 * d * _LOG_2PI_E + pt.sum(log_sigma) + d * log_scale
    x_last = disconnected_grad(xs[-1])
    gap = pt.mean(_stein_terms(x_last, graph.logp_and_grad(x_last)[1]))
    objective = e_log_T + e_log_0 + entropy0  # the EMLBO, eq. (4)
    if stop_gradient:
        # Section 3.2: the gradient stops at the input x_{t-1} of every transition, so the
        # parameters of step t get the gradient of eq. (9) evaluated one step at a time:
        # d/dphi_t E_{p_t}[log pi*]. Summing E_{p_t}[log pi*] over t gives every step its own
        # term (with E_{p_T} alone only the last step would get a gradient); the value reported
        # stays the EMLBO.
        surrogate = pt.sum(pt.mean(lps, axis=1)) + e_log_0 + entropy0
    else:
        surrogate = objective  # the exact gradient of eq. (4), back-propagated through the chain

    phi = [log_steps, log_vars]
    if tune_initial == "stein":
        initial_params = [log_scale]
        # Not a gradient for log_scale: the direction that drives the Stein gap of P_T to zero
        # (a positive gap, P_T too concentrated, widens P_0), a Robbins-Monro root search run
        # by Adam.
        grads = [*pt.grad(-surrogate, phi), -gap]
    else:
        initial_params = [mu, log_sigma] if tune_initial else []
        grads = pt.grad(-surrogate, phi + initial_params)  # one backward pass for all
    outputs = [objective, e_log_T, pt.mean(accepts, axis=1), entropy0, gap]
    updates = (
        adam(grads, phi + initial_params, learning_rate=learning_rate) if n_iterations else {}
    )
    if initial_params and n_iterations:
        # Eq. (5): leave P_0 unchanged when the step would take H(P_0) below h.
        new_entropy = 0.5 * d * _LOG_2PI_E + pt.sum(
            updates.get(log_sigma, log_sigma)
        ) + d * updates.get(log_scale, log_scale)
        keep = pt.ge(new_entropy, h)
        for p_ in initial_params:
            updates[p_] = pt.switch(keep, updates[p_], p_)
    train = pm.compile([eps0, eps_r, u], outputs, updates=updates) if n_iterations else None

    rng = np.random.default_rng(noise_seed)
    hist_obj = np.full(n_iterations, np.nan)
    hist_elog = np.full(n_iterations, np.nan)
    hist_acc = np.full((n_iterations, n_steps), np.nan)
    hist_ent = np.full(n_iterations, np.nan)
    hist_gap = np.full(n_iterations, np.nan)
    # Polyak-Ruppert averaging: the fit returns the mean of the iterates of the second half.
    params = phi + initial_params
    n_average = n_iterations - n_iterations // 2
    sums = [np.zeros_like(p_.get_value()) for p_ in params]
    loop_start = None
    with progress_bar(n_iterations, "Ergodic inference", progressbar and n_iterations > 0) as advance:
        for i in range(n_iterations):
            obj, elog, acc, ent, gap_i = train(
                rng.standard_normal((n_particles, d)),
                rng.standard_normal((n_steps, n_particles, d)),
                rng.uniform(size=(n_steps, n_particles)),
            )
            if not np.isfinite(obj):
                raise ValueError(
                    f"The ergodic objective became {float(obj)} at iteration {i} of "
                    f"{n_iterations} (E_pT[log pi*] = {float(elog)}). The chain reached a region "
                    "where the model's log density or its gradient is not finite: lower "
                    "learning_rate or the initial step sizes, or start from a narrower P_0 "
                    "inside the support."
                )
            hist_obj[i], hist_elog[i], hist_acc[i], hist_ent[i] = obj, elog, acc, ent
            hist_gap[i] = gap_i
            if i == 0:  # the first call may still compile (Scan builds its inner code lazily)
                loop_start = time.perf_counter()
            if i >= n_iterations - n_average:
                for p_, total in zip(params, sums):
                    total += p_.get_value()
            advance()

    timed = n_iterations - 1
    loop_seconds = time.perf_counter() - loop_start if timed > 0 else float("nan")
    for p_, total in zip(params, sums):
        if n_average:
            p_.set_value(total / n_average)
    approx = ErgodicApproximation(
        target=target,
        initial_mean=np.asarray(mu.get_value(), dtype=float),
        initial_std=np.exp(
            np.asarray(log_sigma.get_value(), dtype=float) + float(log_scale.get_value())
        ),
        step_size=np.exp(np.asarray(log_steps.get_value(), dtype=float)),
        momentum_variance=np.exp(np.asarray(log_vars.get_value(), dtype=float)),
        leapfrog_steps=leapfrog_steps,
        entropy_lower_bound=h,
        objective=hist_obj,
        expected_log_density=hist_elog,
        acceptance_rate=hist_acc,
        initial_entropy=hist_ent,
        training_stein_gap=hist_gap,
    )
    if tune_initial == "stein" and calibration_draws:
        scale, gap_mcse = _calibrate_scale(approx, int(calibration_draws), calibration_seed)
        approx.initial_std = approx.initial_std * scale
        approx.settings["calibration_scale"] = scale
        approx.settings["calibration_gap_mcse"] = gap_mcse
    approx.settings.update({
        # wall time per iteration of the optimisation loop after its first iteration (no
        # compilation)
        "seconds_per_iteration": loop_seconds / timed if timed > 0 else float("nan"),
        "n_particles": n_particles,
        "n_iterations": n_iterations,
        "learning_rate": float(learning_rate),
        "stop_gradient": bool(stop_gradient),
        "tune_initial": tune_initial,
        "calibration_draws": int(calibration_draws) if tune_initial == "stein" else 0,
        "entropy_lower_bound_source": bound_source,
    })
    return approx


def _calibrate_scale(approx: ErgodicApproximation, n: int, seed) -> tuple[float, float]:
    """The factor on ``P_0``'s standard deviations that zeroes the Stein gap of ``P_T``.

    Returns the factor and the Monte Carlo standard error of the gap at it (the precision of
    the calibration).

    The tuned transitions are held fixed; the gap of ``n`` chains is a function of the factor
    ``c`` alone when every evaluation reuses the same noise (common random numbers), and
    Brent's method finds its root in ``log c``. The factor never takes ``H(P_0)`` below the
    bound ``h``: if the gap is negative (``P_T`` too dispersed) even there, the bound is kept.
    """
    d = approx.ndim
    rng = np.random.default_rng(seed)
    eps0 = rng.standard_normal((n, d))
    chain_seed = int(rng.integers(2**63))
    h0 = gaussian_entropy(approx.initial_std**2)
    lowest = (approx.entropy_lower_bound - h0) / d  # log c at the bound (<= 0)

    @functools.cache  # brentq re-evaluates the bracket ends; each evaluation runs n chains
    def terms(log_c):
        x0 = approx.initial_mean + np.exp(log_c) * approx.initial_std * eps0
        x, _, _, score = approx._run(n, np.random.default_rng(chain_seed), x0=x0)
        return _stein_terms(x, score)

    def gap(log_c):
        return float(np.mean(terms(float(log_c))))

    if gap(lowest) > 0:
        high = max(lowest, 0.0) + 0.25
        while gap(high) > 0:
            if high > 5.0:
                raise ValueError(
                    "Calibrating the scale of P_0: the last state of the tuned chain stays too "
                    f"concentrated even with P_0 {np.exp(high):.3g} times wider. Use more "
                    "n_iterations, a longer chain (n_steps) or tune_initial=True."
                )
            lowest, high = high, high + 0.5
        lowest = brentq(gap, lowest, high, xtol=1e-3)
    return float(np.exp(lowest)), _mean_and_se(terms(float(lowest)))[1]
