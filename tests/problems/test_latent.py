"""The latent-variable and network problems: each model is the density its docstring writes, the
symmetry its mode probabilities rest on leaves that density unchanged (and a near miss of it does
not), the symmetry maps the modes onto one another, and the labels name the modes in the truths'
order. For the factor models the data make the signs clearly identified (the modes separated)."""

import numpy as np
import pytest
from checks import seed
from scipy import optimize, stats

from pymc_tempering.problems import get
from pymc_tempering.problems.latent import (
    FREE_VARIANCE_MIXTURE_TRUE,
    ONE_FACTOR_TRUE,
    TANH_NETWORK_NOISE,
    TANH_NETWORK_TRUE,
    TWO_FACTOR_FREE,
    TWO_FACTOR_TRUE,
    latent_data,
)

NAMES = ["one_factor", "two_factor", "tanh_network", "free_variance_mixture"]
#: Each problem's free variables and their shapes (the sds' value variables are their logs).
SHAPES = {
    "one_factor": {"lambda": (5,), "f": (40,), "psi_log__": (5,)},
    "two_factor": {"lambda_tril": (11,), "F": (50, 2), "psi_log__": (6,)},
    "tanh_network": {"w": (2,), "b": (2,), "v": (2,), "c": ()},
    "free_variance_mixture": {"mu": (2,), "sigma_log__": (2,)},
}


def _loadings(free):
    lam = np.zeros((6, 2))
    lam[TWO_FACTOR_FREE] = free
    return lam


def _log_density(name, point):
    """The joint log density as the module's docstring writes it, on the value variables (the
    sds by their logs, so with the Jacobian ``sum log sd``)."""
    y = latent_data(name)
    if name in ("one_factor", "two_factor"):
        psi = np.exp(point["psi_log__"])
        if name == "one_factor":
            mean, latent, free = np.outer(point["f"], point["lambda"]), point["f"], point["lambda"]
        else:
            latent, free = point["F"], point["lambda_tril"]
            mean = latent @ _loadings(free).T
        return (stats.norm.logpdf(free).sum() + stats.norm.logpdf(latent).sum()
                + stats.halfnorm.logpdf(psi).sum() + np.log(psi).sum()
                + stats.norm.logpdf(y, mean, psi).sum())
    if name == "tanh_network":
        x = TANH_NETWORK_TRUE["x"]
        mean = np.tanh(np.outer(x, point["w"]) + point["b"]) @ point["v"] + point["c"]
        weights = np.concatenate([point["w"], point["b"], point["v"], [point["c"]]])
        return stats.norm.logpdf(weights).sum() + stats.norm.logpdf(y, mean, TANH_NETWORK_NOISE).sum()
    sigma = np.exp(point["sigma_log__"])
    components = stats.norm.logpdf(y[:, None], point["mu"], sigma) + np.log(0.5)
    return (stats.norm.logpdf(point["mu"], 0, 5).sum() + stats.halfnorm.logpdf(sigma, scale=2).sum()
            + np.log(sigma).sum() + np.logaddexp(components[:, 0], components[:, 1]).sum())


def _flip(point, **signs):
    """``point`` with the named entries multiplied by the given signs (arrays broadcast)."""
    out = {k: np.array(v, dtype=float) for k, v in point.items()}
    for key, sign in signs.items():
        out[key] = out[key] * sign
    return out


def _swap(point, *keys):
    """``point`` with the two entries of each named vector swapped."""
    out = {k: np.array(v, dtype=float) for k, v in point.items()}
    for key in keys:
        out[key] = out[key][::-1].copy()
    return out


