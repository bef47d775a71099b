"""Weighted posterior summaries, expectations and resamples of a result.

Every method's result weighs its draws (``sample_stats.log_weight``); a stratified one holds
its modes' probabilities too (the ``mode_probabilities`` group) and, for the modes its chains
barely reached, draws of their own (the ``mode_draws`` group). These functions read all of
them: :func:`weighted_summary` (ArviZ's summary columns, weighted),
:func:`weighted_expectation` (any function of the draws) and :func:`resample` (unweighted
draws for ArviZ's plots and summaries).

Why by hand: ArviZ's summaries and ESS take equally weighted draws; the weighted means here use
ArviZ's multi-chain ESS for their standard errors (:mod:`pymc_tempering.estimators`) and
ArviZ's resampling.
"""

from __future__ import annotations

import itertools

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import logsumexp
from xarray import DataTree

from pymc_tempering.contract import split_seed
from pymc_tempering.estimators import kish_ess, pooled_weights, stratified_mean, weighted_mean
from pymc_tempering.results import (
    METHOD_VARIABLES,
    PSEUDO_SAMPLE,
    check_result,
    read_mode_draws,
    require_group,
)

__all__ = ["resample", "weighted_expectation", "weighted_summary"]


def _verdict_attrs(idata: DataTree) -> dict:
    """The method's verdict on its posterior (:func:`~pymc_tempering.posterior_check`) from a result's attrs,
    where it gave one."""
    keys = ("posterior_reliable", "posterior_problems")
    return {key: idata.attrs[key] for key in keys if key in idata.attrs}


def _log_weight(idata: DataTree) -> np.ndarray:
    """Log weights ``(chain, draw)``, or ``(chain, draw, pseudo_sample)`` for pseudo-samples."""
    require_group(idata, "sample_stats", "log_weight")
    da = idata["sample_stats"]["log_weight"]
    extra = [d for d in da.dims if d not in ("chain", "draw")]
    if extra not in ([], [PSEUDO_SAMPLE]):
        raise NotImplementedError(
            f"Only one weight per draw or per pseudo-sample is supported here; log_weight has "
            f"the extra dims {extra}."
        )
    lw = da.transpose("chain", "draw", ...).values
    if not np.any(np.isfinite(lw)):
        raise ValueError("All log weights are -inf or NaN.")
    return np.asarray(lw, dtype=float)


def _pick_pseudo_samples(posterior: xr.Dataset, lw: np.ndarray, rng) -> xr.Dataset:
    """One pseudo-sample per draw, drawn by its weight (appendix B of Nemeth et al.)."""
    p = np.exp(lw - logsumexp(lw, axis=-1, keepdims=True))
    cdf = np.cumsum(p, axis=-1)
    u = rng.random(lw.shape[:2])[..., None] * cdf[..., -1:]
    index = np.minimum((u >= cdf).sum(axis=-1), lw.shape[-1] - 1)
    picked = posterior.isel({PSEUDO_SAMPLE: xr.DataArray(index, dims=("chain", "draw"))})
    return picked.drop_vars(PSEUDO_SAMPLE, errors="ignore")


