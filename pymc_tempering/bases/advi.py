"""The ADVI engine of the bases: PyMC's ADVI, with Adam, a plateau stop, and one compiled step.

:func:`fit_advi` fits a Gaussian :class:`~pymc_tempering.bases.densities.Base` to the target by
PyMC's mean-field or full-rank ADVI (:class:`pymc.ADVI`, :class:`pymc.FullRankADVI`). The
approximation, its start, the objective with its gradient and Adam (:func:`pymc.adam`) are
PyMC's; three pieces are written here:

- :class:`AdviSteps`, the loop that runs the fits: PyMC's objective and Adam updates compiled
  once per method with the Monte Carlo noise as an input, the noise drawn with NumPy;
- :class:`_Adam`, :func:`pymc.adam` whose state can be put back, so that the fits of one base
  share that one compiled step;
- :func:`plateau` and :class:`ReduceOnPlateau`, the stop: a :func:`pymc.fit` callback that cuts
  Adam's step at the first plateau of the ELBO and stops at the next (PyMC's one stopping
  callback, :class:`pymc.callbacks.CheckParametersConvergence`, watches the parameters, not
  the ELBO, and changes no step).

Why the loop is not :func:`pymc.fit`: :func:`pymc.fit` compiles a new step function for every
fit, and draws the noise inside it from a NumPy ``Generator`` held in a shared variable.
Numba's dispatcher has no fast path for a ``Generator`` argument (numba/numba#4499): it types
every argument in Python on every call, and on the 92-parameter radon models a step took 9 to
14 times as long as the same step with the noise as an input (which itself costs 1.5 times the
model's log density and gradient). The fits stop after 2000 to 10,000 steps and a mixture base
runs up to four of them, so that overhead and the compilations were most of a base's time.
Measured side by side in one process, four fits from PyMC's default start (a mixture base's
number), in interleaved rounds: :func:`pymc.fit` with the same optimiser and stop (through
:meth:`AdviSteps.run`'s fallback) took 6 times as long as this loop on the 10-parameter
non-centred eight schools and on the 92-parameter radon model (3.4 to 10 times by round), for
the same answers: its means within 0.12 (eight schools) and 1.2 (radon) fitted standard
deviations of this loop's, its ELBOs within 0.19 and 1.0 nats, where this loop's own fits with
other seeds differ by up to 0.12 and 2.0 standard deviations and 0.14 and 0.8 nats.
:func:`pymc.fit` at PyMC's defaults (``adagrad_window``, all 10,000 iterations) took 10 and
4.5 times as long and ended 0.3 to 0.7 and 190 to 205 nats of ELBO lower. PyTensor itself has
no optimisers; :func:`pymc.adam` is the one used. With another optimiser, or keywords that may
carry state between fits (:meth:`AdviSteps.can_share`), the fit is :func:`pymc.fit` itself.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
from pymc.pytensorf import resolve_backend_compile_kwargs
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.random.op import RandomVariable

from pymc_tempering.bases.densities import Base
from pymc_tempering.progress import progress_bar
from pymc_tempering.target import Target

__all__ = [
    "ADVI_DECAY",
    "ADVI_ITERATIONS",
    "ADVI_LEARNING_RATE",
    "ADVI_TOLERANCE",
    "ADVI_WINDOW",
    "AdviSteps",
    "ReduceOnPlateau",
    "fit_advi",
    "plateau",
]

ADVI_ITERATIONS = 10_000  # most iterations of an ADVI fit (fit_base's n)
# Adam's step for pm.fit (PyMC's default, adagrad with a window and a step of 0.001, left the
# 92-parameter radon model's fits 100 to 2000 nats below log Z after 10,000 iterations; Adam
# with 0.01 reached 3 nats below it in 2000)
ADVI_LEARNING_RATE = 0.01
ADVI_TOLERANCE = 0.1  # nats of mean loss a window must gain for the fit to go on
ADVI_WINDOW = 500  # iterations whose mean loss plateau compares with the windows before
ADVI_DECAY = 0.1  # Adam's step is cut by this at the first plateau, and the fit stops at the next


def fit_advi(
    target: Target,
    method: str,
    n: int,
    random_seed,
    progressbar,
    start_sd=None,
    steps: AdviSteps | None = None,
    **fit_kwargs,
) -> Base:
    """One ADVI fit of the target (:class:`AdviSteps`), as a Gaussian :class:`Base` on its
    flat space.

    Parameters
    ----------
    start_sd : ndarray, optional
        Standard deviations (flat) the fit starts at (``start_sigma``).
    steps : AdviSteps, optional
        The step functions already compiled for the other fits of the same base (a new one
        when omitted): this fit runs with them unless ``fit_kwargs`` rule that out
        (:meth:`AdviSteps.can_share`), and with :func:`pymc.fit` otherwise.
    **fit_kwargs
        :func:`pymc.fit` keywords. Without ``obj_optimizer``, Adam at ``ADVI_LEARNING_RATE``
        with :class:`ReduceOnPlateau` (unless ``callbacks`` are given).
    """
    if start_sd is not None:
        fit_kwargs["start_sigma"] = target.unravel(start_sd)
    if steps is None:
        steps = AdviSteps(target.model)
    if "obj_optimizer" not in fit_kwargs:
        share = steps.can_share(method, fit_kwargs)
        optimizer = steps.optimizer(method) if share else _Adam()
        fit_kwargs["obj_optimizer"] = optimizer
        fit_kwargs.setdefault("callbacks", [ReduceOnPlateau(optimizer.learning_rate)])
    try:
        hist, group = steps.run(method, n, random_seed, progressbar, **fit_kwargs)
    except FloatingPointError as err:
        raise ValueError(
            f"The {method} fit diverged to NaN, so it cannot serve as a base. Check the model "
            "for regions where its log density is undefined, or pass a smaller learning rate "
            "(obj_optimizer=pm.adam(learning_rate=...)) or another method."
        ) from err
    hist = np.asarray(hist, dtype=float)
    tail = hist[-max(1, len(hist) // 10) :]
    mean_flat = np.asarray(group.mean.eval(), dtype=float)
    cov_flat = np.asarray(group.cov.eval(), dtype=float)
    if not (np.all(np.isfinite(tail)) and np.all(np.isfinite(mean_flat))):
        raise ValueError(
            f"The {method} fit diverged (non-finite ELBO or parameters), so it cannot serve as a "
            "base. Try a smaller learning rate or another method."
        )
    # Reorder from the approximation's ordering to the Target's flat order.
    index = np.concatenate(
        [
            np.arange(group.ordering[name][1].start, group.ordering[name][1].stop)
            for name in target.names
        ]
    )
    mean = mean_flat[index]
    cov = cov_flat[np.ix_(index, index)]
    if method == "advi":
        cov = np.diag(np.diag(cov))
    return Base(
        mean=mean,
        cov=cov,
        log_zeta=float(-np.mean(tail)),
        method=method,
        diagonal=method == "advi",
    )


class _Adam:
    """:func:`pymc.adam` at ``ADVI_LEARNING_RATE``, as an ``obj_optimizer`` whose state can be
    put back: its step is a shared variable (which :class:`ReduceOnPlateau` cuts), and the
    shared variables it makes when called (the moment estimates and the step count) are kept
    with their initial values (zeros) for :meth:`reset`. The updates are ``pm.adam``'s own."""

    def __init__(self):
        self.learning_rate = pytensor.shared(
            np.asarray(ADVI_LEARNING_RATE, dtype=pytensor.config.floatX)
        )
        self._initial: dict = {}

    def __call__(self, loss_or_grads, params):
        updates = pm.adam(loss_or_grads, params, learning_rate=self.learning_rate)
        params = {id(p) for p in params}
        self._initial = {v: v.get_value() for v in updates if id(v) not in params}
        return updates

    def reset(self):
        """Adam's step, moments and step count as before its first step."""
        self.learning_rate.set_value(np.asarray(ADVI_LEARNING_RATE, dtype=pytensor.config.floatX))
        for variable, value in self._initial.items():
            variable.set_value(value.copy())


