"""results.build_result: the one builder of the layout every method returns (no sampling)."""

import numpy as np
import pytest
import xarray as xr
from xarray import DataTree

import pymc_tempering as pmt
from pymc_tempering.results import base_group, build_result, flat_draws_from_result

CHAINS, DRAWS = 2, 5


@pytest.fixture
def target(normal_model):
    return pmt.Target(normal_model[0])


def _sampled(stats=None, pseudo=False):
    """What a sampler hands to build_result: posterior (with a value variable) and stats."""
    rng = np.random.default_rng(0)
    shape = (CHAINS, DRAWS, 3) if pseudo else (CHAINS, DRAWS)
    dims = ("chain", "draw", "pseudo_sample") if pseudo else ("chain", "draw")
    coords = {"chain": np.arange(CHAINS), "draw": np.arange(DRAWS)}
    if pseudo:
        coords["pseudo_sample"] = np.arange(3)
    post = xr.Dataset(
        {
            "mu": (dims, rng.normal(size=shape)),
            "s": (dims, np.exp(rng.normal(size=shape))),
            "s_log__": (dims, rng.normal(size=shape)),
        },
        coords=coords,
    )
    if stats is None:
        stats = {
            "diverging": np.zeros((CHAINS, DRAWS), dtype=bool),
            "acceptance_rate": np.full((CHAINS, DRAWS), 0.8),
            "lp": rng.normal(size=(CHAINS, DRAWS)),
        }
    stats_ds = xr.Dataset({k: (("chain", "draw"), v) for k, v in stats.items()}, coords=coords)
    return DataTree.from_dict({"/posterior": post, "/sample_stats": stats_ds})


def test_layout_and_default_log_weight(target):
    result = build_result(_sampled(), target, method="toy", attrs={"draws": DRAWS})
    assert set(result["posterior"].data_vars) == {"mu", "s"}
    assert set(result["unconstrained_posterior"].data_vars) == {"s_log__"}
    lw = result["sample_stats"]["log_weight"]
    assert lw.dims == ("chain", "draw")
    np.testing.assert_array_equal(lw.values, 0.0)  # every draw weighs the same
    assert "y" in result["observed_data"] and result["observed_data"]["y"].dims == ("obs",)
    assert result.attrs == {"method": "toy", "draws": DRAWS}
    assert "log_marginal_likelihood" not in result["sample_stats"]


def test_log_weight_evidence_and_extra_stats(target):
    lw = np.log(np.arange(1, CHAINS * DRAWS + 1).reshape(CHAINS, DRAWS))
    result = build_result(
        _sampled(), target, method="toy", log_weight=lw,
        log_marginal_likelihood=(-3.5, 0.25, np.array([-3.4, -3.6])),
        extra_stats={"delta": np.ones((CHAINS, DRAWS))},
    )
    stats_ = result["sample_stats"]
    np.testing.assert_array_equal(stats_["log_weight"].values, lw)
    assert stats_["log_marginal_likelihood"].dims == ("chain",)
    assert stats_["delta"].dims == ("chain", "draw")
    assert result.attrs["log_marginal_likelihood"] == -3.5
    assert result.attrs["log_marginal_likelihood_se"] == 0.25


def test_pseudo_sample_weights_take_the_posterior_coords(target):
    lw = np.zeros((CHAINS, DRAWS, 3))
    result = build_result(
        _sampled(pseudo=True), target, method="pe", log_weight=lw,
        log_weight_dims=["pseudo_sample"],
    )
    da = result["sample_stats"]["log_weight"]
    assert da.dims == ("chain", "draw", "pseudo_sample")
    assert list(da["pseudo_sample"].values) == [0, 1, 2]
    with pytest.raises(ValueError, match="log_weight_dims"):
        build_result(_sampled(pseudo=True), target, method="pe", log_weight=lw,
                     log_weight_dims=["a", "b"])


@pytest.mark.parametrize("missing", ["diverging", "acceptance_rate", "lp"])
def test_required_stats_refused_when_missing(target, missing):
    stats = {
        "diverging": np.zeros((CHAINS, DRAWS), dtype=bool),
        "acceptance_rate": np.ones((CHAINS, DRAWS)),
        "lp": np.zeros((CHAINS, DRAWS)),
    }
    del stats[missing]
    with pytest.raises(ValueError, match=missing):
        build_result(_sampled(stats), target, method="toy")


def test_nutpie_aliases_are_mapped(target):
    """nutpie calls them mean_tree_accept and logp; the result carries ArviZ's names too."""
    stats = {
        "diverging": np.zeros((CHAINS, DRAWS), dtype=bool),
        "mean_tree_accept": np.full((CHAINS, DRAWS), 0.7),
        "logp": np.full((CHAINS, DRAWS), -2.0),
    }
    result = build_result(_sampled(stats), target, method="toy")
    np.testing.assert_array_equal(result["sample_stats"]["acceptance_rate"].values, 0.7)
    np.testing.assert_array_equal(result["sample_stats"]["lp"].values, -2.0)


