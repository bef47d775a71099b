"""Small data sets shipped with the package, and the models the examples and benchmarks use."""

from __future__ import annotations

import json
from importlib.resources import files

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

__all__ = ["load_radon", "radon_model", "kou_mixture_model", "kou_mixture_moments"]

_KOU_MOMENTS = ("E_x1", "E_x2", "E_x1sq", "E_x2sq")


def load_radon() -> pd.DataFrame:
    """The Minnesota radon data of Gelman and Hill (919 households, 85 counties).

    Columns include ``county``, ``county_code`` (0-based), ``floor`` (0 basement, 1 first
    floor), ``log_radon`` and ``log_uppm`` (county log uranium). Source and licence:
    ``pymc_tempering/data/README.md``.
    """
    with files("pymc_tempering").joinpath("data/radon_mn.csv").open() as fh:
        return pd.read_csv(fh)


def radon_model(data: pd.DataFrame | None = None, *, non_centered: bool = False) -> pm.Model:
    """The hierarchical regression of section 7.3 of the continuous tempering paper.

    ``alpha_j ~ N(mu_alpha, sigma_alpha)`` for the 85 counties, ``beta ~ N(mu_beta, sigma_beta)``
    for the two regressors (floor, log uranium), ``log_radon_i ~ N(alpha_{c_i} + x_i beta,
    epsilon)``, half-Cauchy(5) scales and N(0, 10^2) means: 92 parameters.

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Default: :func:`load_radon`.
    non_centered : bool
        Sample standard normal ``alpha_offset`` and ``beta_offset`` and set
        ``alpha = mu_alpha + sigma_alpha * alpha_offset`` (likewise ``beta``) as deterministics,
        as in the paper's factor graph (Fig. 3a). The model, and so its marginal likelihood, is
        the same; only the coordinates the samplers move in differ.

    Returns
    -------
    pymc.Model
    """
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
        if non_centered:
            alpha_offset = pm.Normal("alpha_offset", 0.0, 1.0, dims="county")
            beta_offset = pm.Normal("beta_offset", 0.0, 1.0, dims="regressor")
            alpha = pm.Deterministic("alpha", mu_alpha + sigma_alpha * alpha_offset, dims="county")
            beta = pm.Deterministic("beta", mu_beta + sigma_beta * beta_offset, dims="regressor")
        else:
            alpha = pm.Normal("alpha", mu_alpha, sigma_alpha, dims="county")
            beta = pm.Normal("beta", mu_beta, sigma_beta, dims="regressor")
        mean = alpha[county] + pm.math.dot(X, beta)
        pm.Normal("log_radon", mean, epsilon, observed=data["log_radon"].to_numpy(), dims="obs")
    return model


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
