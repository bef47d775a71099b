"""The posterior's verdict: whether a result's weighted draws support its summaries.

:func:`posterior_check` reads the stratification's own problems, the precision of the modes'
probabilities and the effective draws of the weighted summaries, and every check of the
registry that bears on the posterior (:data:`~pymc_tempering.checks.POSTERIOR_CHECKS`), less
those a stratification with importance-sampled masses and mode draws answers
(``Check.answered_by_strata``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from xarray import DataTree

from pymc_tempering.checks.diagnosis import diagnose
from pymc_tempering.checks.run import Run
from pymc_tempering.results import check_result, strata_problems, strata_table
from pymc_tempering.summaries import weighted_summary

__all__ = ["MAX_MODE_SE", "MIN_ESS_PER_CHAIN", "PosteriorCheck", "posterior_check"]

#: Effective draws per chain below which weighted summaries are not reliable (``pm.sample`` warns
#: below the same count), for at most ``MIN_ESS_CHAINS`` chains: a run of more chains (continuous
#: tempering's batched chains, many short ones) needs the effective draws of that many.
MIN_ESS_PER_CHAIN = 100
MIN_ESS_CHAINS = 4
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
      :data:`pymc_tempering.checks.POSTERIOR_CHECKS`: mass beyond the draws or about an
      optimum that they under-represent, divergences, an incomplete mode search, a missed
      optimum, a mode search that found no optimum, a funnel's neck). A stratification whose
      regions' masses are importance-sampled, each region with draws of its own, answers the
      records marked ``answered_by_strata`` (a missed optimum, mass about an optimum). Each
      failed check's problem is repeated;
    - a posterior entry whose weighted mean is worth fewer than :data:`MIN_ESS_PER_CHAIN`
      independent draws per chain, of at most :data:`MIN_ESS_CHAINS` chains (``ess_mean`` of
      :func:`weighted_summary`, which for a
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
    # the modes' masses by importance sampling, each described by its own draws: mass about an
    # optimum that the chains missed or under-visited is in the summaries
    stratified = Run(idata).stratified
    failed = [(c, f) for c, f in diagnose(idata).failed()
              if c.posterior and not (stratified and c.answered_by_strata)]
    # each failed check says its own problem; one told by another's (mass about an optimum,
    # inside the mass beyond the draws) is named
    problems += [f.problem.rstrip(".") for c, f in failed if f.problem is not None]
    named = [c.name for c, f in failed if f.problem is None]
    if named:
        problems.append(
            f"pmt.diagnose found mass the draws did not reach ({', '.join(named)}): the "
            "summaries lack it"
        )
    chains = idata["posterior"].sizes["chain"]
    ess = weighted_summary(idata)["ess_mean"]
    low = ess[ess < MIN_ESS_PER_CHAIN * min(chains, MIN_ESS_CHAINS)]
    if len(low):
        problems.append(
            f"the weighted draws are worth fewer than {MIN_ESS_PER_CHAIN} independent draws "
            f"per chain (of at most {MIN_ESS_CHAINS}) for {len(low)} of {len(ess)} posterior "
            f"entries (fewest: {low.idxmin()}, {low.min():.0f} for {chains} chains; ess_mean in "
            "pmt.weighted_summary): their weighted means are within mcse_mean, and their sds "
            "and intervals are about that imprecise. Run longer chains (draws) for posterior "
            "summaries"
        )
    return PosteriorCheck(not problems, tuple(problems), table)
