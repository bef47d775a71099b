"""The one place that builds the result ``DataTree`` every method returns.

Layout (``docs/results.md`` describes it for users):

- ``posterior``: the original model's variables under their own names and dims, in constrained
  space, plus method variables (``inverse_temperature``, ``temperature_control``, ...);
- ``unconstrained_posterior``: the transformed value variables (``sigma_log__``, ...), so the
  flat unconstrained draws can be rebuilt without inverting transforms;
- ``sample_stats``: the sampler's stats, plus ``log_weight`` (chain, draw[, ...]) and
  ``log_marginal_likelihood`` (chain);
- ``observed_data`` / ``constant_data`` of the user's model;
- root ``attrs``: scalars only (pooled ``log_marginal_likelihood``, its ``_se``, ``method``,
  ``log_zeta``, the method's settings, and ``improper_prior`` naming the variables with an
  improper prior when the model has any: it then has no marginal likelihood).
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np
import pymc
import xarray as xr
from pymc.backends.arviz import (
    coords_and_dims_for_inferencedata,
    dict_to_dataset,
    find_constants,
    find_observations,
)
from xarray import DataTree

from pymc_tempering.target import Target, flat_directions

# Relative resolution of a reported log Z. A base proportional to the target up to rounding (the
# Laplace base of a Gaussian target) makes the Monte Carlo standard error vanish, while a model's
# log density is only as accurate as its constants: PyTensor makes a Python float with no
# fractional part (sigma=2e4, 2.0) a float32 constant, so log(sigma) carries float32 rounding,
# up to 6e-8 relative. The reported standard error is at least this times max(1, |log Z|).
# Where the terms of a log density cancel (log Z far smaller than its parts), rounding can
# exceed it.
NUMERICAL_RESOLUTION = 1e-7


def numerical_floor(log_z: float) -> float:
    """The least standard error reported for an estimate ``log_z`` of log Z (rounding)."""
    return NUMERICAL_RESOLUTION * max(1.0, abs(float(log_z)))

__all__ = [
    "build_result", "base_group", "check_result", "flat_draws_from_result", "METHOD_VARIABLES",
    "PSEUDO_SAMPLE", "constrained_draws", "draws_to_datatree", "rebuild_posterior", "add_rounds",
    "strata_group", "MODE_REGION", "flat_direction_count", "strata_problems",
    "strata_table", "PROBLEM", "require_group", "OTHER_MODE_REGION", "mode_draws_group", "read_mode_draws",
    "BaseRecord", "Optima", "Funnels", "read_base",
]

# The dimension of the regions of a stratified result (the ``mode_probabilities`` group), and
# that of its problems (its variable ``problems``).
MODE_REGION = "mode_region"
# the second dimension of the covariance of the regions' probabilities
OTHER_MODE_REGION = "other_mode_region"
PROBLEM = "problem"
_PROBLEMS = "problems"

# Names of the method variables a result's posterior may hold beside the model's own.
INVERSE_TEMPERATURE = "inverse_temperature"
TEMPERATURE_CONTROL = "temperature_control"
# The dimension of pseudo-samples (pseudo-extended MCMC) in the posterior and in log_weight.
PSEUDO_SAMPLE = "pseudo_sample"
METHOD_VARIABLES = frozenset({INVERSE_TEMPERATURE, TEMPERATURE_CONTROL})
# Stats every result's sample_stats holds (ArviZ's schema names), and the names other
# samplers give them (nutpie's, PyMC's HamiltonianMC's).
REQUIRED_STATS = ("diverging", "acceptance_rate", "lp")
_STAT_ALIASES = {"acceptance_rate": ("mean_tree_accept", "accept"), "lp": ("logp",)}


def _schema_stats(stats: xr.Dataset, method: str) -> xr.Dataset:
    """Add ArviZ's names for stats a sampler calls otherwise; refuse a result missing one."""
    for name, aliases in _STAT_ALIASES.items():
        found = [alias for alias in aliases if alias in stats]
        if name not in stats and found:
            stats[name] = stats[found[0]]
    missing = [name for name in REQUIRED_STATS if name not in stats]
    if missing:
        raise ValueError(f"The {method} sampler recorded no {missing} (every result needs them).")
    return stats


