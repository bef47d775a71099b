"""The target: a PyMC model's log density on the flat unconstrained space.

Everything in the library that needs the model's log density gets it from here, built once from
PyMC's own API (``model.logp(jacobian=True)``, ``model.value_vars``, ``DictToArrayBijection``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection
from pymc.data import MinibatchIndexRV, MinibatchOp
from pymc.logprob.utils import local_check_parameter_to_ninf_switch
from pymc.model import modelcontext
from pymc.vartypes import discrete_types
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.rewriting.basic import in2out
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import ancestors, graph_inputs
from pytensor.tensor.random.type import RandomGeneratorType
from pytensor.tensor.variable import TensorConstant
from scipy import optimize

from pymc_tempering.per_model import PerGraph, PerModel, graph_key
from pymc_tempering.timing import phase

__all__ = ["Target", "flat_directions", "negative_log_density", "target_of"]


#: Constants with at least this many elements go into compiled functions as shared variables.
LARGE_CONSTANT = 1000
#: Most data elements of a model whose batched log density and gradient are one Op in a graph
#: (:meth:`Target.batched_logp_and_grad_graph`).
OP_MAX_DATA_SIZE = 100


def _data_as_shared(outputs: list) -> list:
    """``outputs`` with every large constant (a data set: ``pm.Minibatch`` and observed arrays
    are constants in the graph) replaced by a shared variable holding the same array.

    Numba cannot cache a compiled function that holds a large array (it warns ``Cannot cache
    compiled function``), so every new process would compile such densities afresh, even with
    PyTensor's cache warm. A shared variable is passed in at call time instead. Used by
    :meth:`Target.compile_batched` and the point functions (``Target.logp``,
    ``logp_and_grad``).
    """
    constants = list(dict.fromkeys(  # in the graph's order, so every process builds the same
        v for v in ancestors(outputs)
        if isinstance(v, TensorConstant) and v.data.size >= LARGE_CONSTANT
    ))
    if not constants:
        return outputs
    replace = {
        c: pytensor.shared(c.data, name=c.name, borrow=True, shape=c.type.shape) for c in constants
    }
    return graph_replace(outputs, replace=replace, strict=False)


def _random_generators(outputs) -> list:
    """The shared random generators the graphs ``outputs`` draw from (a ``pm.Minibatch``'s)."""
    return [
        v
        for v in graph_inputs(outputs)
        if isinstance(v, SharedVariable) and isinstance(v.type, RandomGeneratorType)
    ]


def _minibatches(outputs) -> list:
    """The ``pm.Minibatch`` draws of the graphs ``outputs``: ``(node, batch size, data
    length)`` per ``MinibatchOp`` node (its inputs are the data and the random generator; its
    outputs the minibatches and the next generator). The batch size is None where it is not
    fixed (or the node draws its indices otherwise than ``pm.Minibatch``); the length is the
    data's shared variable where they are one (``pm.Data``, which ``pm.set_data`` may resize
    between calls), a number otherwise."""
    found = []
    for node in {id(v.owner): v.owner for v in ancestors(outputs) if v.owner}.values():
        if not isinstance(node.op, MinibatchOp):
            continue
        draw = [n for n in node.op.fgraph.apply_nodes if isinstance(n.op, MinibatchIndexRV)]
        size = node.outputs[0].type.shape[0]
        data = node.inputs[0]
        if isinstance(data, SharedVariable):
            length = data
        elif isinstance(data, TensorConstant):
            length = int(data.data.shape[0])
        else:
            length = int(data.shape[0].eval())
        found.append((node, None if len(draw) != 1 or size is None else int(size), length))
    return found


def _indexed(node, index) -> dict:
    """The minibatches of a ``MinibatchOp`` node as its data at ``index``: a replacement for
    :func:`~pytensor.graph.replace.graph_replace`."""
    return {out: data[index] for out, data in zip(node.outputs[:-1], node.inputs[:-1], strict=True)}


def _length(data) -> int:
    """A data length from :func:`_minibatches`: the number, or the shared data's current one."""
    return data if isinstance(data, int) else len(data.get_value(borrow=True))


#: The point functions of the models of this process, by graph (:meth:`Target._compiled`).
_COMPILED = PerGraph(16)


class Target:
    """A PyMC model's joint log density on the flat unconstrained space.

    The flat space is the concatenation of the raveled value variables of the model
    (``model.value_vars``, i.e. the free variables after PyMC's default transforms), in the
    order PyMC lists them. The log density includes the Jacobians of those transforms, so it is
    the density the samplers see.

    Parameters
    ----------
    model : pymc.Model, optional
        The model. Taken from the context when omitted. It is never modified.

    Raises
    ------
    ValueError
        If the model has discrete free variables (gradient-based methods cannot move them) or
        no free variables at all (there is nothing to sample).

    Attributes
    ----------
    model : pymc.Model
    names : list of str
        Names of the value variables, in flat order.
    shapes : list of tuple
    ndim : int
        Dimension of the flat space.
    """

    def __init__(self, model: pm.Model | None = None):
        model = modelcontext(model)
        discrete = [rv.name for rv in model.free_RVs if rv.dtype in discrete_types]
        if discrete:
            raise ValueError(
                f"The model has discrete free variables {discrete}. The tempering methods move "
                "every free variable with gradients; marginalise the discrete variables out (for "
                "example with pymc-extras' marginalize) or make them observed."
            )
        if not model.free_RVs:
            raise ValueError(
                "The model has no free variables: there is nothing to sample and its marginal "
                "likelihood is just its log density at the observed data."
            )
        self.model = model
        self.value_vars = list(model.value_vars)
        point = model.initial_point()
        self._point_map_info = DictToArrayBijection.map(
            {v.name: np.asarray(point[v.name]) for v in self.value_vars}
        ).point_map_info
        self.names = [info[0] for info in self._point_map_info]
        self.shapes = [tuple(info[1]) for info in self._point_map_info]
        self.sizes = [int(info[2]) for info in self._point_map_info]
        self.ndim = int(sum(self.sizes))
        self._value_to_rv = {model.rvs_to_values[rv].name: rv for rv in model.free_RVs}
        self.transformed_names = [
            name
            for name in self.names
            if model.rvs_to_transforms.get(self._value_to_rv[name]) is not None
        ]

    # ------------------------------------------------------------------ symbolic interface
    def replace_values(self, outputs, values: Mapping[str, pt.TensorVariable]):
        """``outputs`` (graphs of the model's value variables) at symbolic named ``values``."""
        replace = {v: pt.as_tensor(values[v.name]).astype(v.dtype) for v in self.value_vars}
        return graph_replace(outputs, replace=replace, strict=False)

    def logp_graph(self, values: Mapping[str, pt.TensorVariable]) -> pt.TensorVariable:
        """The model's joint log density (with Jacobians) at symbolic named values."""
        return self.replace_values([self._logp], values)[0]

    def constrained_graph(
        self, values: Mapping[str, pt.TensorVariable]
    ) -> dict[str, pt.TensorVariable]:
        """The model's free variables (constrained) and deterministics at symbolic values."""
        names = list(self.constrained_names)
        outs = self.replace_values(self._constrained_outputs, values)
        return dict(zip(names, outs, strict=True))

    def prior_logp_graph(self, values: Mapping[str, pt.TensorVariable]) -> pt.TensorVariable:
        """The log prior density of the free variables (with Jacobians) at symbolic values.

        Observed variables and potentials are left out; with proper priors it is a normalised
        density on the flat unconstrained space.
        """
        return self.replace_values([self._prior_logp], values)[0]

    @staticmethod
    def _checks_to_ninf(graph):
        # A parameter check (sigma > 0) becomes a -inf switch here, at one point: vectorised
        # over a batch, the check would otherwise fail every row of the batch at once.
        return rewrite_graph(
            graph, include=(), clone=True,
            custom_rewrite=in2out(local_check_parameter_to_ninf_switch),
        )

    @cached_property
    def _logp(self):
        return self._checks_to_ninf(self.model.logp(jacobian=True))

    @cached_property
    def _prior_logp(self):
        return self._checks_to_ninf(self.model.logp(vars=self.model.free_RVs, jacobian=True))

    @cached_property
    def constrained_names(self) -> list[str]:
        """Names of the model's free variables (constrained) and deterministics, in order."""
        return [rv.name for rv in self.model.free_RVs] + [
            d.name for d in self.model.deterministics
        ]

    @cached_property
    def _constrained_outputs(self):
        return self.model.replace_rvs_by_values(
            list(self.model.free_RVs) + list(self.model.deterministics)
        )

    @cached_property
    def _batched_template(self):
        """The batched log density and its gradient at a placeholder matrix, built once."""
        x = pt.vector("x", dtype="float64")
        xs = pt.matrix("xs_template", dtype="float64")
        lp = vectorize_graph(self.logp_graph(self.unravel(x)), replace={x: xs})
        return xs, lp, pt.grad(pt.sum(lp), xs)

    def batched_logp_graph(self, xs: pt.TensorVariable) -> pt.TensorVariable:
        """The log density at the rows of a symbolic matrix ``xs`` (n, ndim), shape (n,)."""
        template, lp, _ = self._batched_template
        return graph_replace([lp], replace={template: xs}, strict=False)[0]

    @cached_property
    def _batched_op(self) -> tuple[OpFromGraph, list]:
        template, lp, grad = self._batched_template
        # the model's shared variables (pm.Data) enter the Op as explicit inputs
        shared = [v for v in graph_inputs([lp, grad]) if isinstance(v, SharedVariable)]
        op = OpFromGraph(
            [template, *shared], [lp, grad], inline=False, name="batched_logp_and_grad"
        )
        return op, shared

    @cached_property
    def data_size(self) -> int:
        """Elements of the arrays (constants and shared variables, scalars left out) that the
        log density holds: its data, mostly."""
        return int(sum(
            np.size(v.data if isinstance(v, TensorConstant) else v.get_value(borrow=True))
            for v in ancestors([self._logp])
            if isinstance(v, TensorConstant | SharedVariable)
            and not isinstance(v.type, RandomGeneratorType)
            and getattr(v.type, "ndim", 0) > 0
        ))

    def batched_logp_and_grad_graph(self, xs: pt.TensorVariable):
        """The log density at the rows of a symbolic matrix ``xs`` (n, ndim) and its gradient
        with respect to ``xs``, shapes (n,) and (n, ndim).

        For a model with at most ``OP_MAX_DATA_SIZE`` data elements (:attr:`data_size`) they
        are one Op (an ``OpFromGraph`` that PyTensor does not inline), which holds the model's
        graph once however often a graph calls it: the ergodic chain calls it at every leapfrog
        step of a ``scan`` and differentiates through them, and with the model's graph copied
        into each call, rewriting the training step's graph dominates a small model's fit.
        Inlined, the model's operations fuse with the chain's, which pays where an evaluation
        is costly, so larger models get the copied graphs.
        """
        if self.data_size > OP_MAX_DATA_SIZE:
            template, lp, grad = self._batched_template
            return tuple(graph_replace([lp, grad], replace={template: xs}, strict=False))
        op, shared = self._batched_op
        return tuple(op(xs, *shared))

    def compile_batched(self, build, random_seed=None, mode=None):
        """Compile ``build`` over a batch of flat points, with seeded minibatches.

        ``build(x, values)`` returns a list of graphs at one symbolic flat point ``x`` (with
        ``values`` its named value tensors); the compiled function maps an array ``(n, ndim)``
        to those outputs with a leading axis ``n``, in one vectorised call. A ``pm.Minibatch``'s
        indices are drawn with NumPy, from a generator seeded by ``random_seed``, and passed in
        (uniform with replacement, as the minibatch draws them); any other shared random
        generator in the graphs is replaced by a fresh copy seeded by ``random_seed``.
        Compiling and running never touches the user's model, and the same seed draws the same
        minibatches (one minibatch per call, shared by the ``n`` points).
        ``pm.compile`` turns parameter checks (``sigma > 0``) into ``-inf`` instead of raising;
        ``mode`` is its PyTensor mode (``"JAX"`` runs on JAX's default device, a GPU where JAX
        has one; None: PyTensor's default).
        """
        x = pt.vector("x", dtype="float64")
        outputs = build(x, self.unravel(x))
        xs = pt.matrix("xs", dtype="float64")
        outputs = vectorize_graph(list(outputs), replace={x: xs})
        inputs, draws = [xs], []
        rngs = _random_generators(outputs)
        if rngs:
            seeds = np.random.SeedSequence(random_seed).spawn(len(rngs))
            generators = {r: np.random.default_rng(sq) for r, sq in zip(rngs, seeds, strict=True)}
            # A pm.Minibatch draws its indices inside the graph, from a NumPy Generator in a
            # shared variable; numba's dispatcher has no fast path for a Generator argument
            # and types every argument in Python on every call, which costs more than drawing
            # the indices here with NumPy and passing them in.
            replace, indices = {}, {}
            for node, size, upper in _minibatches(outputs):
                if size is None:
                    continue
                rng = node.inputs[-1]
                if rng not in indices:
                    indices[rng] = pt.vector(f"{rng.name or 'minibatch'}_index", dtype="int64")
                    inputs.append(indices[rng])
                    draws.append((generators[rng], upper, size))
                replace.update(_indexed(node, indices[rng]))
            if replace:
                outputs = graph_replace(outputs, replace=replace, strict=False)
            # Any other draw: from a copy of its generator, seeded like the rest.
            replace = {
                r: pytensor.shared(generators[r], name=r.name) for r in _random_generators(outputs)
            }
            if replace:
                outputs = graph_replace(outputs, replace=replace, strict=False)
        outputs = _data_as_shared(outputs)
        # random_seed=False: pm.compile must not reseed the copies with fresh entropy
        with phase("compile"):
            fn = pm.compile(inputs, outputs, random_seed=False, mode=mode)

        def call(points: np.ndarray) -> list[np.ndarray]:
            index = [
                rng.integers(0, _length(upper), size=size) for rng, upper, size in draws
            ]
            points = np.ascontiguousarray(points, dtype=float)
            return [np.asarray(o, dtype=float) for o in fn(points, *index)]

        call.seeded = bool(rngs)  # draws of its own: a function of random_seed
        return call

    def batched_logp_and_grad(self, random_seed=None, prior: bool = False, mode=None):
        """``xs (n, ndim) -> (logp (n,), grad (n, ndim))``.

        The one batched log density and gradient every driver uses (see
        :meth:`compile_batched` for minibatches, seeding and ``mode``); with ``prior``, the
        prior's (:meth:`prior_logp_graph`). Compiled once per target, ``prior`` and ``mode``
        where the graph draws nothing (no ``pm.Minibatch``, no other random generator), so
        that ``random_seed`` changes nothing; else once per call of this.
        """
        kept = self.__dict__.setdefault("_batched", {})
        if (prior, mode) in kept:
            return kept[prior, mode]

        def build(x, values):
            logp = self.prior_logp_graph(values) if prior else self.logp_graph(values)
            # a prior of flat variables alone does not depend on x
            return [logp, pytensor.grad(logp, x, disconnected_inputs="ignore")]

        fn = self.compile_batched(build, random_seed, mode)

        def logp_and_grad(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            logp, grad = fn(points)
            return logp, grad

        if not fn.seeded:
            kept[prior, mode] = logp_and_grad
        return logp_and_grad

    @cached_property
    def improper_variables(self) -> list[str]:
        """Free variables with an improper prior (``pm.Flat``, ``pm.HalfFlat``).

        A model with one has no marginal likelihood: its prior does not integrate to one, so
        any number reported as its evidence is meaningless.
        """
        from pymc.distributions.continuous import FlatRV, HalfFlatRV

        return [
            rv.name
            for rv in self.model.free_RVs
            if rv.owner is not None and isinstance(rv.owner.op, FlatRV | HalfFlatRV)
        ]

    @cached_property
    def minibatched_observed(self) -> list:
        """The observed variables scaled up to a ``total_size`` (``pm.Minibatch`` data or
        ``total_size=``): their log density is a noisy estimate of the full data's."""
        from pymc.variational.minibatch_rv import MinibatchRandomVariable

        return [
            rv
            for rv in self.model.observed_RVs
            if rv.owner is not None and isinstance(rv.owner.op, MinibatchRandomVariable)
        ]

    def require_exact(self, method: str) -> None:
        """Refuse a model whose log density is a minibatch estimate, for ``method`` (a name
        for the message), which needs the exact one.

        Raises
        ------
        ValueError
            Naming the minibatched observed variables and the methods that take them.
        """
        if _random_generators([self.model.logp()]):  # a pm.Minibatch: a random slice of the data at every evaluation
            names = ", ".join(rv.name for rv in self.minibatched_observed)
            raise ValueError(
                f"{method} needs the model's exact log density, but its observed data"
                f"{f' ({names})' if names else ''} use pm.Minibatch: each evaluation sees "
                "another minibatch, so the log "
                "density is a noisy estimate. Use pmt.sample_tact or "
                "pmt.sample_replica_exchange, which are built for minibatches, or give the "
                "observed variables their full data."
            )

    def dims(self, name: str) -> tuple[str, ...] | None:
        """The dims the model gave to a named variable, if any."""
        dims = self.model.named_vars_to_dims.get(name)
        return tuple(dims) if dims is not None else None

    # ------------------------------------------------------------------ numeric interface
    def flat_label(self, k: int) -> str:
        """The name of flat coordinate ``k``: its value variable's name, with the element's
        index when the variable has several (``"mu[1]"``, ``"w_logodds__"``)."""
        offsets = np.cumsum([0, *self.sizes])
        i = int(np.searchsorted(offsets, k, side="right") - 1)
        if self.sizes[i] == 1:
            return self.names[i]
        index = np.unravel_index(int(k - offsets[i]), self.shapes[i])
        return f"{self.names[i]}[{', '.join(str(int(j)) for j in index)}]"

    def ravel(self, point: Mapping[str, np.ndarray]) -> np.ndarray:
        """Flatten a dict of unconstrained values (keyed by value-variable name)."""
        return DictToArrayBijection.map(
            {name: np.asarray(point[name]) for name in self.names}
        ).data.astype(float)

    def unravel(self, x) -> dict:
        """Split flat points ``(..., ndim)``, or a symbolic flat vector, into the unconstrained
        values, ``(..., *shape)`` each, by value-variable name."""
        lead = ()  # a symbolic vector: one point
        if not isinstance(x, pt.TensorVariable):
            x = np.asarray(x)
            if x.shape[-1:] != (self.ndim,):
                raise ValueError(f"Expected flat points of length {self.ndim}, got {x.shape}.")
            lead = x.shape[:-1]
        bounds = np.cumsum([0, *self.sizes])
        return {name: x[..., a:b].reshape(lead + shape) for name, shape, a, b
                in zip(self.names, self.shapes, bounds[:-1], bounds[1:], strict=True)}

    @cached_property
    @phase("compile")
    def _compiled(self):
        """The point functions (log density; with its gradient; constrained values), compiled
        once per graph in a process: a new model object of a graph already compiled (with no
        shared data, whose values the functions would hold) takes the earlier ones, where
        PyTensor would rewrite the graphs again (most of a small model's compilation, its
        Numba code being on disk)."""
        keyed = graph_key(
            [self._logp, *self._constrained_outputs, *self.value_vars],
            (tuple(self.shapes), tuple(self.constrained_names), self.model.check_bounds,
             pytensor.config.numba__fastmath, str(pytensor.config.mode)),
        )
        key = keyed[0] if keyed is not None and not keyed[1] else None
        return _COMPILED.get(key, self._compile)

    def _compile(self):
        x = pt.vector("x", dtype="float64")
        logp = self.logp_graph(self.unravel(x))
        grad = pytensor.grad(logp, x)
        logp, grad = _data_as_shared([logp, grad])
        logp_fn = pytensor.function([x], logp)
        logp_grad_fn = pytensor.function([x], [logp, grad])
        constrained = self.constrained_graph(self.unravel(x))
        constrained_fn = pytensor.function([x], list(constrained.values()))
        for fn in (logp_fn, logp_grad_fn, constrained_fn):
            # the methods below pass contiguous float64 vectors of length ndim: PyTensor's
            # check of each input took half of a call (a run's strata make 10^5 calls)
            fn.trust_input = True
        return logp_fn, logp_grad_fn, constrained_fn

    def logp(self, x: np.ndarray) -> np.ndarray:
        """Log density at flat points; ``x`` has shape ``(..., ndim)``.

        One call per point of the compiled log density: a batched function
        (:meth:`compile_batched`) would be faster per point, but costs a compilation of its own
        for every model, more than the calls of a run (the strata of a model with a few modes).
        """
        x = np.asarray(x, dtype=float)
        fn = self._compiled[0]
        flat = np.ascontiguousarray(x.reshape(-1, self.ndim))
        out = np.array([fn(row) for row in flat], dtype=float)
        return out.reshape(x.shape[:-1])

    def _point(self, x) -> np.ndarray:
        """One flat point as the compiled functions take it (they do not check their input)."""
        x = np.ascontiguousarray(x, dtype=float)
        if x.shape != (self.ndim,):
            raise ValueError(f"Expected a flat vector of length {self.ndim}, got shape {x.shape}.")
        return x

    def logp_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Log density and its gradient at one flat point."""
        logp, grad = self._compiled[1](self._point(x))
        return float(logp), np.asarray(grad)

    def constrained(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Map one flat point to the model's named constrained variables and deterministics."""
        values = self._compiled[2](self._point(x))
        return dict(zip(self.constrained_names, values, strict=True))

    def flat_draws(self, posterior) -> np.ndarray:
        """Flat unconstrained draws ``(chain, draw, ndim)`` from a posterior-like dataset.

        Each value variable is looked up by its own name (``s_log__`` for a transformed ``s``).
        """
        parts = []
        for name in self.names:
            da = posterior[name].transpose("chain", "draw", ...)
            arr = np.asarray(da.values, dtype=float)
            parts.append(arr.reshape(arr.shape[0], arr.shape[1], -1))
        return np.concatenate(parts, axis=-1)


_TARGETS = PerModel()


def target_of(model: pm.Model | None = None) -> Target:
    """The :class:`Target` of ``model`` (from the context when omitted), built once per model.

    Its compiled functions (the log density and gradient of the mode search and the weights)
    then serve every later call on the same model: a second ``sample_ct`` of a model with
    another seed compiles none of them again.
    """
    model = modelcontext(model)
    return _TARGETS.get(model, "target", lambda: Target(model))


def per_datum_terms(target: Target, observed, values=None) -> list:
    """The per-datum log densities of the minibatched ``observed`` variables (PyMC scales them
    by ``total_size / m``), at symbolic named ``values`` (the model's value variables when
    None)."""
    terms = target.model.logp(vars=observed, sum=False, jacobian=True)
    return terms if values is None else target.replace_values(terms, values)


#: Positions per call of :func:`full_data_energies`' function times the data size: at most
#: this many per-datum terms are evaluated at once.
FULL_DATA_TERMS_PER_CALL = 2**24


def full_data_energies(
    target: Target, gradient: bool = False, max_length: int | None = None
) -> tuple[Callable, int, int] | None:
    """The exact energy of a minibatched model, from one pass over its data, compiled once.

    The model's minibatch estimate of ``U = -log p`` is unbiased for the energy in which every
    datum of the ``pm.Minibatch`` data set (length ``L``) counts ``total_size / L`` times; this
    computes that energy: the data set is cut into ``ceil(L / m)`` batches of the minibatch's
    size ``m`` (the last padded with zero weights), the minibatched observed variables' per-datum
    log densities (PyMC scales them by ``total_size / m``) are evaluated on all of them in one
    vectorised call and summed times ``m / L``, and the rest of the density (the prior, observed
    variables without ``pm.Minibatch``) is added once. With ``total_size = L`` it is the
    full-data energy itself.

    Parameters
    ----------
    target : Target
    gradient : bool
        Also the gradient of ``U``.
    max_length : int, optional
        None, without compiling anything, when ``L`` is larger.

    Returns
    -------
    (energy, L, m) or None
        ``energy`` maps positions ``(n, D)`` to ``U (n,)`` (with ``gradient``, to ``U`` and
        its gradient ``(n, D)``). None when the model's minibatched observed variables do not
        all come from one ``pm.Minibatch`` call whose batches run along the variables' first
        axis (the energies are then only averaged over minibatches).
    """
    observed = target.minibatched_observed
    if not observed:
        return None
    terms = per_datum_terms(target, observed)
    found = _minibatches(terms)
    rngs = {node.inputs[-1] for node, _, _ in found}
    m = found[0][1] if found else None
    if len(rngs) != 1 or m is None or any(t.type.shape[:1] != (m,) for t in terms):
        return None
    length = _length(found[0][2])
    if max_length is not None and length > max_length:
        return None
    n_batches = -(-length // m)
    flat = np.arange(n_batches * m)
    batches = pytensor.shared((flat % length).reshape(n_batches, m), name="full_data_batches")
    weights = pytensor.shared((flat < length).astype(float).reshape(n_batches, m),
                              name="full_data_weights")

    def build(x, values):
        logp = target.logp_graph(values)
        parts = per_datum_terms(target, observed, values)
        index, weight = pt.lvector("index"), pt.vector("weight", dtype="float64")
        batch = {}
        for node, _, _ in _minibatches([logp, *parts]):
            batch.update(_indexed(node, index))
        logp, *parts = graph_replace([logp, *parts], replace=batch, strict=False)
        rest = logp - sum(pt.sum(t) for t in parts)
        likelihood = sum(
            pt.sum(weight.reshape((m,) + (1,) * (t.ndim - 1)) * t) for t in parts
        )
        rest, likelihood = vectorize_graph(
            [rest, likelihood], replace={index: batches, weight: weights}
        )
        energy = -(rest[0] + likelihood.sum() * (m / length))
        return [energy, pytensor.grad(energy, x)] if gradient else [energy]

    fn = target.compile_batched(build)
    rows = max(1, FULL_DATA_TERMS_PER_CALL // (n_batches * m))

    def energy(theta: np.ndarray):
        theta = np.asarray(theta, dtype=float)
        parts = [fn(theta[i : i + rows]) for i in range(0, theta.shape[0], rows)]
        out = [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
        return tuple(out) if gradient else out[0]

    return energy, length, int(m)


def negative_log_density(target: Target) -> Callable:
    """``x -> (-log p(x), -gradient)`` for SciPy's minimisers, ``(1e300, 0)`` where the log
    density is not finite."""

    def negative(x):
        logp, grad = target.logp_and_grad(x)
        if not np.isfinite(logp):
            return 1e300, np.zeros_like(x)
        return -logp, -grad

    return negative


#: Widths of the weighted draws out along a coordinate at which :func:`flat_directions` looks.
DECAY_RADIUS = 1e4
#: L-BFGS iterations of each profile in :func:`flat_directions`.
PROFILE_ITER = 50


def flat_directions(target: Target, draws: np.ndarray, log_weight: np.ndarray) -> int:
    """Along how many coordinates, each taken both ways, the log density does not fall:
    ``DECAY_RADIUS`` of the weighted draws' widths from their weighted mean in that coordinate,
    the highest log density over the other coordinates (a profile, climbed by L-BFGS from the
    mean's values) is less than ``log(DECAY_RADIUS)`` below the log density at the mean.

    A density that falls more slowly than the inverse of the distance along some direction has
    an infinite integral (a ``pm.Flat`` variable that no potential bounds: the draws drift
    outward and any normalizing constant is arbitrary); one that integrates falls by far more
    (a Gaussian by half the radius squared, a Cauchy tail by twice its log). A flat direction
    along no coordinate, such as that of a potential of ``x[0] - x[1]``, meets the hyperplane
    of some coordinate far out, where the profile finds it. A profile that can only stay high
    on ever thinner ridges (a funnel) also counts, though its integral may be finite; a log
    density that is not finite out there counts as fallen.

    Parameters
    ----------
    target : Target
    draws : ndarray, shape (n, ndim)
        Flat unconstrained draws.
    log_weight : ndarray, shape (n,)
        Their log importance weights towards the target.
    """
    if not np.any(np.isfinite(log_weight)):
        return 0
    w = np.exp(log_weight - np.max(log_weight))
    w = w / w.sum()
    mean = w @ draws
    width = np.sqrt(w @ (draws - mean) ** 2)
    with np.errstate(all="ignore"):
        centre = float(target.logp(mean[None])[0])
    if not np.isfinite(centre):
        return 0
    negative, flat = negative_log_density(target), 0
    for k in np.flatnonzero(np.isfinite(width) & (width > 0)):
        for sign in (1.0, -1.0):
            start = mean.copy()
            start[k] += sign * DECAY_RADIUS * width[k]
            bounds = [(None, None)] * target.ndim
            bounds[k] = (start[k], start[k])
            with np.errstate(all="ignore"):
                res = optimize.minimize(
                    negative, start, jac=True, method="L-BFGS-B", bounds=bounds,
                    options={"maxiter": PROFILE_ITER},
                )
            flat += bool(-res.fun > centre - np.log(DECAY_RADIUS))
    return flat
