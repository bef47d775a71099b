"""pymc_tempering.checks: the one registry of the checks, and what loops over it."""

import numpy as np
import pytest
import xarray as xr
from checks import seed
from xarray import DataTree

import pymc_tempering as pmt
from pymc_tempering.checks import (
    CHECKS,
    NOT_REFIT,
    POSTERIOR_CHECKS,
    Check,
    Finding,
    Mend,
    check,
    diagnose,
    posterior_check,
)
from pymc_tempering.checks import registry


def test_one_record_per_check():
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    assert all(isinstance(c.mended_by, Mend) for c in CHECKS)
    assert all(c.evidence or c.posterior for c in CHECKS)
    assert all(callable(c.applies) and callable(c.judge) for c in CHECKS)
    assert check("divergences") is registry.DIVERGENCES
    with pytest.raises(KeyError):
        check("no_such_check")


def test_derived_lists():
    """NOT_REFIT and POSTERIOR_CHECKS come from the records: the failed checks a refit of the
    base does not mend, and those that bear on the draws, in registry order."""
    assert NOT_REFIT == {c.name for c in CHECKS if c.mended_by is not Mend.REFIT} == {
        "improper_prior", "divergences", "pareto_khat", "missed_mode_mass", "standard_error",
        "unseen_optima", "funnel_mass", "mass_beyond_draws", "mass_near_optima", "known_modes",
        "path_regions_agreement",
    }
    assert POSTERIOR_CHECKS == (
        "mass_beyond_draws", "mass_near_optima", "path_regions_agreement", "beta_near_0",
        "min_end_to_end_passages", "divergences", "unseen_optima", "missed_mode_mass",
        "known_modes", "funnel_mass",
    )
    # mass about an optimum bears on the evidence only through mass_beyond_draws
    assert not registry.MASS_NEAR_OPTIMA.evidence
    assert {c.name for c in CHECKS if c.answered_by_strata} == {
        "missed_mode_mass", "mass_near_optima", "beta_near_0", "min_end_to_end_passages"}


def _tempered(with_optima: bool, rng) -> DataTree:
    """A continuous tempering result whose base group holds optima or none (a mode search that
    found none)."""
    u = rng.normal(size=(2, 400))
    data = {"mean": ("flat", [0.0]), "variance": ("flat", [1.0])}
    if with_optima:
        data |= {
            "mode_point": (("mode", "flat"), [[0.0]]), "mode_log_density": ("mode", [0.0]),
            "mode_log_mass": ("mode", [0.0]), "mode_hits": ("mode", [32]),
            "mode_variance": (("mode", "flat"), [[1.0]]),
        }
    base = xr.Dataset(data, coords={"flat_variable": ("flat", ["u"])})
    tree = DataTree.from_dict({
        "/posterior": xr.Dataset({
            "u": (("chain", "draw"), u),
            "inverse_temperature": (("chain", "draw"), rng.uniform(size=(2, 400))),
        }),
        "/sample_stats": xr.Dataset({
            "log_weight": (("chain", "draw"), np.log(rng.uniform(0.9, 1.0, size=(2, 400)))),
            "log_base_weight": (("chain", "draw"), np.log(rng.uniform(0.9, 1.0, size=(2, 400)))),
        }),
        "/base": base,
    })
    tree.attrs = {"method": "continuous_tempering", "log_marginal_likelihood": 0.0,
                  "log_marginal_likelihood_se": 0.01}
    return tree


def test_a_run_whose_mode_search_found_no_optimum_has_no_reliable_posterior():
    """known_modes: a tempered run whose base's mode search found no optimum (an unbounded
    density: latent factors, free mixture scales) cannot account for its modes, so its
    posterior is not reliable, whatever its draws look like; its evidence's verdict is not
    changed by it. With an optimum the check passes."""
    rng = np.random.default_rng(seed(21))
    blind, seen = _tempered(False, rng), _tempered(True, rng)
    flagged = diagnose(blind)
    assert not flagged.checks.loc["known_modes", "ok"]
    [problem] = [p for p in flagged.problems if "found no optimum" in p]
    assert problem in flagged.draws_only and problem not in flagged.evidence_problems
    verdict = posterior_check(blind)
    assert not verdict.reliable
    assert any("found no optimum" in p for p in verdict.problems)
    assert diagnose(seen).checks.loc["known_modes", "ok"]
    assert not any("found no optimum" in p for p in posterior_check(seen).problems)


def test_chains_that_never_reach_the_base_have_no_reliable_posterior():
    """beta_near_0 bears on the posterior: chains whose inverse temperature never comes near 0
    never visit the base, so they never leave the mode they began in, and the draws' share of
    each mode is where they started."""
    rng = np.random.default_rng(seed(23))
    stuck = _tempered(True, rng)
    stuck["posterior"] = stuck["posterior"].to_dataset().assign(
        inverse_temperature=(("chain", "draw"), rng.uniform(0.5, 1.0, (2, 400))))
    assert not diagnose(stuck).checks.loc["beta_near_0", "ok"]
    verdict = posterior_check(stuck)
    assert not verdict.reliable
    assert any("never came near 0" in p for p in verdict.problems)
    assert not any("never came near 0" in p for p in posterior_check(_tempered(True, rng)).problems)


