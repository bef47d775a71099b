"""The record every problem is: a name, a family, a model builder and its truths.

A harness iterates over these records; a test picks one by name. Truths are computed on first
use and cached (a quadrature or an enumeration can take seconds to a minute).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pymc as pm

__all__ = ["Nested", "Problem", "Truth"]


class Truth(NamedTuple):
    """What is known exactly about a problem's posterior (None where nothing is).

    Attributes
    ----------
    log_z : float or None
        The log marginal likelihood (for a model whose density is not a prior times a
        likelihood, its log normalizing constant).
    mode_probabilities : numpy.ndarray or None
        The posterior mass of each mode's region, in the order of :attr:`Problem.modes`.
    moments : dict or None
        Named exact moments (``{"mean": ..., "cov": ...}`` or the problem's own names).
    """

    log_z: float | None = None
    mode_probabilities: np.ndarray | None = None
    moments: dict | None = None


@dataclass(frozen=True)
class Nested:
    """The problem in constrained space for a sampler that needs a prior transform (dynesty).

    ``params`` names the model's free variables and their shapes, in the order of the flat
    vector ``theta`` that ``loglike``, ``prior_transform`` and ``log_prior`` use. ``loglike``
    and ``log_prior`` take ``theta`` of shape ``(..., ndim)`` and return shape ``(...)``;
    ``prior_transform`` maps uniforms of that shape to ``theta``. ``mc_check(rng, n)`` is an
    independent Monte Carlo estimate ``(log Z, se, how)`` of the truth, or None where none is
    feasible; ``cross_check()`` returns lines of further checks of it.
    """

    params: tuple[tuple[str, tuple[int, ...]], ...]
    loglike: Callable[[np.ndarray], np.ndarray]
    prior_transform: Callable[[np.ndarray], np.ndarray]
    log_prior: Callable[[np.ndarray], np.ndarray]
    mc_check: Callable | None = None
    cross_check: Callable[[], list[str]] | None = None

    @property
    def ndim(self) -> int:
        """The length of the flat parameter vector."""
        return sum(math.prod(shape) for _, shape in self.params)

    def point(self, theta) -> dict:
        """The flat ``theta`` as a point dict of the model's (constrained) variables."""
        theta, out, i = np.asarray(theta, dtype=float), {}, 0
        for name, shape in self.params:
            size = math.prod(shape)
            out[name] = theta[i : i + size].reshape(shape)
            i += size
        return out


@dataclass(frozen=True)
class Problem:
    """A model with a known answer.

    Parameters
    ----------
    name : str
        Unique among the problems (:data:`pymc_tempering.problems.PROBLEMS`).
    family : str
        The module that defines it (``"radon"``, ``"mixtures"``, ...).
    build : callable
        ``build() -> pymc.Model``, a fresh model at each call.
    truth : callable
        ``truth() -> Truth``; cached by :attr:`truths`.
    description : str
    modes : tuple of str
        The names of the modes whose probabilities ``truth`` gives, in its order.
    label : callable, optional
        ``label(draws) -> labels``: posterior draws (a dict of name -> array ``(chain, draw,
        ...)``) to the integer mode of each draw ``(chain, draw)``.
    nested : Nested, optional
        The same problem for nested sampling.
    """

    name: str
    family: str
    build: Callable[[], pm.Model]
    truth: Callable[[], Truth]
    description: str = ""
    modes: tuple[str, ...] = ()
    label: Callable[[dict], np.ndarray] | None = None
    nested: Nested | None = None
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def truths(self) -> Truth:
        """:attr:`truth`'s result, computed once."""
        if "truth" not in self._cache:
            self._cache["truth"] = self.truth()
        return self._cache["truth"]

    @property
    def log_z(self) -> float | None:
        """The exact log Z, or None."""
        return self.truths.log_z

