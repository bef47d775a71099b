"""The shipped radon data, the models built on it and their exact evidence."""

import numpy as np
import pytest
from checks import seed
from pymc_tempering.problems.radon import load_radon, radon_model


def test_radon_data_shape():
    data = load_radon()
    assert len(data) == 919
    assert data["county_code"].nunique() == 85


def test_non_centred_radon_is_the_same_model():
    """Same joint density up to the Jacobian of alpha = mu + sigma * offset, so same evidence.

    log p_nc(mu, log sigma, offset) = log p_c(mu, log sigma, mu + sigma offset)
    + 85 log sigma_alpha + 2 log sigma_beta, exactly, at random points.
    """
    centred, non_centred = radon_model(), radon_model(non_centered=True)
    assert len(non_centred.free_RVs) == len(centred.free_RVs) == 7
    logp_c, logp_nc = centred.compile_logp(), non_centred.compile_logp()
    rng = np.random.default_rng(seed(0))
    for _ in range(3):
        check_point(logp_c, logp_nc, rng)


def check_point(logp_c, logp_nc, rng):
    point = {
        "mu_alpha": rng.normal(1.0, 0.5), "mu_beta": rng.normal(0.0, 0.5),
        "sigma_alpha_log__": rng.normal(-1.0, 0.5), "sigma_beta_log__": rng.normal(-1.0, 0.5),
        "epsilon_log__": rng.normal(-0.3, 0.2),
        "alpha_offset": rng.normal(size=85), "beta_offset": rng.normal(size=2),
    }
    s_a, s_b = np.exp(point["sigma_alpha_log__"]), np.exp(point["sigma_beta_log__"])
    c_point = {k: v for k, v in point.items() if not k.endswith("_offset")}
    c_point["alpha"] = point["mu_alpha"] + s_a * point["alpha_offset"]
    c_point["beta"] = point["mu_beta"] + s_b * point["beta_offset"]
    lp_nc, lp_c = logp_nc(point), logp_c(c_point)
    np.testing.assert_allclose(lp_nc, lp_c + 85 * np.log(s_a) + 2 * np.log(s_b), rtol=1e-10)


