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
from xarray import DataTree

from pymc_tempering.base import Base, fit_base
from pymc_tempering.dynamics.recording import draws_to_datatree, progress_bar
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
            self._sampler = pm.compile(
                [x0, eps_r, u, log_steps, log_vars], [xs[-1], lp0, lps, accepts]
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
        rng = np.random.default_rng(random_seed)
        fn = self._compiled_sampler()
        log_steps = np.log(self.step_size)
        log_vars = np.log(self.momentum_variance)
        if x0 is not None:
            x0 = np.asarray(x0, dtype=float)
            if x0.shape != (int(n), self.ndim):
                raise ValueError(f"x0 must have shape ({int(n)}, {self.ndim}), got {x0.shape}.")
        xs, lps, accs = [], [], []
        for start in range(0, int(n), int(chunk_size)):
            m = min(int(chunk_size), int(n) - start)
            if x0 is None:
                noise = rng.standard_normal((m, self.ndim))
                start_states = self.initial_mean + self.initial_std * noise
            else:
                start_states = x0[start : start + m]
            eps_r = rng.standard_normal((self.n_steps, m, self.ndim))
            u = rng.uniform(size=(self.n_steps, m))
            x_t, lp0, lp, acc = fn(start_states, eps_r, u, log_steps, log_vars)
            xs.append(x_t)
            lps.append(np.concatenate([lp0[None], lp], axis=0))
            accs.append(acc)
        return np.concatenate(xs), np.concatenate(lps, axis=1), np.concatenate(accs, axis=1)

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
    tune_initial: bool = True,
    initial_step_size=(0.01, 0.025),
    n_prior_draws: int = 4000,
    random_seed=None,
    progressbar: bool = True,
) -> ErgodicApproximation:
    """Fit an ergodic approximation (Hamiltonian ergodic inference) to a PyMC model.

    Maximises the EMLBO of eq. (4) of the ergodic-inference paper,
    ``E_{p_T}[log pi*] + E_{p_0}[log pi*] + H(P_0)``, subject to ``H(P_0) > h`` (eq. 5), by Adam
    on reparameterised Monte Carlo gradients (eqs. 7-9) through the ``T``-step HMC chain.

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
    tune_initial : bool
        Whether to optimise ``P_0`` (``False`` keeps it fixed, as in the paper's DGM example).
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
    prior_seed, init_seed, noise_seed = split_seed(random_seed, 3)

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
    log_steps = pytensor.shared(np.log(steps0), name="log_step_size")
    log_vars = pytensor.shared(np.zeros((n_steps, d)), name="log_momentum_variance")

    graph = _ChainGraph(target)
    eps0 = pt.matrix("eps0", dtype="float64")
    eps_r = pt.tensor3("eps_r", dtype="float64")
    u = pt.matrix("u", dtype="float64")
    x0 = mu + pt.exp(log_sigma) * eps0
    _, lps, accepts = graph.chain(x0, eps_r, u, log_steps, log_vars, leapfrog_steps, stop_gradient)
    e_log_T = pt.mean(lps[-1])
    e_log_0 = pt.mean(graph.batch_logp(x0))
    entropy0 = 0.5 * d * _LOG_2PI_E + pt.sum(log_sigma)
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

    params = [log_steps, log_vars] + ([mu, log_sigma] if tune_initial else [])
    outputs = [objective, e_log_T, pt.mean(accepts, axis=1), entropy0]
    updates = adam(-surrogate, params, learning_rate=learning_rate) if n_iterations else {}
    if tune_initial and n_iterations:
        # Eq. (5): leave P_0 unchanged when the step would take H(P_0) below h.
        new_entropy = 0.5 * d * _LOG_2PI_E + pt.sum(updates[log_sigma])
        keep = pt.ge(new_entropy, h)
        updates[mu] = pt.switch(keep, updates[mu], mu)
        updates[log_sigma] = pt.switch(keep, updates[log_sigma], log_sigma)
    train = pm.compile([eps0, eps_r, u], outputs, updates=updates) if n_iterations else None

    rng = np.random.default_rng(noise_seed)
    hist_obj = np.full(n_iterations, np.nan)
    hist_elog = np.full(n_iterations, np.nan)
    hist_acc = np.full((n_iterations, n_steps), np.nan)
    hist_ent = np.full(n_iterations, np.nan)
    loop_start = time.perf_counter()
    with progress_bar(n_iterations, "Ergodic inference", progressbar and n_iterations > 0) as advance:
        for i in range(n_iterations):
            obj, elog, acc, ent = train(
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
            advance()

    loop_seconds = time.perf_counter() - loop_start
    settings = {
        # wall time of the optimisation loop alone (no compilation), per iteration
        "seconds_per_iteration": loop_seconds / n_iterations if n_iterations else float("nan"),
        "n_particles": n_particles,
        "n_iterations": n_iterations,
        "learning_rate": float(learning_rate),
        "stop_gradient": bool(stop_gradient),
        "tune_initial": bool(tune_initial),
        "entropy_lower_bound_source": bound_source,
    }
    return ErgodicApproximation(
        target=target,
        initial_mean=np.asarray(mu.get_value(), dtype=float),
        initial_std=np.exp(np.asarray(log_sigma.get_value(), dtype=float)),
        step_size=np.exp(np.asarray(log_steps.get_value(), dtype=float)),
        momentum_variance=np.exp(np.asarray(log_vars.get_value(), dtype=float)),
        leapfrog_steps=leapfrog_steps,
        entropy_lower_bound=h,
        objective=hist_obj,
        expected_log_density=hist_elog,
        acceptance_rate=hist_acc,
        initial_entropy=hist_ent,
        settings=settings,
    )
