"""The one path of the model-transformation methods: build, sample, weigh, judge, warn.

Joint continuous tempering, Gibbs continuous tempering and pseudo-extended MCMC each turn the
user's model into an extended PyMC model and sample it with :func:`pymc.sample`, so every NUTS
PyMC runs (its own, nutpie, NumPyro) runs them unchanged. What they share is written here once:

- :func:`run_extended`: one run. The method's ``build(state)`` gives the extended model (the
  state is what a run of the method is built from: a base and ``log zeta`` for continuous
  tempering, nothing for pseudo-extended MCMC), kept for later runs under the method's
  ``key(state)`` with the parts that change from run to run as one shared vector, which
  ``data(state)`` sets (:mod:`pymc_tempering.extended.compiled`: one compilation for all the
  runs); NUTS samples it, storing the free variables only
  (:func:`~pymc_tempering.extended.compiled.stored_variables`), with the keywords every method
  passes (:func:`~pymc_tempering.contract.pm_sample_kwargs`); the method's ``weigh`` turns the
  draws into the library's result (weights, log Z, the method's groups).
- :func:`~pymc_tempering.report.warn_weighted`: the verdicts, once, after the method's last
  run (continuous tempering runs bootstrap rounds and extensions before it,
  :mod:`pymc_tempering.extended.rounds`).

The method supplies what differs in an :class:`ExtendedSampling`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import pymc as pm
from xarray import DataTree

from pymc_tempering.contract import pm_sample_kwargs
from pymc_tempering.extended.compiled import extended_model, sample_extended
from pymc_tempering.timing import phase

__all__ = ["ExtendedSampling", "run_extended"]


@dataclass(frozen=True)
class ExtendedSampling:
    """What a model-transformation method gives :func:`run_extended`.

    Attributes
    ----------
    method : str
        The result's ``attrs["method"]``.
    build : callable
        ``build(state) -> pymc.Model``: the extended model for one run.
    weigh : callable
        ``weigh(sampled, state, attrs, seed) -> DataTree``: the result of one run, from what
        :func:`pymc.sample` returned (its posterior holds the free variables of the extended
        model only: :func:`~pymc_tempering.extended.compiled.stored_variables`), with ``attrs``
        for its root and the run's seed (for any randomness of its own).
    chains : int
    nuts_sampler : str or None
        Passed to :func:`pymc.sample`.
    progressbar : bool
    sample_kwargs : dict
        Further :func:`pymc.sample` keywords, as the user gave them.
    attrs : dict
        Scalar settings for every run's result.
    steps : callable, optional
        ``steps(extended_model, target_accept)``, called in the extended model's context,
        returns the step methods for :func:`pymc.sample` (PyMC's own sampler). ``None``
        (default): PyMC's NUTS, or the external one ``nuts_sampler`` names, with
        ``target_accept`` among the :func:`pymc.sample` keywords.
    model : pymc.Model, optional
        The user's model, which the extended models are kept for.
    key : callable, optional
        ``key(state) -> hashable or None``: what fixes the extended model's graph for the
        state; runs with the same key (on the same ``model``) share one model and compilation,
        ``build`` being called for the first only. ``None`` (default, or returned): built for
        each run.
    data : callable, optional
        ``data(state) -> dict``: the values of the extended model's run-data variables
        (:func:`~pymc_tempering.extended.compiled.run_data`) for the state.
    sample : callable, optional
        ``sample(state, draws, tune, seed, target_accept) -> DataTree``: a sampler of the
        extended density of its own, in place of :func:`pymc.sample` on the extended model
        (which is then neither built nor compiled), returning what :func:`pymc.sample` would
        (continuous tempering's batched chains:
        :func:`~pymc_tempering.driver.tempered_chains.sample_tempered_chains`).
    """

    method: str
    build: Callable[[Any], pm.Model]
    weigh: Callable[..., DataTree]
    chains: int
    nuts_sampler: str | None
    progressbar: bool
    sample_kwargs: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    steps: Callable | None = None
    model: pm.Model | None = None
    key: Callable[[Any], Hashable | None] = lambda state: None
    data: Callable[[Any], dict] = lambda state: {}
    sample: Callable[..., DataTree] | None = None


def run_extended(
    sampling: ExtendedSampling, state, draws: int, tune: int, seed, target_accept: float | None
) -> DataTree:
    """One run of a model-transformation method: build, sample and weigh.

    Parameters
    ----------
    sampling : ExtendedSampling
    state
        What ``sampling.build`` and ``sampling.weigh`` take besides the draws.
    draws, tune : int
        Per chain, as in :func:`pymc.sample`.
    seed
        ``pm.sample``'s ``random_seed``; also handed to ``sampling.weigh``.
    target_accept : float or None
        NUTS's target acceptance rate (of the step methods, with ``sampling.steps``); ``None``
        leaves it to the :func:`pymc.sample` keywords (``nuts={"target_accept": ...}``).

    Returns
    -------
    xarray.DataTree
        ``sampling.weigh``'s result, whose attrs hold ``sampling.attrs``, ``draws`` and
        ``tune``. No warning is given here: :func:`~pymc_tempering.report.warn_weighted` gives
        them once, for the method's last run.
    """
    attrs = {**sampling.attrs, "draws": int(draws), "tune": int(tune)}
    if sampling.sample is not None:
        sampled = sampling.sample(state, draws, tune, seed, target_accept)
        with phase("weights"):
            return sampling.weigh(sampled, state, attrs, seed)
    key = sampling.key(state) if sampling.model is not None else None
    extended = extended_model(sampling.model, key, lambda: sampling.build(state))
    kwargs = dict(sampling.sample_kwargs)
    if sampling.steps is None and target_accept is not None:
        kwargs["target_accept"] = target_accept
    kwargs = pm_sample_kwargs(sampling.nuts_sampler, kwargs)
    with extended.lock:
        extended.set(sampling.data(state))
        step = None
        if sampling.steps is not None:
            with extended.model, phase("compile"):
                step = sampling.steps(extended.model, target_accept)
        sampled = sample_extended(
            extended, draws=draws, tune=tune, chains=sampling.chains, seed=seed,
            nuts_sampler=sampling.nuts_sampler, progressbar=sampling.progressbar, step=step,
            kwargs=kwargs,
        )
    with phase("weights"):
        return sampling.weigh(sampled, state, attrs, seed)