@pytest.mark.slow  # compiling the 89-parameter Hessian takes about a minute on 2 cores
def test_radon_conditional_evidence_matches_the_model():
    """The closed form behind ``radon_log_marginal_likelihood`` against PyMC's own density.

    With the three log scales fixed, the centred model's log density is quadratic in its 89
    other parameters, so one Newton step from any point reaches their mode and the Laplace
    formula ``logp(mode) + k/2 log 2 pi - 1/2 log det(-H)`` is their exact integral.
    """
    from pymc_tempering.problems.radon import radon_scales_log_density

    model = radon_model()
    gaussian = [model[name] for name in ("mu_alpha", "mu_beta", "alpha", "beta")]
    logp = model.compile_logp()
    dlogp = model.compile_dlogp(vars=gaussian)
    hessian = model.compile_d2logp(vars=gaussian, negate_output=False)
    conditional = radon_scales_log_density()
    rng = np.random.default_rng(seed(1))
    for scales in ([-1.8, 0.6, -0.32], [-3.0, -1.0, -0.2], [0.5, 2.0, 0.1]):
        point = {
            "mu_alpha": rng.normal(), "mu_beta": rng.normal(), "alpha": rng.normal(size=85),
            "beta": rng.normal(size=2), "sigma_alpha_log__": scales[0],
            "sigma_beta_log__": scales[1], "epsilon_log__": scales[2],
        }
        H = -hessian(point)
        step = np.linalg.solve(H, dlogp(point))
        flat = np.concatenate([np.atleast_1d(point[v.name]) for v in gaussian]) + step
        sizes = np.cumsum([0, 1, 1, 85, 2])
        mode = dict(point, **{v.name: flat[sizes[i]:sizes[i + 1]].reshape(np.shape(point[v.name]))
                              for i, v in enumerate(gaussian)})
        laplace = logp(mode) + len(flat) / 2 * np.log(2 * np.pi) - np.linalg.slogdet(H)[1] / 2
        np.testing.assert_allclose(conditional(*scales), laplace, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_radon_log_marginal_likelihood_quadrature_converged():
    """Half the spacing, or twice the grid, moves the estimate by less than 1e-6 nats."""
    from pymc_tempering.problems.radon import radon_log_evidence_on_grid, radon_log_marginal_likelihood

    value = radon_log_marginal_likelihood()
    assert -1049 < value < -1048
    finer = radon_log_evidence_on_grid(None, spacing=(0.1, 0.2, 0.01))
    wider = radon_log_evidence_on_grid(
        None, spacing=(0.2, 0.4, 0.02), half_widths=((-40.0, 8.0), (-16.0, 32.0), (-0.5, 0.5))
    )
    assert abs(finer - value) < 1e-6
    assert abs(wider - value) < 1e-6


def test_radon_model_non_centres_the_groups_asked_for():
    names = {
        arg: sorted(rv.name for rv in radon_model(non_centered=arg).free_RVs if rv.name[0] in "ab")
        for arg in (False, True, "alpha", ("beta",))
    }
    assert names[False] == ["alpha", "beta"]
    assert names[True] == ["alpha_offset", "beta_offset"]
    assert names["alpha"] == ["alpha_offset", "beta"]
    assert names[("beta",)] == ["alpha", "beta_offset"]
    with pytest.raises(ValueError, match="non_centered"):
        radon_model(non_centered="gamma")


# The radon models with exact evidence: builder, Gaussian coefficients (integrated out in closed
# form given the scales), and the log scales at which to check the closed form.
RADON_MODELS = {
    "full": ("radon_model", ("mu_alpha", "mu_beta", "alpha", "beta"),
             ("sigma_alpha_log__", "sigma_beta_log__", "epsilon_log__"),
             ([-1.8, 0.6, -0.32], [-8.0, -1.0, -0.2], [0.5, 2.0, 0.1])),
    "intercepts": ("radon_intercepts_model", ("mu_alpha", "alpha", "beta"),
                   ("sigma_alpha_log__", "sigma_log__"),
                   ([-1.1, -0.32], [-8.0, -0.25], [0.5, 0.1])),
    "pooled": ("radon_pooled_model", ("alpha", "beta"), ("sigma_log__",),
               ([-0.24], [-0.5], [0.3])),
}


@pytest.mark.parametrize("which", list(RADON_MODELS))
def test_radon_closed_form_matches_each_models_log_density(which):
    """The closed form behind ``radon_log_marginal_likelihood(model=...)`` against PyMC.

    As in the slow test above: with the log scales fixed, the model's log density is quadratic
    in its Gaussian coefficients, so one Newton step from any point reaches their mode and
    ``logp(mode) + k/2 log 2 pi - 1/2 log det(-H)`` is their exact integral. Being quadratic,
    its Hessian is the difference of gradients a unit step apart, exactly up to rounding (no
    second-derivative graph to compile, so this runs in the default suite).
    """
    import pymc_tempering.problems.radon as radon

    builder, coefficients, scale_names, scale_points = RADON_MODELS[which]
    model = getattr(radon, builder)()
    gaussian = [model[name] for name in coefficients]
    assert {v.name for v in model.value_vars} == {*coefficients, *scale_names}
    logp = model.compile_logp()
    dlogp = model.compile_dlogp(vars=gaussian)
    conditional = radon.radon_scales_log_density(model=which)
    shapes = [model.initial_point()[name].shape for name in coefficients]
    bounds = np.cumsum([0, *(int(np.prod(s)) for s in shapes)])

    def as_point(flat, scales):
        point = {name: flat[bounds[i]:bounds[i + 1]].reshape(shapes[i])
                 for i, name in enumerate(coefficients)}
        return dict(point, **dict(zip(scale_names, scales, strict=True)))

    rng = np.random.default_rng(seed(2))
    for scales in scale_points:
        x = rng.normal(size=bounds[-1])
        grad = dlogp(as_point(x, scales))
        H = np.column_stack([dlogp(as_point(x + e, scales)) - grad for e in np.eye(len(x))])
        H = (H + H.T) / 2
        mode = x + np.linalg.solve(-H, grad)
        laplace = (logp(as_point(mode, scales)) + len(x) / 2 * np.log(2 * np.pi)
                   - np.linalg.slogdet(-H)[1] / 2)
        np.testing.assert_allclose(conditional(*scales), laplace, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "which, bounds, finer, wider",
    [
        ("intercepts", (-1065, -1064), (0.025, 0.005), ((-20.0, 6.0), (-0.6, 0.6))),
        ("pooled", (-1103, -1102), (0.005,), ((-0.6, 0.6),)),
    ],
)
def test_radon_log_marginal_likelihood_quadrature_converged_for_each_model(
    which, bounds, finer, wider
):
    """Half the spacing, or twice the grid, moves each estimate by less than 1e-6 nats."""
    from pymc_tempering.problems.radon import (
        RADON_GRIDS,
        radon_log_evidence_on_grid,
        radon_log_marginal_likelihood,
    )

    value = radon_log_marginal_likelihood(model=which)
    assert bounds[0] < value < bounds[1]
    _, half_widths, spacing = RADON_GRIDS[which]
    np.testing.assert_allclose(finer, np.asarray(spacing) / 2)
    np.testing.assert_allclose(wider, 2 * np.asarray(half_widths))
    assert abs(radon_log_evidence_on_grid(None, spacing=finer, model=which) - value) < 1e-6
    assert abs(radon_log_evidence_on_grid(None, half_widths=wider, model=which) - value) < 1e-6


def test_radon_log_marginal_likelihood_full_by_default_and_refuses_unknown_models():
    from pymc_tempering.problems.radon import radon_log_marginal_likelihood

    assert radon_log_marginal_likelihood(model="full") == radon_log_marginal_likelihood()
    with pytest.raises(ValueError, match="model must be one of 'full', 'intercepts', 'pooled'"):
        radon_log_marginal_likelihood(model="hierarchical")


def test_radon_pooled_and_intercepts_models():
    from pymc_tempering.problems.radon import radon_intercepts_model, radon_pooled_model

    pooled, intercepts = radon_pooled_model(), radon_intercepts_model()
    assert [rv.name for rv in pooled.free_RVs] == ["alpha", "beta", "sigma"]
    assert [rv.name for rv in intercepts.free_RVs] == [
        "mu_alpha", "sigma_alpha", "alpha", "beta", "sigma"
    ]
    assert intercepts.named_vars_to_dims["alpha"] == ("county",)
    np.testing.assert_array_equal(intercepts.coords["county"], np.arange(85))
    # a subset of the data gives a model of that subset
    data = load_radon().iloc[:100]
    assert radon_pooled_model(data)["log_radon"].eval().shape == (100,)