# Each problem: (name of the symmetry, the map, how it permutes the modes' indices) for each of
# its symmetries, and a near miss that is no symmetry.
COLUMN = TWO_FACTOR_FREE[1]  # the column of each free loading
SYMMETRIES = {
    "one_factor": [("(lambda, f) -> -(lambda, f)", lambda p: _flip(p, **{"lambda": -1, "f": -1}), [1, 0])],
    "two_factor": [
        ("column 0 of Lambda and F", lambda p: _flip(p, lambda_tril=np.where(COLUMN == 0, -1, 1), F=[-1, 1]),
         [2, 3, 0, 1]),
        ("column 1 of Lambda and F", lambda p: _flip(p, lambda_tril=np.where(COLUMN == 1, -1, 1), F=[1, -1]),
         [1, 0, 3, 2]),
    ],
    "tanh_network": [
        ("unit 0's (w, b, v)", lambda p: _flip(p, w=[-1, 1], b=[-1, 1], v=[-1, 1]), [2, 3, 0, 1]),
        ("unit 1's (w, b, v)", lambda p: _flip(p, w=[1, -1], b=[1, -1], v=[1, -1]), [1, 0, 3, 2]),
        ("swap of the units", lambda p: _swap(p, "w", "b", "v"), [0, 2, 1, 3]),
    ],
    "free_variance_mixture": [("swap of the components", lambda p: _swap(p, "mu", "sigma_log__"), [1, 0])],
}
NEAR_MISSES = {
    "one_factor": lambda p: _flip(p, **{"lambda": -1}),
    "two_factor": lambda p: _flip(p, lambda_tril=np.where(COLUMN == 0, -1, 1)),
    "tanh_network": lambda p: _flip(p, w=[-1, 1], v=[-1, 1]),
    "free_variance_mixture": lambda p: _swap(p, "mu"),
}


def _random_point(name, rng):
    point = {k: rng.normal(size=shape) for k, shape in SHAPES[name].items()}
    for key in ("psi_log__", "sigma_log__"):
        if key in point:
            point[key] = np.log(rng.uniform(0.3, 2.0, SHAPES[name][key]))
    return point


def _labelled(name, point):
    """The label of one point, through the ``(chain, draw, ...)`` draws a sampler gives."""
    draws = {k: np.asarray(v)[None, None] for k, v in point.items()}
    draws = {k.removesuffix("_log__"): np.exp(v) if k.endswith("_log__") else v for k, v in draws.items()}
    return int(get(name).label(draws)[0, 0])


@pytest.fixture(scope="module")
def logps():
    compiled = {}

    def logp(name):
        if name not in compiled:
            compiled[name] = get(name).build().compile_logp()
        return compiled[name]

    return logp


