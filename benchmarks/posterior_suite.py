"""Posterior benchmark: mode probabilities of multimodal models, tempering methods against SMC and NUTS.

What it measures: how much posterior mass each method puts on each mode of ten multimodal
models whose mode probabilities are known exactly (quadrature, symmetry or a closed form),
side by side over seeds. Per run it records the largest error over the modes' probabilities,
that mode's standard error, every mode's probability, the evidence's ``reliable`` flag, the
evidence error where the exact log Z is known, the warnings the run gave and its wall time.

Models
------
Each model has a builder (a ``pm.Model``), a labeller (posterior draws, a dict of name ->
array ``(chain, draw, ...)``, to an integer mode label per draw) and its exact mode
probabilities (``--check`` prints them).

``quickstart``
    The sign-flip posterior of ``examples/quickstart.py``: ``y_i ~ N(theta^2, 1)``, ten
    observations, ``theta ~ N(0.5, 1.5^2)``. Modes: ``theta < 0`` / ``theta > 0``. Truth:
    1-D quadrature (P(theta > 0) about 0.647); log Z by the same quadrature.
``mixture_2d``, ``mixture_5d``, ``mixture_10d``
    ``x ~ N(0, 10^2 I)`` and a ``pm.Potential`` holding the log density of a three-component
    Gaussian mixture (weights 0.6 / 0.3 / 0.1, diagonal covariances of unequal scales, means 8
    apart). The posterior is again a Gaussian mixture (Gaussian products, closed form). A
    draw's mode is the posterior component whose mean is nearest in Mahalanobis distance;
    the exact probability of each such region is computed by Monte Carlo from the exact
    posterior mixture with 10^6 draws (standard error below 0.0005). log Z: closed form.
``shells_5d``, ``shells_20d``
    The two thin Gaussian shells of ``benchmarks/evidence_suite.py`` (radius 2, width 0.1,
    centres ``(+-3.5, 0, ...)``, uniform prior on ``[-6, 6]^d``). Modes: ``x_0 < 0`` /
    ``x_0 > 0``; truth 0.5 / 0.5 by the reflection ``x_0 -> -x_0``. log Z: radial quadrature.
``label_switching``
    A two-component normal mixture likelihood, ``y_i ~ 0.5 N(mu_1, 1) + 0.5 N(mu_2, 1)``, 60
    observations from components at -2.5 and 2.5, exchangeable priors ``mu_k ~ N(0, 5^2)``.
    Modes: ``mu_1 < mu_2`` / ``mu_1 > mu_2``; truth 0.5 / 0.5 by exchangeability. No log Z.
``kou_a``, ``kou_b``
    The 20-component bivariate mixture of Kou, Zhou and Wong (2006) (the components of
    ``pymc_tempering.datasets.kou_mixture_model``). That model puts a ``pm.Flat`` prior on
    ``x``, which ``pm.sample_smc`` cannot start from, so here ``x ~ N(5, 5^2 I)`` and the
    potential is the mixture's log density minus that prior's: the posterior is exactly the
    Kou mixture and log Z = 0 (its first two moments are those of
    ``datasets.kou_mixture_moments``). The package ships moments only, no mode
    probabilities: a draw's mode is the component whose mean is nearest in Mahalanobis
    distance, and the region probabilities are computed by Monte Carlo from the exact mixture
    with 10^6 draws (about 0.05 each in scenario a; in scenario b neighbouring components
    overlap, and the regions are still exact but no longer equal the weights).
``bilinear_regression``
    A regression with two well-separated solutions: ``y_i ~ N(a b x_i, 0.5^2)``, 20
    observations with ``a b = 2``, ``a ~ N(0.3, 1)``, ``b ~ N(0, 1)``. Only the product is
    identified, so the posterior lies on the two branches of a hyperbola (``a, b > 0`` or
    ``a, b < 0``). Modes: ``a < 0`` / ``a > 0``. Truth: ``b`` integrated out in closed form
    (``y | a`` is Gaussian), then 1-D quadrature over ``a``; log Z the same way. (No
    hierarchical model: none with two well-separated solutions has an exact mode probability
    this cheaply.)

Methods
-------
``ct``, ``gibbs_ct``, ``pe``
    ``pmt.sample_ct``, ``pmt.sample_gibbs_ct``, ``pmt.sample_pe`` with
    ``random_seed=seed, progressbar=False`` and otherwise their defaults. Mode probabilities
    are weighted means of the mode indicators with their standard errors,
    ``pmt.weighted_expectation(idata, indicator)`` (stratified by the modes where the run
    is), for ``pe`` ``pymc_tempering.estimators.weighted_mean(indicator, log_weight)`` with the
    pseudo-samples pooled within each chain. ``posterior_reliable`` is the
    result's ``attrs["posterior_reliable"]`` (``pmt.posterior_check``); ``reliable`` is
    ``pmt.log_marginal_likelihood(idata).reliable`` (the evidence's verdict; None where that
    raises).
``smc``
    ``pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)``: plain means
    of the indicators, no standard error (the particles are not a Markov chain); the evidence
    is each chain's last finite ``log_marginal_likelihood``, averaged.
``nuts``
    ``pm.sample(random_seed=seed, progressbar=False)`` at PyMC's defaults: plain means,
    standard error from ArviZ's ``mcse`` (None for a mode whose indicator never changes within
    any chain, i.e. chains stuck, or where it is not finite). No evidence.

Each (model, method, seed) case runs in its own subprocess, as in
``benchmarks/evidence_suite.py`` (``--case MODEL METHOD SEED`` prints one JSON line), so every
method pays the same imports and compilation, a crash or a timeout loses one case, and caches
are as a user would have them. The wall time is measured inside the case: model build,
compilation and sampling (not the labelling). Cases run seed-major, one at a time; the JSON is
rewritten after every case and ``--resume`` skips the cases it already holds.

Usage::

    .venv/bin/python benchmarks/posterior_suite.py --check       # print the exact probabilities
    .venv/bin/python benchmarks/posterior_suite.py               # 10 models, 5 methods, 10 seeds
    .venv/bin/python benchmarks/posterior_suite.py --models quickstart,mixture_2d \\
        --methods ct,smc --seeds 3 --resume
    .venv/bin/python benchmarks/posterior_suite.py --report      # Markdown table from --out
    .venv/bin/python benchmarks/posterior_suite.py --merge a.json b.json long.json --out all.json
    .venv/bin/python benchmarks/posterior_suite.py --quick --methods ct,smc   # plumbing: 1 seed,
                                                   # the 3 cheapest models, 300 draws per method
    .venv/bin/python benchmarks/posterior_suite.py --models quickstart,mixture_2d,label_switching \
        --methods ct,gibbs_ct --draws 16000 --out /tmp/long.json   # long runs: the bias table

Writes ``--out`` (default ``/tmp/posterior_suite.json``). The report gives, per model and
method, the fraction of runs with every mode within 0.03 of the truth, the largest error, the
median standard error, the fraction with ``posterior_reliable`` true, the runs off by more than
0.05 that still said reliable, the fraction with the evidence ``reliable``, the median wall time
and its ratio to SMC's median on the same model; then, per model and method, each mode's
probability averaged over the seeds with the standard error of that mean (their spread over
the seeds) and its z-score against the truth: the bias table. ``--draws N`` runs ``ct``,
``gibbs_ct``, ``pe`` and ``nuts`` with ``N`` draws per chain (``smc`` keeps 2000). When the suite is run in full, its current table goes to
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp
from case_runner import finite, quiet_loggers, run_case_process, versions, write_json

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("ct", "gibbs_ct", "pe", "smc", "nuts")
QUICK_MODELS = ("quickstart", "mixture_2d", "label_switching")
QUICK_DRAWS = 300
DEFAULT_OUT = Path("/tmp/posterior_suite.json")
RESULT_PREFIX = "POSTERIOR_SUITE_CASE "
TOLERANCE = 0.03
N_EXACT_MC = 1_000_000


@dataclass(frozen=True)
class Model:
    """One benchmark model: ``build()`` a ``pm.Model``; ``label(draws)`` maps a dict of name ->
    array ``(chain, draw, ...)`` to integer mode labels ``(chain, draw)``; ``truth()`` returns
    the exact mode probabilities (array, one per label) and the exact log Z or None."""

    name: str
    modes: tuple[str, ...]
    build: Callable[[], pm.Model]
    label: Callable[[dict], np.ndarray]
    truth: Callable[[], tuple[np.ndarray, float | None]]


# ---------------------------------------------------------------------------------------------
# Gaussian mixtures (closed-form posteriors) and the labels of their regions
# ---------------------------------------------------------------------------------------------


def _mvn_diag_logpdf(x, mean, var):
    """log N(x; mean, diag(var)) over the last axis, broadcasting."""
    return -0.5 * np.sum(np.log(2 * np.pi * var) + (x - mean) ** 2 / var, axis=-1)


def _nearest_mahalanobis(x, means, variances):
    """Index of the component mean nearest to each ``x`` (..., d) in Mahalanobis distance."""
    d2 = np.sum((x[..., None, :] - means) ** 2 / variances, axis=-1)
    return np.argmin(d2, axis=-1)


def _region_probabilities(weights, means, variances, label_means, label_vars, seed):
    """P(nearest-Mahalanobis region k) under the exact diagonal Gaussian mixture, by Monte Carlo."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(label_means))
    remaining = N_EXACT_MC
    while remaining:
        n = min(remaining, 200_000)
        comp = rng.choice(len(weights), size=n, p=weights)
        x = means[comp] + np.sqrt(variances[comp]) * rng.standard_normal((n, means.shape[1]))
        counts += np.bincount(_nearest_mahalanobis(x, label_means, label_vars), minlength=len(label_means))
        remaining -= n
    return counts / N_EXACT_MC


