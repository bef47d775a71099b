"""The Minnesota radon data of Gelman and Hill and the regressions on it, with exact evidence.

The models are linear-Gaussian given their scales, so their log marginal likelihoods are a
closed form integrated over the log scales by quadrature (:func:`radon_log_marginal_likelihood`).
"""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd
import pymc as pm
from scipy import optimize, stats
from scipy.special import logsumexp

from pymc_tempering.problems.gaussian import hierarchical_linear_gaussian
from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "RADON_GRIDS",
    "RADON_SCALES",
    "load_radon",
    "problems",
    "radon_intercepts_model",
    "radon_linear_gaussian",
    "radon_log_evidence_on_grid",
    "radon_log_marginal_likelihood",
    "radon_model",
    "radon_pooled_model",
    "radon_scales_log_density",
]


def load_radon() -> pd.DataFrame:
    """The Minnesota radon data of Gelman and Hill (919 households, 85 counties).

    Columns include ``county``, ``county_code`` (0-based), ``floor`` (0 basement, 1 first
    floor), ``log_radon`` and ``log_uppm`` (county log uranium). Source and licence:
    ``pymc_tempering/data/README.md``.
    """
    with files("pymc_tempering").joinpath("data/radon_mn.csv").open() as fh:
        return pd.read_csv(fh)


def radon_model(
    data: pd.DataFrame | None = None, *, non_centered: bool | str | tuple[str, ...] = False
) -> pm.Model:
    """The hierarchical regression of section 7.3 of the continuous tempering paper.

    ``alpha_j ~ N(mu_alpha, sigma_alpha)`` for the 85 counties, ``beta ~ N(mu_beta, sigma_beta)``
    for the two regressors (floor, log uranium), ``log_radon_i ~ N(alpha_{c_i} + x_i beta,
    epsilon)``, half-Cauchy(5) scales and N(0, 10^2) means: 92 parameters.

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Default: :func:`load_radon`.
    non_centered : bool, str or tuple of str
        Which groups to non-centre: ``True`` for both (the paper's factor graph, Fig. 3a),
        ``False`` for neither, or ``"alpha"`` / ``"beta"`` (or a tuple of them) for those. A
        non-centred group samples standard normal offsets, e.g. ``alpha_offset``, and sets
        ``alpha = mu_alpha + sigma_alpha * alpha_offset`` as a deterministic. The model, and so
        its marginal likelihood, is the same; only the coordinates the samplers move in differ,
        and with them where NUTS diverges: the two regression coefficients are well identified
        by the data, so non-centred they make a funnel in ``sigma_beta``; the county intercepts
        centred make one towards small ``sigma_alpha``. ``non_centered="alpha"`` avoids both: with
        it and ``target_accept=0.95``, ``sample_ct`` ran without divergences (see the radon
        benchmark).

    Returns
    -------
    pymc.Model
    """
    if isinstance(non_centered, bool | np.bool_):
        groups = ("alpha", "beta") if non_centered else ()
    else:
        groups = (non_centered,) if isinstance(non_centered, str) else tuple(non_centered)
    if not set(groups) <= {"alpha", "beta"}:
        raise ValueError(
            "non_centered must be True, False, 'alpha', 'beta' or a tuple of them, "
            f"got {non_centered!r}."
        )
    data = load_radon() if data is None else data
    county = data["county_code"].to_numpy()
    counties = data.drop_duplicates("county_code").sort_values("county_code")["county"]
    X = data[["floor", "log_uppm"]].to_numpy(dtype=float)
    coords = {
        "county": counties.to_numpy(),
        "regressor": ["floor", "log_uppm"],
        "obs": np.arange(len(data)),
    }
    with pm.Model(coords=coords) as model:
        mu_alpha = pm.Normal("mu_alpha", 0.0, 10.0)
        sigma_alpha = pm.HalfCauchy("sigma_alpha", 5.0)
        mu_beta = pm.Normal("mu_beta", 0.0, 10.0)
        sigma_beta = pm.HalfCauchy("sigma_beta", 5.0)
        epsilon = pm.HalfCauchy("epsilon", 5.0)
        alpha = _group("alpha", mu_alpha, sigma_alpha, "county", "alpha" in groups)
        beta = _group("beta", mu_beta, sigma_beta, "regressor", "beta" in groups)
        mean = alpha[county] + pm.math.dot(X, beta)
        pm.Normal("log_radon", mean, epsilon, observed=data["log_radon"].to_numpy(), dims="obs")
    return model


