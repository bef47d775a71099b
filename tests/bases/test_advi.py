"""The ADVI engine of the bases: the plateau stop, the shared step function, wide starts."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from checks import seed

import pymc_tempering as pmt


def test_advi_cuts_its_step_then_stops_when_the_elbo_stops_improving():
    from pymc_tempering.bases.advi import (
        ADVI_DECAY,
        ADVI_TOLERANCE,
        ADVI_WINDOW,
        plateau,
        ReduceOnPlateau,
    )

    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 1.0, 6 * ADVI_WINDOW)
    falling = 100.0 - 20 * ADVI_TOLERANCE * np.arange(4 * ADVI_WINDOW) / ADVI_WINDOW + noise[: 4 * ADVI_WINDOW]
    for i in (ADVI_WINDOW, 2 * ADVI_WINDOW, 3 * ADVI_WINDOW, 4 * ADVI_WINDOW):
        assert not plateau(falling[:i])  # still gaining 20 tolerances a window
    # window means differ by ~0.006 (noise sd 0.1), far below the tolerance
    flat = 100.0 + 0.1 * noise
    assert plateau(flat[: 3 * ADVI_WINDOW])
    # one flat window after a falling one is not yet a plateau
    assert not plateau(np.concatenate([falling[:ADVI_WINDOW] + 50.0, flat[: 2 * ADVI_WINDOW]]))

    step = pytensor.shared(0.01)
    callback = ReduceOnPlateau(step)
    callback(None, flat[: 3 * ADVI_WINDOW + 1], 3 * ADVI_WINDOW + 1)  # not at a window's end
    assert step.get_value() == 0.01
    callback(None, flat[: 3 * ADVI_WINDOW], 3 * ADVI_WINDOW)  # first plateau: a smaller step
    assert step.get_value() == pytest.approx(0.01 * ADVI_DECAY)
    # the next plateau is judged on the windows after the cut only
    callback(None, flat[: 5 * ADVI_WINDOW], 5 * ADVI_WINDOW)
    with pytest.raises(StopIteration):
        callback(None, flat[: 6 * ADVI_WINDOW], 6 * ADVI_WINDOW)


def test_advi_fits_of_one_base_compile_once_and_reach_the_closed_form(monkeypatch):
    """The ADVI fits of one base compile one step function per method (AdviSteps), with the
    noise as an input and no random generator, and reach the closed-form optimum of a Gaussian
    target as pymc.fit does: mean-field ADVI's optimum is the mean and 1 / sqrt(diag(S^-1)),
    full-rank ADVI's the mean and S. pymc.fit with the same optimiser and stop comes within
    0.11 standard deviations of them over 12 seeds (Adam's last iterate jitters), these fits
    within 0.08; the bound is 0.2. After a fit that diverged to NaN the next fit starts
    afresh."""
    import pymc as pm
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.tensor.random.type import RandomType

    from pymc_tempering.bases.advi import ADVI_ITERATIONS, AdviSteps, fit_advi

    compiled = []
    compile_step = AdviSteps._compile

    def counting(self, method, *args, **kwargs):
        compiled.append(method)
        return compile_step(self, method, *args, **kwargs)

    monkeypatch.setattr(AdviSteps, "_compile", counting)
    cov = np.array([[2.0, 0.8, 0.3], [0.8, 1.0, -0.2], [0.3, -0.2, 0.5]])
    mean = np.array([1.0, -2.0, 0.5])
    with pm.Model() as model:
        pm.MvNormal("x", mean, cov)
    target = pmt.Target(model)
    steps = AdviSteps(model)
    optimum_sd = {
        "advi": 1 / np.sqrt(np.diag(np.linalg.inv(cov))),
        "fullrank_advi": np.sqrt(np.diag(cov)),
    }
    for k in range(3):
        for method, sd in optimum_sd.items():
            start = {"x": mean + (k - 1.0)}
            fit = fit_advi(target, method, ADVI_ITERATIONS, seed(k), False, steps=steps, start=start)
            assert np.max(np.abs(fit.mean - mean) / sd) < 0.2
            assert np.max(np.abs(np.sqrt(np.diag(fit.cov)) / sd - 1)) < 0.2
    assert compiled == ["advi", "fullrank_advi"]
    for method in optimum_sd:
        step = steps._compiled[method][1]
        shared = [v for v in step.maker.fgraph.inputs if isinstance(v, SharedVariable)]
        assert shared and not any(isinstance(v.type, RandomType) for v in shared)

    with pm.Model() as nan_far_left:
        x = pm.Normal("x", 0, 1)
        pm.Potential("nan", pt.switch(x > -10, 0.0, np.nan))
    target = pmt.Target(nan_far_left)
    steps = AdviSteps(nan_far_left)
    for s, start in [(seed(6), 0.5), (seed(7), -20.0), (seed(8), 1.0)]:
        kwargs = {"start": {"x": start}}
        if start < -10:
            with pytest.raises(ValueError, match="diverged to NaN"):
                fit_advi(target, "advi", 1500, s, False, steps=steps, **kwargs)
            continue
        fit = fit_advi(target, "advi", ADVI_ITERATIONS, s, False, steps=steps, **kwargs)
        assert abs(fit.mean[0]) < 0.2 and abs(fit.std[0] - 1) < 0.2


def test_advi_fits_share_no_step_function_with_an_optimiser_of_the_users():
    import pymc as pm

    from pymc_tempering.bases.advi import AdviSteps

    assert AdviSteps.can_share("advi", {"start": {}, "start_sigma": {}, "obj_n_mc": 2})
    assert AdviSteps.can_share("fullrank_advi", {"callbacks": []})
    assert not AdviSteps.can_share("advi", {"obj_optimizer": pm.adam(learning_rate=0.1)})
    assert not AdviSteps.can_share("advi", {"more_updates": {}})
    assert not AdviSteps.can_share("advi", {"score": False})
    assert not AdviSteps.can_share("fullrank_advi", {"start_sigma": {}})


def test_advi_fits_start_at_widths_above_the_overflow_of_pymcs_softplus_inverse():
    """A mean-field fit started at a width of 2000 (PyMC's log(expm1(sigma)) is inf above 709):
    the fit of N(5000, 2000^2) stays finite and near it, where it diverged to NaN."""
    import pymc as pm

    from pymc_tempering.bases.advi import fit_advi

    with pm.Model() as model:
        pm.Normal("x", 5000.0, 2000.0)
    target = pmt.Target(model)
    fit = fit_advi(
        target, "advi", 3000, seed(3), False, start_sd=np.array([2000.0]), start={"x": 5000.0}
    )
    assert np.isfinite(fit.log_zeta)
    assert abs(fit.mean[0] - 5000.0) < 200 and abs(fit.std[0] / 2000.0 - 1) < 0.1
