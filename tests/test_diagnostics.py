"""The diagnostics on hand-made results with known answers."""

import numpy as np
import xarray as xr
from xarray import DataTree

from pymc_tempering import diagnose


def test_diagnose_khat_reads_the_right_tail():
    """The k-hat check must see bounded weights as light-tailed and Pareto weights as heavy."""
    rng = np.random.default_rng(7)

    def khat_of(log_weight):
        stats_ = xr.Dataset({"log_weight": (("chain", "draw"), log_weight.reshape(4, -1))})
        return diagnose(DataTree.from_dict({"/sample_stats": stats_})).checks.loc["pareto_khat", "value"]

    assert khat_of(np.log(rng.uniform(size=8000))) < 0.3  # bounded: k = -1 in theory
    # Pareto weights with tail index 1/k = 1 / 0.9 (infinite variance)
    assert khat_of(np.log(rng.pareto(1 / 0.9, size=8000) + 1)) > 0.7


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
    rng = np.random.default_rng(3)
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
    assert diagnosis.problems[0].startswith("2 of 100 transitions diverged: NUTS")
