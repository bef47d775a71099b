"""A run as the checks read it: each result group through its one typed reader, read once.

The checks never look a group or an attr up by name: a :class:`Run` reads the result's root
attrs, its ``posterior`` and ``sample_stats``, its ``base`` group
(:func:`~pymc_tempering.results.read_base`) and its ``coverage`` group
(:func:`~pymc_tempering.coverage.read_coverage`), each on first use, and keeps what several
checks share (the flat draws, the temperature's ends). Its ``has_*`` methods say what a run
holds: they are the records' ``applies``.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
from xarray import DataTree

from pymc_tempering.coverage import Beyond, read_coverage
from pymc_tempering.results import (
    INVERSE_TEMPERATURE,
    BaseRecord,
    flat_draws_from_result,
    read_base,
)

__all__ = ["Run"]


class Run:
    """The typed reading of one result that the checks share.

    Parameters
    ----------
    idata : xarray.DataTree
        A result of a pymc_tempering method.
    near : float
        Width of the bands at beta = 0 and beta = 1.
    """

    def __init__(self, idata: DataTree, near: float = 0.1):
        self.idata = idata
        self.near = float(near)
        self.cache: dict = {}  # what the checks of one record group compute once

    # -- root attrs ----------------------------------------------------------------------------
    @property
    def attrs(self):
        return self.idata.attrs

    @property
    def method(self) -> str | None:
        return self.attrs.get("method")

    def _number(self, name: str) -> float | None:
        """The root attr ``name`` as a float, or None without it."""
        value = self.attrs.get(name)
        return None if value is None else float(value)

    @property
    def log_z(self) -> float | None:
        """The run's pooled log marginal likelihood, or None."""
        return self._number("log_marginal_likelihood")

    @property
    def log_z_se(self) -> float | None:
        return self._number("log_marginal_likelihood_se")

    @property
    def target_se(self) -> float | None:
        """The standard error of log Z the run was asked for (continuous tempering), or None."""
        return self._number("target_se")

    @property
    def improper_prior(self) -> str | None:
        """The variables with an improper prior, named, or None."""
        return self.attrs.get("improper_prior")

    @property
    def flat_directions(self) -> int | None:
        value = self._number("flat_directions")
        return None if value is None else int(value)

    @property
    def two_estimators(self) -> tuple[float, float, float, float] | None:
        """The log Z of the run's path and of its regions' masses, with their standard errors
        (``log_marginal_likelihood_path``, ``_regions`` and their ``_se``), or None."""
        names = ("path", "path_se", "regions", "regions_se")
        values = tuple(self._number(f"log_marginal_likelihood_{n}") for n in names)
        return None if None in values else values

    @property
    def funnel_correction(self) -> float | None:
        return self._number("funnel_correction")

    # -- posterior and sample_stats ------------------------------------------------------------
    def _stat(self, name: str) -> np.ndarray | None:
        if "sample_stats" not in self.idata.children or name not in self.idata["sample_stats"]:
            return None
        var = self.idata["sample_stats"][name]
        if set(var.dims) != {"chain", "draw"}:
            return None
        return var.transpose("chain", "draw").values

    @cached_property
    def beta(self) -> np.ndarray | None:
        """The inverse temperature per draw ``(chain, draw)``, or None (no tempering variable,
        or one per pseudo-sample)."""
        if "posterior" not in self.idata.children:
            return None
        post = self.idata["posterior"]
        if INVERSE_TEMPERATURE not in post or set(post[INVERSE_TEMPERATURE].dims) != {"chain", "draw"}:
            return None
        return post[INVERSE_TEMPERATURE].transpose("chain", "draw").values

    @cached_property
    def diverging(self) -> np.ndarray | None:
        """Divergent transitions after tuning ``(chain, draw)``, or None."""
        d = self._stat("diverging")
        return None if d is None else d.astype(bool)

    @cached_property
    def log_weight(self) -> np.ndarray | None:
        """Log importance weights ``(chain, draw)``, or None (none, or one per pseudo-sample)."""
        return self._stat("log_weight")

    @cached_property
    def log_base_weight(self) -> np.ndarray | None:
        """Continuous tempering's log weights towards beta = 0 ``(chain, draw)``, or None. Their
        presence says the weights are probabilities ``p(beta = 1 | x) <= 1``."""
        return self._stat("log_base_weight")

    # -- the base and coverage groups ----------------------------------------------------------
    @cached_property
    def base(self) -> BaseRecord | None:
        """The ``base`` group, or None."""
        return read_base(self.idata)

    @cached_property
    def coverage(self) -> Beyond | None:
        """The ``coverage`` group (mass beyond the draws), or None."""
        return read_coverage(self.idata)

    @cached_property
    def flat_draws(self) -> np.ndarray:
        """The flat unconstrained draws ``(chain, draw, ndim)`` (a result with a base group)."""
        return flat_draws_from_result(self.idata)

    # -- what several checks need ---------------------------------------------------------------
    @property
    def stratified(self) -> bool:
        """Whether the modes' masses were importance-sampled, each region with draws of its
        own (``mode_probabilities`` found by importance sampling, and ``mode_draws``): the
        summaries then hold each region's mass however rarely the chains reached it."""
        children = self.idata.children
        return ("mode_draws" in children and "mode_probabilities" in children
                and self.idata["mode_probabilities"].attrs.get("method") == "importance sampling")

    @property
    def tempered(self) -> bool:
        """Whether the run bridges a base and the target with weights towards both ends
        (continuous tempering: the base-moment, mode and chain-agreement checks)."""
        return self.log_weight is not None and self.log_base_weight is not None

    # -- what the checks apply to (each record's ``applies``) ------------------------------------
    def has_improper(self) -> bool:
        """A model with an improper prior."""
        return self.improper_prior is not None

    def has_flat_directions(self) -> bool:
        """An improper prior whose flat directions were counted."""
        return self.improper_prior is not None and self.flat_directions is not None

    def has_coverage(self) -> bool:
        """A coverage group and a log Z to compare it with."""
        return self.coverage is not None and self.log_z is not None

    def has_target_se(self) -> bool:
        """A standard error of log Z asked for, and one given."""
        return self.target_se is not None and self.log_z_se is not None

    def has_two_estimators(self) -> bool:
        """The path's and the regions' log Z."""
        return self.two_estimators is not None

    def has_beta(self) -> bool:
        """An inverse temperature per draw."""
        return self.beta is not None

    def has_diverging(self) -> bool:
        """The divergent transitions recorded."""
        return self.diverging is not None

    def has_weights(self) -> bool:
        """One log weight per draw."""
        return self.log_weight is not None

    def has_tempered_base(self) -> bool:
        """Weights towards both ends of a tempered path, and its base."""
        return self.tempered and self.base is not None

    def has_optima(self) -> bool:
        """A tempered run whose base holds optima."""
        return self.has_tempered_base() and self.base.optima is not None

    def has_funnels(self) -> bool:
        """A tempered run whose base holds spikes judged against the draws."""
        return self.has_tempered_base() and self.base.funnels is not None

    def has_tempered_base_and_beta(self) -> bool:
        """A tempered run with its base and an inverse temperature per draw."""
        return self.has_tempered_base() and self.beta is not None

    def has_chains(self) -> bool:
        """A tempered run of more than one chain."""
        return self.tempered and self.log_weight.shape[0] > 1
