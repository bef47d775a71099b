"""Reading results: the log marginal likelihood, Bayes factors and model probabilities.

These work on any method's result, since they read only the layout built by
:mod:`pymc_tempering.results`; the evidence's verdict is that of the checks that bear on it
(:func:`~pymc_tempering.diagnose`). The posterior's verdict (:func:`posterior_check`) is
:mod:`pymc_tempering.checks`', re-exported here beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import logsumexp
from xarray import DataTree

from pymc_tempering.checks import (
    MAX_MODE_SE,
    MIN_ESS_PER_CHAIN,
    PosteriorCheck,
    diagnose,
    posterior_check,
)
from pymc_tempering.results import check_result, require_group

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
    require_group(idata, "sample_stats", "log_marginal_likelihood")
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