_INFERENCES = {"advi": pm.ADVI, "fullrank_advi": pm.FullRankADVI}
# pymc.fit keywords with which the fits of a base can run with AdviSteps: the fit's start, and
# options of the graph or its compilation, which are the same for every fit of a base. Any
# other (an optimiser or updates of the user's, score=False, ...) may bring state that this
# cannot put back between fits, and each fit then runs pymc.fit.
_SHAREABLE_FIT_KWARGS = frozenset(
    {
        "start",
        "start_sigma",
        "callbacks",
        "obj_n_mc",
        "total_grad_norm_constraint",
        "compile_kwargs",
        "backend",
    }
)


class AdviSteps:
    """The ADVI fits of one base: PyMC's objective and Adam updates, compiled once per method
    with the Monte Carlo noise as an input, and run by a loop that draws the noise with NumPy.

    Why this is not :func:`pymc.fit` is in the module's docstring. It compiles once per method
    (``"advi"``, ``"fullrank_advi"``) for all the fits of a base.

    What is PyMC's: the approximation (:class:`pymc.MeanField`, :class:`pymc.FullRank`), its
    start (``create_shared_params``, from ``start``; ``start_sigma`` set as :func:`pymc.fit`
    sets it, but without its overflow above 709), the objective with its gradient
    (``Inference.objective.updates``, the same graph :func:`pymc.fit` compiles) and Adam
    (:func:`pymc.adam`, through :class:`_Adam`). What is this loop's: the standard normal
    noise (``obj_n_mc`` draws per step, the graph's one ``normal`` draw replaced by an
    input), the loss history, the callbacks (called after every step with
    ``(approx, losses, i)``, as by :func:`pymc.fit`; ``StopIteration`` ends the fit) and a
    ``FloatingPointError`` when the loss is NaN. A graph with any other random draw (it has
    none for a model that :meth:`Target.require_exact` accepts) is fitted by
    :func:`pymc.fit`.

    Parameters
    ----------
    model : pymc.Model
    """

    def __init__(self, model):
        self.model = model
        self._optimizers: dict[str, _Adam] = {}
        # method -> (inference, step function, (noise shape, noise dtype)), or None
        self._compiled: dict = {}

    @staticmethod
    def can_share(method: str, fit_kwargs) -> bool:
        """Whether a fit with these :func:`pymc.fit` keywords can run here (``start_sigma`` is
        for mean-field fits only: ``pymc.fit`` refuses it for the others)."""
        return set(fit_kwargs) <= _SHAREABLE_FIT_KWARGS and (
            method == "advi" or "start_sigma" not in fit_kwargs
        )

    def optimizer(self, method: str) -> _Adam:
        """The optimiser of ``method``'s step function."""
        if method not in self._optimizers:
            self._optimizers[method] = _Adam()
        return self._optimizers[method]

    def _compile(
        self,
        method,
        random_seed,
        obj_optimizer,
        obj_n_mc=None,
        total_grad_norm_constraint=None,
        compile_kwargs=None,
        backend=None,
    ):
        """``method``'s step function, with the noise as its input, or None where the graph
        has a random draw other than one standard normal."""
        inference = _INFERENCES[method](model=self.model, random_seed=random_seed)
        updates = inference.objective.updates(
            obj_n_mc=obj_n_mc,
            obj_optimizer=obj_optimizer,
            total_grad_norm_constraint=total_grad_norm_constraint,
        )
        outputs = [updates.loss, *updates.values()]
        draws = {
            id(v.owner): v.owner
            for v in ancestors(outputs)
            if v.owner is not None and isinstance(v.owner.op, RandomVariable)
        }
        if len(draws) != 1:
            return None
        (node,) = draws.values()
        noise = node.outputs[1]
        try:
            loc, scale = (get_underlying_scalar_constant_value(v) for v in node.inputs[2:])
        except (NotScalarConstantError, ValueError):
            return None
        if not isinstance(node.op, NormalRV) or loc != 0 or scale != 1 or None in noise.type.shape:
            return None
        value = noise.type("noise")
        loss, *values = graph_replace(outputs, {noise: value}, strict=False)
        step = pm.compile(
            [value],
            loss,
            updates=dict(zip(updates.keys(), values, strict=True)),
            **resolve_backend_compile_kwargs(backend, compile_kwargs),
        )
        step.trust_input = True
        return inference, step, (noise.type.shape, noise.type.dtype)

    def run(
        self,
        method,
        n,
        random_seed,
        progressbar,
        *,
        obj_optimizer,
        start=None,
        start_sigma=None,
        callbacks=None,
        **fit_kwargs,
    ):
        """One fit, as ``pymc.fit(n, method, model, random_seed, start, start_sigma, ...)``:
        with the shared step function, or with :func:`pymc.fit` itself where ``fit_kwargs``
        (:meth:`can_share`) or the graph rule that out.

        Returns
        -------
        hist : ndarray
            The losses.
        group : pymc.variational.opvi.Group
            The approximation, at the end of the fit.
        """
        if isinstance(obj_optimizer, _Adam):
            obj_optimizer.reset()
        params = {"start": start}
        if start_sigma is not None:
            params["start_sigma"] = start_sigma
        compiled = None
        if self.can_share(method, {**params, **fit_kwargs}):
            if method not in self._compiled:
                self._compiled[method] = self._compile(
                    method, random_seed, obj_optimizer, **fit_kwargs
                )
            compiled = self._compiled[method]
        if compiled is None:
            approx = pm.fit(
                n,
                method=method,
                model=self.model,
                random_seed=random_seed,
                progressbar=progressbar,
                obj_optimizer=obj_optimizer,
                callbacks=callbacks,
                **params,
                **fit_kwargs,
            )
            return approx.hist, approx.groups[0]
        inference, step, (shape, dtype) = compiled
        group = inference.approx.groups[0]
        group.rng = np.random.RandomState(random_seed)
        start_params = group.create_shared_params(start=start)
        values = {name: p.get_value() for name, p in start_params.items()}
        if start_sigma is not None:
            # rho with softplus(rho) = sigma, as PyMC's log(expm1(sigma)), which overflows to
            # inf above sigma = 709 (the Laplace widths of eight schools in units of 1e3 reach
            # that, and those fits diverged to NaN); there, the same log(-expm1(-sigma)) + sigma.
            for name, index, *_ in group.ordering.values():
                if start_sigma.get(name) is not None:
                    sigma = np.abs(np.asarray(start_sigma[name], dtype=float)).ravel()
                    with np.errstate(over="ignore"):
                        values["rho"][index] = np.where(
                            sigma > 700, np.log(-np.expm1(-sigma)) + sigma, np.log(np.expm1(sigma))
                        )
        for name, param in group.shared_params.items():
            param.set_value(values[name])
        rng = np.random.default_rng(group.rng.randint(2**30, dtype=np.int64))
        callbacks = callbacks or []
        losses = np.empty(n)
        i = 0
        with progress_bar(n, f"{method} fit", progressbar) as advance:
            try:
                while i < n:
                    block = rng.standard_normal((min(ADVI_WINDOW, n - i), *shape)).astype(dtype)
                    for noise in block:
                        losses[i] = loss = step(noise)
                        i += 1
                        if loss != loss:
                            raise FloatingPointError(f"NaN occurred in the {method} fit.")
                        for callback in callbacks:
                            callback(inference.approx, losses[:i], i)
                    advance(len(block))
            except StopIteration:
                pass
        return losses[:i], group


