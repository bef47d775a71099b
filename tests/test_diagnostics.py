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