def _posterior_mixture(weights, means, variances, prior_sd):
    """The posterior of ``x ~ N(0, prior_sd^2 I)`` times a diagonal Gaussian mixture density."""
    log_w = np.log(weights) + _mvn_diag_logpdf(means, 0.0, variances + prior_sd**2)
    post_var = 1.0 / (1.0 / variances + 1.0 / prior_sd**2)
    post_mean = post_var * means / variances
    log_z = float(logsumexp(log_w))
    return np.exp(log_w - log_z), post_mean, post_var, log_z


def _gaussian_mixture(d: int) -> Model:
    rng = np.random.default_rng(100 + d)
    weights = np.array([0.6, 0.3, 0.1])
    means = np.zeros((3, d))
    means[0, 0], means[1, 0] = -4.0, 4.0
    means[2, 1] = 4.0 * math.sqrt(3.0)  # the three means pairwise 8 apart
    sds = rng.uniform(0.5, 1.2, size=(3, d))
    variances = sds**2
    prior_sd = 10.0
    post_w, post_mean, post_var, log_z = _posterior_mixture(weights, means, variances, prior_sd)

    def build():
        with pm.Model() as model:
            x = pm.Normal("x", 0.0, prior_sd, shape=d)
            comp = pt.stack([
                -0.5 * pt.sum(np.log(2 * np.pi * variances[k]) + (x - means[k]) ** 2 / variances[k])
                for k in range(3)
            ])
            pm.Potential("mixture", pt.logsumexp(np.log(weights) + comp))
        return model

    def label(draws):
        return _nearest_mahalanobis(np.asarray(draws["x"]), post_mean, post_var)

    @functools.cache
    def truth():
        p = _region_probabilities(post_w, post_mean, post_var, post_mean, post_var, seed=d)
        return p, log_z

    return Model(f"mixture_{d}d", ("w0.6", "w0.3", "w0.1"), build, label, truth)


