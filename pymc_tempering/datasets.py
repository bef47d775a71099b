"""Small data sets shipped with the package, and the models the examples and benchmarks use."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd
import pymc as pm

__all__ = ["load_radon", "radon_model"]


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
