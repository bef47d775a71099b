"""The diagnostics on hand-made results with known answers."""

import numpy as np
import xarray as xr
from checks import seed
from xarray import DataTree

from pymc_tempering import diagnose


def test_diagnose_khat_reads_the_right_tail():
    """The k-hat check must see bounded weights as light-tailed and Pareto weights as heavy."""
    rng = np.random.default_rng(seed(7))

    def khat_of(log_weight):
        stats_ = xr.Dataset({"log_weight": (("chain", "draw"), log_weight.reshape(4, -1))})
        return diagnose(DataTree.from_dict({"/sample_stats": stats_})).checks.loc["pareto_khat", "value"]

    # bounded: k = -1 in theory; over seeds k-hat is -0.85 with sd 0.05 (8000 draws)
    assert khat_of(np.log(rng.uniform(size=8000))) < 0.3
    # Pareto weights with k = 1.5 (infinite variance). k-hat's sd is ~0.11 at 20,000 draws, so
    # the limit 0.7 lies 7 of them below k: a miss has probability ~1e-11. (With k = 0.9 and
    # 8000 draws, as before, the sd was 0.11 and k-hat fell below 0.7 for 1 seed in 40.)
    assert khat_of(np.log(rng.pareto(1 / 1.5, size=20_000) + 1)) > 0.7


def test_diagnose_khat_is_no_problem_for_bounded_continuous_tempering_weights():
    """Weights p(beta = 1 | x) <= 1 (continuous tempering: log_base_weight present) have every
    moment finite: the k-hat is shown but not held against the run; without log_base_weight
    the same heavy-tailed weights are a problem."""
    rng = np.random.default_rng(seed(8))
    lw = np.log(rng.pareto(1 / 1.5, size=20_000) + 1).reshape(4, -1)

    def diagnosis(with_base_weight):
        stats_ = {"log_weight": (("chain", "draw"), lw)}
        if with_base_weight:
            stats_["log_base_weight"] = (("chain", "draw"), np.zeros_like(lw))
        return diagnose(DataTree.from_dict({"/sample_stats": xr.Dataset(stats_)}))

    heavy, bounded = diagnosis(False), diagnosis(True)
    assert heavy.checks.loc["pareto_khat", "value"] > 0.7 and not heavy.checks.loc["pareto_khat", "ok"]
    assert any("heavy-tailed" in p for p in heavy.problems)
    assert bounded.checks.loc["pareto_khat", "ok"]
    assert not any("heavy-tailed" in p for p in bounded.problems)


def test_diagnose_flags_divergences_and_says_where():
    """Any divergent transition is a problem, and the message gives the median beta of them."""
    beta = np.tile(np.linspace(0.01, 0.99, 100), (2, 1))
    diverging = np.zeros((2, 100), dtype=bool)

    def run(diverging):
        tree = DataTree.from_dict({
            "/posterior": xr.Dataset({"inverse_temperature": (("chain", "draw"), beta)}),
            "/sample_stats": xr.Dataset({"diverging": (("chain", "draw"), diverging)}),
        })
        return diagnose(tree)

    clean = run(diverging)
    assert clean.checks.loc["divergences", "value"] == 0 and clean.ok
    diverging[1, 95:] = True  # beta 0.951, 0.960, ..., 0.990: median 0.970
    flagged = run(diverging)
    assert flagged.checks.loc["divergences", "value"] == 5 and not flagged.ok
    assert "5 of 200 transitions diverged, at a median beta of 0.97" in flagged.problems[0]


def test_diagnose_reads_pseudo_extended_results():
    """One inverse temperature per pseudo-sample: the two-ends checks are skipped, not crashed on."""
    rng = np.random.default_rng(seed(3))
    dims = ("chain", "draw", "pseudo_sample")
    log_weight = np.log(rng.dirichlet([1.0, 1.0], size=(2, 50)))
    tree = DataTree.from_dict({
        "/posterior": xr.Dataset({"inverse_temperature": (dims, rng.uniform(size=(2, 50, 2)))}),
        "/sample_stats": xr.Dataset({
            "diverging": (("chain", "draw"), np.eye(2, 50, dtype=bool)),
            "log_weight": (dims, log_weight),
        }),
    })
    diagnosis = diagnose(tree)
    assert list(diagnosis.checks.index) == ["divergences"]
    assert diagnosis.problems[0].startswith("2 of 100 transitions diverged: the sampler")
    # no inverse temperature per draw: the message speaks of the density sampled, not of beta
    assert "beta" not in diagnosis.problems[0]
    # an AIS draw ends a run of many transitions: the count is of runs
    tree.attrs["method"] = "ais"
    assert diagnose(tree).problems[0].startswith("2 of 100 runs had a divergent transition:")