def _group(name, mu, sigma, dims, non_centered):
    if non_centered:
        offset = pm.Normal(f"{name}_offset", 0.0, 1.0, dims=dims)
        return pm.Deterministic(name, mu + sigma * offset, dims=dims)
    return pm.Normal(name, mu, sigma, dims=dims)


def radon_pooled_model(data: pd.DataFrame | None = None) -> pm.Model:
    """Complete pooling: one intercept for all households and a floor effect (3 parameters).

    ``alpha ~ N(0, 10^2)``, ``beta ~ N(0, 10^2)``, ``sigma ~ HalfNormal(5)`` and
    ``log_radon_i ~ N(alpha + beta floor_i, sigma)``: the pooled model of
    ``examples/bayes_factor.py``. :func:`radon_log_marginal_likelihood` with
    ``model="pooled"`` gives its exact log marginal likelihood.

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Default: :func:`load_radon`.

    Returns
    -------
    pymc.Model
    """
    data = load_radon() if data is None else data
    floor = data["floor"].to_numpy(dtype=float)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 10.0)
        beta = pm.Normal("beta", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("log_radon", alpha + beta * floor, sigma, observed=data["log_radon"].to_numpy())
    return model


def radon_intercepts_model(data: pd.DataFrame | None = None) -> pm.Model:
    """Varying intercepts: one per county around a common mean, and a floor effect (89 parameters).

    ``mu_alpha ~ N(0, 10^2)``, ``sigma_alpha ~ HalfNormal(5)``, ``alpha_j ~ N(mu_alpha,
    sigma_alpha)`` for the 85 counties (centred, dims ``county``), ``beta ~ N(0, 10^2)``,
    ``sigma ~ HalfNormal(5)`` and ``log_radon_i ~ N(alpha_{c_i} + beta floor_i, sigma)``: the
    hierarchical model of ``examples/bayes_factor.py``. :func:`radon_log_marginal_likelihood`
    with ``model="intercepts"`` gives its exact log marginal likelihood.

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Default: :func:`load_radon`.

    Returns
    -------
    pymc.Model
    """
    data = load_radon() if data is None else data
    county = data["county_code"].to_numpy()
    floor = data["floor"].to_numpy(dtype=float)
    with pm.Model(coords={"county": np.arange(int(county.max()) + 1)}) as model:
        mu_alpha = pm.Normal("mu_alpha", 0.0, 10.0)
        sigma_alpha = pm.HalfNormal("sigma_alpha", 5.0)
        alpha = pm.Normal("alpha", mu_alpha, sigma_alpha, dims="county")
        beta = pm.Normal("beta", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        mean = alpha[county] + beta * floor
        pm.Normal("log_radon", mean, sigma, observed=data["log_radon"].to_numpy())
    return model


RADON_SCALES = {
    # model: its scales, in the order of the quadrature's axes
    "full": ("sigma_alpha", "sigma_beta", "epsilon"),  # radon_model
    "intercepts": ("sigma_alpha", "sigma"),  # radon_intercepts_model
    "pooled": ("sigma",),  # radon_pooled_model
}


def _check_radon_model(model: str) -> None:
    if model not in RADON_SCALES:
        raise ValueError(
            f"model must be one of {', '.join(map(repr, RADON_SCALES))}, got {model!r}."
        )


def radon_log_marginal_likelihood(
    data: pd.DataFrame | None = None, *, model: str = "full"
) -> float:
    """The exact log marginal likelihood of one of the radon models.

    Given its scales, each model is linear-Gaussian in its other parameters, so ``log_radon``
    is Gaussian with covariance ``epsilon^2 I + U D U^T`` and they integrate out in closed form
    (Woodbury and the matrix determinant lemma, the county block being diagonal). What is left
    is an integral over the log scales, done by the trapezoidal rule on a grid around the mode:

    - ``"full"``, :func:`radon_model` (either parameterisation): 89 Gaussian parameters, 3-D
      over ``log sigma_alpha``, ``log sigma_beta``, ``log epsilon`` under their half-Cauchy(5)
      priors, 24 units of ``log sigma_alpha`` (its posterior has an exponential left tail), 24
      of ``log sigma_beta`` and 0.5 of ``log epsilon``;
    - ``"intercepts"``, :func:`radon_intercepts_model`: 87 Gaussian parameters, 2-D over
      ``log sigma_alpha`` and ``log sigma`` under their half-normal(5) priors, from 10 below
      to 3 above the mode in ``log sigma_alpha`` and 0.3 either side in ``log sigma``. To the
      left the integrand falls only like ``sigma_alpha`` (the prior's density is flat at 0 and
      the data tend to the pooled model's), but it starts from far down: 47 nats below its
      peak 5 units left of the mode, 52 at the grid's edge; 63 nats or more below it at the
      other edges;
    - ``"pooled"``, :func:`radon_pooled_model`: 2 Gaussian parameters, 1-D over ``log sigma``
      under its half-normal(5) prior, 0.3 either side of the mode (68 nats or more down).

    The trapezoidal rule converges geometrically for a smooth integrand that is negligible at
    the grid's edges; halving the spacing or doubling the grid changes each result by less than
    1e-6 nats (checked by the tests, as is the closed form against each model's own log
    density).

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Default: :func:`load_radon`.
    model : {"full", "intercepts", "pooled"}
        Which model: :func:`radon_model`, :func:`radon_intercepts_model` or
        :func:`radon_pooled_model`.

    Returns
    -------
    float
        ``log p(log_radon)`` under that model.

    Raises
    ------
    ValueError
        For another ``model``.
    """
    _check_radon_model(model)
    return radon_log_evidence_on_grid(data, model=model)


def _gaussian_log_likelihood(y: np.ndarray, U: np.ndarray, county: np.ndarray | None = None):
    """``log N(y | 0, e^2 I + U diag(d) U^T + s_a^2 Z Z^T)``, vectorised over a batch.

    The model ``y = U g + Z a + noise`` with fixed effects ``g ~ N(0, diag(d))`` (columns
    ``U``, shape ``(n, k)``), a group block ``a ~ N(0, s_a^2 I)`` whose indicator matrix ``Z``
    puts observation ``i`` in group ``county[i]`` (``None``: no group block) and noise
    ``N(0, e^2 I)``. Returns a function of ``(d, u_a, u_e)``: prior variances ``d`` of shape
    ``(b, k)`` and log scales ``u_a = log s_a`` (ignored without a group block) and
    ``u_e = log e`` of shape ``(b,)``; it returns the ``b`` log densities.

    The precision ``A = U^T U / e^2 + D^-1`` of the coefficients' posterior has a diagonal
    group block; eliminating it (Schur complement) leaves a ``k x k`` system per batch member.
    """
    n, k = U.shape
    n_county = 0 if county is None else int(county.max()) + 1
    Z = np.zeros((n, n_county))
    if county is not None:
        Z[np.arange(n), county] = 1.0
    GG, GC, CC = U.T @ U, U.T @ Z, np.diag(Z.T @ Z)  # CC: observations per group
    yg, yc, yy = U.T @ y, Z.T @ y, y @ y

    def log_likelihood(d_g, u_a, u_e):
        inv_e2 = np.exp(-2 * u_e)
        a_c = CC[None, :] * inv_e2[:, None] + np.exp(-2 * u_a)[:, None]
        A_gg = GG[None] * inv_e2[:, None, None] + np.einsum("bi,ij->bij", 1 / d_g, np.eye(k))
        A_gc = GC[None] * inv_e2[:, None, None]
        S = A_gg - np.einsum("bgc,bc,bhc->bgh", A_gc, 1 / a_c, A_gc)
        b_c, b_g = yc[None] * inv_e2[:, None], yg[None] * inv_e2[:, None]
        s = b_g - np.einsum("bgc,bc->bg", A_gc, b_c / a_c)
        L = np.linalg.cholesky(S)
        z = np.linalg.solve(L, s[..., None])[..., 0]
        log_det_a = np.log(a_c).sum(1) + 2 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(1)
        # log|e2 I + U D U^T| = n log e2 + log|D| + log|A|  (matrix determinant lemma)
        log_det = -n * np.log(inv_e2) + n_county * 2 * u_a + np.log(d_g).sum(1) + log_det_a
        quad = yy * inv_e2 - (b_c**2 / a_c).sum(1) - (z**2).sum(1)  # y^T Sigma^-1 y (Woodbury)
        return -0.5 * (n * np.log(2 * np.pi) + log_det + quad)

    return log_likelihood


def _log_scale_prior(distribution, u, scale=5.0):
    """Log density of ``u = log sigma`` for ``sigma ~ distribution(scale)`` (a SciPy
    distribution on the positive half-line; the Jacobian ``sigma`` included)."""
    return distribution.logpdf(np.exp(u), scale=scale) + u


def radon_scales_log_density(data: pd.DataFrame | None = None, model: str = "full"):
    """``log p(y | log scales) + log prior(log scales)`` of a radon model, vectorised.

    Returns a function of the model's log scales (broadcast arrays), in the order of
    ``RADON_SCALES``: ``(u_alpha, u_beta, u_eps)`` for ``"full"``, ``(u_alpha, u_sigma)`` for
    ``"intercepts"``, ``(u_sigma,)`` for ``"pooled"``. It gives the log density of the data with
    the Gaussian coefficients integrated out, plus the log densities of the scales' priors
    (half-Cauchy(5) for ``"full"``, half-normal(5) otherwise) with the Jacobian of
    ``u = log sigma``.
    """
    _check_radon_model(model)
    data = load_radon() if data is None else data
    y = data["log_radon"].to_numpy(dtype=float)
    county = data["county_code"].to_numpy()
    ones = np.ones(len(y))
    if model == "full":
        # g = (mu_alpha, mu_beta, beta - mu_beta) with prior variances (100, 100, sigma_beta^2,
        # sigma_beta^2), a = alpha - mu_alpha with variance sigma_alpha^2.
        X = data[["floor", "log_uppm"]].to_numpy(dtype=float)
        U = np.column_stack([ones, X.sum(axis=1), X])
    else:
        # g = (mu_alpha, beta) for "intercepts", with a = alpha - mu_alpha of variance
        # sigma_alpha^2; g = (alpha, beta) for "pooled"; prior variances (100, 100).
        U = np.column_stack([ones, data["floor"].to_numpy(dtype=float)])
    log_likelihood = _gaussian_log_likelihood(y, U, None if model == "pooled" else county)
    n_scales = len(RADON_SCALES[model])

    def log_density(*u):
        if len(u) != n_scales:
            raise TypeError(f"the {model!r} radon model has {n_scales} scales, got {len(u)}.")
        u = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in u))
        shape = u[0].shape
        u = [v.ravel() for v in u]
        fixed = np.full_like(u[0], 100.0)
        if model == "full":
            ua, ub, ue = u
            var_b = np.exp(2 * ub)
            d_g = np.stack([fixed, fixed, var_b, var_b], axis=1)
            prior = sum(_log_scale_prior(stats.halfcauchy, v) for v in u)
        else:
            ua, ue = u if model == "intercepts" else (np.zeros_like(u[0]), u[0])
            d_g = np.stack([fixed, fixed], axis=1)
            prior = sum(_log_scale_prior(stats.halfnorm, v) for v in u)
        return (log_likelihood(d_g, ua, ue) + prior).reshape(shape)

    return log_density


