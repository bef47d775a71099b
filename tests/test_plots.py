"""plots.py: each plot draws a continuous tempering result and refuses what it cannot draw."""

import matplotlib
import numpy as np
import pytest
import xarray as xr
from checks import seed
from pymc_tempering.problems.conjugate import conjugate_normal_vector
from xarray import DataTree

import pymc_tempering as pmt

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def ct_result():
    """A short CT run on a model with a 2-vector (so plot_joint draws two panels)."""
    model, _, post_mean, post_sd = conjugate_normal_vector()
    base = pmt.Base.from_moments(post_mean, (1.5 * post_sd) ** 2)
    return pmt.sample_ct(
        100, tune=100, chains=2, model=model, base=base, bootstrap=0, random_seed=seed(0),
        progressbar=False,
    )


@pytest.fixture(autouse=True)
def close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_plot_inverse_temperature(ct_result):
    collection = pmt.plot_inverse_temperature(ct_result)
    assert collection is not None


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_plot_log_marginal_likelihood(ct_result):
    ax = pmt.plot_log_marginal_likelihood(ct_result, n_points=10)
    assert ax.get_ylabel() == "log marginal likelihood"
    assert ax.get_xlabel() == "draws per chain"


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_plot_joint(ct_result):
    axes = pmt.plot_joint(ct_result)
    assert len(axes) == 2 and axes[0].get_ylabel() == "inverse temperature"
    assert pmt.plot_joint(ct_result, var_name="mu", max_points=50)[1].get_xlabel() == "mu[1]"


def test_plots_refuse_results_they_cannot_draw():
    plain = DataTree.from_dict({
        "/posterior": xr.Dataset({"x": (("chain", "draw"), np.zeros((1, 5)))}),
        "/sample_stats": xr.Dataset({"log_weight": (("chain", "draw"), np.zeros((1, 5)))}),
    })
    with pytest.raises(ValueError, match="inverse_temperature"):
        pmt.plot_inverse_temperature(plain)
    with pytest.raises(ValueError, match="inverse_temperature"):
        pmt.plot_joint(plain)
    with pytest.raises(ValueError, match="continuous tempering"):
        pmt.plot_log_marginal_likelihood(plain)