def test_attrs_hold_scalars_only(target):
    result = build_result(
        _sampled(), target, method="toy",
        attrs={"n": np.int64(3), "x": np.float32(0.5), "flag": True, "skipped": None},
    )
    assert result.attrs["n"] == 3 and type(result.attrs["n"]) is int
    assert "skipped" not in result.attrs
    with pytest.raises(TypeError, match="scalars only"):
        build_result(_sampled(), target, method="toy", attrs={"ladder": np.arange(3)})


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_seed_attrs_recorded_by_driver_result(target):
    """driver_result records an integer seed, and none for a Generator (not a scalar)."""
    from pymc_tempering.driver import driver_result

    x = np.random.default_rng(1).normal(size=(CHAINS, DRAWS, target.ndim))
    stats = {
        "diverging": np.zeros((CHAINS, DRAWS), dtype=bool),
        "acceptance_rate": np.ones((CHAINS, DRAWS)),
        "lp": np.zeros((CHAINS, DRAWS)),
    }
    seeded = driver_result(target, x, method="toy", sample_stats=stats, random_seed=7, warn=False)
    assert seeded.attrs["random_seed"] == 7
    unseeded = driver_result(
        target, x, method="toy", sample_stats=stats, random_seed=np.random.default_rng(0),
        warn=False,
    )
    assert "random_seed" not in unseeded.attrs


def test_base_group_and_flat_draws_round_trip(target):
    x = np.random.default_rng(2).normal(size=(CHAINS, DRAWS, target.ndim))
    from pymc_tempering.results import draws_to_datatree

    result = build_result(
        draws_to_datatree(target, x, sample_stats={
            "diverging": np.zeros((CHAINS, DRAWS), dtype=bool),
            "acceptance_rate": np.ones((CHAINS, DRAWS)),
            "lp": np.zeros((CHAINS, DRAWS)),
        }),
        target, method="toy",
        extra_groups={"base": base_group(target, np.zeros(2), np.ones(2))},
    )
    assert list(result["base"]["flat_variable"].values) == ["mu", "s_log__"]
    np.testing.assert_allclose(flat_draws_from_result(result), x)


def test_flat_directions_are_stored_as_given(target):
    """build_result stores what the caller computed: flat_directions only for a model with an
    improper prior (this one's is proper), and flat_direction_count computes nothing then, nor
    for weights with pseudo-samples."""
    from pymc_tempering.results import flat_direction_count

    result = build_result(_sampled(), target, method="toy", flat_directions=3)
    assert "flat_directions" not in result.attrs and "improper_prior" not in result.attrs
    x = np.zeros((CHAINS, DRAWS, target.ndim))
    assert flat_direction_count(target, x, None) is None
    import pymc as pm

    with pm.Model() as model:
        pm.Flat("a")
        pm.Potential("like", -0.5 * (model["a"] - 1.0) ** 2)
    improper = pmt.Target(model)
    draws = np.random.default_rng(3).normal(1.0, 1.0, size=(CHAINS, DRAWS, 1))
    assert flat_direction_count(improper, draws, None) == 0
    assert flat_direction_count(improper, draws, np.zeros((CHAINS, DRAWS, 3))) is None


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_strata_group_holds_its_problems_as_a_list(tmp_path):
    """The ``mode_probabilities`` group: the regions along ``mode_region`` and the problems
    along ``problem``, read back whole by strata_problems (also from a zarr store, as
    sample_many saves results, and when there is none); strata_table drops the problems."""
    from types import SimpleNamespace

    from pymc_tempering.results import strata_group, strata_problems, strata_table

    def strata(problems):
        return SimpleNamespace(
            probability=[0.4, 0.6], standard_error=[0.01, 0.01], draws_probability=[0.5, 0.5],
            draws_standard_error=[0.02, 0.02], log_mass=[0.0, 0.4], log_mass_se=[0.1, 0.1],
            khat=[0.2, 0.3], optima=["0", "1, 2"], method="draws", problems=problems,
            covariance=[[1e-4, -1e-4], [-1e-4, 1e-4]],
        )

    for problems in [("one; with a semicolon", "two"), ()]:
        tree = DataTree.from_dict({"/mode_probabilities": strata_group(strata(problems))})
        tree.to_zarr(tmp_path / f"{len(problems)}.zarr", consolidated=False)
        stored = xr.open_datatree(tmp_path / f"{len(problems)}.zarr", engine="zarr",
                                  consolidated=False)
        for result in (tree, stored):
            assert strata_problems(result["mode_probabilities"]) == list(problems)
            table = strata_table(result["mode_probabilities"])
            assert set(table.dims) == {"mode_region"} and table.attrs["method"] == "draws"
            np.testing.assert_array_equal(table["probability"].values, [0.4, 0.6])
