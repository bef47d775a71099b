"""The judge of every run: :func:`diagnose` runs each check of the registry that applies.

Checks catch a run that looks fine and is wrong. Each is one record of
:mod:`~pymc_tempering.checks.registry` (when it applies, its judge, what it bears on, what mends
it); a result that lacks what a check reads is not judged by it. A problem of a check that does
not bear on the evidence is one of the draws alone (``Diagnosis.draws_only``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from xarray import DataTree

from pymc_tempering.checks.record import Check, Finding
from pymc_tempering.checks.registry import CHECKS
from pymc_tempering.checks.run import Run
from pymc_tempering.results import check_result

__all__ = ["Diagnosis", "diagnose"]


@dataclass
class Diagnosis:
    """The outcome of :func:`diagnose`.

    Attributes
    ----------
    checks : pandas.DataFrame
        One row per check that applied: ``value``, ``limit``, ``ok`` and what it means.
    problems : list of str
        One sentence per failed check, naming the likely cause and what to do.
    draws_only : list of str
        Those of ``problems`` that concern the draws but not the log marginal likelihood
        (mass about an optimum; a funnel's neck, whose mass the estimate takes from the
        profile of the target).
    improper : list of str
        Those of ``problems`` that say the model's prior is improper: its log marginal
        likelihood is no evidence, but its joint density's normalizing constant can still be
        right (:func:`~pymc_tempering.log_normalizing_constant`).
    findings : dict of str to Finding
        Each check's :class:`~pymc_tempering.checks.record.Finding`, by name, in the order
        the checks ran (what the extension policy reads).
    """

    checks: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    draws_only: list[str] = field(default_factory=list)
    improper: list[str] = field(default_factory=list)
    findings: dict = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return not self.problems

    @property
    def evidence_problems(self) -> list[str]:
        """The problems that bear on the log marginal likelihood."""
        return [p for p in self.problems if p not in self.draws_only]

    @property
    def normalizing_constant_problems(self) -> list[str]:
        """The problems that bear on the normalizing constant of the model's joint density
        (those of the log marginal likelihood but the prior's impropriety)."""
        return [p for p in self.evidence_problems if p not in self.improper]

    def failed(self) -> list[tuple[Check, Finding]]:
        """The records whose check failed, with their findings, in registry order."""
        return [(c, self.findings[c.name]) for c in CHECKS
                if c.name in self.findings and not self.findings[c.name].ok]

    def __str__(self) -> str:
        text = self.checks.to_string()
        if self.problems:
            text += "\n\nProblems:\n" + "\n".join(f"- {p}" for p in self.problems)
        return text


def diagnose(idata: DataTree, near: float = 0.1) -> Diagnosis:
    """Check a tempering result for the failures that bias its estimates silently.

    Runs every check of :data:`pymc_tempering.checks.CHECKS` that applies to the result, in
    that order. Each record says when it applies, what it bears on (the log marginal
    likelihood, the posterior summaries) and what mends it. The checks:

    - ``improper_prior``: an improper prior (``pm.Flat``, ``pm.HalfFlat``; root attr
      ``improper_prior``): the model has no marginal likelihood (``Diagnosis.improper``; its
      normalizing constant can still be right).
    - ``flat_directions``: with an improper prior, the coordinate directions (each way) in
      which the log density's profile does not fall far from the weighted draws
      (:func:`~pymc_tempering.target.flat_directions`); a problem when there is any: the joint
      density's integral is infinite.
    - ``mass_beyond_draws``: the share of the target's mass that the run's draws never
      reached, from an importance sampler at 1 to 64 times the base's and the optima's widths
      (:mod:`pymc_tempering.coverage`, stored in the ``coverage`` group): the mass beyond every
      draw (in the Mahalanobis distance of the weighted draws), or the sampler's log Z above
      the run's by more than three standard errors, or the mass within an optimum's Laplace
      ellipsoid more than twice the draws' share there; a problem from 0.005 (and three of its
      standard errors) where the bias it makes, ``-log(1 - share)``, exceeds the run's
      standard error.
    - ``mass_near_optima``: that share about one optimum where the weighted draws hold less than
      half of it; a problem for the draws (a mode's probability is off) and, through
      ``mass_beyond_draws``, for the evidence where it biases it beyond its standard error.
    - ``standard_error``: when the result carries the ``target_se`` it was run for (root attrs
      of :func:`~pymc_tempering.sample_ct` and :func:`~pymc_tempering.sample_gibbs_ct`), the
      standard error of log Z against it; a problem above it. A ``target_se`` below the
      rounding floor of the estimate (``1e-7 |log Z|``) is raised to it.
    - ``beta_near_0``, ``beta_near_1``: fraction of draws with the inverse temperature within
      ``near`` of 0 and of 1; a problem when one end is never visited (the base or the target
      is not reached, so eq. 20 has nothing to compare).
    - ``min_end_to_end_passages``: fewest passages between the two ends in any chain; a chain
      without one is no problem in a calibrated run.
    - ``divergences``: NUTS transitions that diverged after tuning (``sample_stats.diverging``);
      a problem when there is any, as in PyMC: missing mass biases the log marginal
      likelihood low while its standard error stays small. Divergences that all ended beyond
      the edge of a funnel's neck whose mass the estimate takes from the profile are a
      problem of the draws alone.
    - ``ess_weights``: Kish's effective sample size of the importance weights.
    - ``pareto_khat``: Pareto k-hat of the weights from arviz-stats' PSIS; a problem above
      0.7, except for continuous tempering, whose weights ``p(beta = 1 | x)`` are bounded by 1
      and so cannot have a heavy tail.
    - ``base_moments_max_abs_z``: the base-moment check of eq. (22): the means and variances of
      the draws weighted towards beta = 0 against the base's known ones, in Monte Carlo
      standard errors; a problem above the Bonferroni limit for a family-wise rate of 0.001.
    - ``unseen_optima``: with the optima of the base's mode search (the ``base`` group), the
      share of the search's converged runs whose optimum no other run reached: the
      Good-Turing chance that another run finds an optimum not found yet; a problem above 0.5,
      unless the run is :func:`~pymc_tempering.checks.calibrated` (at least 32 chains whose 8
      batches agree on log Z, and its path and regions agreeing).
    - ``missed_mode_mass``: the share of the optima's Laplace mass that the weighted draws
      never came near (each draw counted at its nearest optimum; an optimum is missed when at
      least 10 effective draws were due there and under a tenth of that came); a problem from
      0.05. A run whose base misses a mode never samples it at any temperature and every
      other check passes: this one compares the run with an independent look at the target.
    - ``known_modes``: for a tempered run, whether its base carries optima: the mode search's,
      or where it found none (a log density unbounded along the way, as in factor models and
      mixtures with free scales) the regions of a census of short NUTS runs; a problem for the
      posterior when there are none: the run cannot account for its modes, and draws that
      stay in one of them pass every other check.
    - ``path_regions_agreement``: for a stratified run whose regions' masses are all
      importance-sampled, the distance in standard errors between the path's log Z and the
      regions' summed masses; a problem above 3.
    - ``funnel_mass``: when the base's mode search climbed a spike (a centred group's scale
      run off towards 0) that the draws stay far from, the share of the target's mass on the
      spike's side of the draws that they never reached, from a profile Laplace approximation
      (:func:`~pymc_tempering.extended.funnel.funnel_mass`); a problem from 0.05 and 2.5 of
      its standard errors. Continuous tempering's log marginal likelihood takes the neck's
      mass from the profile (root attr ``funnel_correction``), so this problem is then one of
      the draws alone.
    - ``chains_log_z_chi2_p``: the p-value of the per-chain log Z estimates agreeing within
      their standard errors (chi-square with chains - 1 degrees of freedom); from 32 chains on,
      of 8 batches of chains, each batch's error from its chains' spread; a problem below
      0.001.

    Parameters
    ----------
    idata : xarray.DataTree
        A result of a pymc_tempering method.
    near : float
        Width of the bands at beta = 0 and beta = 1.

    Returns
    -------
    Diagnosis

    Raises
    ------
    TypeError
        When ``idata`` is not a DataTree (``fit_ergodic``'s approximation, say).
    """
    check_result(idata)
    run = Run(idata, near)
    rows, findings = {}, {}
    problems, draws_only, improper = [], [], []
    for record in CHECKS:
        if not record.applies(run):
            continue
        finding = record.judge(run)
        findings[record.name] = finding
        if record.improper:  # a property of the model, shown as a problem, not as a row
            improper.append(finding.problem)
            problems.append(finding.problem)
            continue
        rows[record.name] = {"value": finding.value, "limit": finding.limit,
                             "ok": bool(finding.ok), "meaning": finding.meaning}
        if finding.problem is None:
            continue
        problems.append(finding.problem)
        if not (record.evidence if finding.evidence is None else finding.evidence):
            draws_only.append(finding.problem)
    return Diagnosis(
        checks=pd.DataFrame.from_dict(rows, orient="index"),
        problems=problems,
        draws_only=draws_only,
        improper=improper,
        findings=findings,
    )