RADON_GRIDS = {
    # model: (start of the mode search, grid (lo, hi) around the mode, spacing), in log scales
    "full": ((-1.0, 0.0, -0.3), ((-20.0, 4.0), (-8.0, 16.0), (-0.25, 0.25)), (0.2, 0.4, 0.02)),
    "intercepts": ((-1.0, -0.3), ((-10.0, 3.0), (-0.3, 0.3)), (0.05, 0.01)),
    "pooled": ((-0.3,), ((-0.3, 0.3),), (0.01,)),
}


def radon_log_evidence_on_grid(
    data, spacing=None, half_widths=None, *, model: str = "full"
) -> float:
    """Trapezoidal rule for the integral of :func:`radon_scales_log_density` over the log scales.

    ``spacing`` and ``half_widths`` (the grid's ``(lo, hi)`` offsets from the mode, per axis)
    default to the model's entry of ``RADON_GRIDS``.
    """
    _check_radon_model(model)
    start, default_widths, default_spacing = RADON_GRIDS[model]
    spacing = default_spacing if spacing is None else spacing
    half_widths = default_widths if half_widths is None else half_widths
    log_density = radon_scales_log_density(data, model)
    mode = optimize.minimize(
        lambda u: -log_density(*u), np.array(start), method="Nelder-Mead",
        options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000},
    ).x
    axes = [
        np.arange(m + lo, m + hi + h / 2, h)
        for m, (lo, hi), h in zip(mode, half_widths, spacing, strict=True)
    ]
    # Uniform spacing: the trapezoidal weights are h (halved at the ends).
    log_w = [np.log(np.full(len(a), h)) for a, h in zip(axes, spacing, strict=True)]
    for lw in log_w:
        lw[[0, -1]] -= np.log(2.0)
    # One slab per point of the first axis, the other axes as a grid.
    rest = np.meshgrid(*axes[1:], indexing="ij")
    log_w_rest = sum(np.ix_(*log_w[1:]), np.float64(0.0))
    slabs = [
        logsumexp(log_density(u0, *rest) + log_w_rest) + lw0
        for u0, lw0 in zip(axes[0], log_w[0], strict=True)
    ]
    return float(logsumexp(slabs))


