"""checks.py: the one registry of diagnose's checks, and the lists derived from it."""

import ast
from pathlib import Path

import pytest

from pymc_tempering import checks
from pymc_tempering.checks import CHECKS, NOT_REFIT, POSTERIOR_CHECKS, Mend, check


def test_one_record_per_check():
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    assert all(isinstance(c.mended_by, Mend) for c in CHECKS)
    assert all(c.evidence or c.posterior for c in CHECKS)
    assert check("divergences") is checks.DIVERGENCES
    with pytest.raises(KeyError):
        check("no_such_check")


def test_derived_lists():
    """NOT_REFIT and POSTERIOR_CHECKS come from the records: the failed checks a refit of the
    base does not mend (the weights' tail, the standard error, a missed mode, an incomplete mode
    search, a funnel's neck, mass beyond the draws or about an optimum, divergences), and those
    that bear on the draws, in the order posterior_check names them."""
    assert NOT_REFIT == {c.name for c in CHECKS if c.mended_by is not Mend.REFIT} == {
        "divergences", "pareto_khat", "missed_mode_mass", "standard_error", "unseen_optima",
        "funnel_mass", "mass_beyond_draws", "mass_near_optima",
    }
    assert POSTERIOR_CHECKS == (
        "missed_mode_mass", "unseen_optima", "funnel_mass", "mass_beyond_draws",
        "mass_near_optima", "divergences",
    )
    # mass about an optimum bears on the evidence only through mass_beyond_draws
    assert not checks.MASS_NEAR_OPTIMA.evidence


def test_the_registry_imports_nothing_of_the_library():
    """A low layer: every module may read it, and it reads none."""
    tree = ast.parse(Path(checks.__file__).read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [m for m in imported if m and m.startswith("pymc_tempering")]
