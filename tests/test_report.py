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