def _kou(scenario: str) -> Model:
    comp = pd.read_csv(files("pymc_tempering").joinpath("data/kou_mixture_components.csv"))
    means = comp[["mu1", "mu2"]].to_numpy()
    weights = comp["w_a" if scenario == "a" else "w_b_normalised"].to_numpy()
    weights = weights / weights.sum()
    var = comp["var_a" if scenario == "a" else "var_b"].to_numpy()
    variances = np.repeat(var[:, None], 2, axis=1)
    prior_mu, prior_sd = 5.0, 5.0

    def build():
        with pm.Model() as model:
            x = pm.Normal("x", prior_mu, prior_sd, shape=2)
            d2 = pt.sum((x[None, :] - means) ** 2, axis=1)
            log_mix = pt.logsumexp(np.log(weights) - np.log(2 * np.pi * var) - d2 / (2 * var))
            log_prior = pt.sum(-0.5 * np.log(2 * np.pi * prior_sd**2) - (x - prior_mu) ** 2 / (2 * prior_sd**2))
            pm.Potential("mixture_over_prior", log_mix - log_prior)
        return model

    def label(draws):
        return _nearest_mahalanobis(np.asarray(draws["x"]), means, variances)

    @functools.cache
    def truth():
        return _region_probabilities(weights, means, variances, means, variances, seed=7), 0.0

    return Model(f"kou_{scenario}", tuple(f"c{j}" for j in comp["j"]), build, label, truth)


# ---------------------------------------------------------------------------------------------
# The other models
# ---------------------------------------------------------------------------------------------


def _quickstart() -> Model:
    rng = np.random.default_rng(42)  # as in examples/quickstart.py
    y = rng.normal(1.5**2, 1.0, size=10)
    prior_mu, prior_sd = 0.5, 1.5

    def build():
        with pm.Model() as model:
            theta = pm.Normal("theta", prior_mu, prior_sd)
            pm.Normal("y", theta**2, 1.0, observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["theta"]) > 0).astype(int)

    @functools.cache
    def truth():
        def log_joint(t):
            return stats.norm.logpdf(t, prior_mu, prior_sd) + stats.norm.logpdf(y, t**2, 1.0).sum()

        peak = max(log_joint(-1.5), log_joint(1.5))
        z_neg = integrate.quad(lambda t: np.exp(log_joint(t) - peak), -8, 0, points=[-1.5], limit=200)[0]
        z_pos = integrate.quad(lambda t: np.exp(log_joint(t) - peak), 0, 8, points=[1.5], limit=200)[0]
        z = z_neg + z_pos
        return np.array([z_neg / z, z_pos / z]), float(peak + np.log(z))

    return Model("quickstart", ("theta<0", "theta>0"), build, label, truth)


