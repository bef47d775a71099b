"""Small data sets shipped with the package, and the models the examples and benchmarks use."""

from __future__ import annotations

import json
from importlib.resources import files

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
from scipy import optimize
from scipy.special import logsumexp

__all__ = [
    "load_radon",
    "radon_model",
    "radon_log_marginal_likelihood",
    "kou_mixture_model",
    "kou_mixture_moments",
]

_KOU_MOMENTS = ("E_x1", "E_x2", "E_x1sq", "E_x2sq")


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


def radon_log_marginal_likelihood(data: pd.DataFrame | None = None) -> float:
    """The exact log marginal likelihood of :func:`radon_model` (either parameterisation).

    Given the three scales, the model is linear-Gaussian in its 89 other parameters
    (``mu_alpha``, ``mu_beta``, ``alpha``, ``beta``), so ``log_radon`` is Gaussian with
    covariance ``epsilon^2 I + U D U^T`` and they integrate out in closed form (Woodbury and
    the matrix determinant lemma, the county block being diagonal). What is left is a 3-D
    integral over ``log sigma_alpha``, ``log sigma_beta``, ``log epsilon`` under their
    half-Cauchy(5) priors, done by the trapezoidal rule on a grid around the mode: 24 units of
    ``log sigma_alpha`` (its posterior has an exponential left tail), 24 of
    ``log sigma_beta`` and 0.5 of ``log epsilon``. The trapezoidal rule converges
    geometrically for a smooth integrand that is negligible at the grid's edges; halving the
    spacing or doubling the grid changes the result by less than 1e-6 nats (checked by the
    tests, as is the closed form against the model's own log density). About a second.

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Default: :func:`load_radon`.

    Returns
    -------
    float
        ``log p(log_radon)`` under :func:`radon_model`.
    """
    return _radon_log_evidence(data, spacing=(0.2, 0.4, 0.02))


def _radon_conditional(data: pd.DataFrame | None = None):
    """``log p(y | log scales) + log prior(log scales)`` of the radon model, vectorised.

    Returns a function of arrays ``(u_alpha, u_beta, u_eps)`` (log scales, broadcast): the
    log density of the data with the 89 Gaussian coefficients integrated out, plus the
    half-Cauchy(5) log densities of the three scales with the Jacobian of ``u = log sigma``.
    """
    data = load_radon() if data is None else data
    y = data["log_radon"].to_numpy(dtype=float)
    county = data["county_code"].to_numpy()
    X = data[["floor", "log_uppm"]].to_numpy(dtype=float)
    n, n_county = len(y), int(county.max()) + 1
    # y = U_g g + Z a + noise: g = (mu_alpha, mu_beta, beta - mu_beta) with prior variances
    # (100, 100, sigma_beta^2, sigma_beta^2), a = alpha - mu_alpha with variance sigma_alpha^2.
    Ug = np.column_stack([np.ones(n), X.sum(axis=1), X])
    Z = np.zeros((n, n_county))
    Z[np.arange(n), county] = 1.0
    GG, GC, CC = Ug.T @ Ug, Ug.T @ Z, np.diag(Z.T @ Z)  # CC: observations per county
    yg, yc, yy = Ug.T @ y, Z.T @ y, y @ y
    log_hc = np.log(2 / (np.pi * 5.0))

    def log_density(u_alpha, u_beta, u_eps):
        ua, ub, ue = np.broadcast_arrays(
            *(np.asarray(v, dtype=float) for v in (u_alpha, u_beta, u_eps))
        )
        shape = ua.shape
        ua, ub, ue = ua.ravel(), ub.ravel(), ue.ravel()
        inv_e2 = np.exp(-2 * ue)
        # A = U^T U / e2 + D^-1: its county block is diagonal; eliminate it (Schur complement).
        a_c = CC[None, :] * inv_e2[:, None] + np.exp(-2 * ua)[:, None]
        var_b = np.exp(2 * ub)
        d_g = np.stack([np.full_like(ub, 100.0), np.full_like(ub, 100.0), var_b, var_b], axis=1)
        A_gg = GG[None] * inv_e2[:, None, None] + np.einsum("bi,ij->bij", 1 / d_g, np.eye(4))
        A_gc = GC[None] * inv_e2[:, None, None]
        S = A_gg - np.einsum("bgc,bc,bhc->bgh", A_gc, 1 / a_c, A_gc)
        b_c, b_g = yc[None] * inv_e2[:, None], yg[None] * inv_e2[:, None]
        s = b_g - np.einsum("bgc,bc->bg", A_gc, b_c / a_c)
        L = np.linalg.cholesky(S)
        z = np.linalg.solve(L, s[..., None])[..., 0]
        log_det_a = np.log(a_c).sum(1) + 2 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(1)
        # log|e2 I + U D U^T| = n log e2 + log|D| + log|A|  (matrix determinant lemma)
        log_det = -n * np.log(inv_e2) + n_county * 2 * ua + np.log(d_g).sum(1) + log_det_a
        quad = yy * inv_e2 - (b_c**2 / a_c).sum(1) - (z**2).sum(1)  # y^T Sigma^-1 y (Woodbury)
        loglik = -0.5 * (n * np.log(2 * np.pi) + log_det + quad)
        prior = sum(log_hc - np.log1p(np.exp(2 * u) / 25.0) + u for u in (ua, ub, ue))
        return (loglik + prior).reshape(shape)

    return log_density