def radon_linear_gaussian():
    """The hierarchical linear-Gaussian model on the radon data: 85 counties, 919 households,
    regressors floor and log uranium, known scales (88 parameters).

    Returns
    -------
    (model, log_evidence, posterior_mean)
        As :func:`~pymc_tempering.problems.gaussian.hierarchical_linear_gaussian`.
    """
    df = load_radon()
    return hierarchical_linear_gaussian(
        data=(df["county_code"], df[["floor", "log_uppm"]].to_numpy(), df["log_radon"])
    )


def problems() -> list[Problem]:
    """The radon problems with exact log Z.

    ``radon_alpha`` (:func:`radon_model` with the county intercepts non-centred, 92
    parameters), ``radon_non_centred`` (both groups non-centred, the paper's form),
    ``radon_centred`` (neither), ``radon_intercepts`` (89), ``radon_pooled`` (3) and
    ``radon_linear_gaussian`` (known scales, 88).
    """
    return [
        Problem("radon_alpha", "radon", lambda: radon_model(non_centered="alpha"),
                lambda: Truth(log_z=radon_log_marginal_likelihood()),
                "radon regression, county intercepts non-centred (92 parameters)"),
        Problem("radon_non_centred", "radon", lambda: radon_model(non_centered=True),
                lambda: Truth(log_z=radon_log_marginal_likelihood()),
                "radon regression, both groups non-centred (the CT paper's, 92 parameters)"),
        Problem("radon_centred", "radon", radon_model,
                lambda: Truth(log_z=radon_log_marginal_likelihood()),
                "radon regression, centred (92 parameters)"),
        Problem("radon_intercepts", "radon", radon_intercepts_model,
                lambda: Truth(log_z=radon_log_marginal_likelihood(model="intercepts")),
                "radon varying intercepts, centred (89 parameters)"),
        Problem("radon_pooled", "radon", radon_pooled_model,
                lambda: Truth(log_z=radon_log_marginal_likelihood(model="pooled")),
                "radon complete pooling (3 parameters)"),
        Problem("radon_linear_gaussian", "radon", lambda: radon_linear_gaussian()[0],
                lambda: Truth(log_z=radon_linear_gaussian()[1]),
                "radon hierarchical linear-Gaussian, known scales (88 parameters)"),
    ]