SHELL_R, SHELL_W, SHELL_BOX = 2.0, 0.1, 6.0


def _shells(d: int) -> Model:
    centres = np.zeros((2, d))
    centres[:, 0] = (-3.5, 3.5)
    log_norm = -0.5 * np.log(2 * np.pi) - np.log(SHELL_W)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -SHELL_BOX, SHELL_BOX, shape=d)
            dist = pt.sqrt(((x - centres) ** 2).sum(axis=-1))
            pm.Potential("likelihood", pm.math.logsumexp(-0.5 * ((dist - SHELL_R) / SHELL_W) ** 2) + log_norm)
        return model

    def label(draws):
        return (np.asarray(draws["x"])[..., 0] > 0).astype(int)

    @functools.cache
    def truth():
        r, w = SHELL_R, SHELL_W

        def f(rho):
            return np.exp((d - 1) * np.log(rho / r) - 0.5 * ((rho - r) / w) ** 2) / (math.sqrt(2 * math.pi) * w)

        value = integrate.quad(f, r - 15 * w, r + 30 * w, points=[r, r + (d - 1) * w**2 / r], epsrel=1e-12)[0]
        log_radial = (d - 1) * np.log(r) + np.log(value)
        log_area = np.log(2) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d)
        log_z = float(np.log(2) + log_area + log_radial - d * np.log(2 * SHELL_BOX))
        return np.array([0.5, 0.5]), log_z

    return Model(f"shells_{d}d", ("x0<0", "x0>0"), build, label, truth)


def _label_switching() -> Model:
    rng = np.random.default_rng(11)
    y = np.concatenate([rng.normal(-2.5, 1.0, 30), rng.normal(2.5, 1.0, 30)])

    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 5.0, shape=2)
            pm.NormalMixture("y", w=np.array([0.5, 0.5]), mu=mu, sigma=1.0, observed=y)
        return model

    def label(draws):
        mu = np.asarray(draws["mu"])
        return (mu[..., 0] > mu[..., 1]).astype(int)

    def truth():
        return np.array([0.5, 0.5]), None

    return Model("label_switching", ("mu1<mu2", "mu1>mu2"), build, label, truth)


def _bilinear_regression() -> Model:
    rng = np.random.default_rng(5)
    n, sigma, a_mu, a_sd, b_sd = 20, 0.5, 0.3, 1.0, 1.0
    x = rng.normal(size=n)
    y = 2.0 * x + rng.normal(0.0, sigma, size=n)
    xx, xy, yy = x @ x, x @ y, y @ y

    def build():
        with pm.Model() as model:
            a = pm.Normal("a", a_mu, a_sd)
            b = pm.Normal("b", 0.0, b_sd)
            pm.Normal("y", a * b * x, sigma, observed=y)
        return model

    def label(draws):
        return (np.asarray(draws["a"]) > 0).astype(int)

    def log_joint_a(a):
        # y | a ~ N(0, sigma^2 I + v x x'), v = a^2 b_sd^2: determinant lemma and Sherman-Morrison
        v = a**2 * b_sd**2
        s2 = sigma**2
        logdet = n * np.log(s2) + np.log1p(v * xx / s2)
        quad = (yy - v * xy**2 / (s2 + v * xx)) / s2
        return stats.norm.logpdf(a, a_mu, a_sd) - 0.5 * (n * np.log(2 * np.pi) + logdet + quad)

    @functools.cache
    def truth():
        grid = np.linspace(-8, 8, 4001)
        peak = float(np.max(log_joint_a(grid)))
        a_star = float(grid[np.argmax(log_joint_a(grid))])
        f = lambda a: np.exp(log_joint_a(a) - peak)  # noqa: E731
        z_neg = integrate.quad(f, -10, 0, points=[-abs(a_star)], limit=400, epsabs=0, epsrel=1e-10)[0]
        z_pos = integrate.quad(f, 0, 10, points=[abs(a_star)], limit=400, epsabs=0, epsrel=1e-10)[0]
        z = z_neg + z_pos
        return np.array([z_neg / z, z_pos / z]), float(peak + np.log(z))

    return Model("bilinear_regression", ("a<0", "a>0"), build, label, truth)