@pytest.mark.parametrize("name", NAMES)
def test_the_data_and_the_model_are_the_density_the_docstring_writes(name, logps):
    """The data are regenerated identically, with the documented shapes and roughly the
    documented generating values; PyMC's log density (with the log transforms' Jacobians) is the
    hand-written joint density at random points, to 1e-10."""
    y = latent_data(name)
    np.testing.assert_array_equal(y, latent_data(name))
    shape = {"one_factor": (40, 5), "two_factor": (50, 6), "tanh_network": (30,),
             "free_variance_mixture": (60,)}[name]
    assert y.shape == shape
    if name == "one_factor":  # the covariance of the features is about lambda lambda' + 0.25 I
        lam = ONE_FACTOR_TRUE["lambda"]
        np.testing.assert_allclose(np.cov(y.T), np.outer(lam, lam) + 0.25 * np.eye(5), atol=0.35)
    elif name == "two_factor":
        lam = TWO_FACTOR_TRUE["lambda"]
        np.testing.assert_allclose(np.cov(y.T), lam @ lam.T + 0.16 * np.eye(6), atol=0.35)
    elif name == "free_variance_mixture":
        for (m, s, _), part in zip(FREE_VARIANCE_MIXTURE_TRUE, (y[:30], y[30:]), strict=True):
            assert abs(part.mean() - m) < 4 * s / np.sqrt(30) and 0.6 * s < part.std() < 1.4 * s
    rng = np.random.default_rng(seed(60))
    for _ in range(3):
        point = _random_point(name, rng)
        np.testing.assert_allclose(logps(name)(point), _log_density(name, point), rtol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_the_symmetry_leaves_the_density_unchanged_and_maps_the_modes(name, logps):
    """At random points, each symmetry the truth rests on gives the same log density (to 1e-8
    relative) and moves the point's label as the modes' permutation says; the near miss (the
    loadings or the weights flipped without the factors or the biases, the means swapped
    without the sds) changes it by more than a nat."""
    logp = logps(name)
    rng = np.random.default_rng(seed(61))
    for _ in range(3):
        point = _random_point(name, rng)
        value = logp(point)
        for what, symmetry, permutation in SYMMETRIES[name]:
            image = symmetry(point)
            np.testing.assert_allclose(logp(image), value, rtol=1e-8, err_msg=what)
            assert _labelled(name, image) == permutation[_labelled(name, point)], what
        assert abs(logp(NEAR_MISSES[name](point)) - value) > 1.0


@pytest.mark.parametrize(("name", "draws", "expected"), [
    ("one_factor", {"lambda": [[[-0.9, 0.8, 0.7, 0.6, 0.5], [0.01, -0.8, -0.7, -0.6, -0.5]]]}, [0, 1]),
    ("two_factor", {"lambda_tril": [[np.r_[s0, 0.5, s1, np.ones(8)] for s0, s1 in
                                     ((-0.9, -0.7), (-0.9, 0.7), (0.9, -0.7), (0.9, 0.7))]]}, [0, 1, 2, 3]),
    ("tanh_network", {"v": [[[-1.5, -1.0], [-1.5, 1.0], [1.5, -1.0], [1.5, 1.0]]]}, [0, 1, 2, 3]),
    ("free_variance_mixture", {"mu": [[[-2.0, 3.0], [3.0, -2.0], [-2.0, -1.9]]]}, [0, 1, 0]),
])
def test_the_label_names_the_modes_in_the_truths_order(name, draws, expected):
    """Hand-built draws ``(chain, draw, ...)``: the label is the mode's index in ``modes`` (for
    ``two_factor`` the signs of ``lambda_tril[0]`` = ``Lambda_00`` and ``lambda_tril[2]`` =
    ``Lambda_11``, not of ``lambda_tril[1]`` = ``Lambda_10``), and the truths are uniform over
    the modes and sum to one."""
    problem = get(name)
    labels = problem.label({k: np.asarray(v, dtype=float) for k, v in draws.items()})
    assert labels.shape == (1, len(expected))
    np.testing.assert_array_equal(labels[0], expected)
    p = problem.truths.mode_probabilities
    assert len(p) == len(problem.modes) and problem.truths.log_z is None
    assert p.sum() == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_array_equal(p, np.full(len(p), 1 / len(p)))
    np.testing.assert_array_equal(np.transpose(TWO_FACTOR_FREE)[:3], [[0, 0], [1, 0], [1, 1]])


def _factor_marginal(name, free, log_psi):
    """The log posterior of the loadings and the log noise sds with the factors integrated out
    (``y_i ~ N(0, Lambda Lambda' + diag psi^2)``), Jacobian included."""
    y = latent_data(name)
    lam = free[:, None] if name == "one_factor" else _loadings(free)
    psi = np.exp(log_psi)
    cov = lam @ lam.T + np.diag(psi**2)
    return (stats.multivariate_normal(np.zeros(len(psi)), cov).logpdf(y).sum() + stats.norm.logpdf(free).sum()
            + stats.halfnorm.logpdf(psi).sum() + log_psi.sum())


@pytest.mark.parametrize(("name", "index"), [("one_factor", 0), ("two_factor", 0), ("two_factor", 2)])
def test_the_factor_models_signs_are_clearly_identified(name, index):
    """The marginal log posterior (factors integrated out) maximised with ``Lambda_00`` (or
    ``Lambda_11``) held at zero is more than 15 nats below its maximum (about 23, 31 and 26):
    the boundary between the sign regions is far from the modes."""
    true = (ONE_FACTOR_TRUE if name == "one_factor" else TWO_FACTOR_TRUE)
    free = true["lambda"] if name == "one_factor" else true["lambda"][TWO_FACTOR_FREE]
    start = np.concatenate([free, np.log(np.full(true["lambda"].shape[0], true["psi"]))])
    n_free = len(free)

    def negative(x, held=None):
        if held is not None:
            x = np.insert(x, held, 0.0)
        return -_factor_marginal(name, x[:n_free], x[n_free:])

    top = optimize.minimize(negative, start, method="BFGS")
    held = optimize.minimize(negative, np.delete(start, index), args=(index,), method="BFGS")
    assert abs(top.x[index]) > 0.5
    assert held.fun - top.fun > 15