def resample(idata: DataTree, draws: int | None = None, random_seed=None) -> DataTree:
    """Unweighted draws by importance resampling of the weighted posterior.

    Parameters
    ----------
    idata : xarray.DataTree
        A weighted result. With a ``pseudo_sample`` dim in ``log_weight`` (pseudo-extended
        MCMC), one pseudo-sample is first picked per draw by its weight (appendix B of Nemeth
        et al.); the draws are then resampled by their total weights.
    draws : int, optional
        Number of draws. ``None`` (default) keeps the number of draws and uses stratified
        resampling (lower variance); a number uses multinomial resampling. A result with
        ``mode_draws`` (the modes its chains barely reached) draws those modes from them, in
        their probabilities, by multinomial resampling.
    random_seed : int, optional

    Returns
    -------
    xarray.DataTree
        One chain of resampled draws in ``posterior`` (plus the model's observed and constant
        data), for ``az.summary``, ``az.plot_dist`` and the like. Resampled draws repeat: the
        number of distinct ones is about ``weighted_summary(...)["ess_weights"]``, and MCMC
        diagnostics such as R-hat do not apply to them. Its attrs carry the source's
        ``posterior_reliable`` and ``posterior_problems`` (:func:`~pymc_tempering.posterior_check`).
    """
    require_group(idata, "posterior")
    lw = _log_weight(idata)
    source = idata
    if lw.ndim == 3:
        # Pseudo-samples: pick one per draw by its weight (appendix B), then resample the draws
        # by their total weights (all equal to one for sample_pe).
        pick_seed, random_seed = split_seed(random_seed, 2)
        picked = _pick_pseudo_samples(
            idata["posterior"].to_dataset(), lw, np.random.default_rng(pick_seed)
        )
        picked.attrs = idata["posterior"].attrs
        source = DataTree.from_dict({"/posterior": picked})
        lw = logsumexp(lw, axis=-1)
    weights = np.exp(lw - logsumexp(lw)).ravel()
    weights = weights / weights.sum()
    n = weights.size if draws is None else int(draws)  # the chains' number of draws
    mode_draws = read_mode_draws(idata)
    if mode_draws is not None:
        # the modes' own draws beside the chains' (the modes the chains barely reached are
        # drawn from them alone): one chain of both, of the variables both hold
        w, sub_w = _pooled_weights(idata, lw, mode_draws)
        sub = mode_draws[0]
        post = idata["posterior"].to_dataset()
        names = [v for v in post.data_vars if v in sub]
        stacked = post[names].stack(flat=("chain", "draw")).drop_vars(["flat", "chain", "draw"])
        extra = sub[names].stack(flat=("chain", "draw")).drop_vars(["flat", "chain", "draw"])
        both = xr.concat([stacked, extra], dim="flat").rename({"flat": "draw"})
        both = both.expand_dims(chain=[0]).transpose("chain", "draw", ...)
        both = both.assign_coords(draw=np.arange(both.sizes["draw"]))
        both.attrs = idata["posterior"].attrs
        source = DataTree.from_dict({"/posterior": both})
        weights = np.concatenate([w.ravel(), sub_w.ravel()])
        weights = weights / weights.sum()
    resampled = az.extract(
        source,
        group="posterior",
        num_samples=n,
        weights=weights,
        # ArviZ's stratified resampling gives as many draws as weights: the chains' own only
        resampling_method="stratified" if draws is None and mode_draws is None else "multinomial",
        random_seed=random_seed,
        keep_dataset=True,
    )
    resampled = (
        resampled.drop_vars(["sample", "chain", "draw"])
        .rename({"sample": "draw"})
        .assign_coords(draw=np.arange(n))
        .expand_dims(chain=[0])
        .transpose("chain", "draw", ...)
    )
    resampled.attrs = {**idata["posterior"].attrs, "sample_dims": ["chain", "draw"]}
    groups = {"/posterior": resampled}
    for name in ("observed_data", "constant_data"):
        if name in idata.children:
            groups[f"/{name}"] = idata[name].to_dataset()
    tree = DataTree.from_dict(groups)
    tree.attrs = {"method": f"resampled {idata.attrs.get('method', '')}".strip()}
    tree.attrs.update(_verdict_attrs(idata))  # the source's verdict on them
    return tree


def _labels(name: str, da: xr.DataArray) -> list[str]:
    extra = [d for d in da.dims if d not in ("chain", "draw")]
    if not extra:
        return [name]
    coords = [da[d].values if d in da.coords else np.arange(da.sizes[d]) for d in extra]
    return [f"{name}[{', '.join(str(c) for c in combo)}]" for combo in itertools.product(*coords)]