MODELS: dict[str, Model] = {m.name: m for m in (
    _quickstart(), _gaussian_mixture(2), _gaussian_mixture(5), _gaussian_mixture(10), _shells(5),
    _shells(20), _label_switching(), _kou("a"), _kou("b"), _bilinear_regression(),
)}


def check_models(names) -> None:
    """Print each model's exact mode probabilities and log Z (and Kou's moments against the package's)."""
    for name in names:
        p, log_z = MODELS[name].truth()
        shown = ", ".join(f"{m} {v:.4f}" for m, v in zip(MODELS[name].modes, p))
        print(f"{name}: {shown}; log Z {'-' if log_z is None else f'{log_z:.4f}'}")
    from pymc_tempering import datasets

    for scenario in ("a", "b"):
        if f"kou_{scenario}" in names:
            print(f"kou_{scenario} exact moments (E x1, E x2, E x1^2, E x2^2):",
                  np.round(datasets.kou_mixture_moments(scenario), 4))


# ---------------------------------------------------------------------------------------------
# One case (in its own process)
# ---------------------------------------------------------------------------------------------


def _draws_and_weights(idata, names):
    """Posterior arrays (chain, draw, ...) and the log weights (chain, draw) or None; pseudo-samples
    (``pe``) are pooled within each chain."""
    post = idata["posterior"]
    stats_ = idata["sample_stats"] if "sample_stats" in idata.children else None
    log_weight = None
    if stats_ is not None and "log_weight" in stats_:
        log_weight = stats_["log_weight"]
    draws = {}
    for name in names:
        da = post[name]
        if "pseudo_sample" in da.dims:
            da = da.transpose("chain", "draw", "pseudo_sample", ...)
            vals = da.values
            draws[name] = vals.reshape((vals.shape[0], vals.shape[1] * vals.shape[2]) + vals.shape[3:])
        else:
            draws[name] = da.transpose("chain", "draw", ...).values
    if log_weight is not None:
        if "pseudo_sample" in log_weight.dims:
            lw = log_weight.transpose("chain", "draw", "pseudo_sample").values
            log_weight = lw.reshape(lw.shape[0], -1)
        else:
            log_weight = log_weight.transpose("chain", "draw").values
    return draws, log_weight


def _time_nutpie_compile() -> list:
    """Wrap ``nutpie.compile_pymc_model`` so that its seconds add up in the returned one-item
    list (the per-process compilation that decides much of a small model's time)."""
    import nutpie

    spent = [0.0]
    original = nutpie.compile_pymc_model

    @functools.wraps(original)
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    nutpie.compile_pymc_model = timed
    return spent