def _model_data_groups(target: Target) -> dict[str, xr.Dataset]:
    coords, dims = coords_and_dims_for_inferencedata(target.model)
    groups = {}
    for name, found in [
        ("observed_data", find_observations(target.model)),
        ("constant_data", find_constants(target.model)),
    ]:
        if found:
            groups[name] = dict_to_dataset(
                found, inference_library=pymc, coords=coords, dims=dims, sample_dims=[]
            )
    return groups


def _check_scalar_attrs(attrs: dict) -> dict:
    out = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, str | numbers.Number | bool):
            raise TypeError(f"Result attrs hold scalars only; {key!r} is {type(value).__name__}.")
        out[key] = value
    return out


def build_result(
    sampled: DataTree,
    target: Target,
    *,
    method: str,
    log_weight: np.ndarray | None = None,
    log_marginal_likelihood: tuple[float, float, np.ndarray] | None = None,
    attrs: dict | None = None,
    log_weight_dims: list[str] | None = None,
    extra_stats: dict[str, np.ndarray] | None = None,
    extra_groups: dict[str, xr.Dataset] | None = None,
    flat_directions: int | None = None,
) -> DataTree:
    """Turn a sampler's ``DataTree`` into the library's result layout.

    Parameters
    ----------
    sampled : xarray.DataTree
        What the sampler returned. Its ``posterior`` holds the original variables (under their
        own names) and, for transformed ones, the value variables under their value names.
    target : Target
        The user's model, for its observed and constant data and its transformed names.
    method : str
        The method's name, stored in ``attrs["method"]``.
    log_weight : ndarray, shape (chain, draw[, ...]), optional
        Unnormalised log importance weights of the draws. Default zeros: every draw weighs
        the same.
    log_marginal_likelihood : (estimate, standard_error, per_chain), optional
    attrs : dict, optional
        Further scalar settings for the root ``attrs``.
    log_weight_dims : list of str, optional
        Names of the dims of ``log_weight`` after ``(chain, draw)``, e.g. ``["pseudo_sample"]``;
        a dim the posterior also has takes its coords. Default ``log_weight_dim_0``, ...
    extra_stats : dict of name to ndarray (chain, draw), optional
        Further per-draw statistics of the method for ``sample_stats``.
    extra_groups : dict of name to xarray.Dataset, optional
        Further groups (e.g. ``bootstrap`` rounds).
    flat_directions : int, optional
        For a model with an improper prior, what :func:`flat_direction_count` found in the
        draws, stored in ``attrs["flat_directions"]`` beside ``improper_prior``.

    Returns
    -------
    xarray.DataTree
    """
    posterior = sampled["posterior"].to_dataset()
    moved = [name for name in target.transformed_names if name in posterior]
    groups: dict[str, xr.Dataset] = {"posterior": posterior.drop_vars(moved)}
    if moved:
        groups["unconstrained_posterior"] = posterior[moved]

    stats = sampled["sample_stats"].to_dataset() if "sample_stats" in sampled else xr.Dataset()
    chain_draw = {"chain": posterior["chain"], "draw": posterior["draw"]}
    if log_weight is None:
        log_weight = np.zeros((posterior.sizes["chain"], posterior.sizes["draw"]))
        log_weight_dims = []
    log_weight = np.asarray(log_weight, dtype=float)
    if log_weight_dims is None:
        extra_dims = [f"log_weight_dim_{i}" for i in range(log_weight.ndim - 2)]
    else:
        extra_dims = list(log_weight_dims)
        if len(extra_dims) != log_weight.ndim - 2:
            raise ValueError(
                f"log_weight has {log_weight.ndim - 2} dims after (chain, draw) but "
                f"log_weight_dims names {len(extra_dims)}."
            )
    weight_coords = dict(chain_draw)
    weight_coords.update({d: posterior[d] for d in extra_dims if d in posterior.coords})
    stats["log_weight"] = xr.DataArray(
        log_weight, dims=["chain", "draw", *extra_dims], coords=weight_coords
    )
    root_attrs = {"method": method}
    if target.improper_variables:
        root_attrs["improper_prior"] = ", ".join(target.improper_variables)
        if flat_directions is not None:
            root_attrs["flat_directions"] = int(flat_directions)
    if log_marginal_likelihood is not None:
        estimate, se, per_chain = log_marginal_likelihood
        stats["log_marginal_likelihood"] = xr.DataArray(
            np.asarray(per_chain, dtype=float), dims=["chain"], coords={"chain": posterior["chain"]}
        )
        root_attrs["log_marginal_likelihood"] = float(estimate)
        # No method resolves log Z below the accuracy of the log densities themselves.
        root_attrs["log_marginal_likelihood_se"] = max(float(se), numerical_floor(estimate))
    for name, values in (extra_stats or {}).items():
        stats[name] = xr.DataArray(np.asarray(values), dims=["chain", "draw"], coords=chain_draw)
    groups["sample_stats"] = _schema_stats(stats, method)
    groups.update(extra_groups or {})
    groups.update(_model_data_groups(target))

    root_attrs.update(attrs or {})
    tree = DataTree.from_dict({f"/{name}": ds for name, ds in groups.items()})
    tree.attrs = _check_scalar_attrs(root_attrs)
    return tree