def weighted_expectation(idata: DataTree, values) -> tuple[np.ndarray, np.ndarray]:
    """The posterior expectation of any function of a result's draws, with its standard error.

    Parameters
    ----------
    idata : xarray.DataTree
        A weighted result (one log weight per draw, no pseudo-samples).
    values : callable or array_like
        The function: ``values(posterior)`` of a posterior ``xarray.Dataset`` returns an array
        shaped ``(chain, draw, ...)``, e.g. ``lambda post: post["theta"].values > 0``; or its
        values at the draws, shaped ``(chain, draw, ...)``. Give the function: a stratified
        result describes its modes by draws of their own too (a ``mode_draws`` group), at
        which only a function can be evaluated; the values at the chains' draws leave out a
        mode the chains did not reach.

    Returns
    -------
    mean, standard_error : ndarray
        Shape of the values after ``(chain, draw)``. For a result stratified by its modes (a
        ``mode_probabilities`` group) the modes' probabilities times their weighted means
        (:func:`~pymc_tempering.estimators.stratified_mean`), else the self-normalised
        weighted mean (:func:`~pymc_tempering.estimators.weighted_mean`).
    """
    check_result(idata)
    lw = _log_weight(idata)
    if callable(values):
        mode_draws = read_mode_draws(idata)
        sub = None
        if mode_draws is not None:
            sub = (np.asarray(values(mode_draws[0]), dtype=float), *mode_draws[1:])
        values = np.asarray(values(idata["posterior"].to_dataset()), dtype=float)
        return _expectation(idata, values, lw, sub)
    return _expectation(idata, np.asarray(values, dtype=float), lw)


def _expectation(idata: DataTree, values: np.ndarray, lw: np.ndarray, sub=None):
    """:func:`weighted_expectation` with the result's log weights ``lw`` already read, and
    ``sub`` the function's values at the result's ``mode_draws`` with their log weights and
    regions (None: without them)."""
    if "mode_probabilities" not in idata.children or "mode_region" not in idata["sample_stats"]:
        return weighted_mean(values, lw)
    strata = idata["mode_probabilities"]
    region = idata["sample_stats"]["mode_region"].transpose("chain", "draw").values
    # a result saved before the covariance was stored: its standard errors alone
    cov = (strata["covariance"].values if "covariance" in strata
           else np.diag(strata["standard_error"].values ** 2))
    return stratified_mean(values, lw, region, strata["probability"].values, cov, sub)


def _pooled_weights(idata: DataTree, lw: np.ndarray, mode_draws) -> tuple[np.ndarray, np.ndarray]:
    """The normalised weights of a result's draws and of its ``mode_draws``
    (:func:`~pymc_tempering.results.read_mode_draws`;
    :func:`~pymc_tempering.estimators.pooled_weights`)."""
    _, sub_lw, sub_region = mode_draws
    region = idata["sample_stats"]["mode_region"].transpose("chain", "draw").values
    probability = idata["mode_probabilities"]["probability"].values
    return pooled_weights(lw, region, probability, sub_lw, sub_region)


