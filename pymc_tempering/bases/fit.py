"""Gaussian base densities on the flat unconstrained space, and how they are fitted.

A base is the normalised density that the tempering methods bridge to (psi in the continuous
tempering paper). It carries an approximation ``log_zeta`` of the target's log normaliser.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.pytensorf import resolve_backend_compile_kwargs
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.random.op import RandomVariable
from scipy import linalg, optimize
from scipy.special import logsumexp

from pymc_tempering.diagnostics import UNSEEN_OPTIMA_LIMIT
from pymc_tempering.estimators import beyond_edge, unseen_share, weighted_mean
from pymc_tempering.contract import reproducible, split_seed, warn
from pymc_tempering.target import Target

__all__ = [
    "Base",
    "MixtureBase",
    "Modes",
    "PriorDensity",
    "fit_base",
    "find_modes",
    "base_from_result",
    "estimate_log_zeta",
]

_LOG_2PI = float(np.log(2.0 * np.pi))
# Up to this dimension a full-rank base's quadratic form is written elementwise in the tempered
# graph rather than as a matrix-vector product: the same arithmetic, but nutpie's numba
# compilation of the product and its gradient took 5-10 s more (radon pooled, 3 parameters:
# 12.9 s against 2.3 s), and the samplers then call no BLAS, whose results can depend on its
# thread count. Above it the d x d temporary would cost more than the product.
ELEMENTWISE_MAX_DIM = 256
ADVI_ITERATIONS = 10_000  # most iterations of an ADVI fit (fit_base's n)
N_FITS = 4  # most ADVI runs of a mixture base (fit_base's n_fits)
# Share of a multimodal base spread evenly over its modes, and kept by a bootstrap refit
# (see MixtureBase.gaussian).
DEFENSIVE_WEIGHT = 0.5


@dataclass(frozen=True, eq=False)
class Base:
    """A normalised Gaussian density ``N(mean, cov)`` on the flat unconstrained space.

    Build one with :func:`fit_base` or directly with :meth:`Base.from_moments`.

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
        Share of this base that a bootstrap refit keeps (:func:`base_from_result`): 0 for a
        unimodal fit, positive for one moment-matched to several modes.
    modes : Modes or None
        The optima of the mode search the base was fitted from (:func:`find_modes`), kept so
        that :func:`~pymc_tempering.diagnose` can see a mode a run never visited.
    spikes : tuple of (int, float, float)
        The flat coordinates along which runs of that search ran off without converging (the
        scale of a centred group going to 0: a spike of the log density), each with the value
        and the log density of the highest run that ended on that side of the prior (at most
        one each way); :func:`funnel_mass` looks along them for mass a run never reached.
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
            - 0.5 * self.ndim * _LOG_2PI
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
        if isinstance(x, pt.TensorVariable):  # the flat vector itself
            pieces, shapes, sizes = [x], [(self.ndim,)], [self.ndim]
        else:
            pieces = [pt.as_tensor(p) for p in x]
            shapes = [tuple(p.type.shape) for p in pieces]
            if any(d is None for shape in shapes for d in shape):
                raise ValueError("The pieces of the flat vector need static shapes.")
            sizes = [int(np.prod(shape)) for shape in shapes]
            if sum(sizes) != self.ndim:
                raise ValueError(
                    f"The pieces have {sum(sizes)} elements; the base has {self.ndim}."
                )
        const = -np.sum(np.log(np.diag(self.scale_tril))) - 0.5 * self.ndim * _LOG_2PI
        if not self.diagonal:
            # z = P (x - mean), piece by piece: column block k of P times piece k.
            z, start = 0.0, 0
            for piece, size in zip(pieces, sizes, strict=True):
                block = self._precision_tril[:, start : start + size]
                centred = piece.ravel() - self.mean[start : start + size]
                if self.ndim <= ELEMENTWISE_MAX_DIM:
                    z = z + pt.sum(pt.constant(block) * centred[None, :], axis=1)
                else:
                    z = z + pt.dot(pt.constant(block), centred)
                start += size
            return -0.5 * pt.sum(z**2) + const
        quad, start, std = 0.0, 0, self.std
        for piece, shape, size in zip(pieces, shapes, sizes, strict=True):
            mean = self.mean[start : start + size].reshape(shape)
            sd = std[start : start + size].reshape(shape)
            quad = quad + pt.sum(((piece - mean) / sd) ** 2)
            start += size
        return -0.5 * quad + const

    def unwhiten(self, z) -> np.ndarray:
        """Map whitened coordinates ``z`` (``..., ndim``) to the flat space: ``mean + L z``."""
        return self.mean + np.asarray(z, dtype=float) @ self.scale_tril.T

    def sample(self, n: int, random_seed=None) -> np.ndarray:
        """``n`` independent draws, shape ``(n, ndim)``."""
        rng = np.random.default_rng(random_seed)
        return self.unwhiten(rng.standard_normal((int(n), self.ndim)))


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
        _, draws = _prior_draws(self.target, self._n_moments, self._random_seed)
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
        return _prior_draws(self.target, n, random_seed)[1].reshape(int(n), self.ndim)


