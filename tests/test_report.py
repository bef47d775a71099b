"""report.py: the post-run warnings, on hand-built results (no sampling). The weighted-ESS
warning is tested with the weighted summaries it reads, in test_analysis.py."""

import numpy as np
import pytest
import xarray as xr
from xarray import DataTree

from pymc_tempering.report import warn_problems


def _tree(diverging):
    return DataTree.from_dict({
        "/sample_stats": xr.Dataset({"diverging": (("chain", "draw"), diverging)}),
    })


def test_warn_problems_warns_once_per_problem():
    diverging = np.zeros((2, 10), dtype=bool)
    with pytest.warns(UserWarning, match="3 of 20 transitions diverged") as record:
        diverging[0, :3] = True
        warn_problems(_tree(diverging))
    # the warning points at the caller outside the package (here this file), not at a wrapper
    assert [w.filename for w in record] == [__file__]


def test_warn_problems_is_silent_on_a_clean_result(recwarn):
    warn_problems(_tree(np.zeros((2, 10), dtype=bool)))
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_warn_missed_modes_warns_of_the_record_it_is_given():
    """The mode search is the caller's (driver_result); the warning names the missed optima and
    the remedy for the model: sample_ct for an exact density, replica exchange for a
    minibatched one, more tuning for replica exchange itself; nothing below the limit."""
    import warnings

    from pymc_tempering.report import MissedModes, warn_missed_modes

    with pytest.warns(UserWarning, match=r"tact_hmc: the draws never came near 1 of the 3 .* "
                      r"about 50% .* use pmt.sample_ct"):
        warn_missed_modes(MissedModes(1, 3, 0.5), "tact_hmc")
    with pytest.warns(UserWarning, match="use pmt.sample_replica_exchange"):
        warn_missed_modes(MissedModes(1, 2, 0.5, full_data=True), "tact_hmc")
    with pytest.warns(UserWarning, match="or raise tune"):
        warn_missed_modes(MissedModes(1, 2, 0.5, full_data=True), "replica_exchange")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_missed_modes(MissedModes(1, 3, 0.01), "tact_hmc")


def test_warn_convergence_tells_r_hat_from_the_effective_sample_size():
    """PyMC's two convergence warnings, told apart by their level and not by their text: chains
    in two places give an R-hat warning, sticky chains an ESS warning."""
    import pymc as pm

    from pymc_tempering.report import warn_convergence

    with pm.Model() as model:
        pm.Normal("x")
    rng = np.random.default_rng(0)
    apart = rng.normal(size=(4, 500)) + np.array([[0.0], [0.0], [3.0], [3.0]])
    sticky = np.repeat(rng.normal(size=(4, 25)), 20, axis=1)  # 25 distinct draws per chain

    def result(x):
        return DataTree.from_dict({"/posterior": xr.Dataset({"x": (("chain", "draw"), x)})})

    for x, what in [(apart, "R-hat above 1.01 (largest"),
                    (sticky, "effective sample size below 100 per chain (smallest")]:
        with pytest.warns(UserWarning) as record:
            warn_convergence(result(x), model, "toy")
        assert any(str(w.message).startswith(f"toy: {what}") for w in record), what