def run_case(name: str, method: str, seed: int, quick: bool = False, draws: int | None = None) -> dict:
    """Run one (model, method, seed) case in this process; returns its record."""
    quiet_loggers()
    import arviz as az

    import pymc_tempering as pmt
    from pymc_tempering.estimators import weighted_mean

    spec = MODELS[name]
    row = {"model": name, "method": method, "seed": seed, "probabilities": None, "se": None,
           "reliable": None, "log_z": None, "seconds": None, "warnings": [], "error_message": None,
           "quick": quick}
    draws_kw = {"draws": QUICK_DRAWS} if quick else ({"draws": draws} if draws else {})
    compile_seconds = _time_nutpie_compile()
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = spec.build()
            with model:
                if method == "ct":
                    idata = pmt.sample_ct(random_seed=seed, progressbar=False, **draws_kw)
                elif method == "gibbs_ct":
                    idata = pmt.sample_gibbs_ct(random_seed=seed, progressbar=False, **draws_kw)
                elif method == "pe":
                    idata = pmt.sample_pe(random_seed=seed, progressbar=False, **draws_kw)
                elif method == "smc":
                    idata = pm.sample_smc(draws=QUICK_DRAWS if quick else 2000, chains=2, random_seed=seed,
                                          progressbar=False)
                elif method == "nuts":
                    idata = pm.sample(random_seed=seed, progressbar=False, **draws_kw)
                else:
                    raise ValueError(f"unknown method {method!r}")
        row["seconds"] = time.perf_counter() - start
        row["nutpie_compile_seconds"] = compile_seconds[0]
        seen = []
        for w in caught:
            text = f"{w.category.__name__}: {w.message}"[:300]
            if text not in seen and not issubclass(w.category, (DeprecationWarning, FutureWarning)):
                seen.append(text)
        row["warnings"] = seen[:8]

        names = [v.name for v in model.free_RVs]
        draws, log_weight = _draws_and_weights(idata, names)
        labels = spec.label(draws)
        onehot = (labels[..., None] == np.arange(len(spec.modes))).astype(float)
        if method in ("ct", "gibbs_ct", "pe"):
            if method == "pe":  # pseudo-samples pooled within each chain
                p, se = weighted_mean(onehot, log_weight)
            else:  # the summaries' own estimator (stratified by the modes where the run is)
                p, se = pmt.weighted_expectation(idata, onehot)
            row["se"] = [finite(s) for s in se]
            try:
                lml = pmt.log_marginal_likelihood(idata)
            except ValueError as exc:
                row["evidence_message"] = f"ValueError: {exc}"[:300]
            else:
                row["log_z"] = finite(lml.estimate)
                row["reliable"] = bool(lml.reliable)
                row["evidence_problems"] = [q[:300] for q in lml.problems[:5]]
            row["posterior_reliable"] = idata.attrs.get("posterior_reliable")
            row["posterior_problems"] = idata.attrs.get("posterior_problems", "")[:600]
            if "mode_probabilities" in idata.children:
                row["mode_method"] = idata["mode_probabilities"].attrs.get("method")
        else:
            p = onehot.mean(axis=(0, 1))
            if method == "nuts":
                # no standard error for a mode whose indicator never changes within any chain
                # (chains stuck): ArviZ would give 0 or NaN there
                row["se"] = [None if np.all(np.ptp(onehot[..., k], axis=1) == 0)
                             else finite(az.mcse(onehot[..., k])) for k in range(onehot.shape[-1])]
            else:
                per_chain = pmt.log_marginal_likelihood(idata).per_chain
                if np.all(np.isfinite(per_chain)):
                    row["log_z"] = float(np.mean(per_chain))
        row["probabilities"] = [float(v) for v in p]
        inv = idata["posterior"]
        if "inverse_temperature" in inv:
            beta = inv["inverse_temperature"].values
            row["beta_share_above_0.9"] = float(np.mean(beta > 0.9))
    except Exception as exc:  # noqa: BLE001 - recorded, the suite goes on
        import traceback

        traceback.print_exc()
        row["error_message"] = f"{type(exc).__name__}: {exc}"[:2000]
        if row["seconds"] is None:
            row["seconds"] = time.perf_counter() - start
    return row


# ---------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------


