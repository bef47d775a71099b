"""Hamiltonian ergodic inference's numerics: the statistic that tells whether further cycles of
the tuned chain moved its draws, and which parameters each way of tuning ``P_0`` trains."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest


def test_cycle_drift_sees_a_change_and_no_change():
    """``cycle_drift``: draws that one more cycle left where they were score 0; draws whose
    spread one cycle widened by 20% (4000 draws: the paired z of the squared deviations is
    about 30) score far beyond the Bonferroni bound, as does a shift of the log density alone;
    rows that are not finite are dropped. The bound is the two-sided Bonferroni quantile for
    2 d + 1 statistics at family-wise rate 0.01."""
    from scipy.stats import norm

    from pymc_tempering.kernels.ergodic import CYCLE_DRIFT_ALPHA, cycle_drift

    rng = np.random.default_rng(0)  # fixed draws: the assertions hold by a wide margin
    x = rng.standard_normal((4000, 3))
    lp = -0.5 * (x**2).sum(axis=1)
    z, critical = cycle_drift(x, lp, x, lp)
    assert z == 0.0
    assert critical == pytest.approx(norm.isf(CYCLE_DRIFT_ALPHA / 14))
    wider = 1.2 * x
    assert cycle_drift(x, lp, wider, -0.5 * (wider**2).sum(axis=1))[0] > 10 * critical
    assert cycle_drift(x, lp, x, lp - 0.1 + 0.01 * rng.standard_normal(4000))[0] > 10 * critical
    x_nan = x.copy()
    x_nan[0] = np.nan
    assert cycle_drift(x_nan, lp, x, lp)[0] == 0.0


def test_tune_initial_true_in_any_spelling_tunes_p0():
    """``True`` (also ``1``, ``np.True_``, which the option check accepts) tunes P_0's mean and
    sds by the objective's gradient; ``False``, ``0`` and ``"stein"`` share one graph, which
    tunes P_0's common scale only (along the Stein gap, or not at all)."""
    from pymc_tempering.kernels import ergodic as hei

    params = hei.init_parameters(np.zeros(2), np.ones(2), np.full(3, 0.1))
    total = sum(pt.sum(p) for p in params)
    objective = hei.Objective(*[total] * 6)

    def tunes(flag, p):
        return any(q is p for q in hei.tuning_gradients(objective, params, flag)[0])

    for flag in (True, 1, np.True_):
        assert tunes(flag, params.mean) and tunes(flag, params.log_std), flag
        assert not tunes(flag, params.log_scale), flag
    for flag in (False, 0, "stein"):
        assert tunes(flag, params.log_scale) and not tunes(flag, params.mean), flag