_RADON_GRID = ((-20.0, 4.0), (-8.0, 16.0), (-0.25, 0.25))  # around the mode, in log scale


def _radon_log_evidence(data, spacing, half_widths=_RADON_GRID) -> float:
    """Trapezoidal rule for the 3-D integral of :func:`_radon_conditional` over the log scales."""
    log_density = _radon_conditional(data)
    mode = optimize.minimize(
        lambda u: -log_density(*u), np.array([-1.0, 0.0, -0.3]), method="Nelder-Mead",
        options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000},
    ).x
    axes = [
        np.arange(m + lo, m + hi + h / 2, h)
        for m, (lo, hi), h in zip(mode, half_widths, spacing, strict=True)
    ]
    ub, ue = np.meshgrid(axes[1], axes[2], indexing="ij")
    # Uniform spacing: the trapezoidal weights are h (halved at the ends).
    log_w = [np.log(np.full(len(a), h)) for a, h in zip(axes, spacing, strict=True)]
    for lw in log_w:
        lw[[0, -1]] -= np.log(2.0)
    slabs = [
        logsumexp(log_density(ua, ub, ue) + log_w[1][:, None] + log_w[2][None, :]) + lwa
        for ua, lwa in zip(axes[0], log_w[0], strict=True)
    ]
    return float(logsumexp(slabs))


def _check_kou_scenario(scenario: str) -> None:
    if scenario not in ("a", "b"):
        raise ValueError(f"scenario must be 'a' or 'b', got {scenario!r}.")


def kou_mixture_model(scenario: str) -> pm.Model:
    """The 20-component bivariate Gaussian mixture of Kou, Zhou and Wong (2006), normalised.

    Section 4.1 of the pseudo-extended paper: scenario ``"a"`` (equal weights, component sd
    0.1, well separated) or ``"b"`` (weights and variances growing with the distance to
    (5, 5)); component table and sources in ``pymc_tempering/data/README.md``. The model is
    ``x`` (``pm.Flat``, 2-vector, initial value (0.5, 0.5)) with the mixture's log density as a
    ``pm.Potential``, so ``log Z = 0``.

    Parameters
    ----------
    scenario : {"a", "b"}

    Returns
    -------
    pymc.Model

    Raises
    ------
    ValueError
        For another scenario.
    """
    _check_kou_scenario(scenario)
    comp = pd.read_csv(files("pymc_tempering").joinpath("data/kou_mixture_components.csv"))
    mu = comp[["mu1", "mu2"]].to_numpy()
    w = comp["w_a" if scenario == "a" else "w_b_normalised"].to_numpy()
    var = comp["var_a" if scenario == "a" else "var_b"].to_numpy()
    with pm.Model() as model:
        x = pm.Flat("x", shape=2, initval=np.array([0.5, 0.5]))
        d2 = pt.sum((x[None, :] - mu) ** 2, axis=1)
        pm.Potential("mixture", pt.logsumexp(np.log(w) - np.log(2 * np.pi * var) - d2 / (2 * var)))
    return model


def kou_mixture_moments(scenario: str) -> np.ndarray:
    """The exact ``E x1, E x2, E x1^2, E x2^2`` of :func:`kou_mixture_model` (Table 1's truth).

    Parameters
    ----------
    scenario : {"a", "b"}

    Returns
    -------
    numpy.ndarray
        Shape ``(4,)``.
    """
    _check_kou_scenario(scenario)
    with files("pymc_tempering").joinpath("data/kou_mixture_exact_moments.json").open() as fh:
        exact = json.load(fh)[scenario]
    return np.array([exact[k] for k in _KOU_MOMENTS])