def flat_direction_count(target: Target, x: np.ndarray, log_weight) -> int | None:
    """What a result stores as ``flat_directions``: for a model with an improper prior, how many
    coordinate directions of the flat draws ``x (chain, draw, ndim)`` weighted by
    ``log_weight (chain, draw)`` (zeros when None) the log density does not fall in
    (:func:`~pymc_tempering.target.flat_directions`: whether the joint density's integral, the
    normalizing constant, can be finite). None for a proper prior, or for weights with dims
    beyond ``(chain, draw)`` (pseudo-samples)."""
    x = np.asarray(x, dtype=float)
    lw = np.zeros(x.shape[:2]) if log_weight is None else np.asarray(log_weight, dtype=float)
    if not target.improper_variables or lw.ndim != 2:
        return None
    return flat_directions(target, x.reshape(-1, target.ndim), lw.ravel())


def base_group(
    target: Target, mean: np.ndarray, variance: np.ndarray, modes=None, funnels=None
) -> xr.Dataset:
    """The ``base`` group: a Gaussian base's mean and variances on the flat unconstrained space.

    Its coordinate ``flat_variable`` names the value variable of each flat element, so the
    flat draws can be rebuilt from the result alone (:func:`flat_draws_from_result`). With the
    base's :class:`~pymc_tempering.Modes`, it also holds the optima of its mode search:
    ``mode_point`` (mode, flat), ``mode_log_density``, ``mode_log_mass`` and ``mode_hits``
    (mode: the search's runs that reached each) and ``mode_variance`` (mode, flat: the
    diagonals of their Laplace covariances). With ``funnels`` (what
    :func:`~pymc_tempering.extended.funnel.funnel_mass` returned for the run), ``funnel_mass``,
    ``funnel_edge``, ``funnel_inner`` (the band's other end), ``funnel_index`` (the flat
    coordinate), ``funnel_mass_se`` and ``funnel_tail_ratio`` (NaN where the profile's tail is
    incomplete) (funnel), with the coordinate ``funnel_variable`` naming each spike's flat
    coordinate.
    """
    labels = np.repeat(np.array(target.names, dtype=object), target.sizes).astype(str)
    data = {"mean": ("flat", np.asarray(mean)), "variance": ("flat", np.asarray(variance))}
    if modes is not None:
        data["mode_point"] = (("mode", "flat"), modes.points)
        data["mode_log_density"] = ("mode", modes.log_density)
        data["mode_log_mass"] = ("mode", modes.log_mass)
        data["mode_hits"] = ("mode", modes.hits)
        data["mode_variance"] = (("mode", "flat"), np.diagonal(modes.cov, axis1=1, axis2=2))
    coords = {"flat_variable": ("flat", labels)}
    if funnels:
        data["funnel_mass"] = ("funnel", np.array([f.mass for f in funnels]))
        data["funnel_edge"] = ("funnel", np.array([f.edge for f in funnels]))
        data["funnel_inner"] = ("funnel", np.array([f.inner for f in funnels]))
        data["funnel_index"] = ("funnel", np.array([f.index for f in funnels], dtype=int))
        data["funnel_mass_se"] = ("funnel", np.array([f.mass_se for f in funnels]))
        data["funnel_tail_ratio"] = (  # NaN where the profile's tail is incomplete (no correction)
            "funnel", np.array([f.tail_ratio if f.complete else np.nan for f in funnels])
        )
        coords["funnel_variable"] = ("funnel", [target.flat_label(f.index) for f in funnels])
    return xr.Dataset(data, coords=coords)


