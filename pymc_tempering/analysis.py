"""Reading results: the log marginal likelihood, the posterior's verdict, unweighted resamples and
weighted summaries.

These work on any method's result, since they read only the layout built by
:mod:`pymc_tempering.results`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import logsumexp
from xarray import DataTree

from pymc_tempering.checks import POSTERIOR_CHECKS
from pymc_tempering.diagnostics import diagnose
from pymc_tempering.estimators import kish_ess, stratified_mean, weighted_mean
from pymc_tempering.results import (
    METHOD_VARIABLES,
    PSEUDO_SAMPLE,
    check_result,
    strata_problems,
    strata_table,
)
from pymc_tempering.contract import split_seed

__all__ = [
    "LogMarginalLikelihood",
    "PosteriorCheck",
    "posterior_check",
    "MIN_ESS_PER_CHAIN",
    "MAX_MODE_SE",
    "log_marginal_likelihood",
    "log_normalizing_constant",
    "bayes_factor",
    "compare_evidence",
    "resample",
    "weighted_summary",
    "weighted_expectation",
]


@dataclass(frozen=True)
class LogMarginalLikelihood:
    """A log marginal likelihood estimate with its verdict.

    Attributes
    ----------
    estimate : float
        Pooled over chains.
    standard_error : float
        Monte Carlo standard error of ``estimate``.
    per_chain : ndarray
        The estimate from each chain alone; their spread is a check on ``standard_error``.
    method : str
    reliable : bool
        Whether the run passed every check of :func:`~pymc_tempering.diagnose` that bears on
        the evidence (all but those of ``Diagnosis.draws_only``, which the estimate corrects
        for). When False the
        estimate and its standard error may be wrong together (a missed mode, an unvisited end
        of the temperature, chains that disagree): do not read the number without reading
        ``problems``.
    problems : tuple of str
        One sentence per failed check that bears on the evidence, naming the likely cause and
        what to do.
    """

    estimate: float
    standard_error: float
    per_chain: np.ndarray
    method: str
    reliable: bool = True
    problems: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.estimate:.3f} ± {self.standard_error:.3f}"
        if not self.reliable:
            text += f" (UNRELIABLE: {len(self.problems)} problem(s))"
        return text

    def __repr__(self) -> str:
        lines = [
            f"LogMarginalLikelihood({self.estimate:.4f} ± {self.standard_error:.4f}, "
            f"method={self.method!r}, reliable={self.reliable})"
        ]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


#: Effective draws per chain below which weighted summaries are not reliable (``pm.sample`` warns
#: below the same count).
MIN_ESS_PER_CHAIN = 100
#: Largest standard error of a mode's probability in a reliable posterior: an error of 0.05 is
#: then 2.5 standard errors.
MAX_MODE_SE = 0.02


@dataclass(frozen=True)
class PosteriorCheck:
    """Whether a result's weighted draws support its posterior summaries, apart from its evidence.

    Attributes
    ----------
    reliable : bool
        False when a problem below was found: the summaries of
        :func:`weighted_summary` and the draws of :func:`resample` may then be off by more
        than their standard errors say, or those errors are too large to use.
    problems : tuple of str
        One sentence per problem.
    mode_probabilities : pandas.DataFrame or None
        For a result stratified by the modes of its base's mode search (continuous tempering
        with several optima found): per region ``probability``, ``standard_error``,
        ``optima`` (the search's optima it holds), the weighted draws' own
        ``draws_probability`` and ``draws_standard_error``, and ``khat`` (importance sampling
        of its mass); ``attrs["method"]`` says how the probabilities were found. None
        otherwise.
    """

    reliable: bool
    problems: tuple[str, ...]
    mode_probabilities: pd.DataFrame | None = None


def posterior_check(idata: DataTree) -> PosteriorCheck:
    """Judge a weighted result's posterior: its modes' probabilities and its effective draws.

    The checks:

    - the stratification's own problems (``mode_probabilities`` group): importance sampling of
      a mode's mass that cannot be trusted (the probabilities then come from the draws alone),
      or a mode with mass and no draws;
    - a mode probability with a standard error above :data:`MAX_MODE_SE`;
    - a failed check of :func:`~pymc_tempering.diagnose` that bears on the draws (those of
      :data:`pymc_tempering.checks.POSTERIOR_CHECKS`: a missed optimum, an incomplete mode
      search, a funnel's neck, mass beyond the draws or about an optimum that they
      under-represent, divergences);
    - a posterior entry whose weighted mean is worth fewer than :data:`MIN_ESS_PER_CHAIN`
      independent draws per chain (``ess_mean`` of :func:`weighted_summary`, which for a
      stratified result counts the modes' probabilities as known to their standard errors).

    The methods store the verdict in the result's ``attrs["posterior_reliable"]`` and
    ``attrs["posterior_problems"]`` (the problems joined by ``"; "``, for display) and warn
    with each problem.
    """
    check_result(idata)
    problems, table = [], None
    if "mode_probabilities" in idata.children:
        strata = strata_table(idata["mode_probabilities"])
        table = strata.to_dataframe()
        table.attrs["method"] = strata.attrs.get("method", "")
        problems += strata_problems(idata["mode_probabilities"])
        worst = float(np.nanmax(strata["standard_error"].values))
        if not worst <= MAX_MODE_SE:
            problems.append(
                f"the modes' probabilities have standard errors up to {worst:.3f} (above "
                f"{MAX_MODE_SE}; from the {table.attrs['method']}): longer runs (draws) make "
                "more moves between the modes"
            )
    checks = diagnose(idata).checks
    failed = [] if checks.empty else [c for c in POSTERIOR_CHECKS
                                       if c in checks.index and not checks.loc[c, "ok"]]
    if failed:
        problems.append(
            f"pmt.diagnose found mass the draws did not reach ({', '.join(failed)}): the "
            "summaries lack it"
        )
    chains = idata["posterior"].sizes["chain"]
    ess = weighted_summary(idata)["ess_mean"]
    low = ess[ess < MIN_ESS_PER_CHAIN * chains]
    if len(low):
        problems.append(
            f"the weighted draws are worth fewer than {MIN_ESS_PER_CHAIN} independent draws "
            f"per chain for {len(low)} of {len(ess)} posterior entries (fewest: "
            f"{low.idxmin()}, {low.min():.0f} for {chains} chains; ess_mean in "
            "pmt.weighted_summary): their weighted means are within mcse_mean, and their sds "
            "and intervals are about that imprecise. Run longer chains (draws) for posterior "
            "summaries"
        )
    return PosteriorCheck(not problems, tuple(problems), table)


def _verdict_attrs(idata: DataTree) -> dict:
    """The method's verdict on its posterior (:func:`posterior_check`) from a result's attrs,
    where it gave one."""
    keys = ("posterior_reliable", "posterior_problems")
    return {key: idata.attrs[key] for key in keys if key in idata.attrs}


def _require(idata: DataTree, group: str, var: str | None = None):
    check_result(idata)
    if group not in idata.children or (var is not None and var not in idata[group]):
        what = f"{group}.{var}" if var else group
        raise ValueError(
            f"The result has no {what}; pass a DataTree returned by a pymc_tempering method."
        )


def _smc_log_marginal_likelihood(idata: DataTree) -> LogMarginalLikelihood:
    """Read ``pm.sample_smc``'s estimate: per chain, the last finite value of its stages."""
    values = np.asarray(idata["sample_stats"]["log_marginal_likelihood"].values)
    per_chain = []
    for chain in values.reshape(values.shape[0], -1):
        flat = np.concatenate([np.atleast_1d(np.asarray(v, dtype=float)) for v in chain])
        finite = flat[np.isfinite(flat)]
        per_chain.append(finite[-1] if finite.size else np.nan)
    per_chain = np.asarray(per_chain, dtype=float)
    return LogMarginalLikelihood(
        estimate=float(np.mean(per_chain)),
        standard_error=float("nan"),
        per_chain=per_chain,
        method="smc",
        reliable=False,
        problems=(
            "pm.sample_smc reports no standard error, so nothing says how far off its "
            "estimate may be (the spread of its chains is the only hint).",
        ),
    )


def log_marginal_likelihood(idata: DataTree) -> LogMarginalLikelihood:
    """The log marginal likelihood of a result, with its standard error.

    Parameters
    ----------
    idata : xarray.DataTree
        A result of a pymc_tempering method that estimates the evidence, or of
        ``pm.sample_smc`` (for comparisons): then ``estimate`` is the mean over chains of each
        chain's final estimate, ``per_chain`` those estimates and ``standard_error`` is NaN, as
        SMC reports none (the spread of the chains is the only hint; on hierarchical models
        SMC's estimate can be off by several nats while its chains agree).

    Returns
    -------
    LogMarginalLikelihood
        With ``reliable`` and ``problems`` from :func:`~pymc_tempering.diagnose` on the result
        (its ``evidence_problems``).

    Raises
    ------
    ValueError
        When the result carries no evidence, or its model has an improper prior (``pm.Flat``,
        ``pm.HalfFlat``): such a model has no marginal likelihood.
    TypeError
        When ``idata`` is not a DataTree (``fit_ergodic``'s approximation, say).
    """
    check_result(idata)
    if (
        "log_marginal_likelihood" not in idata.attrs
        and "sample_stats" in idata.children
        and "log_marginal_likelihood" in idata["sample_stats"]
        and idata["sample_stats"]["log_marginal_likelihood"].dtype == object
    ):
        return _smc_log_marginal_likelihood(idata)
    if "improper_prior" in idata.attrs:
        raise ValueError(
            f"The model has improper priors ({idata.attrs['improper_prior']}: pm.Flat or "
            "pm.HalfFlat), so its marginal likelihood does not exist: the prior does not "
            "integrate to one and any number would be arbitrary. Give those variables proper "
            "priors to compare models by evidence; the draws themselves are unaffected. For the "
            "integral of the model's joint density (an unnormalized density written as pm.Flat "
            "variables and a pm.Potential), call pmt.log_normalizing_constant."
        )
    return _log_integral(idata, improper=False)


def log_normalizing_constant(idata: DataTree) -> LogMarginalLikelihood:
    """The log of the integral of the model's joint density over its free variables.

    The joint density is the product of the priors, the likelihood and the potentials, as
    ``model.logp()`` gives it; with proper priors its integral is the marginal likelihood and
    this is :func:`log_marginal_likelihood`. With improper ones (``pm.Flat``, ``pm.HalfFlat``)
    it is the normalizing constant of an unnormalized density, such as a Boltzmann machine's
    relaxation written as ``pm.Flat`` variables and a ``pm.Potential`` (section 7.2 of the
    continuous tempering paper). Such a number is no evidence: :func:`bayes_factor` and
    :func:`compare_evidence` refuse models with improper priors.

    Parameters
    ----------
    idata : xarray.DataTree
        A result of a pymc_tempering method that estimates the evidence.

    Returns
    -------
    LogMarginalLikelihood
        With ``reliable`` and ``problems`` from :func:`~pymc_tempering.diagnose` (its
        ``normalizing_constant_problems``). For an improper prior they include
        ``flat_directions``: where the log density does not fall along some axis of the draws,
        the integral is infinite and ``reliable`` is False.

    Raises
    ------
    ValueError
        When the result carries no evidence.
    TypeError
        When ``idata`` is not a DataTree.
    """
    check_result(idata)
    return _log_integral(idata, improper=True)


def _log_integral(idata: DataTree, improper: bool) -> LogMarginalLikelihood:
    """The result's log Z with its standard error, per-chain values and the problems that
    :func:`diagnose` finds with it (but an improper prior's, when ``improper``)."""
    if "log_marginal_likelihood" not in idata.attrs:
        note = idata.attrs.get("log_marginal_likelihood_note")
        raise ValueError(
            f"This result (method {idata.attrs.get('method', 'unknown')!r}) carries no log "
            "marginal likelihood" + (f": {note}." if note else ".")
        )
    _require(idata, "sample_stats", "log_marginal_likelihood")
    diagnosis = diagnose(idata)
    problems = tuple(
        diagnosis.normalizing_constant_problems if improper else diagnosis.evidence_problems
    )
    return LogMarginalLikelihood(
        estimate=float(idata.attrs["log_marginal_likelihood"]),
        standard_error=float(idata.attrs["log_marginal_likelihood_se"]),
        per_chain=np.asarray(idata["sample_stats"]["log_marginal_likelihood"].values, dtype=float),
        method=str(idata.attrs.get("method", "")),
        reliable=not problems,
        problems=problems,
    )


def bayes_factor(idata_1: DataTree, idata_2: DataTree) -> LogMarginalLikelihood:
    """The log Bayes factor of model 1 against model 2, with its standard error.

    ``log BF = log Z_1 - log Z_2``; the runs are independent, so the standard errors add in
    quadrature. Positive values favour model 1.

    Parameters
    ----------
    idata_1, idata_2 : xarray.DataTree
        Results (of any evidence-estimating method) for the two models, on the same data.

    Returns
    -------
    LogMarginalLikelihood
        ``estimate`` is the log Bayes factor, ``standard_error`` its standard error and
        ``per_chain`` empty; ``method`` names the two methods. It is ``reliable`` only when both
        evidences are; ``problems`` holds theirs, prefixed with ``model 1:`` / ``model 2:``.
    """
    a, b = log_marginal_likelihood(idata_1), log_marginal_likelihood(idata_2)
    problems = tuple(f"model 1: {p}" for p in a.problems) + tuple(
        f"model 2: {p}" for p in b.problems
    )
    return LogMarginalLikelihood(
        estimate=a.estimate - b.estimate,
        standard_error=float(np.hypot(a.standard_error, b.standard_error)),
        per_chain=np.array([]),
        method=f"log Bayes factor ({a.method} vs {b.method})",
        reliable=a.reliable and b.reliable,
        problems=problems,
    )


def compare_evidence(results: dict[str, DataTree], prior=None) -> pd.DataFrame:
    """Compare models by their marginal likelihoods.

    Parameters
    ----------
    results : dict of name to xarray.DataTree
        One result per model, all on the same data.
    prior : dict of name to float, optional
        Prior model probabilities (normalised here); equal by default.

    Returns
    -------
    pandas.DataFrame
        One row per model, sorted by log marginal likelihood (best first):
        ``log_marginal_likelihood``, ``standard_error``, ``log_bayes_factor`` against the best
        model and its ``log_bayes_factor_se``, and ``posterior_probability`` (from the point
        estimates; when log Bayes factors are within a few standard errors of each other, so
        are the models, whatever these probabilities say), and ``reliable`` (the model's
        evidence passed every check; a Bayes factor against an unreliable evidence is
        unreliable too, so a row is reliable only when its own and the best model's evidence
        are) and ``problems``, the number of the model's own failed checks.
    """
    if len(results) < 1:
        raise ValueError("Give at least one result.")
    names = list(results)
    lml = {name: log_marginal_likelihood(idata) for name, idata in results.items()}
    prior = {name: 1.0 for name in names} if prior is None else dict(prior)
    if set(prior) != set(names) or any(not p > 0 for p in prior.values()):
        raise ValueError("prior must give a positive probability to each model, and no others.")
    est = np.array([lml[n].estimate for n in names])
    se = np.array([lml[n].standard_error for n in names])
    log_post = est + np.log(np.array([prior[n] for n in names]))
    best = int(np.argmax(est))
    df = pd.DataFrame(
        {
            "log_marginal_likelihood": est,
            "standard_error": se,
            "log_bayes_factor": est - est[best],
            "log_bayes_factor_se": np.where(
                np.arange(len(names)) == best, 0.0, np.hypot(se, se[best])
            ),
            "posterior_probability": np.exp(log_post - logsumexp(log_post)),
            "reliable": [lml[n].reliable and lml[names[best]].reliable for n in names],
            "problems": [len(lml[n].problems) for n in names],
        },
        index=pd.Index(names, name="model"),
    )
    return df.sort_values("log_marginal_likelihood", ascending=False)


def _log_weight(idata: DataTree) -> np.ndarray:
    """Log weights ``(chain, draw)``, or ``(chain, draw, pseudo_sample)`` for pseudo-samples."""
    _require(idata, "sample_stats", "log_weight")
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
        resampling (lower variance); a number uses multinomial resampling.
    random_seed : int, optional

    Returns
    -------
    xarray.DataTree
        One chain of resampled draws in ``posterior`` (plus the model's observed and constant
        data), for ``az.summary``, ``az.plot_dist`` and the like. Resampled draws repeat: the
        number of distinct ones is about ``weighted_summary(...)["ess_weights"]``, and MCMC
        diagnostics such as R-hat do not apply to them. Its attrs carry the source's
        ``posterior_reliable`` and ``posterior_problems`` (:func:`posterior_check`).
    """
    _require(idata, "posterior")
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
    n = weights.size if draws is None else int(draws)
    resampled = az.extract(
        source,
        group="posterior",
        num_samples=n,
        weights=weights,
        resampling_method="stratified" if draws is None else "multinomial",
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
    values : array_like, shape (chain, draw, ...)
        The function's values at the draws, e.g. ``idata["posterior"]["theta"].values > 0``.

    Returns
    -------
    mean, standard_error : ndarray
        Shape ``values.shape[2:]``. For a result stratified by its modes (a
        ``mode_probabilities`` group) the modes' probabilities times their weighted means
        (:func:`~pymc_tempering.estimators.stratified_mean`), else the self-normalised
        weighted mean (:func:`~pymc_tempering.estimators.weighted_mean`).
    """
    check_result(idata)
    return _expectation(idata, np.asarray(values, dtype=float), _log_weight(idata))


def _expectation(idata: DataTree, values: np.ndarray, lw: np.ndarray):
    """:func:`weighted_expectation` with the result's log weights ``lw`` already read."""
    if "mode_probabilities" not in idata.children or "mode_region" not in idata["sample_stats"]:
        return weighted_mean(values, lw)
    strata = idata["mode_probabilities"]
    region = idata["sample_stats"]["mode_region"].transpose("chain", "draw").values
    # a result saved before the covariance was stored: its standard errors alone
    cov = (strata["covariance"].values if "covariance" in strata
           else np.diag(strata["standard_error"].values ** 2))
    return stratified_mean(values, lw, region, strata["probability"].values, cov)


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
        many independent posterior draws the weighted mean is worth, as ArviZ's ``ess_mean``)
        and ``ess_weights`` (Kish's effective sample size of the weights, the same for every
        row; also in ``DataFrame.attrs``). Kish's count ignores the chains' autocorrelation,
        so it can be many times ``ess_mean``; the sd and the interval are then as imprecise as
        ``ess_mean`` says, with no standard error of their own: read ``ess_mean``. For a
        result stratified by its modes (a ``mode_probabilities`` group) the mean is the
        modes' probabilities times their weighted means, and ``mcse_mean`` counts the
        probabilities as known to their standard errors
        (:func:`~pymc_tempering.estimators.stratified_mean`). ``attrs["posterior_reliable"]``
        and ``attrs["posterior_problems"]`` carry the method's verdict
        (:func:`posterior_check`).
    """
    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob}.")
    _require(idata, "posterior")
    lw = _log_weight(idata)
    posterior = idata["posterior"].to_dataset()
    if var_names is None:
        names = [name for name in posterior.data_vars if name not in METHOD_VARIABLES]
    else:
        names = list(var_names)
    missing = [n for n in names if n not in posterior]
    if missing:
        raise ValueError(f"Variables {missing} are not in the posterior.")
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
            mean, mcse = _expectation(idata, values.reshape(values.shape[:2] + (-1,)), lw)
        var = np.einsum("n,nk->k", w, (flat - mean) ** 2)
        quantiles = np.quantile(flat, [q_lo, 0.5, q_hi], axis=0, weights=w, method="inverted_cdf")
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
                    "ess_mean": var[k] / mcse[k] ** 2 if mcse[k] > 0 else np.nan,
                    "ess_weights": ess_w,
                }
            )
    df = pd.DataFrame(rows, index=index)
    df.attrs["ess_weights"] = ess_w
    df.attrs["prob"] = prob
    df.attrs.update(_verdict_attrs(idata))
    return df