@dataclass(frozen=True, eq=False)
class MixtureBase:
    """A normalised mixture base: Gaussian components and, optionally, the model's prior.

    ``q(x) = sum_k w_k N(x; m_k, S_k) + w_prior prior(x)``, evaluated exactly (log-sum-exp)
    and drawn from exactly. The Gaussians cover the modes that the fits found; the prior
    component (a defensive mixture, Hesterberg 1995) gives every region the prior reaches a
    density bounded below by ``w_prior`` times the prior's. Built by
    ``fit_base(method="mixture")``. It serves as the proposal of
    :func:`~pymc_tempering.sample_pe` and of :func:`estimate_log_zeta` as it is; the methods that
    temper from a base run on its moment-matched Gaussian, :meth:`gaussian`.

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
        when it refits the base (:func:`base_from_result`), so that a round whose weights sit
        on some of the modes does not shrink the base onto them.
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
                target.unravel_graph(x)
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


@reproducible
def fit_base(
    model: pm.Model | None = None,
    method: str = "advi",
    n: int = ADVI_ITERATIONS,
    random_seed=None,
    progressbar: bool = True,
    *,
    n_fits: int = N_FITS,
    prior_weight: float = 0.0,
    **fit_kwargs,
) -> Base | MixtureBase:
    """Fit a Gaussian base density to a PyMC model.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the context when omitted. It is not modified.
    method : {"advi", "fullrank_advi", "mixture", "laplace", "prior"}
        - ``"advi"`` (mean-field) and ``"fullrank_advi"`` run PyMC's ADVI (see
          ``**fit_kwargs``) with Adam
          (step 0.01) until the mean loss of 500 iterations gains less than 0.1 nats on the
          500 before, twice in a row; then with a step of 0.001 until that happens again, or
          ``n`` iterations in all; ``log_zeta`` is the ELBO averaged over the last 10%
          of the iterations. (PyMC's default optimiser, adagrad with a step of 0.001, left the
          92-parameter radon model's fits 100 to 2000 nats below log Z after 10,000 iterations;
          Adam came within 3 nats in 2000 to 8500.) Pass ``obj_optimizer`` to use another
          optimiser (then without the schedule and the stop), or ``callbacks``.
        - ``"mixture"`` (section 6 of the CT paper): a mode search first
          (:func:`find_modes`: L-BFGS from 32 prior draws, the distinct converged maxima with
          their Laplace masses; repeated from 128 when more than half of the converged runs
          reached an optimum that no other run reached, a Good-Turing chance of a new optimum
          above 0.5, as on a Boltzmann relaxation); then mean-field ADVI runs from the
          ``n_fits`` most dispersed optima (one run when it found one), the other optima joining
          as their Laplace Gaussians; each run starts at the widths of its optimum's Laplace
          Gaussian. Where no run of the search converged (a centred hierarchical model's spike,
          a flat direction), half the ``n_fits`` ADVI runs start where the search's runs ended,
          those with the largest diagonal Laplace mass first, at the widths of the diagonal
          curvature there, and the others from dispersed prior draws; where the prior cannot be
          drawn from, from points spread around a first fit at three of its standard deviations.
          Fits more than 30 nats of ELBO below the best are failed optimisations and dropped;
          fits of one mode are dropped as duplicates (means within one standard deviation in
          every coordinate, or no dip of the log density deeper than 5 nats on the segment
          between them). The components are kept as the true mixture of eq. (25), weighted by
          their ELBOs and Laplace masses (a :class:`MixtureBase`: exact log density and draws,
          carrying the optima as ``modes``); ``log_zeta`` is eq. (25)'s ``log sum exp(ELBO_i)``.
          :meth:`MixtureBase.gaussian` is the defensive Gaussian that continuous tempering runs
          with.
        - ``"laplace"`` (the default base of continuous tempering, AIS and simulated
          tempering): the mode search of ``"mixture"``, and the mixture of the optima's
          Laplace Gaussians weighted by their Laplace masses, without ADVI. Its ``log_zeta``
          is an importance-sampling estimate with the mixture as proposal (1000 draws); when
          that disagrees with the total Laplace mass by more than a nat (a Gaussian at a point
          of a Gaussian shell, a funnel), the search finds nothing, or ``prior_weight`` is
          set, it is ``"mixture"``.
          Measured on the evidence suite, it saves the 2-10 s of the ADVI runs on the six of
          ten problems where it holds, with the same accuracy.
        - ``"prior"`` moment-matches a Gaussian to ``n`` draws of the prior on the unconstrained
          space (wide, so it covers modes that a variational fit misses; potentials are not part
          of the prior and are ignored); its ``log_zeta`` is left unset.
    n : int
        Most iterations of the optimiser (per fit), or prior draws for ``"prior"``.
    random_seed : int, optional
    progressbar : bool
    n_fits : int
        Most ADVI runs for ``"mixture"``.
    prior_weight : float
        Weight of the model's prior as a component of ``"mixture"`` (a defensive mixture,
        Hesterberg 1995), in [0, 1); it needs a proper prior that can be drawn from. Off by
        default: measured on the two 20-D Gaussian shells, a weight of 0.1 left the base so
        much wider than the target that the chains never reached inverse temperature 0 (11
        nats off, flagged), where the fits alone were right.
    **fit_kwargs
        :func:`pymc.fit` keywords (for example ``obj_optimizer``). The ADVI runs of a base
        share one step function per method, PyMC's objective and Adam compiled with the
        Monte Carlo noise as an input (drawn with NumPy: :func:`pymc.fit`'s step draws it
        from a generator that numba dispatches slowly, 120 to 200 microseconds a step on
        the radon models against 14), unless these hold more than ``callbacks``,
        ``obj_n_mc``, ``total_grad_norm_constraint``, ``compile_kwargs`` and ``backend``
        (an ``obj_optimizer``, say); each run then calls :func:`pymc.fit`.

    Returns
    -------
    Base or MixtureBase
        A :class:`MixtureBase` for ``"mixture"``, a Gaussian :class:`Base` otherwise.

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, an unknown method, or a fit that
        diverged to NaN.
    """
    target = Target(modelcontext(model))
    target.require_exact("fit_base")
    return _fit_base(
        target, method, n, random_seed, progressbar, n_fits, prior_weight, **fit_kwargs
    )


def _fit_base(
    target: Target, method, n=ADVI_ITERATIONS, random_seed=None, progressbar=True, n_fits=N_FITS,
    prior_weight=0.0, **fit_kwargs,
) -> Base | MixtureBase:
    """:func:`fit_base` for a :class:`Target` already built (and its functions compiled)."""
    if method == "prior":
        return _fit_prior(target, n, random_seed)
    if method in ("mixture", "laplace"):
        return _fit_mixture(
            target, n, n_fits, prior_weight, random_seed, progressbar, fit_kwargs, method == "mixture"
        )
    if method not in ("advi", "fullrank_advi"):
        raise ValueError(
            f"Unknown base method {method!r}; use 'laplace', 'mixture', 'advi', 'fullrank_advi' "
            "or 'prior'."
        )
    return _fit_advi(target, method, n, random_seed, progressbar, **fit_kwargs)


def _fit_advi(
    target: Target,
    method: str,
    n: int,
    random_seed,
    progressbar,
    start_sd=None,
    steps: _AdviSteps | None = None,
    **fit_kwargs,
) -> Base:
    """One ADVI fit of the target (:class:`_AdviSteps`), as a Gaussian :class:`Base` on its
    flat space.

    Parameters
    ----------
    start_sd : ndarray, optional
        Standard deviations (flat) the fit starts at (``start_sigma``).
    steps : _AdviSteps, optional
        The step functions already compiled for the other fits of the same base (a new one
        when omitted): this fit runs with them unless ``fit_kwargs`` rule that out
        (:meth:`_AdviSteps.can_share`), and with :func:`pymc.fit` otherwise.
    **fit_kwargs
        :func:`pymc.fit` keywords. Without ``obj_optimizer``, Adam at ``ADVI_LEARNING_RATE``
        with :class:`_ReduceOnPlateau` (unless ``callbacks`` are given).
    """
    if start_sd is not None:
        fit_kwargs["start_sigma"] = target.unravel(start_sd)
    if steps is None:
        steps = _AdviSteps(target.model)
    if "obj_optimizer" not in fit_kwargs:
        share = steps.can_share(method, fit_kwargs)
        optimizer = steps.optimizer(method) if share else _Adam()
        fit_kwargs["obj_optimizer"] = optimizer
        fit_kwargs.setdefault("callbacks", [_ReduceOnPlateau(optimizer.learning_rate)])
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
    put back: its step is a shared variable (which :class:`_ReduceOnPlateau` cuts), and the
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
# pymc.fit keywords with which the fits of a base can run with _AdviSteps: the fit's start, and
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


class _AdviSteps:
    """The ADVI fits of one base: PyMC's objective and Adam updates, compiled once per method
    with the Monte Carlo noise as an input, and run by a loop that draws the noise with NumPy.

    :func:`pymc.fit` compiles its step function with the noise drawn inside it from a NumPy
    ``Generator`` held in a shared variable. Numba's dispatcher has no fast path for a
    ``Generator`` argument (numba/numba#4499): it types every argument in Python on every
    call, and on the 92-parameter radon models a step took 120 to 200 microseconds where the
    same step with the noise as an input takes 14 (the model's log density and gradient: 9).
    The fits stop after 2000 to 10,000 steps and a mixture base runs up to ``N_FITS`` of them,
    so that overhead was most of the base's time. :func:`pymc.fit` also compiled a new step
    function for every fit (1.2 s on eight schools, 1.6 to 1.9 s on radon); this compiles once
    per method (``"advi"``, ``"fullrank_advi"``).

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
        from pymc_tempering.progress import progress_bar

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


ADVI_WINDOW = 500  # iterations whose mean loss _plateau compares with the windows before
ADVI_DECAY = 0.1  # Adam's step is cut by this at the first plateau, and the fit stops at the next


def _plateau(losses) -> bool:
    """Whether the mean loss has gained less than ``ADVI_TOLERANCE`` nats in each of the last
    two windows of ``ADVI_WINDOW`` iterations. One window is not enough: the noise of a noisy
    ELBO's window means stopped full-rank fits of a two-parameter model early, 5 nats of ELBO
    short, in two seeds of six."""
    if len(losses) < 3 * ADVI_WINDOW:
        return False
    n = len(losses)
    means = [np.mean(losses[n - (k + 1) * ADVI_WINDOW : n - k * ADVI_WINDOW]) for k in range(3)]
    return bool(means[1] - means[0] < ADVI_TOLERANCE and means[2] - means[1] < ADVI_TOLERANCE)


class _ReduceOnPlateau:
    """A :func:`pymc.fit` callback: at the first plateau of the loss (:func:`_plateau`, checked
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
        if not _plateau(since):
            return
        if self.decayed_at is None:
            self.learning_rate.set_value(self.learning_rate.get_value() * ADVI_DECAY)
            self.decayed_at = len(losses)
            return
        raise StopIteration(f"The ELBO stopped improving after {i} iterations.")


def _prior_draws(target: Target, n: int, random_seed) -> tuple[list[dict], np.ndarray]:
    """``n`` prior draws of the free variables: constrained (dicts) and flat unconstrained."""
    model = target.model
    forward = []
    for rv in model.free_RVs:
        transform = model.rvs_to_transforms.get(rv)
        forward.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
    try:
        fn = pm.compile(inputs=[], outputs=list(model.free_RVs) + forward, random_seed=random_seed)
        raw = [fn() for _ in range(int(n))]
    except NotImplementedError as err:
        raise ValueError(
            "The model's prior cannot be drawn from (an improper or custom prior without a "
            "random generator), so method='prior' is unavailable; use 'advi'."
        ) from err
    k = len(model.free_RVs)
    names = [rv.name for rv in model.free_RVs]
    constrained = [dict(zip(names, r[:k], strict=True)) for r in raw]
    # Value variables are listed in the same order as free_RVs.
    flat = np.array([np.concatenate([np.ravel(v) for v in r[k:]]) for r in raw], dtype=float)
    if not np.all(np.isfinite(flat)):
        raise ValueError("Prior draws on the unconstrained space are not all finite.")
    return constrained, flat


def _fit_prior(target: Target, n: int, random_seed) -> Base:
    _, draws = _prior_draws(target, n, random_seed)
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    return Base(mean=draws.mean(axis=0), cov=cov, log_zeta=None, method="prior")


def _dispersed(points: np.ndarray, k: int) -> list[int]:
    """Indices of ``k`` mutually distant points (farthest-point selection, standardised)."""
    z = (points - points.mean(0)) / np.maximum(points.std(0), 1e-12)
    chosen = [int(np.argmin(np.sum(z**2, axis=1)))]
    dist = np.sum((z - z[chosen[0]]) ** 2, axis=1)
    while len(chosen) < min(k, len(points)):
        chosen.append(int(np.argmax(dist)))
        dist = np.minimum(dist, np.sum((z - z[chosen[-1]]) ** 2, axis=1))
    return chosen


# Adam's step for pm.fit (PyMC's default, adagrad with a window and a step of 0.001, left the
# 92-parameter radon model's fits 100 to 2000 nats below log Z after 10,000 iterations; Adam
# with 0.01 reached 3 nats below it in 2000)
ADVI_LEARNING_RATE = 0.01
ADVI_TOLERANCE = 0.1  # nats of mean loss a window must gain for the fit to go on
# nats of ELBO below the best fit of a mixture at which a fit counts as failed and is dropped
# (fits of distinct modes of the evidence suite differ by up to 6 nats; failed fits of the
# radon models lay 300 or more below until ADVI's stop got better, and then a fit that
# collapsed into the centred intercepts' spike, sd 1e-4 where the best fit has 0.25, came
# out 99 nats below, was kept at the weight floor and made the run unreliable, 1 nat off)
FAILED_FIT_GAP = 30.0
N_MODE_STARTS = 32  # optimisations from prior draws in the mode search of fit_base("mixture")
# fit_base("mixture") repeats its search with this many times the starts when the first one is
# far from complete (most runs reached an optimum no other run reached)
MODE_SEARCH_GROWTH = 4
MODE_MAX_ITER = 200  # L-BFGS iterations per optimisation


@dataclass(frozen=True, eq=False)
class Modes:
    """Local maxima of the target's log density, found by optimisation from prior draws.

    Made by the mode search of ``fit_base(method="mixture")`` (:func:`find_modes`); each
    distinct optimum carries a Laplace approximation of the probability mass around it. The
    ADVI fits of the base start from them, and :func:`~pymc_tempering.diagnose` compares the
    weighted draws of a run with them to see a mode that the run never visited.

    Attributes
    ----------
    points : ndarray, shape (k, ndim)
        The optima on the flat unconstrained space, by decreasing log density.
    log_density : ndarray, shape (k,)
        The target's (unnormalised) log density there.
    log_mass : ndarray, shape (k,)
        Laplace approximation of the log mass around each: ``log p(x*) + ndim/2 log(2 pi) +
        1/2 log det S`` with ``S`` the inverse of the negative Hessian, whose eigenvalues are
        floored at the prior's precision (a direction in which the target is flat, such as
        along a shell, counts as wide as the prior, not infinitely wide).
    cov : ndarray, shape (k, ndim, ndim)
        Those Laplace covariances ``S``.
    hits : ndarray of int, shape (k,)
        How many of the search's runs converged to each. Optima reached once only, ``f1`` of
        ``n = hits.sum()`` runs, say the search is incomplete: by the Good-Turing estimate a new
        run would reach an optimum not yet found with probability about ``f1 / n``
        (:attr:`unseen`).
    """

    points: np.ndarray
    log_density: np.ndarray
    log_mass: np.ndarray
    cov: np.ndarray
    hits: np.ndarray

    @property
    def unseen(self) -> float:
        """Good-Turing estimate of the chance that a new run of the search reaches an optimum
        not found yet: the share of runs whose optimum no other run reached."""
        return unseen_share(self.hits)

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def probabilities(self) -> np.ndarray:
        """Each optimum's share of the total Laplace mass."""
        return np.exp(self.log_mass - logsumexp(self.log_mass))


@reproducible
def find_modes(
    target: Target, n_starts: int = N_MODE_STARTS, random_seed=None, *, starts=None
) -> Modes | None:
    """Optimise the target's log density from prior draws, and keep the distinct maxima.

    L-BFGS (:func:`scipy.optimize.minimize`) on the flat unconstrained space from ``n_starts``
    prior draws. A run counts when it converged to a finite local maximum (the Hessian, by
    central differences of the gradient, is negative definite up to the flooring described in
    :class:`Modes`); one that runs off to infinity (the spike of a centred hierarchical model)
    or stops at a saddle does not. Optima that agree within a tenth of their Laplace standard
    deviations are one.

    Parameters
    ----------
    target : Target
    n_starts : int
        Prior draws to start from.
    random_seed : int, optional
    starts : array_like, shape (n, ndim), optional
        At least two finite flat points to start from instead of prior draws (for a model
        whose prior cannot be drawn from, such as one with ``pm.Flat`` variables); their spread
        then stands for the prior's in the flooring of :class:`Modes`.

    Returns
    -------
    Modes or None
        ``None`` when the prior cannot be drawn from (and no ``starts`` are given) or no run
        converged.
    """
    return _search(target, n_starts, random_seed, starts)[0]


def _search(target: Target, n_starts: int, random_seed, starts=None):
    """:func:`find_modes`, the end points of the runs that did not converge (by decreasing
    log density; ``None`` when the prior cannot be drawn from) with the prior's standard
    deviations on the unconstrained space, and the spikes among those ends (:func:`_spikes`)."""
    if starts is not None:
        starts = np.asarray(starts, dtype=float)
        if starts.ndim != 2 or starts.shape[1] != target.ndim or starts.shape[0] < 2:
            raise ValueError(
                f"starts must have shape (n, {target.ndim}) with n >= 2 (flat unconstrained "
                f"points; their spread stands for the prior's), got {starts.shape}."
            )
        if not np.all(np.isfinite(starts)):
            raise ValueError("starts must be finite.")
    else:
        try:
            _, starts = _prior_draws(target, n_starts, random_seed)
        except ValueError:
            return None, None, None, ()
    # Directions in which the target is flat count as wide as the prior (see Modes.log_mass).
    prior_sd = np.maximum(starts.std(axis=0), 1e-12)
    centre = starts.mean(axis=0)

    def negative(x):
        logp, grad = target.logp_and_grad(x)
        if not np.isfinite(logp):
            return 1e300, np.zeros_like(x)
        return -logp, -grad

    optima, ends = [], []
    for start in starts:
        with np.errstate(all="ignore"):
            res = optimize.minimize(
                negative, start, jac=True, method="L-BFGS-B", options={"maxiter": MODE_MAX_ITER}
            )
        if np.isfinite(res.fun) and res.fun < 1e299:
            (optima if res.success else ends).append((-float(res.fun), res.x))
    optima.sort(key=lambda f: -f[0])
    kept: list = []  # [log density, point, Laplace covariance, runs that reached it]

    def same(x, within):
        return next((k for k in kept if np.all(np.abs(x - k[1]) < within(k))), None)

    for logp, x in optima:
        # Runs that reached one optimum first, cheaply (before a Hessian for each): then
        # optima that agree within a tenth of their Laplace standard deviations.
        match = same(x, lambda k: 1e-3 * prior_sd)
        if match is not None:
            match[3] += 1
            continue
        laplace = _laplace_cov(target, x, 1.0 / prior_sd.max() ** 2)
        if laplace is None:
            ends.append((logp, x))
            continue
        cov, grad = laplace
        # Converged: the Newton step to the quadratic's maximum gains under 0.01 nats. (A run
        # that L-BFGS stopped on a slope, climbing a centred model's spike, does not count.)
        if 0.5 * grad @ cov @ grad >= 0.01:
            ends.append((logp, x))
            continue
        match = same(x, lambda k: 0.1 * np.sqrt(np.diag(k[2])))
        if match is not None:
            match[3] += 1
        else:
            kept.append([logp, x, cov, 1])
    ends.sort(key=lambda f: -f[0])
    spikes = _spikes(ends, centre, prior_sd)
    ends = np.array([x for _, x in ends]).reshape(-1, target.ndim)
    if not kept:
        return None, ends, prior_sd, spikes
    log_density = np.array([k[0] for k in kept])
    points = np.array([k[1] for k in kept])
    covs = np.array([k[2] for k in kept])
    log_det = np.array([np.linalg.slogdet(c)[1] for c in covs])
    modes = Modes(
        points=points,
        log_density=log_density,
        log_mass=log_density + 0.5 * target.ndim * _LOG_2PI + 0.5 * log_det,
        cov=covs,
        hits=np.array([k[3] for k in kept]),
    )
    return modes, ends, prior_sd, spikes


SPIKE_PRIOR_Z = 4.0  # prior sds from the prior draws' mean at which an end of the search is a spike


def _spikes(ends: list, centre: np.ndarray, prior_sd: np.ndarray) -> tuple:
    """The spikes among the search's unconverged ends ``[(log density, point), ...]``: for
    each end, the flat coordinate in which it lies farthest from the prior draws' mean in their
    standard deviations, when that is ``SPIKE_PRIOR_Z`` or more (a centred group's log scale
    run off towards -inf: -8 to -19 on the centred radon intercepts and eight schools, whose
    members stay at their mean). Per coordinate and side, the end of highest log density:
    ``((k, value, log density), ...)``. A run that drifted along a flat ridge to the other side
    (measured: towards large ``tau`` on the centred eight schools) is kept apart from the spike
    and judged by its own, low, log density (:func:`funnel_mass`)."""
    found: dict[tuple[int, bool], tuple[int, float, float]] = {}
    for logp, end in ends:
        z = (end - centre) / prior_sd
        k = int(np.argmax(np.abs(z)))
        key = (k, bool(z[k] > 0))
        if abs(z[k]) >= SPIKE_PRIOR_Z and (key not in found or logp > found[key][2]):
            found[key] = (k, float(end[k]), float(logp))
    return tuple(found[key] for key in sorted(found))


def _hessian(target: Target, x: np.ndarray):
    """The Hessian of the target's log density at ``x`` (central differences of the gradient)
    and the gradient there."""
    d = x.size
    grad = target.logp_and_grad(x)[1]
    h = 1e-5 * np.maximum(1.0, np.abs(x))
    hess = np.empty((d, d))
    for i in range(d):
        e = np.zeros(d)
        e[i] = h[i]
        plus, minus = target.logp_and_grad(x + e)[1], target.logp_and_grad(x - e)[1]
        hess[i] = (plus - minus) / (2 * h[i])
    return hess, grad


def _laplace_cov(target: Target, x: np.ndarray, floor: float):
    """Inverse negative Hessian at ``x``, eigenvalues of the precision floored at ``floor``,
    and the gradient there; ``None`` at a saddle or where the gradient fails."""
    hess, grad = _hessian(target, x)
    if not (np.all(np.isfinite(hess)) and np.all(np.isfinite(grad))):
        return None
    precision = -0.5 * (hess + hess.T)
    values, vectors = np.linalg.eigh(precision)
    if values.min() < -1e-3 * max(abs(values.max()), floor):  # a saddle, not a maximum
        return None
    values = np.maximum(values, floor)
    return (vectors / values) @ vectors.T, grad


def _diagonal_laplace(target: Target, x: np.ndarray, prior_sd: np.ndarray):
    """The log mass of a Gaussian at ``x`` (any point, not only a maximum) with the standard
    deviations of the log density's diagonal curvature there, each at most the prior's, and
    those standard deviations: ``(log p(x) + sum log sd + ndim/2 log 2 pi, sd)``."""
    hess, _ = _hessian(target, x)
    curvature = np.where(np.isfinite(np.diag(hess)), -np.diag(hess), 0.0)
    sd = 1.0 / np.sqrt(np.maximum(curvature, 1.0 / prior_sd**2))
    logp = float(target.logp(x[None])[0])
    return logp + float(np.sum(np.log(sd))) + 0.5 * x.size * _LOG_2PI, sd


# The funnel check (funnel_mass): a spike is looked at when the draws lie at least SPIKE_Z of
# their weighted standard deviations away from it; the profile is compared with the draws
# between their FUNNEL_EDGE and 1 - FUNNEL_EDGE quantiles; its tail has at most
# FUNNEL_MAX_POINTS points and ends where it is FUNNEL_DEPTH nats below that band.
SPIKE_Z = 5.0
FUNNEL_EDGE = 0.25
FUNNEL_MAX_POINTS = 60
FUNNEL_DEPTH = 12.0
FUNNEL_DRAWS = 256  # importance-sampling draws per point of the profile
FUNNEL_MAX_DIM = 300  # above it the profile's Hessians (2 ndim gradients a point) cost too much


class Funnel(NamedTuple):
    """A spike judged by :func:`funnel_mass`: what the draws hold near it, and what the target
    holds there by the profile along its flat coordinate."""

    index: int
    """The spike's flat coordinate ``u``."""
    mass: float
    """``m``: the target's mass beyond ``edge`` (towards the spike) that the draws lack, in
    units of the draws' whole weight."""
    edge: float
    """The draws' ``FUNNEL_EDGE`` quantile of ``u`` on the spike's side (flat units)."""
    inner: float
    """The other end of the band the profile is normalised on, the draws' ``1 - FUNNEL_EDGE``
    quantile."""
    tail_ratio: float
    """The profile's mass beyond ``edge`` over its mass between ``edge`` and ``inner``."""
    tail_ratio_error: float
    """The importance sampling's relative error in ``tail_ratio``."""
    complete: bool
    """Whether the profile went on until ``FUNNEL_DEPTH`` nats below the band or to the spike;
    where an optimisation stopped converging before, ``tail_ratio`` is only a lower bound and
    :func:`funnel_correction` leaves the funnel out."""
    mass_se: float
    """The standard error of ``mass``: the draws' quartiles' and the importance sampling's."""


def funnel_mass(target: Target, x: np.ndarray, log_weight: np.ndarray, spikes) -> list[Funnel]:
    """The mass of the target that weighted draws never reached in the neck of a funnel.

    A centred hierarchical model's log density grows without bound as a group's scale goes to
    0 with its members at their mean: the spike that runs of the mode search climb without
    converging (:attr:`Base.spikes`). The mass near it, the funnel's neck, is where NUTS with a
    step size that suits the rest cannot go, and a run that never enters it shows nothing: no
    divergence, chains that agree, and a log marginal likelihood low by about ``log(1 + m)``
    for a missing mass ``m`` (in units of the mass the draws hold; measured on the centred
    eight schools at the defaults: up to 0.59 nats low, 12 of 40 runs beyond 4 standard errors
    and reliable by every other check). This looks at the
    target itself, along each spike's flat coordinate ``u`` that the draws stay at least
    ``SPIKE_Z`` weighted standard deviations away from, and whose log density is above every
    draw's (a spike climbs above the posterior; a run that drifted off along a ridge does not):
    the profile Laplace approximation of ``u``'s marginal density,

        log p(u) ~ max_v log p(u, v) - 1/2 log det(-d2/dv2 log p(u, v)) + const,

    corrected by importance sampling from that Laplace Gaussian (``FUNNEL_DRAWS`` draws, the
    same normal draws at every ``u``; exact for a group of Gaussians given its scale), on the
    draws' middle half (between their ``FUNNEL_EDGE`` and ``1 - FUNNEL_EDGE`` quantiles of
    ``u``) and from there towards the spike, until it is ``FUNNEL_DEPTH`` nats below the middle
    or its optimisation stops converging (the coordinates of the other spikes judged held at
    the draws' weighted medians: optimised, they would climb their own spikes). Normalised by
    the middle half, where the draws hold
    ``1 - 2 FUNNEL_EDGE`` of their weight, the profile's mass on the spike's side of that band
    is compared with the ``FUNNEL_EDGE`` the draws hold there; the excess is ``m``. The
    profile must first reproduce the draws where both are seen: it must put the draws' median
    within ``FUNNEL_AGREEMENT`` of the middle of its band, or that coordinate is not judged.

    Measured against exact draws: on the centred eight schools, -0.002 to 0.016 (standard
    error 0.011) for 4,000 exact posterior draws and 0.24 to 0.28 for the same draws without
    those at ``tau < 1`` (truth 0.257); on the centred radon intercepts, 0.002 +- 0.037 for
    draws of ``log sigma_alpha`` from its exact marginal (0.045 with the Laplace value alone).

    Parameters
    ----------
    target : Target
    x : ndarray, shape (chain, draw, ndim) or (n, ndim)
        Draws on the flat unconstrained space.
    log_weight : ndarray, shape (chain, draw) or (n,)
        Their log importance weights (unnormalised). With a chain axis the standard error
        counts the draws' autocorrelation.
    spikes : sequence of (int, float, float)
        Flat coordinates, the values the search's runs reached in them and the log densities
        there (:attr:`Base.spikes`).

    Returns
    -------
    list of Funnel
        One for each spike judged. Empty with no spike to judge, or above ``FUNNEL_MAX_DIM``
        parameters. :func:`funnel_correction` puts the profile's mass beyond each ``edge`` into
        a log marginal likelihood.
    """
    if not len(spikes) or target.ndim < 2 or target.ndim > FUNNEL_MAX_DIM:
        return []
    log_weight = np.asarray(log_weight, dtype=float)
    chains = log_weight.reshape(-1, log_weight.shape[-1]) if log_weight.ndim > 1 else None
    x = np.asarray(x, dtype=float).reshape(-1, target.ndim)
    log_weight = log_weight.reshape(-1)
    w = np.exp(log_weight - logsumexp(log_weight))
    top = float(np.max(target.logp(x)))
    judged = []
    for k, spike, logp_spike in spikes:
        mean = float(w @ x[:, k])
        sd = float(np.sqrt(w @ (x[:, k] - mean) ** 2))
        if abs(spike - mean) >= SPIKE_Z * sd and logp_spike > top:
            judged.append((int(k), float(np.sign(spike - mean)), spike))
    # Along one spike's coordinate the others' coordinates are held at the draws' weighted
    # medians: optimised, they would climb their own spikes (two centred groups in one model)
    fixed = {
        k: float(np.quantile(x[:, k], 0.5, weights=w, method="inverted_cdf")) for k, _, _ in judged
    }
    found = []
    for k, side, spike in judged:
        held = {j: v for j, v in fixed.items() if j != k}
        funnel = _funnel_profile(target, x, w, k, side, spike, held)
        if funnel is None:
            continue
        # Its noise: the draws' share beyond the edge is FUNNEL_EDGE by construction, but
        # what they estimate there has a Monte Carlo error (autocorrelation included when the
        # draws come by chain); an error d1 in the share at the edge and d2 at the other end
        # of the band moves the result by 1.5 d1 - 0.5 d2 (for FUNNEL_EDGE = 1/4).
        beyond = beyond_edge(x[:, k], funnel.edge, funnel.inner).astype(float)
        if chains is not None:
            se = float(weighted_mean(beyond.reshape(chains.shape), chains)[1])
        else:
            se = float(np.sqrt(FUNNEL_EDGE * (1 - FUNNEL_EDGE) * np.sum(w**2)))
        approximation = (1 - 2 * FUNNEL_EDGE) * funnel.tail_ratio * funnel.tail_ratio_error
        found.append(funnel._replace(mass_se=float(np.hypot(np.sqrt(2.5) * se, approximation))))
    return found


def funnel_correction(x: np.ndarray, log_weight: np.ndarray, funnels) -> tuple[np.ndarray, float]:
    """Per draw, the log factor that puts the profile's mass of each funnel's neck into an
    estimate of ``log Z`` as a mean over weighted draws, and that correction's own error.

    The draws beyond a funnel's ``edge`` (towards its spike) are those a run that misses the
    neck has too few of. Their weight is replaced by the profile's mass there, scaled to the
    draws by the band where both are seen: a draw beyond the edge gets the factor 0, a draw in
    the band ``1 + tail_ratio``, any other 1. For weights ``w1`` of the target (continuous
    tempering's ``p(beta = 1 | x)``),

        mean(w1 f) = mean(w1) - mean(w1 [beyond]) + tail_ratio mean(w1 [band]),

    the draws' mass with the part beyond the edge taken from the profile; its Monte Carlo
    error comes with the estimator's own (:func:`~pymc_tempering.estimators.log_ratio_by_chain`
    on ``log w1 + log f``), the correlation between the draws' share and their weights
    included. Exact when the profile is (a group of Gaussians given its scale); with several
    funnels the factors multiply (each profile holds the other spikes' coordinates at the
    draws' medians), exact for independent groups.

    Parameters
    ----------
    x : ndarray, shape (chain, draw, ndim)
        Flat draws.
    log_weight : ndarray, shape (chain, draw)
        Their log weights ``log w1``.
    funnels : sequence of Funnel
        What :func:`funnel_mass` returned for these draws; those not ``complete`` are left
        out.

    Returns
    -------
    log_factor : ndarray, shape (chain, draw)
        ``log f`` (``-inf`` beyond an edge; 0 everywhere with no funnel).
    error : float
        The error in ``log mean(w1 f)`` from the importance sampling of the ``tail_ratio``s
        (added, as they share their normal draws).
    """
    x = np.asarray(x, dtype=float)
    log_factor = np.zeros(x.shape[:-1])
    parts = []
    for funnel in funnels:
        if not funnel.complete:
            continue
        u = x[..., funnel.index]
        beyond = beyond_edge(u, funnel.edge, funnel.inner)
        band = ~beyond & ~beyond_edge(u, funnel.inner, funnel.edge)
        with np.errstate(divide="ignore"):
            log_factor = log_factor + np.where(
                beyond, -np.inf, np.where(band, np.log1p(funnel.tail_ratio), 0.0)
            )
        parts.append((band, funnel))
    if not parts:
        return log_factor, 0.0
    log_wf = np.asarray(log_weight, dtype=float) + log_factor
    top = np.max(log_wf)
    if not np.isfinite(top):
        return log_factor, 0.0
    wf = np.exp(log_wf - top)
    error = 0.0
    for band, funnel in parts:
        # d log mean(w1 f) / d log tail_ratio: the corrected mass's share that came from it
        share = funnel.tail_ratio / (1 + funnel.tail_ratio) * np.sum(wf[band]) / np.sum(wf)
        error += share * funnel.tail_ratio_error
    return log_factor, float(error)


FUNNEL_AGREEMENT = 0.1  # the profile's share of the draws' middle half below their median: 0.5 +-


def _funnel_profile(target: Target, x, w, k: int, side: float, spike: float, held=None):
    """:func:`funnel_mass` along the flat coordinate ``k``, whose spike is on the ``side`` (+-1)
    of the draws, with the coordinates of ``held`` (index: value) fixed: a :class:`Funnel` with
    its ``mass_se`` still NaN, or ``None`` where the profile of the middle half cannot be
    computed or does not reproduce the draws."""
    held = held or {}
    u = -side * x[:, k]  # the spike at low u
    edge, median, inner = np.quantile(
        u, [FUNNEL_EDGE, 0.5, 1 - FUNNEL_EDGE], weights=w, method="inverted_cdf"
    )
    if not inner > median > edge:
        return None
    index = np.arange(target.ndim)
    others = np.flatnonzero((index != k) & ~np.isin(index, list(held)))
    point = x[np.argmin(np.abs(u - median))].copy()  # the optimisations start at a draw
    point[list(held)] = list(held.values())
    normal = np.random.default_rng(0).standard_normal((FUNNEL_DRAWS, others.size))
    samples = {}  # each point's Laplace value and importance log ratios, for the bootstrap

    def profile(at):
        """The profile's log density at ``u = at``, or ``None`` where its optimisation does not
        converge to a maximum (a saddle, a slope, a spike of the conditional)."""
        point[k] = -side * at

        def negative(rest):
            trial = point.copy()
            trial[others] = rest
            logp, grad = target.logp_and_grad(trial)
            if not np.isfinite(logp):
                return 1e300, np.zeros_like(rest)
            return -logp, -grad[others]

        with np.errstate(all="ignore"):
            res = optimize.minimize(
                negative, point[others], jac=True, method="L-BFGS-B",
                options={"maxiter": MODE_MAX_ITER},
            )
        if not (res.success and np.isfinite(res.fun) and res.fun < 1e299):
            return None
        point[others] = res.x
        hess, grad = _hessian(target, point)
        precision = -0.5 * (hess + hess.T)[np.ix_(others, others)]
        if not (np.all(np.isfinite(precision)) and np.all(np.isfinite(grad))):
            return None
        values, vectors = np.linalg.eigh(precision)
        if values.min() <= 0:
            return None
        newton = vectors.T @ grad[others]
        if 0.5 * np.sum(newton**2 / values) >= 0.01:  # as in the mode search: not converged
            return None
        # Importance sampling from the conditional's Laplace Gaussian, the same normal draws at
        # every point: the Laplace value alone was off by an amount that changes with u (on
        # the centred radon intercepts, against the exact marginal: 0.01 nats at log
        # sigma_alpha = -3, 0.54 at the draws' lower quartile, 1.0 at -0.8; with the draws,
        # 0.004 to 0.1).
        trial = np.repeat(point[None], len(normal), axis=0)
        trial[:, others] += (normal / np.sqrt(values)) @ vectors.T
        log_ratio = target.logp(trial) + 0.5 * np.sum(normal**2, axis=1) + float(res.fun)
        log_ratio = np.where(np.isnan(log_ratio), -np.inf, log_ratio)
        if not np.any(np.isfinite(log_ratio)):
            return None
        laplace = -float(res.fun) - 0.5 * float(np.sum(np.log(values)))
        samples[float(at)] = (laplace, log_ratio)
        return laplace + float(logsumexp(log_ratio)) - np.log(len(normal))

    # From the median to the far end, then back down to the edge, each optimisation starting
    # where the last ended: the tail goes on from the edge.
    band = np.concatenate([np.linspace(median, inner, 9), np.linspace(median, edge, 9)[1:]])
    band_logp = []
    for at in band:
        value = profile(at)
        if value is None:
            return None
        band_logp.append(value)
    order = np.argsort(band)
    band, band_logp = band[order], np.array(band_logp)[order]
    lower = np.exp(_log_trapezoid(band[:9], band_logp[:9]) - _log_trapezoid(band, band_logp))
    if abs(lower - 0.5) > FUNNEL_AGREEMENT:
        return None
    tail, tail_logp = [edge], [band_logp[0]]
    step = (median - edge) / 8
    end = -side * spike
    while (
        len(tail) < FUNNEL_MAX_POINTS
        and tail[-1] > end
        and tail_logp[-1] > band_logp.max() - FUNNEL_DEPTH
    ):
        at = max(tail[-1] - step, end)
        value = profile(at)
        if value is None:
            break
        tail.append(at)
        tail_logp.append(value)
        step *= 1.2
    if len(tail) < 2:  # not one point beyond the edge converged: nothing to judge
        return None
    ratio = np.exp(_log_trapezoid(tail, tail_logp) - _log_trapezoid(band, band_logp))
    return Funnel(
        index=k,
        mass=float((1 - 2 * FUNNEL_EDGE) * ratio - FUNNEL_EDGE),
        edge=float(-side * edge),
        inner=float(-side * inner),
        tail_ratio=float(ratio),
        tail_ratio_error=_bootstrap_error(tail, band, samples),
        complete=bool(tail[-1] <= end or tail_logp[-1] <= band_logp.max() - FUNNEL_DEPTH),
        mass_se=float("nan"),
    )


FUNNEL_BOOTSTRAP = 200  # resamples of the profile's normal draws for its error


def _bootstrap_error(tail, band, samples: dict) -> float:
    """The importance sampling's relative error in the ratio of the profile's integrals over
    ``tail`` and ``band``: the standard deviation of its log over bootstrap resamples of the
    normal draws, the same resample at every point, as the points share their draws (their
    errors are correlated, and largely cancel in the ratio: the largest error of a point,
    times sqrt(2), put 0.04 nats into the corrected log Z's standard error on the centred radon
    intercepts, whose z sd over 40 runs then came out 0.71)."""
    n = next(iter(samples.values()))[1].size
    rows = np.random.default_rng(1).integers(0, n, size=(FUNNEL_BOOTSTRAP, n))

    def resampled(grid):
        return np.stack([
            samples[float(g)][0] + logsumexp(samples[float(g)][1][rows], axis=1) for g in grid
        ], axis=1)

    with np.errstate(invalid="ignore"):
        log_ratio = _log_trapezoid(tail, resampled(tail)) - _log_trapezoid(band, resampled(band))
    finite = log_ratio[np.isfinite(log_ratio)]
    # resamples that lost every finite draw of a point: no spread to read, a 100% error
    return float(np.std(finite)) if finite.size > FUNNEL_BOOTSTRAP // 2 else 1.0


def _log_trapezoid(grid, logp):
    """Log of the trapezoidal integral of ``exp(logp)`` over the (monotone) ``grid``; with a
    2-D ``logp`` (rows of values on ``grid``), one per row."""
    grid, logp = np.asarray(grid, dtype=float), np.asarray(logp, dtype=float)
    terms = np.logaddexp(logp[..., 1:], logp[..., :-1]) - np.log(2) + np.log(np.abs(np.diff(grid)))
    out = logsumexp(terms, axis=-1)
    return float(out) if out.ndim == 0 else out


MODE_BARRIER = 5.0  # nats: a deeper dip of the log density between two fits separates modes


def _same_mode(target: Target, a: Base, b: Base, n: int = 9) -> bool:
    """Whether two fits sit on one mode of the target.

    Yes when their means are within one standard deviation in every coordinate, or when the
    target's log density on the segment between them never dips more than ``MODE_BARRIER``
    nats below its lower end: ADVI runs from different starts stop at slightly different
    points of one mode (more than a standard deviation apart somewhere, in many dimensions),
    while separated modes have a valley between them.
    """
    if np.all(np.abs(a.mean - b.mean) < np.maximum(a.std, b.std)):
        return True
    t = np.linspace(0.0, 1.0, n + 2)[:, None]
    logp = target.logp(a.mean + t * (b.mean - a.mean))
    return bool(np.min(logp[1:-1]) >= min(logp[0], logp[-1]) - MODE_BARRIER)


def _fit_mixture(
    target: Target,
    n: int,
    n_fits: int,
    prior_weight,
    random_seed,
    progressbar,
    fit_kwargs,
    advi: bool = True,
) -> MixtureBase:
    if n_fits < 1:
        raise ValueError(f"n_fits must be at least 1, got {n_fits}.")
    if not 0 <= prior_weight < 1:
        raise ValueError(f"prior_weight must be in [0, 1), got {prior_weight!r}.")
    start_seed, mode_seed, *fit_seeds = split_seed(random_seed, n_fits + 2)
    rv_names = [rv.name for rv in target.model.free_RVs]
    fits: list[Base] = []
    laplace: list[Base] = []
    modes, ends, prior_sd, spikes = _search(target, N_MODE_STARTS, mode_seed)
    if modes is not None and modes.unseen > UNSEEN_OPTIMA_LIMIT:
        # Far from complete: the target has many more optima than the search found, and a
        # base moment-matched to a few of them misses the mass of the others. Measured on the
        # 22-unit Boltzmann relaxations (five machines, four seeds each, the proper-prior form
        # of evidence_calibration.py): 128 starts instead of 32 cut the RMSE of sample_ct's
        # log Z from 0.32 to 0.17 nats, in the same time. The runs stay unreliable
        # (unseen_optima).
        modes, ends, prior_sd, spikes = _search(
            target, MODE_SEARCH_GROWTH * N_MODE_STARTS, mode_seed
        )
    if modes is not None and not advi and prior_weight == 0:
        mixture = _laplace_mixture(target, modes, start_seed, spikes)
        if mixture is not None:
            return mixture
    start_sds: list = []
    # The ADVI runs share their compiled step function (see _AdviSteps).
    steps = _AdviSteps(target.model)
    try:
        if modes is not None:
            # One ADVI run from each of the n_fits most dispersed optima (one run when the
            # search found one), starting at the widths of its Laplace Gaussian; the other
            # optima join the mixture as their Laplace approximations.
            chosen = _dispersed(modes.points, n_fits)
            starts = [target.constrained(modes.points[i]) for i in chosen]
            starts = [{k: start[k] for k in rv_names} for start in starts]
            start_sds = [np.sqrt(np.diag(modes.cov[i])) for i in chosen]
            laplace = [
                Base(
                    mean=modes.points[i],
                    cov=modes.cov[i],
                    log_zeta=float(modes.log_mass[i]),
                    method="laplace",
                )
                for i in range(len(modes))
                if i not in chosen
            ]
        elif ends is not None and len(ends):
            # No optimum: the runs climbed a spike (a centred hierarchical model's, as the
            # scale of a group goes to 0) or stopped on a slope. Half the ADVI runs start where
            # the search's runs ended, those of the largest diagonal Laplace mass first (a
            # point in a spike has a high density but a tiny mass), at the widths of the
            # diagonal curvature there; the others from dispersed prior draws. Measured on the
            # radon models (importance-sampling estimate of log Z from each fit): with the
            # county intercepts non-centred, fits from the ends came within 0.15 nats and fits
            # from prior draws 300 to 6000 nats below in 10,000 iterations; centred, every end
            # lay in the spike (log sigma_alpha -8 to -19), fits from there failed by 1e8 nats
            # or more and fits from prior draws came within 0.5.
            scored = sorted(
                ((_diagonal_laplace(target, x, prior_sd), x) for x in ends),
                key=lambda f: -f[0][0],
            )
            n_ends = (n_fits + 1) // 2
            starts = [
                {k: v for k, v in target.constrained(x).items() if k in rv_names}
                for _, x in scored[:n_ends]
            ]
            start_sds = [sd for (_, sd), _ in scored[:n_ends]]
            if n_fits > n_ends:
                constrained, flat = _prior_draws(target, 50 * n_fits, start_seed)
                starts += [constrained[i] for i in _dispersed(flat, n_fits - n_ends)]
        else:
            # Starts spread over the prior: the most central of 50 * n_fits prior draws, then
            # repeatedly the draw farthest from those already chosen.
            constrained, flat = _prior_draws(target, 50 * n_fits, start_seed)
            starts = [constrained[i] for i in _dispersed(flat, n_fits)]
    except ValueError:
        # No prior to draw from: spread the starts around a first fit.
        fits.append(
            _fit_advi(
                target, "advi", n, fit_seeds.pop(), progressbar, steps=steps, **fit_kwargs
            )
        )
        rng = np.random.default_rng(start_seed)
        flat = fits[0].mean + 3 * fits[0].std * rng.standard_normal((n_fits - 1, target.ndim))
        starts = [{k: target.constrained(x)[k] for k in rv_names} for x in flat]
    errors = []
    start_sds += [None] * (len(starts) - len(start_sds))
    for start, sd, seed in zip(starts, start_sds, fit_seeds, strict=False):
        try:
            fits.append(
                _fit_advi(
                    target,
                    "advi",
                    n,
                    seed,
                    progressbar,
                    start_sd=sd,
                    steps=steps,
                    start=start,
                    **fit_kwargs,
                )
            )
        except ValueError as err:
            errors.append(err)
    if not fits:
        raise ValueError(
            f"Every ADVI run of the mixture base failed. The first: {errors[0]}"
        ) from errors[0]
    if errors:
        warn(
            f"{len(errors)} of {len(errors) + len(fits)} ADVI runs of the mixture base failed and "
            f"were dropped. The first: {errors[0]}"
        )
    # Keep the best fit of each mode: fits of one mode are duplicates. Fits started at
    # distinct optima of the mode search are distinct modes already, and the test of their
    # means would be wrong for them: a fit of a Gaussian shell has its mean in the shell's
    # hole, where the log density is far below the valley between two shells, so the segment
    # between two such means shows no dip (measured on the 5-D shells: the two fits merged
    # and the run missed a shell).
    kept: list[Base] = []
    best = max(f.log_zeta for f in fits)
    for fit in sorted(fits, key=lambda f: -f.log_zeta):
        if fit.log_zeta < best - FAILED_FIT_GAP:
            # A failed optimisation, not a mode: its mass is negligible beside the best fit's,
            # and it would distort the moments of the Gaussian base.
            continue
        if modes is not None or not any(_same_mode(target, fit, k) for k in kept):
            kept.append(fit)
    elbo = np.array([k.log_zeta for k in kept])
    components = kept + laplace
    log_mass = np.array([k.log_zeta for k in components])
    prior = PriorDensity(target, random_seed=start_seed) if prior_weight > 0 else None
    method = f"mixture of {len(components)}" + (" and the prior" if prior is not None else "")
    return MixtureBase(
        components=tuple(components),
        # eq. (25)'s weights (the ELBOs, and the Laplace masses of the optima without a fit),
        # floored so that no mode found becomes invisible in the base
        weights=np.maximum(np.exp(log_mass - log_mass.max()), 1e-3),
        prior=prior,
        prior_weight=float(prior_weight),
        # the ELBOs only: each is a lower bound on the mass of its mode, a Laplace mass is not
        log_zeta=float(logsumexp(elbo)),
        method=method,
        modes=modes,
        spikes=spikes,
    )


LAPLACE_AGREEMENT = 1.0  # nats between the Laplace mass and its importance-sampling check


def _laplace_mixture(target: Target, modes: Modes, random_seed, spikes=()) -> MixtureBase | None:
    """The mixture of the optima's Laplace Gaussians weighted by their Laplace masses, when it
    describes the target: its importance-sampling estimate of log Z (1000 draws) agrees with
    the total Laplace mass within ``LAPLACE_AGREEMENT`` nats; ``None`` otherwise.

    Measured on the evidence suite (``benchmarks/evidence_suite.py``): they agree within 0.2
    nats on the 18 peaks, the correlated 10-D Gaussian, the Gaussian cut by its box and the
    bimodal Cauchy likelihood, and within 0.75 on the Rosenbrock valley; they disagree by 1.4
    to 1190 nats on the Gaussian shells (a Gaussian at a point of a shell is no description
    of it) and by 3 on eight schools' funnel, where ADVI does better.
    """
    components = [
        Base(mean=x, cov=c, log_zeta=float(m), method="laplace")
        for x, c, m in zip(modes.points, modes.cov, modes.log_mass, strict=True)
    ]
    mixture = MixtureBase(
        components=tuple(components),
        weights=np.maximum(modes.probabilities, 1e-3 * modes.probabilities.max()),
        method=f"Laplace mixture of {len(components)}",
        modes=modes,
        spikes=spikes,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log_zeta = estimate_log_zeta(target, mixture, random_seed=random_seed)
    if abs(log_zeta - logsumexp(modes.log_mass)) > LAPLACE_AGREEMENT:
        return None
    return replace(mixture, log_zeta=log_zeta)


def base_from_result(idata, model: pm.Model | None = None, previous: Base | None = None) -> Base:
    """A full-covariance Gaussian from a weighted result: the bootstrap of section 6.

    Mean and covariance are the weighted moments of the result's draws on the model's flat
    unconstrained space (eq. 21), and ``log_zeta`` its log marginal likelihood estimate. When
    the ``previous`` base has a ``defensive_weight`` (one moment-matched to several modes), the
    new base is moment-matched to the mixture of the weighted draws and that share of the
    previous base, and keeps the same ``defensive_weight``: a round whose weights sit on some
    of the modes (as they do whenever its chains crossed between them rarely) would otherwise
    shrink the base onto those and the next run would never see the others.

    Parameters
    ----------
    idata : xarray.DataTree
        A result with ``sample_stats.log_weight`` and a log marginal likelihood.
    model : pymc.Model, optional
        The model the result belongs to; taken from the context when omitted.
    previous : Base, optional
        The base the result was sampled with.
    """
    target = Target(modelcontext(model))
    if "log_marginal_likelihood" not in idata.attrs or "log_weight" not in idata["sample_stats"]:
        raise ValueError("The result carries no log weights or no log marginal likelihood.")
    posterior = idata["posterior"].to_dataset()
    if "unconstrained_posterior" in idata.children:
        posterior = posterior.merge(idata["unconstrained_posterior"].to_dataset())
    x = target.flat_draws(posterior).reshape(-1, target.ndim)
    lw = idata["sample_stats"]["log_weight"].transpose("chain", "draw").values.ravel()
    w = np.exp(lw - logsumexp(lw))
    mean = w @ x
    centred = x - mean
    cov = (centred * w[:, None]).T @ centred
    keep = 0.0 if previous is None else previous.defensive_weight
    if keep > 0:
        shift = previous.mean - mean
        mean = mean + keep * shift
        cov = (1 - keep) * cov + keep * previous.cov + keep * (1 - keep) * np.outer(shift, shift)
    # Guard against a singular estimate (few effective draws in many dimensions).
    cov = cov + 1e-10 * np.mean(np.diag(cov)) * np.eye(target.ndim)
    return Base(
        mean=mean,
        cov=cov,
        log_zeta=float(idata.attrs["log_marginal_likelihood"]),
        method="bootstrap",
        defensive_weight=keep,
        modes=None if previous is None else previous.modes,
        spikes=() if previous is None else previous.spikes,
    )


def widen_base(base: Base, missed) -> Base:
    """The base widened to the optima of its mode search that a run missed.

    Moment-matched to the mixture of the base (half) and the Laplace approximations of the
    ``missed`` optima of ``base.modes`` (half, shared equally), and defensive like
    :meth:`MixtureBase.gaussian`, so that a bootstrap refit keeps half of it.

    Parameters
    ----------
    base : Base
        A base with ``modes``.
    missed : array_like of bool, shape (mode,)
        Which optima to add (:func:`~pymc_tempering.diagnostics.missed_modes`).
    """
    index = np.flatnonzero(missed)
    if base.modes is None or index.size == 0:
        raise ValueError("widen_base needs a base with modes and at least one missed optimum.")
    laplace = [Base(mean=base.modes.points[i], cov=base.modes.cov[i]) for i in index]
    parts = [(1 - DEFENSIVE_WEIGHT, base)] + [(DEFENSIVE_WEIGHT / index.size, c) for c in laplace]
    mean, cov = MixtureBase._moments(parts)
    return Base(
        mean=mean,
        cov=cov,
        log_zeta=base.log_zeta,
        method=f"{base.method}, widened to {index.size} missed optima",
        defensive_weight=DEFENSIVE_WEIGHT,
        modes=base.modes,
        spikes=base.spikes,
    )


@reproducible
def estimate_log_zeta(target: Target, base: Base, n: int = 1000, random_seed=None) -> float:
    """Importance-sampling estimate of the target's log normaliser with the base as proposal.

    ``log((1/n) sum_i p(x_i) / q(x_i))`` with ``x_i ~ q``: a stochastic lower bound on log Z,
    tighter than the ELBO. Used as ``log_zeta`` when a base carries none.

    Parameters
    ----------
    target : Target
        The model's log density on the flat unconstrained space.
    base : Base
        The proposal, on the same space.
    n : int
        Number of base draws.
    random_seed : int or numpy.random.Generator, optional

    Returns
    -------
    float
        The estimate of log Z. Draws where the target's log density is not finite count as zero
        weight (with a warning).
    """
    x = base.sample(n, random_seed=random_seed)
    log_ratio = target.logp(x) - base.logp(x)
    log_ratio = log_ratio[np.isfinite(log_ratio)]
    if log_ratio.size == 0:
        raise ValueError("The target log density is not finite at any draw of the base.")
    if log_ratio.size < n:
        warn(f"{n - log_ratio.size} of {n} base draws have a non-finite target log density.")
    return float(logsumexp(log_ratio) - np.log(n))


def prepare_base(model, base, log_zeta, random_seed, progressbar):
    """The set-up shared by every method that bridges to a base (CT, Gibbs CT, AIS, ST).

    Checks the model, fits a base when none is given (``fit_base(method="laplace")``), takes
    the moment-matched
    Gaussian of a :class:`MixtureBase` (:meth:`MixtureBase.gaussian`: one connected density,
    which NUTS and the HMC kernels cross freely at inverse temperature 0), and chooses
    ``log_zeta`` (see :func:`~pymc_tempering.sample_ct`).

    Returns
    -------
    target : Target
    base : Base
    log_zeta : float
    sample_seed : int or None
        The seed left for the sampler.
    """
    model = modelcontext(model)
    target = Target(model)
    target.require_exact("Tempering from a base (continuous tempering, AIS, simulated tempering)")
    fit_seed, zeta_seed, sample_seed = split_seed(random_seed, 3)
    given = base is not None
    if not given:
        base = _fit_base(target, "laplace", random_seed=fit_seed, progressbar=progressbar)
    check_base(target, base)
    if isinstance(base, MixtureBase):
        base = base.gaussian()
    if given and base.modes is None and not base.spikes:
        # The optima and spikes that diagnose compares the run with. A base fitted here carries
        # its own search's (no optimum where no run converged: searching again with another
        # seed, as this did, took 0.35 to 0.5 s of the radon models' 7 to 11 and found none
        # either).
        modes, _, _, spikes = _search(target, N_MODE_STARTS, fit_seed)
        base = replace(base, modes=modes, spikes=spikes)
    if log_zeta is None:
        # Both the ELBO and the importance-sampling estimate are (stochastic) lower bounds on
        # log Z; the tighter one keeps beta from piling up at 1 (section 6 of the paper).
        log_zeta = estimate_log_zeta(target, base, random_seed=zeta_seed)
        if base.log_zeta is not None:
            log_zeta = max(log_zeta, base.log_zeta)
    return target, base, float(log_zeta), sample_seed
