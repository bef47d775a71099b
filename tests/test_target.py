import numpy as np
import pymc as pm
import pytensor
import pytensor.graph.traversal
import pytensor.tensor
import pytest
from conftest import model_fingerprint
from targets import numeric_grad, reference_logp

import pymc_tempering as pmt


def test_logp_grad_and_map_back(normal_model):
    model, y = normal_model
    target = pmt.Target(model)
    assert target.names == ["mu", "s_log__"]
    assert target.transformed_names == ["s_log__"]
    assert target.ndim == 2
    for x in [np.array([0.1, -0.3]), np.array([-1.5, 0.8]), np.array([2.0, -2.0])]:
        ref = reference_logp(x, y)
        assert target.logp(x) == pytest.approx(ref, rel=1e-7)  # PyMC constants carry ~1e-9 error
        logp, grad = target.logp_and_grad(x)
        assert logp == pytest.approx(ref, rel=1e-7)  # PyMC constants carry ~1e-9 error
        np.testing.assert_allclose(grad, numeric_grad(lambda z: reference_logp(z, y), x), rtol=1e-6)
        named = target.constrained(x)
        assert named["mu"] == pytest.approx(x[0])
        assert named["s"] == pytest.approx(np.exp(x[1]))
        assert named["mu_twice"] == pytest.approx(2 * x[0])
    batch = np.array([[0.1, -0.3], [-1.5, 0.8]])
    np.testing.assert_allclose(target.logp(batch), [reference_logp(r, y) for r in batch], rtol=1e-7)
    assert target.dims("y") == ("obs",)


def test_ravel_roundtrip(normal_model):
    target = pmt.Target(normal_model[0])
    x = np.array([0.4, -1.2])
    point = target.unravel(x)
    assert set(point) == {"mu", "s_log__"}
    np.testing.assert_array_equal(target.ravel(point), x)
    with pytest.raises(ValueError, match="length 2"):
        target.unravel(np.zeros(3))
    # many points at once: the same split per point
    xs = np.arange(12.0).reshape(2, 3, 2)
    many = target.unravel(xs)
    assert many["mu"].shape == (2, 3)
    np.testing.assert_array_equal(many["s_log__"][1, 2], target.unravel(xs[1, 2])["s_log__"])


def test_refuses_discrete(discrete_model):
    before = model_fingerprint(discrete_model)
    with pytest.raises(ValueError, match="discrete free variables.*k"):
        pmt.Target(discrete_model)
    assert model_fingerprint(discrete_model) == before


def test_refuses_no_free_variables(no_free_model):
    with pytest.raises(ValueError, match="no free variables"):
        pmt.Target(no_free_model)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_methods_that_need_the_exact_log_density_refuse_a_minibatch():
    """A ``pm.Minibatch`` makes the log density a random estimate; continuous tempering, the
    base fit, pseudo-extended MCMC and ergodic inference refuse it with a clear error (they
    failed inside PyTensor with an AttributeError on a random generator). ``total_size`` on the
    full data is exact and accepted."""
    y = np.random.default_rng(5).normal(2.0, 1.0, size=400)
    with pm.Model() as minibatched:
        theta = pm.Normal("theta", 0, 3)
        pm.Normal("y", theta, 1.0, observed=pm.Minibatch(y, batch_size=50), total_size=400)
    with pm.Model() as full:
        theta = pm.Normal("theta", 0, 3)
        pm.Normal("y", theta, 1.0, observed=y, total_size=400)
    for method in (pmt.sample_ct, pmt.fit_base, pmt.sample_pe, pmt.fit_ergodic):
        with pytest.raises(ValueError, match=r"exact log density.*\(y\) use pm.Minibatch"):
            method(model=minibatched, progressbar=False)
    pmt.Target(full).require_exact("test")  # no error


def test_flat_label_names_each_coordinate():
    with pm.Model() as model:
        pm.Normal("mu", 0, 1, shape=(2, 3))
        pm.HalfNormal("s", 1)
    target = pmt.Target(model)
    labels = [target.flat_label(k) for k in range(target.ndim)]
    assert labels == [f"mu[{i}, {j}]" for i in range(2) for j in range(3)] + ["s_log__"]


@pytest.mark.parametrize("as_op", [True, False])
def test_batched_logp_and_grad_graph_matches_the_point_functions(normal_model, monkeypatch, as_op):
    """One Op for a model with few data, the copied graph otherwise: the same values."""
    from pymc_tempering import target as target_module

    model, _ = normal_model
    if not as_op:
        monkeypatch.setattr(target_module, "OP_MAX_DATA_SIZE", 0)
    target = pmt.Target(model)
    assert target.data_size == 5  # the five observations
    xs = pytensor.tensor.matrix("xs")
    lp, grad = target.batched_logp_and_grad_graph(xs)
    ops = {type(node.op).__name__ for node in pytensor.graph.traversal.applys_between([xs], [lp])}
    assert ("OpFromGraph" in ops) == as_op
    fn = pytensor.function([xs], [lp, grad])
    points = np.array([[0.1, -0.3], [1.2, 0.4], [-1.5, 0.8]])
    lps, grads = fn(points)
    for point, value, gradient in zip(points, lps, grads, strict=True):
        expected = target.logp_and_grad(point)
        np.testing.assert_allclose(value, expected[0], rtol=1e-12)
        np.testing.assert_allclose(gradient, expected[1], rtol=1e-10)


def test_a_new_model_object_of_the_same_graph_reuses_the_point_functions():
    """A rebuilt model (same graph, same data) takes the point functions compiled for the first
    one; other data, or shared data (pm.Data, whose values the functions would hold), compile
    their own, and each gives its own model's log density."""
    def build(y, data=False):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 1.0)
            s = pm.HalfNormal("s", 1.0)
            pm.Normal("y", mu, s, observed=pm.Data("y_data", y) if data else y)
        return model

    y = np.array([0.3, -0.2, 1.1])
    first, again = pmt.Target(build(y)), pmt.Target(build(y))
    other = pmt.Target(build(y + 1.0))
    x = np.array([0.1, -0.3])
    assert again._compiled is first._compiled
    assert other._compiled is not first._compiled
    assert other.logp(x) != first.logp(x)
    from scipy import stats

    def exact(data):  # on (mu, log s), with the Jacobian
        mu, s = x[0], np.exp(x[1])
        return (stats.norm.logpdf(mu) + stats.halfnorm.logpdf(s) + x[1]
                + stats.norm.logpdf(data, mu, s).sum())

    np.testing.assert_allclose([first.logp(x), again.logp(x), other.logp(x)],
                               [exact(y), exact(y), exact(y + 1.0)])
    shared_a, shared_b = pmt.Target(build(y, data=True)), pmt.Target(build(y, data=True))
    assert shared_a._compiled is not shared_b._compiled