class Optima(NamedTuple):
    """The optima a result's ``base`` group holds (:func:`base_group`), as arrays.

    Attributes
    ----------
    points : ndarray, shape (mode, flat)
    log_density, log_mass : ndarray, shape (mode,)
    hits : ndarray of int, shape (mode,)
        How many of the mode search's runs reached each.
    variance : ndarray, shape (mode, flat)
        The diagonals of their Laplace covariances.
    """

    points: np.ndarray
    log_density: np.ndarray
    log_mass: np.ndarray
    hits: np.ndarray
    variance: np.ndarray


class Funnels(NamedTuple):
    """The spikes a result's ``base`` group holds (:func:`base_group`), one entry each.

    ``tail_ratio`` is NaN where the profile's tail is incomplete (the log marginal likelihood
    is not corrected for that funnel); ``variable`` names each spike's flat coordinate.
    """

    mass: np.ndarray
    mass_se: np.ndarray
    edge: np.ndarray
    inner: np.ndarray
    index: np.ndarray
    tail_ratio: np.ndarray
    variable: np.ndarray


class BaseRecord(NamedTuple):
    """A result's ``base`` group, read back (:func:`read_base`).

    Attributes
    ----------
    mean, variance : ndarray, shape (flat,)
        The Gaussian base's moments on the flat unconstrained space.
    labels : ndarray of str, shape (flat,)
        The value variable of each flat element.
    optima : Optima or None
        The optima of the base's mode search and those its run reached; None without.
    funnels : Funnels or None
        The spikes the mode search climbed, judged against the run's draws; None without.
    """

    mean: np.ndarray
    variance: np.ndarray
    labels: np.ndarray
    optima: Optima | None
    funnels: Funnels | None


def read_base(idata) -> BaseRecord | None:
    """A result's ``base`` group (written by :func:`base_group`) as a :class:`BaseRecord`;
    None for a result without one. The one reader of that group: nothing else reads its
    variables by name."""
    if "base" not in idata.children:
        return None
    group = idata["base"]
    optima = funnels = None
    if "mode_point" in group:
        optima = Optima(
            points=group["mode_point"].values,
            log_density=group["mode_log_density"].values,
            log_mass=group["mode_log_mass"].values,
            hits=group["mode_hits"].values.astype(int),
            variance=group["mode_variance"].values,
        )
    if "funnel_mass" in group:
        funnels = Funnels(
            mass=group["funnel_mass"].values,
            mass_se=group["funnel_mass_se"].values,
            edge=group["funnel_edge"].values,
            inner=group["funnel_inner"].values,
            index=group["funnel_index"].values.astype(int),
            tail_ratio=group["funnel_tail_ratio"].values,
            variable=group["funnel_variable"].values.astype(str),
        )
    return BaseRecord(
        mean=group["mean"].values,
        variance=group["variance"].values,
        labels=group["flat_variable"].values.astype(str),
        optima=optima,
        funnels=funnels,
    )


def check_result(idata) -> None:
    """Refuse what is not a result ``DataTree``, saying what to pass instead (``TypeError``)."""
    if isinstance(idata, DataTree):
        return
    hint = (
        " fit_ergodic returns an approximation, as pm.fit does: pass its .sample(), a DataTree."
        if hasattr(idata, "sample") and hasattr(idata, "stein_gap")
        else ""
    )
    raise TypeError(
        f"Expected the xarray.DataTree a pymc_tempering method returns, got "
        f"{type(idata).__name__}.{hint}"
    )


def require_group(idata, group: str, var: str | None = None) -> None:
    """Refuse a result without the group ``group`` (and its variable ``var``), saying what to
    pass instead (``ValueError``)."""
    check_result(idata)
    if group not in idata.children or (var is not None and var not in idata[group]):
        what = f"{group}.{var}" if var else group
        raise ValueError(
            f"The result has no {what}; pass a DataTree returned by a pymc_tempering method."
        )