def weighted_summary(
    idata: DataTree, var_names: list[str] | None = None, prob: float = 0.94
) -> pd.DataFrame:
    """Weighted posterior summary (eq. 21 of the CT paper for tempering results).

    Parameters
    ----------
    idata : xarray.DataTree
        A weighted result. With a ``pseudo_sample`` dim in ``log_weight`` (pseudo-extended
        MCMC) the summaries weight over draws and pseudo-samples (eq. 13 of Nemeth et al.),
        and ``mcse_mean`` treats each draw's weighted average over its pseudo-samples as one
        term of the series.
    var_names : list of str, optional
        Variables of ``posterior`` to summarise; default all but the method's own
        (``inverse_temperature``, ...).
    prob : float
        Mass of the equal-tailed interval reported.

    Returns
    -------
    pandas.DataFrame
        One row per scalar element: weighted ``mean``, ``sd``, the interval's quantiles
        (``eti_lo``, ``eti_hi``), ``median``, ``mcse_mean`` (delta method with the multi-chain
        ESS of :mod:`pymc_tempering.estimators`), ``ess_mean`` (``(sd / mcse_mean)^2``: how
        many independent posterior draws the weighted mean is worth, as ArviZ's ``ess_mean``, at
        most the number of draws it reads, the chains' and the mode draws': a stratified mean
        whose modes' probabilities are importance-sampled can be more precise than that)
        and ``ess_weights`` (Kish's effective sample size of the weights, the same for every
        row; also in ``DataFrame.attrs``). Kish's count ignores the chains' autocorrelation,
        so it can be many times ``ess_mean``; the sd and the interval are then as imprecise as
        ``ess_mean`` says, with no standard error of their own: read ``ess_mean``. For a
        result stratified by its modes (a ``mode_probabilities`` group) the mean is the
        modes' probabilities times their weighted means, and ``mcse_mean`` counts the
        probabilities as known to their covariance
        (:func:`~pymc_tempering.estimators.stratified_mean`); with ``mode_draws`` each mode's
        mean, sd and quantiles read its own draws beside the chains'. ``attrs["posterior_reliable"]``
        and ``attrs["posterior_problems"]`` carry the method's verdict
        (:func:`~pymc_tempering.posterior_check`).
    """
    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob}.")
    require_group(idata, "posterior")
    lw = _log_weight(idata)
    posterior = idata["posterior"].to_dataset()
    if var_names is None:
        names = [name for name in posterior.data_vars if name not in METHOD_VARIABLES]
    else:
        names = list(var_names)
    missing = [n for n in names if n not in posterior]
    if missing:
        raise ValueError(f"Variables {missing} are not in the posterior.")
    mode_draws = read_mode_draws(idata)
    if mode_draws is not None:
        w, sub_w = _pooled_weights(idata, lw, mode_draws)
        w = w.ravel()
    else:
        w = np.exp(lw - lw.max()).ravel()
        w = w / w.sum()
    ess_w = kish_ess(lw)
    # With pseudo-samples, each draw's estimate is its weighted average over pseudo-samples,
    # h_t = sum_i w_ti f_ti / W_t, weighted across draws by W_t = sum_i w_ti: the same mean,
    # with the standard error of a series of draws.
    lw_draw = logsumexp(lw, axis=-1) if lw.ndim == 3 else lw
    w_within = np.exp(lw - lw_draw[..., None]) if lw.ndim == 3 else None
    q_lo, q_hi = (1 - prob) / 2, 1 - (1 - prob) / 2
    rows, index = [], []
    for name in names:
        da = posterior[name]
        sub = None
        if w_within is not None:
            if PSEUDO_SAMPLE not in da.dims:
                raise ValueError(
                    f"{name!r} has no {PSEUDO_SAMPLE!r} dim but the weights have one; it "
                    "cannot be weighted (pass var_names)."
                )
            da = da.transpose("chain", "draw", PSEUDO_SAMPLE, ...)
            values = np.asarray(da.values, dtype=float)
            per_draw = values.reshape(values.shape[:3] + (-1,))
            flat = per_draw.reshape(-1, per_draw.shape[-1])
            h = np.einsum("cdi,cdik->cdk", w_within, per_draw)
            mean, mcse = weighted_mean(h, lw_draw)
            da = da.isel({PSEUDO_SAMPLE: 0}, drop=True)
        else:
            da = da.transpose("chain", "draw", ...)
            values = np.asarray(da.values, dtype=float)
            flat = values.reshape(values.shape[0] * values.shape[1], -1)
            if mode_draws is not None and name in mode_draws[0]:
                sub = mode_draws[0][name].transpose("chain", "draw", ...).values
                sub = np.asarray(sub, dtype=float).reshape(sub.shape[:2] + (-1,))
            mean, mcse = _expectation(idata, values.reshape(values.shape[:2] + (-1,)), lw,
                                      None if sub is None else (sub, *mode_draws[1:]))
        weights = w
        if sub is not None:  # the mode draws beside the chains' draws
            flat = np.concatenate([flat, sub.reshape(-1, flat.shape[1])])
            weights = np.concatenate([w, sub_w.ravel()])
        var = np.einsum("n,nk->k", weights, (flat - mean) ** 2) / weights.sum()
        # the draws read: an ESS above them is no count to compare with az.summary's
        n_read = flat.shape[0] if w_within is None else lw_draw.size
        quantiles = np.quantile(flat, [q_lo, 0.5, q_hi], axis=0, weights=weights,
                                method="inverted_cdf")
        for k, label in enumerate(_labels(name, da)):
            index.append(label)
            rows.append(
                {
                    "mean": mean[k],
                    "sd": np.sqrt(var[k]),
                    "eti_lo": quantiles[0, k],
                    "median": quantiles[1, k],
                    "eti_hi": quantiles[2, k],
                    "mcse_mean": mcse[k],
                    "ess_mean": min(var[k] / mcse[k] ** 2, n_read) if mcse[k] > 0 else np.nan,
                    "ess_weights": ess_w,
                }
            )
    df = pd.DataFrame(rows, index=index)
    df.attrs["ess_weights"] = ess_w
    df.attrs["prob"] = prob
    df.attrs.update(_verdict_attrs(idata))
    return df