def _spawn_case(name, method, seed, args) -> dict:
    """Run one case in a subprocess (its own process group, killed on timeout)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", name, method, str(seed)]
    if args.quick:
        cmd.append("--quick")
    if args.draws:
        cmd += ["--draws", str(args.draws)]
    failed = {"model": name, "method": method, "seed": seed, "probabilities": None, "se": None,
              "reliable": None, "log_z": None, "warnings": [], "quick": args.quick}
    return run_case_process(cmd, args.timeout, RESULT_PREFIX, failed)


def run_suite(args, models, methods):
    out = Path(args.out)
    settings = {"quick": args.quick,
                "draws": QUICK_DRAWS if args.quick else (args.draws or "defaults (smc 2000)"),
                "smc_chains": 2, "timeout": args.timeout}
    if args.resume and out.exists():
        data = json.loads(out.read_text())
        if data.get("settings") != settings:
            raise SystemExit(f"--resume: {out} was written with settings {data.get('settings')}, "
                             f"not {settings}; use another --out.")
    else:
        data = {"settings": settings, "truths": {}, "runs": []}
    data["versions"] = versions(("pymc-tempering", "pymc", "pytensor", "nutpie", "numpy"))
    for name in models:
        p, log_z = MODELS[name].truth()
        data["truths"][name] = {"modes": list(MODELS[name].modes), "probabilities": [float(v) for v in p],
                                "log_z": log_z}
    done = {(r["model"], r["method"], r["seed"]) for r in data["runs"]}
    cases = [(name, method, seed) for seed in range(args.first_seed, args.first_seed + args.seeds)
             for name in models for method in methods if (name, method, seed) not in done]
    print(f"{len(cases)} cases to run ({len(done)} already in {out})", flush=True)
    for i, (name, method, seed) in enumerate(cases, 1):
        row = _spawn_case(name, method, seed, args)
        truth = data["truths"][name]
        if row["probabilities"] is not None:
            errors = np.abs(np.array(row["probabilities"]) - np.array(truth["probabilities"]))
            k = int(np.argmax(errors))
            row["max_error"], row["max_error_mode"] = float(errors[k]), truth["modes"][k]
            row["max_error_se"] = row["se"][k] if row["se"] is not None else None
        else:
            row["max_error"] = row["max_error_mode"] = row["max_error_se"] = None
        row["log_z_error"] = (row["log_z"] - truth["log_z"]
                              if row["log_z"] is not None and truth["log_z"] is not None else None)
        data["runs"].append(row)
        write_json(out, data)
        if row["probabilities"] is not None:
            se = row["max_error_se"]
            status = (f"P = [{', '.join(f'{v:.3f}' for v in row['probabilities'][:6])}"
                      f"{', ...' if len(row['probabilities']) > 6 else ''}] max error {row['max_error']:.3f}"
                      f" ({row['max_error_mode']}, se {'-' if se is None else f'{se:.3f}'}), "
                      f"reliable {row['reliable']}, {len(row['warnings'])} warning(s)")
        else:
            status = f"FAILED: {str(row['error_message'])[:200]}"
        seconds = row["seconds"] if row["seconds"] is not None else float("nan")
        print(f"[{i}/{len(cases)}] {name} {method} seed {seed}: {status}  {seconds:.1f} s", flush=True)
    return data


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _fmt(value, spec=".3f"):
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def report(data) -> None:
    """Print a Markdown table: per model and method, over its runs."""
    runs = data["runs"]
    models = [m for m in MODELS if any(r["model"] == m for r in runs)]
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    print(f"| model | method | runs | failed | within {TOLERANCE} | largest error | median se "
          "| posterior reliable | off > 0.05 unflagged | evidence reliable | median s | x SMC "
          "| x SMC without nutpie's compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in models:
        smc_times = [r["seconds"] for r in runs if r["model"] == model and r["method"] == "smc"
                     and r["probabilities"] is not None and r["seconds"] is not None]
        smc_median = float(np.median(smc_times)) if smc_times else None
        for method in methods:
            rows = [r for r in runs if r["model"] == model and r["method"] == method]
            if not rows:
                continue
            ok = [r for r in rows if r["probabilities"] is not None]
            errors = [r["max_error"] for r in ok]
            ses = [r["max_error_se"] for r in ok if r.get("max_error_se") is not None]
            flags = [r["reliable"] for r in ok if r["reliable"] is not None]
            post = [r.get("posterior_reliable") for r in ok if r.get("posterior_reliable") is not None]
            unflagged = (sum(r["max_error"] > 0.05 and r.get("posterior_reliable") is True for r in ok)
                         if post else None)
            times = [r["seconds"] for r in ok if r["seconds"] is not None]
            within = (sum(e <= TOLERANCE for e in errors) / len(errors)) if errors else None
            med_t = float(np.median(times)) if times else None
            ratio = med_t / smc_median if med_t is not None and smc_median else None
            bare = [r["seconds"] - r["nutpie_compile_seconds"] for r in ok
                    if r.get("nutpie_compile_seconds") and r["seconds"] is not None]
            bare_ratio = float(np.median(bare)) / smc_median if bare and smc_median else None
            print(f"| {model} | {method} | {len(rows)} | {len(rows) - len(ok)} | {_fmt(within, '.2f')} "
                  f"| {_fmt(max(errors) if errors else None)} | {_fmt(float(np.median(ses)) if ses else None)} "
                  f"| {_fmt(sum(post) / len(post) if post else None, '.2f')} | {_fmt(unflagged, 'd')} "
                  f"| {_fmt(sum(flags) / len(flags) if flags else None, '.2f')} | {_fmt(med_t, '.1f')} "
                  f"| {_fmt(ratio, '.2f')} | {_fmt(bare_ratio, '.2f')} |")
    _bias_table(data["truths"], runs, models, methods, data["settings"].get("draws"))
    for long in data.get("long_runs", []):  # suites with more draws, merged in (--merge)
        long_methods = [m for m in METHODS if any(r["method"] == m for r in long["runs"])]
        _bias_table(long["truths"], long["runs"], [m for m in MODELS if m in long["truths"]],
                    long_methods, long["settings"].get("draws"))
    truths = data.get("truths", {})
    print("\nTruths: " + "; ".join(
        f"{m}: " + ", ".join(f"{v:.3f}" for v in t["probabilities"][:6]) + (", ..." if len(t["probabilities"]) > 6 else "")
        for m, t in truths.items()))


def _bias_table(truths, runs, models, methods, draws) -> None:
    """Per model and method: the mode whose seed-averaged probability is most standard errors
    (of that average, from the spread over seeds, and of the truth where it is by Monte Carlo)
    from the truth."""
    print(f"\nDraws per chain: {draws}\n")
    print("| model | method | runs | mode | mean over seeds | se of the mean | truth | z |")
    print("|---|---|---|---|---|---|---|---|")
    for model in models:
        truth = truths[model]
        for method in methods:
            probs = np.array([r["probabilities"] for r in runs if r["model"] == model
                              and r["method"] == method and r["probabilities"] is not None])
            if len(probs) < 2:
                continue
            mean, se = probs.mean(0), probs.std(0, ddof=1) / np.sqrt(len(probs))
            p_true = np.array(truth["probabilities"])
            if model.startswith(("mixture_", "kou_")):  # truths by Monte Carlo (N_EXACT_MC draws)
                se = np.hypot(se, np.sqrt(p_true * (1 - p_true) / N_EXACT_MC))
            k = int(np.argmax(np.abs(mean - truth["probabilities"]) / np.maximum(se, 1e-12)))
            z = (mean[k] - truth["probabilities"][k]) / se[k] if se[k] > 0 else float("nan")
            print(f"| {model} | {method} | {len(probs)} | {truth['modes'][k]} | {mean[k]:.4f} "
                  f"| {se[k]:.4f} | {truth['probabilities'][k]:.4f} | {_fmt(float(z), '.2f')} |")


def merge_suites(paths) -> dict:
    """One results file from suites run apart (other models, methods or seeds): the runs at the
    defaults pooled (their settings must agree), each suite with ``--draws`` kept whole in
    ``long_runs``."""
    merged, long_runs = None, {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if isinstance(data["settings"].get("draws"), int):
            key = str(data["settings"]["draws"])
            if key in long_runs:
                long_runs[key]["runs"] += data["runs"]
                long_runs[key]["truths"].update(data["truths"])
            else:
                long_runs[key] = {k: data[k] for k in ("settings", "truths", "runs")}
            continue
        if merged is None:
            merged = {**data, "runs": list(data["runs"]), "truths": dict(data["truths"])}
        elif data["settings"] != merged["settings"]:
            raise SystemExit(f"{path} has settings {data['settings']}, not {merged['settings']}.")
        else:
            merged["runs"] += data["runs"]
            merged["truths"].update(data["truths"])
    if merged is None:
        raise SystemExit("no suite at the defaults among the files to merge.")
    merged["long_runs"] = list(long_runs.values())
    return merged


def plot(data, path) -> None:
    """Each run's largest mode-probability error, per model and method, on a log scale, with the
    0.03 goal: one row per model, one colour per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in data["runs"] if r.get("max_error") is not None]
    models = [m for m in MODELS if any(r["model"] == m for r in runs)]
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(models) + 1.2))
    for j, method in enumerate(methods):
        for i, model in enumerate(models):
            errs = [max(r["max_error"], 1e-4) for r in runs if r["model"] == model and r["method"] == method]
            y = i + (j - (len(methods) - 1) / 2) * 0.22
            ax.scatter(errs, np.full(len(errs), y), s=14, color=f"C{j}", alpha=0.7,
                       label=method if i == 0 else None)
    ax.axvline(TOLERANCE, color="k", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yticks(range(len(models)), models)
    ax.invert_yaxis()
    ax.set_xlabel("largest error of a mode probability in a run")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(methods), fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 10; 1 with --quick)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="start the seeds here (two processes can share a suite)")
    parser.add_argument("--models", default=None, help=f"comma-separated, of: {','.join(MODELS)}")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of: " + ",".join(METHODS))
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    parser.add_argument("--quick", action="store_true",
                        help=f"plumbing run: 1 seed, the 3 cheapest models, {QUICK_DRAWS} draws per method")
    parser.add_argument("--resume", action="store_true", help="skip the cases already in --out")
    parser.add_argument("--draws", type=int, default=None,
                        help="draws per chain for ct, gibbs_ct, pe and nuts (default: theirs)")
    parser.add_argument("--report", action="store_true", help="only print the Markdown table from --out")
    parser.add_argument("--check", action="store_true", help="print the models' exact probabilities and exit")
    parser.add_argument("--figure", default="", help="with --report: write the errors' figure here")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="merge suites run apart into --out: those at the defaults pooled, "
                             "those with --draws kept as long_runs")
    parser.add_argument("--case", nargs=3, metavar=("MODEL", "METHOD", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.case:
        name, method, seed = args.case
        row = run_case(name, method, int(seed), quick=args.quick, draws=args.draws)
        print(RESULT_PREFIX + json.dumps(row), flush=True)
        return

    models = args.models.split(",") if args.models else list(QUICK_MODELS if args.quick else MODELS)
    methods = args.methods.split(",")
    unknown = [m for m in models if m not in MODELS] + [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown model(s)/method(s): {unknown}")
    if args.check:
        check_models(models)
        return
    if args.merge:
        write_json(Path(args.out), merge_suites(args.merge))
        return
    if args.report:
        data = json.loads(Path(args.out).read_text())
        report(data)
        if args.figure:
            plot(data, args.figure)
        return
    if args.seeds is None:
        args.seeds = 1 if args.quick else 10
    data = run_suite(args, models, methods)
    print()
    report(data)


if __name__ == "__main__":
    main()
