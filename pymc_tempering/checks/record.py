"""What a check is: its record (:class:`Check`), its outcome on one run (:class:`Finding`) and
what mends it (:class:`Mend`).

A check declares when it applies to a run, how it judges it (both read the run through the
typed readers of :class:`~pymc_tempering.checks.run.Run`), what its failure bears on (the log
marginal likelihood, the posterior summaries, or both) and what a further run changes to pass
it. :mod:`~pymc_tempering.checks.registry` holds every record; ``diagnose``, the posterior's
verdict and the extension policy of continuous tempering loop over them.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pymc_tempering.checks.run import Run

__all__ = ["Check", "Finding", "Mend"]


class Mend(Enum):
    """What a further run changes to pass a failed check."""

    #: a base (and ``log_zeta``) refitted to the run's weighted draws
    REFIT = "a refit of the base"
    #: a base refitted to the run and more draws per chain (by the finding's ``remedy``)
    LONGER_CHAINS = "longer chains"
    #: the base widened to the optima that the draws missed (the finding's ``remedy``)
    WIDENED_BASE = "a widened base"
    #: smaller steps (NUTS' ``target_accept`` raised)
    HIGHER_TARGET_ACCEPT = "a higher target_accept"
    #: no further run of the same model: the model or the base the user passes must change
    NOTHING = "nothing"


class Finding(NamedTuple):
    """A check's outcome on one run: its row of ``Diagnosis.checks`` and its problem.

    Attributes
    ----------
    value : Any
        What it measured.
    limit : str
        The limit it is held to, as shown.
    ok : bool
        Whether it passed.
    meaning : str
        What it measures.
    problem : str or None
        The sentence a user reads when it failed; None when it passed, or when its failure is
        told by another check's problem (mass about an optimum, inside the mass beyond the
        draws).
    evidence : bool or None
        Whether this problem bears on the evidence, where it differs from the record's
        (divergences in a funnel's neck whose mass the estimate takes from the profile).
    remedy : Any
        What the mend needs: the missed optima for a widened base, the growth of the draws for
        longer chains.
    """

    value: Any
    limit: str
    ok: bool
    meaning: str
    problem: str | None = None
    evidence: bool | None = None
    remedy: Any = None


class Check(NamedTuple):
    """One check of every run.

    Attributes
    ----------
    name : str
        Its row in ``Diagnosis.checks``.
    evidence : bool
        Whether its failure makes the log marginal likelihood unreliable.
    posterior : bool
        Whether its failure makes the posterior summaries unreliable.
    mended_by : Mend
        What a further run changes to pass it.
    applies : callable
        ``applies(run) -> bool``: whether the run holds what it reads.
    judge : callable
        ``judge(run) -> Finding``.
    answered_by_strata : bool
        Whether a stratification whose regions' masses are importance-sampled, each region
        with draws of its own, answers it for the posterior (mass about an optimum that the
        chains missed or under-visited is then in the summaries; the evidence still reads it).
    improper : bool
        Whether its problem says the model's prior is improper (``Diagnosis.improper``).
    """

    name: str
    evidence: bool
    posterior: bool
    mended_by: Mend
    applies: Callable[[Run], bool]
    judge: Callable[[Run], Finding]
    answered_by_strata: bool = False
    improper: bool = False
