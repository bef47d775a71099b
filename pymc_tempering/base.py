"""Gaussian base densities on the flat unconstrained space, and how they are fitted.

A base is the normalised density that the tempering methods bridge to (psi in the continuous
tempering paper). It carries an approximation ``log_zeta`` of the target's log normaliser.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.model import modelcontext
from scipy import linalg
from scipy.special import logsumexp

from pymc_tempering.target import Target

__all__ = ["Base", "fit_base", "estimate_log_zeta"]

_LOG_2PI = float(np.log(2.0 * np.pi))


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
    """

    mean: np.ndarray
    cov: np.ndarray
    log_zeta: float | None = None
    method: str = "moments"
    diagonal: bool = False
    _scale_tril: np.ndarray = field(init=False, repr=False)
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
        if self.log_zeta is not None and not np.isfinite(self.log_zeta):
            raise ValueError(f"log_zeta must be finite, got {self.log_zeta}.")
        for name, value in [
            ("mean", mean),
            ("cov", cov),
            ("diagonal", diagonal),
            ("_scale_tril", scale_tril),
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
            - np.sum(np.log(np.diag(self._scale_tril)))
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
        const = -np.sum(np.log(np.diag(self._scale_tril))) - 0.5 * self.ndim * _LOG_2PI
        if not self.diagonal:
            flat = pt.concatenate([p.ravel() for p in pieces]) if len(pieces) > 1 else pieces[0]
            z = pt.dot(pt.constant(self._precision_tril), flat.ravel() - self.mean)
            return -0.5 * pt.sum(z**2) + const
        quad, start, std = 0.0, 0, self.std
        for piece, shape, size in zip(pieces, shapes, sizes, strict=True):
            mean = self.mean[start : start + size].reshape(shape)
            sd = std[start : start + size].reshape(shape)
            quad = quad + pt.sum(((piece - mean) / sd) ** 2)
            start += size
        return -0.5 * quad + const

    def sample(self, n: int, random_seed=None) -> np.ndarray:
        """``n`` independent draws, shape ``(n, ndim)``."""
        rng = np.random.default_rng(random_seed)
        eps = rng.standard_normal((int(n), self.ndim))
        return self.mean + eps @ self._scale_tril.T


def fit_base(
    model: pm.Model | None = None,
    method: str = "advi",
    n: int = 10_000,
    random_seed=None,
    progressbar: bool = True,
    **fit_kwargs,
) -> Base:
    """Fit a Gaussian base density to a PyMC model.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the context when omitted. It is not modified.
    method : {"advi", "fullrank_advi", "prior"}
        ``"advi"`` (mean-field) and ``"fullrank_advi"`` run :func:`pymc.fit`; ``log_zeta`` is
        then the ELBO averaged over the last 10% of the iterations. ``"prior"`` moment-matches a
        Gaussian to ``n`` draws of the prior on the unconstrained space (wide, so it covers modes
        that a variational fit misses; potentials are not part of the prior and are ignored); its
        ``log_zeta`` is left unset.
    n : int
        Iterations of the optimiser, or prior draws for ``"prior"``.
    random_seed : int, optional
    progressbar : bool
    **fit_kwargs
        Passed to :func:`pymc.fit` (for example ``obj_optimizer``).

    Returns
    -------
    Base

    Raises
    ------
    ValueError
        For a model :class:`~pymc_tempering.Target` refuses, an unknown method, or a fit that
        diverged to NaN.
    """
    model = modelcontext(model)
    target = Target(model)
    if method == "prior":
        return _fit_prior(target, n, random_seed)
    if method not in ("advi", "fullrank_advi"):
        raise ValueError(f"Unknown base method {method!r}; use 'advi', 'fullrank_advi' or 'prior'.")
    try:
        approx = pm.fit(
            n,
            method=method,
            model=model,
            random_seed=random_seed,
            progressbar=progressbar,
            **fit_kwargs,
        )
    except FloatingPointError as err:
        raise ValueError(
            f"The {method} fit diverged to NaN, so it cannot serve as a base. Check the model "
            "for regions where its log density is undefined, or pass a smaller learning rate "
            "(obj_optimizer=pm.adam(learning_rate=...)) or another method."
        ) from err
    hist = np.asarray(approx.hist, dtype=float)
    tail = hist[-max(1, len(hist) // 10) :]
    group = approx.groups[0]
    mean_flat = np.asarray(group.mean.eval(), dtype=float)
    cov_flat = np.asarray(group.cov.eval(), dtype=float)
    if not (np.all(np.isfinite(tail)) and np.all(np.isfinite(mean_flat))):
        raise ValueError(
            f"The {method} fit diverged (non-finite ELBO or parameters), so it cannot serve as a "
            "base. Try a smaller learning rate or another method."
        )
    # Reorder from the approximation's ordering to the Target's flat order.
    index = np.concatenate(
        [np.arange(group.ordering[name][1].start, group.ordering[name][1].stop) for name in target.names]
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


def _fit_prior(target: Target, n: int, random_seed) -> Base:
    model = target.model
    outputs = []
    for rv in model.free_RVs:
        transform = model.rvs_to_transforms.get(rv)
        outputs.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
    try:
        draw_fn = pm.compile(inputs=[], outputs=outputs, random_seed=random_seed)
        draws = np.array(
            [np.concatenate([np.ravel(v) for v in draw_fn()]) for _ in range(int(n))], dtype=float
        )
    except NotImplementedError as err:
        raise ValueError(
            "The model's prior cannot be drawn from (an improper or custom prior without a "
            "random generator), so method='prior' is unavailable; use 'advi'."
        ) from err
    # Value variables are listed in the same order as free_RVs.
    if not np.all(np.isfinite(draws)):
        raise ValueError("Prior draws on the unconstrained space are not all finite.")
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    return Base(mean=draws.mean(axis=0), cov=cov, log_zeta=None, method="prior")


def estimate_log_zeta(target: Target, base: Base, n: int = 1000, random_seed=None) -> float:
    """Importance-sampling estimate of the target's log normaliser with the base as proposal.

    ``log((1/n) sum_i p(x_i) / q(x_i))`` with ``x_i ~ q``: a stochastic lower bound on log Z,
    tighter than the ELBO. Used as ``log_zeta`` when a base carries none.
    """
    x = base.sample(n, random_seed=random_seed)
    log_ratio = target.logp(x) - base.logp(x)
    log_ratio = log_ratio[np.isfinite(log_ratio)]
    if log_ratio.size == 0:
        raise ValueError("The target log density is not finite at any draw of the base.")
    if log_ratio.size < n:
        warnings.warn(
            f"{n - log_ratio.size} of {n} base draws have a non-finite target log density.",
            stacklevel=2,
        )
    return float(logsumexp(log_ratio) - np.log(n))