def test_divergences_in_a_corrected_neck_are_a_problem_of_the_draws_only():
    """Divergent transitions that all end beyond a funnel's edge, where the log marginal
    likelihood takes the mass from the profile (``funnel_correction``), are a problem of the
    draws (``draws_only``) and not of the evidence; one elsewhere is a problem of both."""
    u = np.tile(np.linspace(-3.0, 3.0, 100), (2, 1))  # the spike at low u; the edge at -1
    beta = np.full((2, 100), 0.95)
    base = xr.Dataset(
        {
            "mean": ("flat", [0.0]), "variance": ("flat", [1.0]),
            "funnel_mass": ("funnel", [0.3]), "funnel_mass_se": ("funnel", [0.05]),
            "funnel_edge": ("funnel", [-1.0]), "funnel_inner": ("funnel", [1.0]),
            "funnel_index": ("funnel", [0]), "funnel_tail_ratio": ("funnel", [0.6]),
        },
        coords={"flat_variable": ("flat", ["u"]), "funnel_variable": ("funnel", ["u"])},
    )

    def run(diverging, corrected=True):
        tree = DataTree.from_dict({
            "/posterior": xr.Dataset({
                "inverse_temperature": (("chain", "draw"), beta), "u": (("chain", "draw"), u),
            }),
            "/sample_stats": xr.Dataset({"diverging": (("chain", "draw"), diverging)}),
            "/base": base,
        })
        if corrected:
            tree.attrs["funnel_correction"] = 0.2
        return diagnose(tree)

    diverging = np.zeros((2, 100), dtype=bool)
    diverging[0, :5] = True  # u from -3 to -2.76: in the neck
    neck = run(diverging)
    assert not neck.checks.loc["divergences", "ok"]
    def diverged(problems):  # (beta stays at 0.95 here: the ends of beta are problems too)
        return [p for p in problems if "diverged" in p]

    [problem] = diverged(neck.problems)
    assert "every one at a draw in the neck" in problem
    assert neck.draws_only == [problem] and not diverged(neck.evidence_problems)
    # without the correction, and with one divergence in the bulk, the evidence has the problem
    assert diverged(run(diverging, corrected=False).evidence_problems)
    diverging[1, 50] = True
    [problem] = diverged(run(diverging).evidence_problems)
    assert "median beta" in problem


def _full_result(near_optimum=0.0):
    """A continuous tempering result with every input of diagnose: two optima, a funnel, the
    coverage check's group, an improper prior, a target_se, the path's and the regions' log Z."""
    from pymc_tempering.coverage import COVERAGE, Beyond, coverage_group

    rng = np.random.default_rng(seed(12))
    u = rng.normal(size=(2, 200))
    base = xr.Dataset(
        {
            "mean": ("flat", [0.0]), "variance": ("flat", [1.0]),
            "mode_point": (("mode", "flat"), [[-1.0], [1.0]]),
            "mode_log_density": ("mode", [0.0, 0.0]), "mode_variance": (("mode", "flat"), [[1.0], [1.0]]),
            "mode_log_mass": ("mode", [0.0, 0.0]), "mode_hits": ("mode", [10, 10]),
            "funnel_mass": ("funnel", [0.0]), "funnel_mass_se": ("funnel", [0.01]),
            "funnel_edge": ("funnel", [-2.0]), "funnel_inner": ("funnel", [1.0]),
            "funnel_index": ("funnel", [0]), "funnel_tail_ratio": ("funnel", [0.6]),
        },
        coords={"flat_variable": ("flat", ["u"]), "funnel_variable": ("funnel", ["u"])},
    )
    tree = DataTree.from_dict({
        "/posterior": xr.Dataset({
            "u": (("chain", "draw"), u),
            "inverse_temperature": (("chain", "draw"), rng.uniform(size=(2, 200))),
        }),
        "/sample_stats": xr.Dataset({
            "diverging": (("chain", "draw"), np.zeros((2, 200), dtype=bool)),
            "log_weight": (("chain", "draw"), np.log(rng.uniform(size=(2, 200)))),
            "log_base_weight": (("chain", "draw"), np.log(rng.uniform(size=(2, 200)))),
        }),
        "/base": base,
        f"/{COVERAGE}": coverage_group(Beyond(0.0, 0.0, -1.0, 0.1, near_optimum, 0.001)),
    })
    tree.attrs = {"method": "continuous_tempering", "log_marginal_likelihood": -1.0,
                  "log_marginal_likelihood_se": 0.1, "target_se": 0.3,
                  "improper_prior": "u", "flat_directions": 0,
                  "log_marginal_likelihood_path": -1.0, "log_marginal_likelihood_path_se": 0.1,
                  "log_marginal_likelihood_regions": -1.0,
                  "log_marginal_likelihood_regions_se": 0.1}
    return tree


def test_every_check_is_a_record_of_the_registry():
    """The table's rows are the checks of pymc_tempering.checks, every one of them (the
    improper prior, a property of the model, is a problem without a row)."""
    from pymc_tempering.checks import CHECKS

    diagnosis = diagnose(_full_result())
    rows = diagnosis.checks.index
    assert sorted(rows) == sorted(c.name for c in CHECKS if not c.improper)
    assert list(diagnosis.findings) == [c.name for c in CHECKS]
    assert diagnosis.improper == [diagnosis.problems[0]]


def test_mass_about_an_optimum_from_the_coverage_group_is_a_problem_of_the_draws():
    """The coverage group's mass_near_optima, read back from the group, fails its check; by
    the registry it bears on the posterior alone, so it is a problem of the draws only."""
    clean, missed = diagnose(_full_result()), diagnose(_full_result(near_optimum=0.03))
    assert clean.checks.loc["mass_near_optima", "ok"]
    assert not missed.checks.loc["mass_near_optima", "ok"]
    assert missed.checks.loc["mass_near_optima", "value"] == 0.03
    [problem] = [p for p in missed.problems if "about one of the optima" in p]
    assert "3.0%" in problem and problem in missed.draws_only
    assert problem not in missed.evidence_problems