def test_a_new_check_is_one_record(monkeypatch):
    """A record added to the registry is run by diagnose (its row and problem), read by the
    posterior's verdict when it bears on the posterior, and skipped where it does not apply."""
    def judge(run):
        share = float(np.mean(run.beta > 0.5))
        return Finding(share, "< 0.1", share < 0.1, "share of hot draws",
                       "too many hot draws" if share >= 0.1 else None)

    def applies(run):
        return run.beta is not None

    record = Check("hot_draws", False, True, Mend.NOTHING, applies, judge)
    import pymc_tempering.checks.diagnosis as diagnose_module

    monkeypatch.setattr(diagnose_module, "CHECKS", (*CHECKS, record))
    rng = np.random.default_rng(seed(22))
    tree = _tempered(True, rng)
    diagnosis = diagnose(tree)
    assert diagnosis.checks.loc["hot_draws", "ok"] == False  # noqa: E712 (a numpy bool)
    assert "too many hot draws" in diagnosis.draws_only
    assert "too many hot draws" in posterior_check(tree).problems
    no_beta = DataTree.from_dict({"/sample_stats": tree["sample_stats"].to_dataset()})
    assert "hot_draws" not in diagnose(no_beta).checks.index


def test_the_extension_policy_applies_each_failed_records_mend(monkeypatch):
    """rounds._extension reads the registry: a failed evidence check mended by a refit refits,
    one mended by a higher target_accept raises it, one mended by nothing changes nothing, and
    a check of the posterior alone asks for no further run."""
    from pymc_tempering.checks.diagnosis import Diagnosis
    from pymc_tempering.extended import rounds

    def diagnosis(*records):
        findings = {r.name: Finding(1, "0", False, "", "problem") for r in records}
        return Diagnosis(checks=None, problems=["problem"], findings=findings)

    refitted = []
    monkeypatch.setattr(rounds, "_refit", lambda *a: (refitted.append(1) or ("base", 1.0, True)))
    for records, accept, refit in [
        ((registry.DIVERGENCES,), 0.95, False),
        ((registry.BETA_NEAR_0,), 0.9, True),
        ((registry.PARETO_KHAT,), None, False),
        ((registry.KNOWN_MODES, registry.MASS_NEAR_OPTIMA), None, False),
    ]:
        refitted.clear()
        monkeypatch.setattr(rounds, "diagnose", lambda result, d=diagnosis(*records): d)
        nxt = rounds._extension(None, None, pmt.Base(np.zeros(1), np.eye(1)), 0.0, 100, 0.9, 0)
        if accept is None:
            assert nxt is None
            continue
        assert nxt.target_accept == pytest.approx(accept) and bool(refitted) == refit


def test_two_estimators_that_disagree_flag_the_evidence_and_the_posterior():
    """ct_result's regions estimator: where the path's log Z and the regions' summed masses
    agree they are combined, where they do not the regions' is reported and the check
    path_regions_agreement fails, for the evidence and the posterior."""
    from types import SimpleNamespace

    from pymc_tempering.extended.tempered import evidence_from_regions

    strata = SimpleNamespace(method="importance sampling", log_mass=np.log([0.5, 0.5]),
                             log_mass_se=np.array([0.02, 0.02]))
    per_chain = np.zeros(4)
    lml, attrs = evidence_from_regions((0.05, 0.1, per_chain), strata)
    assert attrs["log_marginal_likelihood_regions"] == pytest.approx(0.0)
    assert lml[1] < 0.1 and abs(lml[0]) < 0.05  # combined, nearer the precise one
    far, far_attrs = evidence_from_regions((1.4, 0.2, per_chain), strata)
    # disagreeing: the regions' (independent importance sampling), flagged below
    assert far[0] == pytest.approx(0.0) and far[1] == pytest.approx(0.02 / np.sqrt(2))
    assert evidence_from_regions((1.4, 0.2, per_chain),
                                 SimpleNamespace(**{**vars(strata), "method": "draws"})) == (
        (1.4, 0.2, per_chain), {})
    rng = np.random.default_rng(seed(23))
    for attrs_, ok in ((attrs, True), (far_attrs, False)):
        tree = _tempered(True, rng)
        tree.attrs.update(attrs_)
        diagnosis = diagnose(tree)
        assert diagnosis.checks.loc["path_regions_agreement", "ok"] == ok
        assert any("two estimates of log Z disagree" in p for p in diagnosis.evidence_problems) != ok
        assert ok or any("disagree" in p for p in posterior_check(tree).problems)


