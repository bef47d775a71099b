"""Batched continuously tempered chains against a closed form: the log evidence and posterior
mean of a conjugate model, for both kernels, through continuous tempering's one weighing."""

import warnings

import numpy as np
import pytest
from checks import assert_within_se, seed

import pymc_tempering as pmt
from pymc_tempering.driver.tempered_chains import sample_tempered_chains
from pymc_tempering.extended.tempered import ct_result
from pymc_tempering.problems.conjugate import conjugate_normal_vector
from pymc_tempering.results import INVERSE_TEMPERATURE, TEMPERATURE_CONTROL


@pytest.mark.parametrize("kind", ["gibbs", "joint"])
def test_batched_chains_recover_the_evidence_and_the_mean(kind):
    model, log_z, post_mean, post_sd = conjugate_normal_vector()
    target = pmt.Target(model)
    # a base off the posterior by a posterior sd and twice as wide, log zeta 1.5 nats low
    base = pmt.Base.from_moments(post_mean + post_sd, np.diag((2 * post_sd) ** 2))
    sampled = sample_tempered_chains(target, base, log_z - 1.5, kind=kind, draws=300, tune=150,
                                     chains=64, seed=seed(3), progressbar=False)
    temperature = INVERSE_TEMPERATURE if kind == "gibbs" else TEMPERATURE_CONTROL
    assert sampled["posterior"][temperature].shape == (64, 300)
    assert sampled["posterior"]["mu"].shape == (64, 300, 2)
    assert {"diverging", "acceptance_rate", "step_size", "lp"} <= set(sampled["sample_stats"])
    result = ct_result(sampled, target, base, log_z - 1.5, method="x", attrs={}, random_seed=seed(4))
    lml = pmt.log_marginal_likelihood(result)
    estimate, se = lml.estimate, lml.standard_error
    assert_within_se(estimate, log_z, se, what="log Z")
    summary = pmt.weighted_summary(result, var_names=["mu"])
    assert_within_se(summary["mean"].values, post_mean, summary["mcse_mean"].values, what="mean")
    assert se < 0.1 and np.all(summary["mcse_mean"].values < 0.1 * post_sd)


def test_unknown_kind_is_refused():
    model, *_ = conjugate_normal_vector()
    with pytest.raises(ValueError, match="kind"):
        sample_tempered_chains(pmt.Target(model), pmt.Base.from_moments([0, 0], np.eye(2)), 0.0,
                               kind="nuts", draws=10, tune=0, chains=2, seed=0)


def test_sample_ct_batched_is_reproducible_and_leaves_the_model_alone(normal_model):
    """``batched_chains`` runs the batched path under sample_ct's bootstrap and checks: the
    result's layout, its chains, the same draws for the same seed, the model unchanged."""
    from conftest import model_fingerprint

    model, _ = normal_model
    before = model_fingerprint(model)
    kwargs = dict(model=model, draws=200, tune=100, batched_chains=32, random_seed=seed(5),
                  progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pmt.TemperingWarning)
        a = pmt.sample_ct(**kwargs)
        b = pmt.sample_ct(**kwargs)
    assert a.attrs["nuts_sampler"] == "batched" and a.attrs["chains"] == 32
    assert a["posterior"]["mu"].shape == (32, 200)
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    assert a.attrs["log_marginal_likelihood"] == b.attrs["log_marginal_likelihood"]
    assert model_fingerprint(model) == before


@pytest.mark.parametrize("given, kwargs, message", [
    (-1, {}, "whole number"), (2.5, {}, "whole number"),
    (8, {"nuts_sampler": "nutpie"}, "either batched_chains"),
    (8, {"cores": 1}, "either batched_chains"),
])
def test_bad_batched_chains_are_refused_before_any_fit(normal_model, given, kwargs, message):
    model, _ = normal_model
    with pytest.raises(ValueError, match=message):
        pmt.sample_ct(model=model, batched_chains=given, progressbar=False, **kwargs)


def test_the_batched_path_is_chosen_where_the_mode_search_is_incomplete():
    """The default: batched chains where more than half of the search's runs found an optimum
    of their own, NUTS elsewhere, when NUTS is asked for, or for large models."""
    from types import SimpleNamespace

    from pymc_tempering.driver.tempered_chains import BATCH_CHAINS, batched_chain_count

    def base(hits):
        return SimpleNamespace(modes=SimpleNamespace(unseen=float(np.mean(np.asarray(hits) == 1))))

    small, large = SimpleNamespace(ndim=22), SimpleNamespace(ndim=500)
    incomplete, complete = base([1] * 30 + [2]), base([16, 16])
    assert batched_chain_count(small, incomplete, None) == BATCH_CHAINS
    assert batched_chain_count(small, complete, None) == 0
    assert batched_chain_count(small, SimpleNamespace(modes=None), None) == 0
    assert batched_chain_count(small, incomplete, None, nuts_sampler="nutpie") == 0
    assert batched_chain_count(small, incomplete, None, sample_kwargs={"cores": 1}) == 0
    assert batched_chain_count(large, incomplete, None) == 0
    assert batched_chain_count(small, complete, 16) == 16


def test_large_batches_run_the_same_density_on_jax():
    """From JAX_MIN_CHAINS chains the batched density is compiled for JAX (where installed),
    and it is the default backend's to rounding."""
    pytest.importorskip("jax")
    from pymc_tempering.driver.tempered_chains import JAX_MIN_CHAINS, compile_mode

    assert compile_mode(JAX_MIN_CHAINS - 1) is None and compile_mode(JAX_MIN_CHAINS) == "JAX"
    model, *_ = conjugate_normal_vector()
    target = pmt.Target(model)
    points = np.random.default_rng(seed(6)).normal(size=(JAX_MIN_CHAINS, 2))
    default, jax = target.batched_logp_and_grad()(points), target.batched_logp_and_grad(
        mode="JAX")(points)
    np.testing.assert_allclose(jax[0], default[0], rtol=1e-12)
    np.testing.assert_allclose(jax[1], default[1], rtol=1e-12, atol=1e-12)
