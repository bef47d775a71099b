"""The normalised base densities on the flat unconstrained space.

A base is the normalised density that the tempering methods bridge to (psi in the continuous
tempering paper). :class:`Base` is a Gaussian, :class:`PriorDensity` the model's own prior
(with the Jacobians of its transforms), :class:`MixtureBase` an exact mixture of Gaussians and,
optionally, the prior (eq. 25). Each carries an approximation ``log_zeta`` of the target's log
normaliser, and knows its log density (as NumPy and as a PyTensor graph) and how to draw from
it. How they are fitted is :mod:`pymc_tempering.bases.fit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pytensor.tensor as pt
from scipy import linalg
from scipy.special import logsumexp

from pymc_tempering.bases.modes import LOG_2PI, Modes, prior_draws
from pymc_tempering.target import Target

__all__ = [
    "DEFENSIVE_WEIGHT",
    "ELEMENTWISE_MAX_DIM",
    "Base",
    "MixtureBase",
    "PriorDensity",
    "check_base",
    "gaussian_logp_graph",
]

# Up to this dimension a full-rank base's quadratic form is written elementwise in the tempered
# graph rather than as a matrix-vector product: the same arithmetic, but nutpie's numba
# compilation of the product and its gradient took over five times as long (radon pooled, 3
# parameters), and the samplers then call no BLAS, whose results can depend on its thread
# count. Above it the d x d temporary would cost more than the product.
ELEMENTWISE_MAX_DIM = 256
# Share of a multimodal base spread evenly over its modes, and kept by a bootstrap refit
# (see MixtureBase.gaussian).
DEFENSIVE_WEIGHT = 0.5


@dataclass(frozen=True, eq=False)
class Base:
    """A normalised Gaussian density ``N(mean, cov)`` on the flat unconstrained space.

    Build one with :func:`~pymc_tempering.fit_base` or directly with :meth:`Base.from_moments`.

    Attributes
    ----------
    mean : ndarray, shape (ndim,)
    cov : ndarray, shape (ndim, ndim)
        Covariance; diagonal for a mean-field fit.
    log_zeta : float or None
        Approximation of the target's log normalising constant (the converged ELBO for an ADVI
        fit). ``None`` when unknown; :func:`sample_ct <pymc_tempering.sample_ct>` then estimates it
        by importance sampling from the base.
    method : str
        How the base was made.
    diagonal : bool
        Whether the covariance is diagonal (the log density then costs O(ndim)).
    defensive_weight : float
        Share of this base that a bootstrap refit keeps
        (:func:`~pymc_tempering.base_from_result`): 0 for a unimodal fit, positive for one
        moment-matched to several modes.
    modes : Modes or None
        The optima of the mode search the base was fitted from
        (:func:`~pymc_tempering.find_modes`), kept so that :func:`~pymc_tempering.diagnose`
        can see a mode a run never visited.
    spikes : tuple of (int, float, float)
        The flat coordinates along which runs of that search ran off without converging (the
        scale of a centred group going to 0: a spike of the log density), each with the value
        and the log density of the highest run that ended on that side of the prior (at most
        one each way); :func:`~pymc_tempering.extended.funnel.funnel_mass` looks along them for
        mass a run never reached.
    scale_tril : ndarray, shape (ndim, ndim)
        Lower Cholesky factor ``L`` of ``cov``: ``x = mean + L z`` maps whitened coordinates
        ``z ~ N(0, I)`` to the base (:meth:`unwhiten`).
    """

    mean: np.ndarray
    cov: np.ndarray
    log_zeta: float | None = None
    method: str = "moments"
    diagonal: bool = False
    defensive_weight: float = 0.0
    modes: Modes | None = field(default=None, repr=False)
    spikes: tuple = field(default=(), repr=False)
    scale_tril: np.ndarray = field(init=False, repr=False)
    _precision_tril: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        mean = np.array(self.mean, dtype=float).reshape(-1)
        cov = np.array(self.cov, dtype=float)
        if cov.ndim == 1:
            cov = np.diag(cov)
        if cov.shape != (mean.size, mean.size):
            raise ValueError(
                f"Covariance of shape {cov.shape} does not match a mean of length {mean.size}."
            )
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
            raise ValueError("The base mean and covariance must be finite.")
        diagonal = bool(self.diagonal or np.count_nonzero(cov - np.diag(np.diag(cov))) == 0)
        if diagonal:
            sd = np.sqrt(np.diag(cov))
            if np.any(~(sd > 0)):
                raise ValueError("The base covariance must be positive definite.")
            scale_tril = np.diag(sd)
        else:
            cov = 0.5 * (cov + cov.T)
            try:
                scale_tril = linalg.cholesky(cov, lower=True)
            except linalg.LinAlgError as err:
                raise ValueError("The base covariance must be positive definite.") from err
        precision_tril = linalg.solve_triangular(scale_tril, np.eye(mean.size), lower=True)
        if not 0 <= self.defensive_weight < 1:
            raise ValueError(f"defensive_weight must be in [0, 1), got {self.defensive_weight}.")
        if self.log_zeta is not None and not np.isfinite(self.log_zeta):
            raise ValueError(f"log_zeta must be finite, got {self.log_zeta}.")
        for name, value in [
            ("mean", mean),
            ("cov", cov),
            ("diagonal", diagonal),
            ("scale_tril", scale_tril),
            ("_precision_tril", precision_tril),
            ("log_zeta", None if self.log_zeta is None else float(self.log_zeta)),
        ]:
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            object.__setattr__(self, name, value)

    @classmethod
    def from_moments(cls, mean, cov, log_zeta: float | None = None) -> Base:
        """A Gaussian base with the given mean and covariance.

        Parameters
        ----------
        mean : array_like, shape (ndim,)
        cov : array_like, shape (ndim, ndim) or (ndim,)
            Full covariance, or the vector of variances of a diagonal one.
        log_zeta : float, optional
            Approximation of the target's log normaliser.
        """
        return cls(mean=mean, cov=cov, log_zeta=log_zeta, method="moments")

    @property
    def ndim(self) -> int:
        """Dimension of the flat space."""
        return int(self.mean.size)

    @property
    def std(self) -> np.ndarray:
        """Marginal standard deviations."""
        return np.sqrt(np.diag(self.cov))

    def logp(self, x) -> np.ndarray:
        """Normalised log density at points ``x`` of shape ``(..., ndim)``."""
        x = np.asarray(x, dtype=float)
        z = (x - self.mean) @ self._precision_tril.T
        return (
            -0.5 * np.sum(z**2, axis=-1)
            - np.sum(np.log(np.diag(self.scale_tril)))
            - 0.5 * self.ndim * LOG_2PI
        )

    def logp_graph(self, x) -> pt.TensorVariable:
        """Normalised log density, for use inside a PyTensor graph.

        Parameters
        ----------
        x : TensorVariable or sequence of TensorVariable
            The symbolic flat vector, or the pieces it is made of, in flat order and of any
            shapes (a model's value variables). With pieces, a diagonal base is evaluated
            piece by piece, without concatenating them (which would cost a copy in the log
            density and a split in its gradient).
        """
        dense = not self.diagonal
        return gaussian_logp_graph(
            x, *(pt.constant(v) for v in self.parameters(dense).values()), dense=dense
        )

    def parameters(self, dense: bool) -> dict[str, np.ndarray]:
        """The values :func:`gaussian_logp_graph` takes for this base, by its argument names.

        Parameters
        ----------
        dense : bool
            ``True``: the lower-triangular precision factor ``P = L^-1`` as ``scale`` (any base);
            ``False``: the inverse standard deviations (a diagonal base only).
        """
        if dense:
            scale = np.array(self._precision_tril)
        elif self.diagonal:
            scale = 1.0 / self.std
        else:
            raise ValueError("Only a diagonal base has a diagonal parametrisation.")
        log_norm = -np.sum(np.log(np.diag(self.scale_tril))) - 0.5 * self.ndim * LOG_2PI
        return {"mean": np.array(self.mean), "scale": scale, "log_norm": np.array(log_norm)}

    def unwhiten(self, z) -> np.ndarray:
        """Map whitened coordinates ``z`` (``..., ndim``) to the flat space: ``mean + L z``."""
        return self.mean + np.asarray(z, dtype=float) @ self.scale_tril.T

    def sample(self, n: int, random_seed=None) -> np.ndarray:
        """``n`` independent draws, shape ``(n, ndim)``."""
        rng = np.random.default_rng(random_seed)
        return self.unwhiten(rng.standard_normal((int(n), self.ndim)))



def gaussian_logp_graph(x, mean, scale, log_norm, *, dense: bool) -> pt.TensorVariable:
    """The log density of a Gaussian on the flat space in a PyTensor graph, its parameters
    symbolic (constants of one base, or shared variables that a compiled function swaps).

    Parameters
    ----------
    x : TensorVariable or sequence of TensorVariable
        The flat vector, or its pieces in flat order, each with a static shape.
    mean : TensorVariable, shape (ndim,)
    scale : TensorVariable
        ``dense``: the lower-triangular precision factor ``P`` (``ndim, ndim``), ``z = P (x -
        mean)``; else the inverse standard deviations (``ndim``), ``z = (x - mean) scale``.
    log_norm : TensorVariable, scalar
        The normalising term, ``-log det L - ndim log(2 pi) / 2``.
    dense : bool
    """
    if isinstance(x, pt.TensorVariable):  # the flat vector itself, of the mean's length
        pieces = [x]
        shapes = [tuple(mean.type.shape)]
    else:
        pieces = [pt.as_tensor(p) for p in x]
        shapes = [tuple(p.type.shape) for p in pieces]
    if any(d is None for shape in shapes for d in shape):
        raise ValueError("The pieces of the flat vector need static shapes.")
    sizes = [int(np.prod(shape)) for shape in shapes]
    ndim = sum(sizes)
    if tuple(mean.type.shape) != (ndim,):
        raise ValueError(f"The pieces have {ndim} elements; the base has {mean.type.shape[0]}.")
    quad, start = 0.0, 0
    if dense:
        # z = P (x - mean), piece by piece: column block k of P times piece k.
        z = 0.0
        for piece, size in zip(pieces, sizes, strict=True):
            block = scale[:, start : start + size]
            centred = piece.ravel() - mean[start : start + size]
            if ndim <= ELEMENTWISE_MAX_DIM:
                z = z + pt.sum(block * centred[None, :], axis=1)
            else:
                z = z + pt.dot(block, centred)
            start += size
        quad = pt.sum(z**2)
    else:
        for piece, shape, size in zip(pieces, shapes, sizes, strict=True):
            centred = piece - mean[start : start + size].reshape(shape)
            quad = quad + pt.sum((centred * scale[start : start + size].reshape(shape)) ** 2)
            start += size
    return -0.5 * quad + log_norm


class PriorDensity:
    """The model's own prior on the flat unconstrained space, as a component of a base.

    Its log density is PyMC's prior log density of the free variables with the Jacobians of
    their transforms (observed variables and potentials left out), which is normalised when
    every prior is proper; its draws are forward draws of the prior. Its mean and covariance
    are estimated from ``n_moments`` draws, when first asked for.

    Parameters
    ----------
    target : Target
        The model's flat space.
    n_moments : int
        Prior draws for the moments.
    random_seed : int, optional

    Raises
    ------
    ValueError
        When the model has an improper prior or one that cannot be drawn from.
    """

    def __init__(self, target: Target, n_moments: int = 10_000, random_seed=None):
        if target.improper_variables:
            raise ValueError(
                f"The prior of {target.improper_variables} is improper, so it cannot be a "
                "component of a normalised base."
            )
        self.target = target
        self._n_moments, self._random_seed = n_moments, random_seed

    @cached_property
    def _moments(self) -> tuple[np.ndarray, np.ndarray]:
        _, draws = prior_draws(self.target, self._n_moments, self._random_seed)
        return draws.mean(axis=0), np.atleast_2d(np.cov(draws, rowvar=False))

    @property
    def mean(self) -> np.ndarray:
        return self._moments[0]

    @property
    def cov(self) -> np.ndarray:
        return self._moments[1]

    @property
    def ndim(self) -> int:
        return self.target.ndim

    @cached_property
    def _batched(self):
        return self.target.compile_batched(lambda x, values: [self.target.prior_logp_graph(values)])

    def logp(self, x) -> np.ndarray:
        """Log prior density at flat points ``x`` of shape ``(..., ndim)``."""
        x = np.asarray(x, dtype=float)
        flat = x.reshape(-1, self.ndim)
        with np.errstate(invalid="ignore", over="ignore"):
            out = self._batched(flat)[0] if len(flat) else np.zeros(0)
        out = np.where(np.isfinite(out), out, -np.inf)
        return out.reshape(x.shape[:-1])

    def sample(self, n: int, random_seed=None) -> np.ndarray:
        """``n`` forward draws of the prior on the flat space, shape ``(n, ndim)``."""
        return prior_draws(self.target, n, random_seed)[1].reshape(int(n), self.ndim)



@dataclass(frozen=True, eq=False)
class MixtureBase:
    """A normalised mixture base: Gaussian components and, optionally, the model's prior.

    ``q(x) = sum_k w_k N(x; m_k, S_k) + w_prior prior(x)``, evaluated exactly (log-sum-exp)
    and drawn from exactly. The Gaussians cover the modes that the fits found; the prior
    component (a defensive mixture, Hesterberg 1995) gives every region the prior reaches a
    density bounded below by ``w_prior`` times the prior's. Built by
    ``fit_base(method="mixture")``. It serves as the proposal of
    :func:`~pymc_tempering.sample_pe` and of :func:`~pymc_tempering.estimate_log_zeta` as it
    is; the methods that temper from a base run on its moment-matched Gaussian, :meth:`gaussian`.

    Attributes
    ----------
    components : tuple of Base
    weights : ndarray
        Weights of the Gaussian components; with ``prior_weight`` they sum to 1.
    prior : PriorDensity or None
    prior_weight : float
    log_zeta : float or None
    method : str
    modes : Modes or None
        The optima of the mode search the base was fitted from, if any.
    spikes : tuple of (int, float, float)
        That search's spikes, as :attr:`Base.spikes`.
    """

    components: tuple
    weights: np.ndarray
    prior: PriorDensity | None = None
    prior_weight: float = 0.0
    log_zeta: float | None = None
    method: str = "mixture"
    modes: Modes | None = field(default=None, repr=False)
    spikes: tuple = field(default=(), repr=False)

    def __post_init__(self):
        weights = np.array(self.weights, dtype=float).reshape(-1)
        if len(self.components) != weights.size or not self.components:
            raise ValueError("A mixture base needs one weight per Gaussian component.")
        if (self.prior is None) != (self.prior_weight == 0):
            raise ValueError("prior_weight must be positive exactly when there is a prior.")
        if np.any(weights <= 0) or not 0 <= self.prior_weight < 1:
            raise ValueError("The weights must be positive and prior_weight in [0, 1).")
        weights = weights / weights.sum() * (1.0 - self.prior_weight)
        weights.setflags(write=False)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "components", tuple(self.components))

    @property
    def ndim(self) -> int:
        return self.components[0].ndim

    def _log_weights(self) -> np.ndarray:
        return np.log([w for w, _ in self._parts()])

    def _parts(self, weights=None):
        weights = self.weights if weights is None else weights
        parts = list(zip(weights, self.components, strict=True))
        return parts if self.prior is None else [*parts, (self.prior_weight, self.prior)]

    @staticmethod
    def _moments(parts):
        mean = sum(w * p.mean for w, p in parts)
        cov = sum(w * (p.cov + np.outer(p.mean - mean, p.mean - mean)) for w, p in parts)
        return mean, cov

    @property
    def mean(self) -> np.ndarray:
        return self._moments(self._parts())[0]

    @property
    def cov(self) -> np.ndarray:
        return self._moments(self._parts())[1]

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))

    def gaussian(self) -> Base:
        """The moment-matched Gaussian that continuous tempering and AIS run with.

        With one part it is that part. With several (distinct modes, or the prior) it is
        defensive: it is moment-matched to the mixture whose Gaussian weights are blended half
        and half with equal weights (the ELBOs of eq. 25 can differ by tens of nats between
        fits of modes of equal mass: on the 20-D Gaussian shells, fits on both shells got
        weights 0.997 and 0.001), so every mode found keeps a share of it; and it carries
        ``defensive_weight = DEFENSIVE_WEIGHT``, the share of itself that the bootstrap keeps
        when it refits the base (:func:`~pymc_tempering.base_from_result`), so that a round
        whose weights sit on some of the modes does not shrink the base onto them.
        """
        parts = self._parts()
        if len(parts) == 1:
            return replace(
                self.components[0],
                log_zeta=self.log_zeta,
                method=self.method,
                modes=self.modes,
                spikes=self.spikes,
            )
        k = len(self.components)
        total = 1.0 - self.prior_weight
        blended = (1 - DEFENSIVE_WEIGHT) * self.weights + DEFENSIVE_WEIGHT * total / k
        mean, cov = self._moments(self._parts(blended))
        return Base(
            mean=mean,
            cov=cov,
            log_zeta=self.log_zeta,
            method=self.method,
            defensive_weight=DEFENSIVE_WEIGHT,
            modes=self.modes,
            spikes=self.spikes,
        )

    def logp(self, x) -> np.ndarray:
        """Normalised log density at points ``x`` of shape ``(..., ndim)``."""
        parts = [c.logp(x) for c in self.components]
        if self.prior is not None:
            parts.append(self.prior.logp(x))
        return logsumexp(np.stack(parts, axis=-1) + self._log_weights(), axis=-1)

    def logp_graph(self, x) -> pt.TensorVariable:
        """Normalised log density in a PyTensor graph (``x`` as in :meth:`Base.logp_graph`)."""
        parts = [c.logp_graph(x) for c in self.components]
        if self.prior is not None:
            target = self.prior.target
            values = (
                target.unravel(x)
                if isinstance(x, pt.TensorVariable)
                else dict(zip(target.names, x, strict=True))
            )
            parts.append(target.prior_logp_graph(values))
        return pt.logsumexp(pt.stack(parts) + self._log_weights())

    def sample(self, n: int, random_seed=None) -> np.ndarray:
        """``n`` independent draws, shape ``(n, ndim)``, in random order."""
        rng = np.random.default_rng(random_seed)
        counts = rng.multinomial(int(n), np.exp(self._log_weights()))
        parts = [c.sample(k, rng) for c, k in zip(self.components, counts, strict=False)]
        if self.prior is not None and counts[-1]:
            parts.append(self.prior.sample(counts[-1], int(rng.integers(2**31))))
        return rng.permutation(np.concatenate(parts))



def check_base(target: Target, base: Base | MixtureBase) -> None:
    """Raise a clear error unless ``base`` is a Base or MixtureBase on ``target``'s flat space."""
    if not isinstance(base, Base | MixtureBase):
        raise TypeError(
            f"base must be a pymc_tempering.Base or MixtureBase, got {type(base).__name__}."
        )
    if base.ndim != target.ndim:
        raise ValueError(
            f"The base has dimension {base.ndim} but the model's unconstrained space has "
            f"dimension {target.ndim} ({', '.join(target.names)})."
        )
