"""The sampler contract (issue 15), checked once for every sampler.

Every method is called the same way, ``sample_<method>(draws, tune, chains, *, model,
random_seed, progressbar, <options>)``, and returns the same layout: the model's variables with
their dims, ``sample_stats`` with ``log_weight``, ``diverging``, ``acceptance_rate`` and ``lp``,
scalar attrs with the method and the seed. Same seed, same draws; the user's model untouched;
bad input refused with a ValueError; the analysis functions accept every result; and every
method that estimates the evidence gets the conjugate normal model's closed form within ``K``
standard errors.

Runs are shared through module-scoped fixtures (one small run per sampler, one longer run per
evidence method) so that the whole file stays cheap.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
from checks import assert_within_se, seed
from conftest import model_fingerprint
from pymc_tempering.problems.conjugate import conjugate_normal_vector

import pymc_tempering as pmt

CHEAP = dict(draws=60, tune=60, chains=2)  # layout, seeds, model untouched: any run will do
# Evidence runs: long enough that the standard error is calibrated for any seed (thousands of
# draws of a 2-D Gaussian target from a base of 1.5 times its width), so that
# |estimate - truth| < K se fails with probability ~2 Phi(-K) = 6e-5.
EVIDENCE = dict(draws=1000, tune=500, chains=4)


def _problem():
    return conjugate_normal_vector()


def _base():
    """A fixed Gaussian base a little off-centre and 1.5 times wider than the posterior."""
    _, _, post_mean, post_sd = _problem()
    return pmt.Base.from_moments(post_mean + 0.3 * post_sd, (1.5 * post_sd) ** 2)


def sample_ergodic(draws=1000, tune=1000, chains=4, *, model=None, random_seed=None,
                   progressbar=True, **fit_kwargs):
    """Ergodic inference through its public API: fit (like ``pm.fit``), then sample."""
    del tune  # the fit is its warm-up
    approx = pmt.fit_ergodic(model=model, random_seed=random_seed, progressbar=progressbar,
                             **fit_kwargs)
    return approx.sample(draws, chains, random_seed=random_seed)


# name: (the sampler, its cheap options, whether it estimates the evidence)
SAMPLERS = {
    "ct": (lambda: pmt.sample_ct, lambda: dict(base=_base(), bootstrap=0), True),
    "gibbs_ct": (lambda: pmt.sample_gibbs_ct, lambda: dict(base=_base(), bootstrap=0), True),
    "pe": (lambda: pmt.sample_pe, lambda: dict(n_pseudo=2, proposal=_base()), True),
    "ais": (
        lambda: pmt.sample_ais, lambda: dict(n_temperatures=30, n_leapfrog=5, base=_base()), True
    ),
    "simulated_tempering": (
        lambda: pmt.sample_simulated_tempering,
        lambda: dict(n_temperatures=21, n_leapfrog=5, base=_base()),
        True,
    ),
    "tact": (lambda: pmt.sample_tact, lambda: dict(steps_per_sample=5), False),
    "replica_exchange": (
        lambda: pmt.sample_replica_exchange, lambda: dict(n_temperatures=3, steps_per_sample=5),
        False,
    ),
    "ergodic": (
        lambda: sample_ergodic,
        # untrained (n_iterations=0): training compiles a gradient through the chain, minutes
        # on 2 cores; the contract is about the call and the result, which training leaves alone.
        # One leapfrog step: the smallest chain graph (a cold cache compiles it in 30 s, 41 s
        # with the default 5)
        lambda: dict(n_iterations=0, n_particles=20, n_steps=3, tune_initial=False, n_leapfrog=1,
                     n_prior_draws=500),
        False,
    ),
}
NAMES = list(SAMPLERS)
EVIDENCE_NAMES = [name for name, (_, _, evidence) in SAMPLERS.items() if evidence]
# Offsets of each sampler's seeds, so that no two runs of the file share one.
OFFSET = {name: 100 * i for i, name in enumerate(NAMES)}


def run(name, model, random_seed, size=CHEAP, **extra):
    fn, options, _ = SAMPLERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # diagnose's warnings on short runs
        return fn()(**size, model=model, random_seed=random_seed, progressbar=False,
                    **{**options(), **extra})


def size_of(name):
    return EVIDENCE if name in EVIDENCE_NAMES else CHEAP


@pytest.fixture(scope="module", params=NAMES)
def cheap_run(request):
    """One run per sampler (long enough for the evidence where there is one), with the model's
    fingerprint before and after it."""
    name = request.param
    model = _problem()[0]
    before = model_fingerprint(model)
    idata = run(name, model, seed(OFFSET[name]), size_of(name))
    return name, idata, model, before


# ------------------------------------------------------------------------------- the signature
@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize("name", NAMES)
def test_signature(name):
    fn = SAMPLERS[name][0]()
    if name == "ergodic":
        params = inspect.signature(pmt.fit_ergodic).parameters
        for keyword in ("model", "random_seed", "progressbar"):
            assert params[keyword].kind is inspect.Parameter.KEYWORD_ONLY, keyword
        sample = list(inspect.signature(pmt.ErgodicApproximation.sample).parameters)
        assert sample[1:3] == ["draws", "chains"] and "random_seed" in sample
        return
    params = list(inspect.signature(fn).parameters.values())
    assert [(p.name, p.default) for p in params[:3]] == [
        ("draws", 1000), ("tune", 1000), ("chains", 4)
    ]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:3])
    rest = {p.name: p for p in params[3:]}
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in rest.values()), rest
    assert rest["model"].default is None and rest["random_seed"].default is None
    assert rest["progressbar"].default is True


# ------------------------------------------------------------------------------- the layout
def test_layout(cheap_run):
    name, idata, model, _ = cheap_run
    post = idata["posterior"]
    pseudo = ("pseudo_sample",) if name == "pe" else ()
    size = size_of(name)
    assert post.sizes["chain"] == size["chains"] and post.sizes["draw"] == size["draws"]
    assert post["mu"].dims == ("chain", "draw", *pseudo, "coef")
    assert list(post["coef"].values) == ["a", "b"]
    stats_ = idata["sample_stats"]
    assert stats_["log_weight"].dims in (("chain", "draw"), ("chain", "draw", *pseudo))
    for stat in ("diverging", "acceptance_rate", "lp"):
        assert stats_[stat].dims == ("chain", "draw"), (stat, stats_[stat].dims)
        assert stats_[stat].shape == (size["chains"], size["draws"])
    assert stats_["diverging"].dtype == bool
    assert "accept_rate" not in stats_  # ArviZ's schema name only
    assert np.all(np.isfinite(stats_["lp"].values))
    assert idata["observed_data"]["y"].dims == ("obs", "coef")
    attrs = idata.attrs
    assert all(np.ndim(v) == 0 for v in attrs.values()), attrs
    assert isinstance(attrs["method"], str)
    assert attrs["random_seed"] == seed(OFFSET[name])


def test_model_unchanged(cheap_run):
    _, _, model, before = cheap_run
    assert model_fingerprint(model) == before


def test_analysis_accepts_the_result(cheap_run):
    name, idata, _, _ = cheap_run
    summary = pmt.weighted_summary(idata, var_names=["mu"])
    assert list(summary.index) == ["mu[a]", "mu[b]"]
    assert np.all(np.isfinite(summary["mean"].values))
    resampled = pmt.resample(idata, random_seed=seed(1))
    assert resampled["posterior"]["mu"].dims == ("chain", "draw", "coef")
    diagnosis = pmt.diagnose(idata)
    assert "divergences" in diagnosis.checks.index
    if name in EVIDENCE_NAMES:
        assert np.isfinite(pmt.log_marginal_likelihood(idata).estimate)
    else:  # a method without an evidence estimate says so instead of returning a number
        with pytest.raises(ValueError, match="no log marginal likelihood"):
            pmt.log_marginal_likelihood(idata)


def test_same_seed_same_draws(cheap_run):
    name, a, _, _ = cheap_run
    b = run(name, _problem()[0], seed(OFFSET[name]), size_of(name))
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    np.testing.assert_array_equal(
        a["sample_stats"]["log_weight"].values, b["sample_stats"]["log_weight"].values
    )


# ------------------------------------------------------------------------------- bad input
_UNTUNED = {}


def untuned_ergodic():
    """An ergodic approximation with no training (cached: only its ``sample`` is tested)."""
    if not _UNTUNED:
        options = {**SAMPLERS["ergodic"][1](), "n_iterations": 0}
        _UNTUNED["fit"] = pmt.fit_ergodic(
            model=_problem()[0], progressbar=False, random_seed=seed(3), **options
        )
    return _UNTUNED["fit"]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "bad", [dict(draws=0), dict(chains=0), dict(tune=-1), dict(draws=1.5)], ids=str
)
def test_bad_counts_refused(name, bad):
    if name == "ergodic" and "tune" in bad:
        pytest.skip("fit_ergodic is a fit: it has no tune")
    model = _problem()[0]
    size = {**CHEAP, **bad}
    key = next(iter(bad))
    if name == "ergodic":
        approx = untuned_ergodic()
        with pytest.raises(ValueError, match=key):
            approx.sample(size["draws"], size["chains"], random_seed=seed(3))
        return
    with pytest.raises(ValueError, match=key):
        run(name, model, seed(3), size)


@pytest.mark.parametrize("name", NAMES)
def test_discrete_model_refused(name, discrete_model):
    before = model_fingerprint(discrete_model)
    extra = {}
    if name in ("ct", "gibbs_ct", "ais", "simulated_tempering"):
        extra["base"] = None  # the 2-D base of the conjugate model does not fit this model
    elif name == "pe":
        extra["proposal"] = "tempered"
    with pytest.raises(ValueError, match="discrete"):
        run(name, discrete_model, seed(4), **extra)
    assert model_fingerprint(discrete_model) == before


# ------------------------------------------------------------------------------- evidence
def test_evidence_against_closed_form(cheap_run):
    name, idata, _, _ = cheap_run
    if name not in EVIDENCE_NAMES:
        pytest.skip(f"{name} gives no evidence")
    log_z = _problem()[1]
    lml = pmt.log_marginal_likelihood(idata)
    assert lml.standard_error > 0 and lml.per_chain.shape == (EVIDENCE["chains"],)
    assert_within_se(lml.estimate, log_z, lml.standard_error, what=f"{name} log Z")