def flat_draws_from_result(idata: DataTree) -> np.ndarray:
    """Flat unconstrained draws ``(chain, draw, ndim)`` of a result that has a ``base`` group."""
    names = list(dict.fromkeys(read_base(idata).labels))
    parts = []
    for name in names:
        group = (
            "unconstrained_posterior"
            if "unconstrained_posterior" in idata.children and name in idata["unconstrained_posterior"]
            else "posterior"
        )
        arr = idata[group][name].transpose("chain", "draw", ...).values
        parts.append(np.asarray(arr, dtype=float).reshape(arr.shape[0], arr.shape[1], -1))
    return np.concatenate(parts, axis=-1)


def constrained_draws(target: Target, x: np.ndarray) -> dict[str, np.ndarray]:
    """The model's constrained variables and deterministics at flat draws ``(..., ndim)``.

    The flat draws split (:meth:`~pymc_tempering.target.Target.unravel`) where the model has no
    transforms and no deterministics; otherwise one call per draw of the function the
    :class:`Target` compiled with its log density: a batched function (the graph vectorised
    over draws) would cost a compilation of its own, far longer on a large model than the
    calls.
    """
    x = np.asarray(x, dtype=float)
    if not target.transformed_names and not target.model.deterministics:  # nothing to map
        return {name: value.copy() for name, value in target.unravel(x).items()}
    lead = x.shape[:-1]
    rows = [target.constrained(row) for row in x.reshape(-1, target.ndim)]
    # each variable's shape from the first draw; without draws, from one call at the origin
    first = rows[0] if rows else target.constrained(np.zeros(target.ndim))
    return {
        name: np.reshape([row[name] for row in rows], lead + np.shape(first[name]))
        for name in target.constrained_names
    }