def test_mass_about_an_optimum_fails_the_evidence_of_a_stratified_run_too():
    """mass_beyond_draws counts the mass about an optimum that the weighted draws under-weigh
    (coverage's near_optimum) whether or not strata importance-sampled the modes' masses: the
    strata can be off with a standard error that does not show it, and this is how a tanh
    network's run 0.10 off was flagged."""
    from types import SimpleNamespace

    from pymc_tempering.coverage import Beyond

    coverage = Beyond(share=0.0, se=0.0, log_z=0.0, log_z_se=0.3, near_optimum=0.145,
                      near_optimum_se=0.01)
    for stratified in (False, True):
        run = SimpleNamespace(cache={}, coverage=coverage, log_z=0.0, log_z_se=0.005,
                              stratified=stratified)
        assert not registry._mass_beyond_draws(run).ok


def _many_chains(shift: float, chains: int, rng) -> DataTree:
    """A tempered result of ``chains`` chains whose Delta(x) is N(0, 1) per draw, with
    ``shift`` added in the second half of the chains (a mode only they reach); its mode
    search far from complete (32 runs, each at its own optimum)."""
    from pymc_tempering.estimators import ct_log_weights

    delta = rng.normal(size=(chains, 300))
    delta[chains // 2:] += shift
    log_w0, log_w1 = ct_log_weights(delta)
    base = _tempered(False, rng)["base"].to_dataset()
    k = 32
    base = base.assign(mode_point=(("mode", "flat"), rng.normal(size=(k, 1))),
                       mode_log_density=("mode", np.zeros(k)), mode_log_mass=("mode", np.zeros(k)),
                       mode_hits=("mode", np.ones(k, dtype=int)),
                       mode_variance=(("mode", "flat"), np.ones((k, 1))))
    return DataTree.from_dict({
        "/posterior": xr.Dataset({
            "u": (("chain", "draw"), rng.normal(size=delta.shape)),
            "inverse_temperature": (("chain", "draw"), rng.uniform(size=delta.shape))}),
        "/sample_stats": xr.Dataset({"log_weight": (("chain", "draw"), log_w1),
                                     "log_base_weight": (("chain", "draw"), log_w0)}),
        "/base": base,
    })


@pytest.mark.parametrize("shift, chains, expected", [(0.0, 64, True), (1.0, 64, False),
                                                      (0.0, 16, False)])
def test_agreeing_batches_of_many_chains_stand_in_for_an_incomplete_mode_search(
        shift, chains, expected):
    """``calibrated``: at least 32 chains whose 8 batches agree on log Z. It answers
    ``unseen_optima`` (a mode search where every run found its own optimum) and
    ``min_end_to_end_passages``; a mode half the chains reach splits the batches."""
    from pymc_tempering.checks import Run, calibrated

    rng = np.random.default_rng(seed(31))
    tree = _many_chains(shift, chains, rng)
    tree.attrs = {"method": "continuous_tempering", "log_marginal_likelihood": 0.0,
                  "log_marginal_likelihood_se": 0.01}
    assert calibrated(Run(tree)) == expected
    checks = diagnose(tree).checks
    assert checks.loc["unseen_optima", "ok"] == expected
    assert checks.loc["chains_log_z_chi2_p", "ok"] == (shift == 0.0)


def test_a_path_of_agreeing_batches_is_reported_where_the_regions_disagree():
    """With many chains whose batches agree, the path's estimate is the one reported when the
    regions' disagrees (regions around a few of thousands of optima miss mass); the check
    path_regions_agreement still fails."""
    from types import SimpleNamespace

    from pymc_tempering.extended.tempered import evidence_from_regions

    strata = SimpleNamespace(method="importance sampling", log_mass=np.log([0.5, 0.5]),
                             log_mass_se=np.array([0.02, 0.02]))
    lml = (1.4, 0.2, np.zeros(64))
    reported, attrs = evidence_from_regions(lml, strata, trust_path=True)
    assert reported == lml and attrs["log_marginal_likelihood_regions"] == pytest.approx(0.0)


def test_missed_optima_over_blocks_of_draws():
    from pymc_tempering.checks.registry import NEAREST_BLOCK, missed_optima

    rng = np.random.default_rng(0)
    points = 3.0 * rng.normal(size=(5, 3))
    # draws near the first four optima only, more than one block of them
    near = rng.integers(0, 4, size=2 * NEAREST_BLOCK + 17)
    flat = points[near] + 0.01 * rng.normal(size=(len(near), 3))
    missed, mass = missed_optima(points, np.zeros(5), flat, np.ones(3))
    np.testing.assert_array_equal(missed, [False, False, False, False, True])
    assert mass == pytest.approx(0.2)
    # weights that put (almost) nothing on the draws near the first optimum miss it too
    log_weight = np.where(near == 0, -50.0, 0.0)
    missed, _ = missed_optima(points, np.zeros(5), flat, np.ones(3), log_weight)
    np.testing.assert_array_equal(missed, [True, False, False, False, True])


def test_search_incomplete_above_the_unseen_limit():
    from types import SimpleNamespace

    from pymc_tempering.checks import UNSEEN_OPTIMA_LIMIT, search_incomplete

    assert not search_incomplete(None)  # no search: nothing to vouch or not
    assert not search_incomplete(SimpleNamespace(unseen=UNSEEN_OPTIMA_LIMIT))
    assert search_incomplete(SimpleNamespace(unseen=UNSEEN_OPTIMA_LIMIT + 0.01))