def plateau(losses) -> bool:
    """Whether the mean loss has gained less than ``ADVI_TOLERANCE`` nats in each of the last
    two windows of ``ADVI_WINDOW`` iterations. One window is not enough: the noise of a noisy
    ELBO's window means stopped full-rank fits of a two-parameter model early, 5 nats of ELBO
    short, in two seeds of six."""
    if len(losses) < 3 * ADVI_WINDOW:
        return False
    n = len(losses)
    means = [np.mean(losses[n - (k + 1) * ADVI_WINDOW : n - k * ADVI_WINDOW]) for k in range(3)]
    return bool(means[1] - means[0] < ADVI_TOLERANCE and means[2] - means[1] < ADVI_TOLERANCE)


class ReduceOnPlateau:
    """A :func:`pymc.fit` callback: at the first plateau of the loss (:func:`plateau`, checked
    at the end of each window) cut Adam's step (a shared variable) by ``ADVI_DECAY``, and stop
    at the next plateau. Adam's constant step leaves its last iterate jittering around the
    optimum (up to 0.15 standard deviations in the means of a 1-D Gaussian's fits, after 10,000
    iterations at 0.01); the smaller step settles it."""

    def __init__(self, learning_rate):
        self.learning_rate = learning_rate
        self.decayed_at = None

    def __call__(self, approx, losses, i):
        if i % ADVI_WINDOW:
            return
        since = losses if self.decayed_at is None else losses[self.decayed_at :]
        if not plateau(since):
            return
        if self.decayed_at is None:
            self.learning_rate.set_value(self.learning_rate.get_value() * ADVI_DECAY)
            self.decayed_at = len(losses)
            return
        raise StopIteration(f"The ELBO stopped improving after {i} iterations.")