def draws_to_datatree(
    target: Target,
    x: np.ndarray,
    *,
    extra_posterior: dict[str, np.ndarray] | None = None,
    sample_stats: dict[str, np.ndarray] | None = None,
) -> DataTree:
    """Pack flat draws ``x`` of shape ``(chain, draw, ndim)`` like PyMC's converter.

    The ``posterior`` holds the model's variables under their own names and dims, the
    transformed value variables under their value names (``s_log__``) and ``extra_posterior``;
    ``sample_stats`` holds ``sample_stats``, each shaped ``(chain, draw, ...)``.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 3 or x.shape[-1] != target.ndim:
        raise ValueError(f"Expected draws of shape (chain, draw, {target.ndim}), got {x.shape}.")
    coords, dims = coords_and_dims_for_inferencedata(target.model)
    posterior = constrained_draws(target, x)
    values = target.unravel(x)
    for name in target.transformed_names:
        posterior[name] = values[name]
    posterior.update(extra_posterior or {})
    post_ds = dict_to_dataset(posterior, inference_library=pymc, coords=coords, dims=dims)
    groups = {"/posterior": post_ds}
    if sample_stats:
        groups["/sample_stats"] = dict_to_dataset(
            sample_stats, inference_library=pymc, coords=coords, dims={}
        )
    return DataTree.from_dict(groups)


def rebuild_posterior(
    sampled: DataTree, target: Target, x: np.ndarray, extra_posterior: dict[str, np.ndarray]
) -> DataTree:
    """``sampled`` with its ``posterior`` rebuilt from the flat draws ``x`` (chain, draw, ndim).

    The new posterior is :func:`draws_to_datatree`'s (the model's variables, constrained, with
    their dims, and the transformed value variables under their value names) with
    ``extra_posterior`` beside them and the old posterior's attrs; the other groups are kept.
    """
    posterior = sampled["posterior"]
    rebuilt = draws_to_datatree(target, x, extra_posterior=extra_posterior)["posterior"]
    rebuilt = rebuilt.to_dataset()
    rebuilt.attrs = dict(posterior.attrs)
    groups = {f"/{name}": sampled[name].to_dataset() for name in sampled.children}
    groups["/posterior"] = rebuilt
    return DataTree.from_dict(groups)


def add_rounds(result: DataTree, rounds: list[dict], attrs: dict) -> DataTree:
    """Record a method's earlier runs and its settings in ``result`` (in place; returned).

    ``rounds`` holds one record of scalars per earlier run, all with the same keys; they become
    the ``bootstrap`` group (dim ``round``), absent when there is none. ``attrs`` are scalar
    settings for the root attrs (a ``None`` is left out).
    """
    if rounds:
        result["bootstrap"] = DataTree(
            xr.Dataset({k: ("round", [r[k] for r in rounds]) for k in rounds[0]})
        )
    result.attrs.update(_check_scalar_attrs(attrs))
    return result


def strata_group(strata) -> xr.Dataset:
    """The ``mode_probabilities`` group of a stratified result, from a
    :class:`~pymc_tempering.stratification.Strata`: per region (dim ``mode_region``, coordinate
    ``optima`` naming the mode search's optima it holds) ``probability``, ``standard_error``,
    the weighted draws' own ``draws_probability`` and ``draws_standard_error``, the importance
    sampling's ``log_mass``, ``log_mass_se`` and ``khat``; ``covariance`` (dims ``mode_region``,
    ``other_mode_region``): the covariance of the probabilities' errors; ``problems`` (dim
    ``problem``, empty when there is none): one sentence per problem of the stratification;
    attrs ``method``. :func:`strata_problems` reads the problems back and :func:`strata_table`
    the regions."""
    names = ["probability", "standard_error", "draws_probability", "draws_standard_error",
             "log_mass", "log_mass_se", "khat"]
    data = {name: (MODE_REGION, np.asarray(getattr(strata, name), dtype=float)) for name in names}
    data[_PROBLEMS] = (PROBLEM, np.array(list(strata.problems), dtype=str))
    data["covariance"] = ((MODE_REGION, OTHER_MODE_REGION), np.asarray(strata.covariance, float))
    ds = xr.Dataset(data, coords={"optima": (MODE_REGION, list(strata.optima))})
    ds.attrs = {"method": strata.method}
    return ds


MODE_DRAW_LOG_WEIGHT = "mode_draw_log_weight"
MODE_DRAW_REGION = "mode_draw_region"


def mode_draws_group(target: Target, mode_draws) -> xr.Dataset:
    """The ``mode_draws`` group of a stratified result, from
    :attr:`~pymc_tempering.stratification.Strata.mode_draws`: each region's proposal draws, as
    one chain of the posterior's variables (constrained,
    with their dims; :func:`draws_to_datatree`), with their log importance weights
    (``mode_draw_log_weight``) and regions (``mode_draw_region``). :func:`read_mode_draws`
    reads it."""
    z, log_ratio, region = mode_draws
    ds = draws_to_datatree(target, np.asarray(z, dtype=float)[None])["posterior"].to_dataset()
    ds[MODE_DRAW_LOG_WEIGHT] = (("chain", "draw"), np.asarray(log_ratio, dtype=float)[None])
    ds[MODE_DRAW_REGION] = (("chain", "draw"), np.asarray(region, dtype=int)[None])
    return ds


def read_mode_draws(idata) -> tuple[xr.Dataset, np.ndarray, np.ndarray] | None:
    """A result's ``mode_draws`` (:func:`mode_draws_group`): the draws' variables, log weights
    and regions, each ``(chain, draw, ...)`` with one chain; None without."""
    if "mode_draws" not in idata.children:
        return None
    ds = idata["mode_draws"].to_dataset()
    log_weight = ds[MODE_DRAW_LOG_WEIGHT].transpose("chain", "draw").values
    region = ds[MODE_DRAW_REGION].transpose("chain", "draw").values
    return ds.drop_vars([MODE_DRAW_LOG_WEIGHT, MODE_DRAW_REGION]), log_weight, region


def strata_problems(group) -> list[str]:
    """The stratification's problems that a ``mode_probabilities`` group holds
    (:func:`strata_group`)."""
    return [str(problem) for problem in group[_PROBLEMS].values]


def strata_table(group: DataTree) -> xr.Dataset:
    """The regions of a result's ``mode_probabilities`` group (:func:`strata_group`): its
    variables along ``mode_region`` alone and its attrs, without the problems and the
    covariance."""
    return group.to_dataset().drop_dims([PROBLEM, OTHER_MODE_REGION])
