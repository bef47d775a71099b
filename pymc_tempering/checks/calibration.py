"""Whether a run's independent parts agree: its chains (or batches of them) and its two
estimators of log Z.

A run of many chains, each started from its own draw of the base, carries its own check of its
error: independent batches of chains estimate the same log Z, and a mode that some batches
reach and others do not splits their estimates beyond their errors. Where the base's mode
search is far from complete (systems with thousands of optima), this agreement is what can
vouch for a run (:func:`calibrated`); the registry's ``chains_log_z_chi2_p``,
``unseen_optima`` and ``min_end_to_end_passages`` read it.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from pymc_tempering.checks.run import Run
from pymc_tempering.estimators import AGREEMENT_Z, log_ratio_by_chain, log_ratio_of_means

__all__ = [
    "FAMILY_P",
    "CALIBRATION_CHAINS",
    "CALIBRATION_BATCHES",
    "chains_agreement_p",
    "chains_agreement_p_of",
    "path_vouched",
    "calibrated",
]

FAMILY_P = 1e-3  # family-wise false-alarm rate of the z-score and chi-square checks
# Independent chains from which a run's agreement stands in for an incomplete mode search:
# enough that a mode some chains reach and others do not splits their estimates (the batched
# chains of continuous tempering; a NUTS run's four are too few)
CALIBRATION_CHAINS = 32
CALIBRATION_BATCHES = 8  # independent batches of chains whose estimates such a run compares


def chains_agreement_p_of(lw1: np.ndarray, lw0: np.ndarray) -> float:
    """The chi-square p-value of the chains' log Z estimates agreeing within their standard
    errors; from ``CALIBRATION_CHAINS`` chains on, of ``CALIBRATION_BATCHES`` batches of
    chains instead (each batch's error from its chains' spread, which a short chain's own
    autocorrelation estimate understates when it rarely moves between the ends of beta)."""
    if len(lw1) >= CALIBRATION_CHAINS:
        batches = zip(np.array_split(lw1, CALIBRATION_BATCHES),
                      np.array_split(lw0, CALIBRATION_BATCHES), strict=True)
        est, se = np.array([log_ratio_by_chain(a, b)[:2] for a, b in batches]).T
    else:
        est, se = np.array([log_ratio_of_means(a, b) for a, b in zip(lw1, lw0, strict=True)]).T
    if np.ptp(est) <= 1e-9 * (1.0 + np.max(np.abs(est))):  # agree to rounding (an exact base)
        return 1.0
    if np.any(~(se > 0)):
        return float("nan")
    w = 1 / se**2
    pooled = np.sum(w * est) / np.sum(w)
    chi2 = float(np.sum(w * (est - pooled) ** 2))
    return float(stats.chi2.sf(chi2, df=len(est) - 1))


def chains_agreement_p(run: Run) -> float:
    """The p-value of the run's chains (or batches of chains) agreeing on log Z, computed once
    per :class:`~pymc_tempering.checks.Run`."""
    if "chains_p" not in run.cache:
        run.cache["chains_p"] = chains_agreement_p_of(run.log_weight, run.log_base_weight)
    return run.cache["chains_p"]


def path_vouched(lw1: np.ndarray, lw0: np.ndarray) -> bool:
    """Whether the path's estimate of log Z (eq. 20, from the weights ``(chain, draw)`` towards
    beta = 1 and 0) is vouched for by its own chains: at least ``CALIBRATION_CHAINS`` of them,
    whose batches agree (:func:`chains_agreement_p_of` at least ``FAMILY_P``)."""
    return len(lw1) >= CALIBRATION_CHAINS and chains_agreement_p_of(lw1, lw0) >= FAMILY_P


def calibrated(run: Run) -> bool:
    """Whether a tempered run's own agreement vouches for its estimate where its base's mode
    search cannot: at least ``CALIBRATION_CHAINS`` independent chains (each from its own draw
    of the base) whose ``CALIBRATION_BATCHES`` batches' log Z estimates agree within their
    standard errors (chi-square p at least ``FAMILY_P``), and, where the run has both, its
    path's and its regions' estimates agreeing within ``AGREEMENT_Z`` standard errors.

    A mode that some chains reach and others do not splits the batches' estimates; a mode that
    none of so many chains reaches from the base is one the run cannot see, calibrated or not.
    """
    if not run.has_chains() or run.log_weight.shape[0] < CALIBRATION_CHAINS:
        return False
    if not chains_agreement_p(run) >= FAMILY_P:  # path_vouched, computed once per Run
        return False
    if not run.has_two_estimators():
        return True
    path, path_se, regions, regions_se = run.two_estimators
    return abs(regions - path) <= AGREEMENT_Z * float(np.hypot(path_se, regions_se))
