"""Evidence benchmark: nineteen problems with known log Z, five methods, side by side over seeds.

Every problem is written as a PyMC user would write it (``pm.Potential`` with PyTensor math, or
observed distributions) and, on the same parameters in constrained space, as a NumPy
log-likelihood and prior transform for dynesty. The true log marginal likelihood is computed in
this file (closed form or accurate quadrature); ``--check`` verifies each problem (below).

Problems
--------
``peaks_2d``
    18 equal, separated isotropic Gaussian peaks (sd 0.3) on a 3 x 6 grid inside a uniform box
    ``[-10, 10]^2``; the likelihood is their normalised equal-weight mixture. Truth: closed form,
    ``Z = (1/400) (1/18) sum_k P(peak k inside the box)`` with ``norm.cdf`` (a multi-modal
    test in the spirit of the egg-box of Feroz, Hobson & Bridges 2009, with an exact Z).
``shells_2d``, ``shells_5d``, ``shells_20d``
    The two Gaussian shells of Feroz & Hobson (2008, MNRAS 384, 449), also used by Feroz,
    Hobson & Bridges (2009, MNRAS 398, 1601, the MultiNest paper): uniform prior ``[-6, 6]^d``,
    ``L = sum_i N(|x - c_i|; r, w)`` with ``r = 2``, ``w = 0.1``, ``c = (+-3.5, 0, ..., 0)``.
    Truth: 1-D radial quadrature (area of the unit (d-1)-sphere times the integral of
    ``rho^(d-1) N(rho; r, w)``); the shells lie inside the box (``--check``: none of 10^6 draws
    from the shells falls outside). Asserted to agree with the published analytic values
    -1.75, -5.67, -36.09 to their rounding.
``gauss_corr_10d``
    ``theta ~ N(0, 5^2 I_10)``, one observation ``y ~ MvNormal(theta, Sigma)`` with unit variances
    and correlation 0.9 between every pair. Truth: closed form, ``log N(y; 0, Sigma + 25 I)``.
``gauss_in_box``
    ``x ~ U(0, 10)^3``, ``y_k ~ N(x_k, 0.2)`` observed at ``y = (5, 0, 9.9)``: a narrow Gaussian
    cut in half by one face of the box and by 31 % at another. Truth: closed form with
    ``norm.cdf``.
``rosenbrock_2d``
    ``x, y ~ U(-5, 5)``, ``log L = -[(1 - x)^2 + 100 (y - x^2)^2]``: the curved Rosenbrock
    degeneracy used in nested-sampling test suites (MultiNest, PolyChord, dynesty), here
    truncated by the box where ``x^2 > 5``. Truth: the ``y`` integral in closed form
    (``norm.cdf``), then adaptive 1-D quadrature over ``x`` (cross-checked on a dense grid).
``cauchy_2d``
    Heavy-tailed likelihood: ``mu ~ N(0, 10)``, ``sigma ~ HalfNormal(3)``, eight observations
    ``~ Cauchy(mu, sigma)`` in two clusters near -4 and +4 (a bimodal posterior in ``mu``).
    Truth: nested adaptive 2-D quadrature (cross-checked on a dense grid).
``eight_schools``
    Rubin (1981) / Gelman et al. (BDA, sec. 5.5), non-centred: ``mu ~ N(0, 5)``,
    ``tau ~ HalfCauchy(5)``, ``theta = mu + tau theta_tilde``, ``theta_tilde ~ N(0, 1)^8``,
    ``y_j ~ N(theta_j, sigma_j)``; 10 parameters, a funnel. Truth: ``theta`` and ``mu``
    integrated analytically (``y | tau ~ N(0, diag(sigma^2 + tau^2) + 25)``), then adaptive
    1-D quadrature over ``tau`` (cross-checked by 2-D quadrature over ``mu, tau``).
``hier_gauss_11d``
    The project's hierarchical linear-Gaussian target (``tests/targets.py``,
    ``hierarchical_linear_gaussian``) on 8 groups x 4 observations, two regressors: 11
    parameters with known scales. Truth: the helper's closed form (``y`` is Gaussian).
``spike_slab_{5,10,20}d_{spike,even,slab}``
    A phase change (Skilling 2006, "Nested sampling for general Bayesian computation", on
    phase changes; the BlackJAX sampling book's tempered-SMC example): ``x ~ U(-0.5, 0.5)^d``
    and a likelihood that is the normalised mixture ``s N(0, 0.01^2 I) + (1 - s) N(0, 0.1^2 I)``, a
    narrow spike on a broad slab about the same point, with spike share ``s`` 0.99 (``spike``),
    0.5 (``even``) or 0.01 (``slab``). Truth: closed form, the box's share of each Gaussian
    (``norm.cdf``; log Z within 1e-5 of 0). A method that finds one phase only is off by about
    ``log s`` or ``log(1 - s)``.

Methods
-------
``ct``
    ``pmt.sample_ct(random_seed=seed, progressbar=False)`` at its defaults; evidence, standard
    error, ``reliable`` and ``problems`` from ``pmt.log_marginal_likelihood(idata)`` (a
    ``ValueError`` from it is recorded as the run's error message).
``pe``
    ``pmt.sample_pe(random_seed=seed, progressbar=False)`` at its defaults, read the same way
    (it may carry no evidence by default: then the message is recorded and the suite goes on).
``pe_base``
    ``pmt.sample_pe(proposal=pmt.fit_base(method="laplace", random_seed=seed), ...)``: the
    pseudo-samples proposed from the covering base that ``sample_ct`` fits (the mode search's
    mixture), which makes the evidence of eq. (4) available. Wall time includes the base fit.
``smc``
    ``pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)``: each chain's
    last finite ``log_marginal_likelihood`` in ``sample_stats``, averaged over the chains (as in
    ``benchmarks/evidence_vs_smc.py``). SMC reports no standard error: the one recorded here is
    the spread of the two chains, ``sd(chains, ddof=1) / sqrt(2)`` (one degree of freedom, so its
    z-scores are heavy-tailed), and ``reliable`` is None. ``--smc-cores`` sets its ``cores``
    (default: PyMC's, i.e. the chains in parallel processes).
``dynesty``
    Static nested sampling, ``dynesty.NestedSampler(loglike, prior_transform, ndim, nlive=500,
    rstate=np.random.default_rng(seed))``, ``run_nested(dlogz=0.1, print_progress=False)``;
    estimate ``results.logz[-1]``, standard error ``results.logzerr[-1]``; ``reliable`` is None.

Each (problem, method, seed) case runs in its own subprocess
(``python benchmarks/evidence_suite.py --case PROBLEM METHOD SEED``, printing one JSON line), so a
crash or timeout loses one case and caches and threads are as a user would have them. The wall
time is measured inside the case (model build, compilation, sampling, evidence). Cases run
seed-major (for each seed every problem, for each problem every method) so that machine load
affects the methods alike, one at a time. The JSON is rewritten after every case; ``--resume``
skips the cases it already holds.

Summary columns (per problem and method, over runs that returned an estimate; ``failed`` counts
the others: exceptions, timeouts, no evidence): median |error|, RMSE, median se, sd of z, max
|z|, fraction |z| < 3, fraction marked reliable (ct/pe only), fraction "ok or flagged" (runs
with ``|z| < 3 and se <= 0.3``, or marked unreliable: the runs that do not mislead), median wall
seconds. The figure shows each run's error +- its standard error, one panel per problem.

Usage::

    .venv/bin/python benchmarks/evidence_suite.py --check       # verify the truths (~1 min)
    .venv/bin/python benchmarks/evidence_suite.py               # the suite, 10 seeds
    .venv/bin/python benchmarks/evidence_suite.py --seeds 3 --problems peaks_2d,shells_5d \\
        --methods ct,dynesty --resume
    .venv/bin/python benchmarks/evidence_suite.py --report      # table + figure from the JSON
    .venv/bin/python benchmarks/evidence_suite.py --quick       # plumbing: 1 seed, 3 cheap
                                                                # problems, smaller SMC/dynesty

Writes ``benchmarks/results/evidence_suite.json`` (``--out``) and
``docs/figures/evidence_suite.png`` (``--figure``). ``--quick`` uses ``draws=500`` for SMC and
``nlive=100`` for dynesty (ct and pe stay at their defaults) and is recorded in the JSON.

Runtime (2 shared CPU cores; smoke test: ct 34 s and pe 24 s on ``gauss_in_box``, SMC with 500
draws 3 s and dynesty with nlive 100 1-3 s on the 2-D/3-D problems): per case roughly ct and pe
0.5-2 min, SMC (2000 draws) 10-60 s, dynesty (nlive 500) seconds on the 2-D problems to minutes
on ``shells_20d`` and the 10-11-D ones, plus about 5 s of imports per case: some 0.5-1.5 hours
per seed, 5-15 hours for the default 10 seeds (``--resume`` runs it in pieces). The report ends
with one row per problem (the table of ``docs/benchmarks.md``).
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
from pathlib import Path
from typing import Callable

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp

from pymc_tempering import datasets
from case_runner import finite, quiet_loggers, run_case_process, versions, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from targets import hierarchical_linear_gaussian  # noqa: E402

METHODS = ("ct", "pe", "pe_base", "smc", "dynesty")
QUICK_PROBLEMS = ("gauss_in_box", "rosenbrock_2d", "shells_2d")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "evidence_suite.json"
DEFAULT_FIGURE = ROOT / "docs" / "figures" / "evidence_suite.png"
RESULT_PREFIX = "EVIDENCE_SUITE_CASE "
LOG_2PI = math.log(2 * math.pi)


# ---------------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One benchmark problem.

    ``params`` names the model's free variables and their shapes, in the order of the flat
    parameter vector ``theta`` that ``loglike``, ``prior_transform`` and ``log_prior`` use
    (constrained space). ``loglike`` and ``log_prior`` take ``theta`` of shape ``(..., ndim)``
    and return shape ``(...)``; ``prior_transform`` maps uniforms of that shape to ``theta``.
    ``truth`` computes log Z (cached). ``mc_check(rng, n)`` is an independent Monte Carlo
    estimate ``(log Z, se, how)``, or None where none is feasible; ``cross_check()`` returns
    lines of further checks of the truth.
    """

    name: str
    description: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    build: Callable[[], pm.Model]
    loglike: Callable[[np.ndarray], np.ndarray]
    prior_transform: Callable[[np.ndarray], np.ndarray]
    log_prior: Callable[[np.ndarray], np.ndarray]
    truth: Callable[[], float]
    mc_check: Callable | None = None
    cross_check: Callable[[], list[str]] | None = None

    @property
    def ndim(self) -> int:
        return sum(math.prod(shape) for _, shape in self.params)

    @property
    def log_z(self) -> float:
        return self.truth()

    def point(self, theta) -> dict:
        """The flat ``theta`` as a point dict of the model's (constrained) variables."""
        theta, out, i = np.asarray(theta, dtype=float), {}, 0
        for name, shape in self.params:
            size = math.prod(shape)
            out[name] = theta[i : i + size].reshape(shape)
            i += size
        return out


def _uniform_box(lower: float, upper: float, ndim: int):
    """Prior transform and log density of ``U(lower, upper)^ndim``."""
    width = upper - lower

    def prior_transform(u):
        return lower + width * np.asarray(u, dtype=float)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        inside = np.all((theta >= lower) & (theta <= upper), axis=-1)
        return np.where(inside, -ndim * math.log(width), -np.inf)

    return prior_transform, log_prior


def _prior_mc(problem: Problem, rng: np.random.Generator, n: int, chunk: int = 250_000):
    """``log mean L`` over ``n`` prior draws, with its delta-method standard error."""
    logl = []
    for start in range(0, n, chunk):
        u = rng.uniform(size=(min(chunk, n - start), problem.ndim))
        logl.append(problem.loglike(problem.prior_transform(u)))
    return _log_mean_exp(np.concatenate(logl)) + ("mean of L over prior draws",)


def _grid_integral(log_f, x, y, chunk: int = 200) -> float:
    """Trapezoid rule for ``int int exp(log_f(x, y)) dy dx`` on a grid, ``chunk`` x values at a
    time (memory)."""
    inner = np.concatenate([
        integrate.trapezoid(np.exp(log_f(x[i : i + chunk, None], y[None, :])), y, axis=1)
        for i in range(0, len(x), chunk)
    ])
    return float(integrate.trapezoid(inner, x))


def _log_mean_exp(log_values):
    log_values = np.asarray(log_values, dtype=float)
    top = np.max(log_values)
    w = np.exp(log_values - top)
    return float(top + np.log(w.mean())), float(w.std() / (w.mean() * math.sqrt(w.size)))


# --- peaks_2d --------------------------------------------------------------------------------

PEAK_SD = 0.3
PEAK_CENTRES = np.array([(x, y) for y in (-5.0, 0.0, 5.0) for x in (-7.5, -4.5, -1.5, 1.5, 4.5, 7.5)])


def peaks_2d() -> Problem:
    k, box = len(PEAK_CENTRES), 10.0
    prior_transform, log_prior = _uniform_box(-box, box, 2)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -box, box, shape=2)
            log_peaks = pm.logp(pm.Normal.dist(PEAK_CENTRES, PEAK_SD), x).sum(axis=-1)
            pm.Potential("likelihood", pm.math.logsumexp(log_peaks) - np.log(k))
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        d2 = ((theta[..., None, :] - PEAK_CENTRES) ** 2).sum(-1)
        return logsumexp(-0.5 * d2 / PEAK_SD**2, axis=-1) - np.log(k) - LOG_2PI - 2 * np.log(PEAK_SD)

    @functools.cache
    def truth():
        # Z = int U(x) L(x) dx = (1/400) * (1/18) sum_k prod_i P(box | peak k, coordinate i)
        mass = np.prod(
            stats.norm.cdf(box, PEAK_CENTRES, PEAK_SD) - stats.norm.cdf(-box, PEAK_CENTRES, PEAK_SD),
            axis=1,
        )
        return float(np.log(mass.mean()) - 2 * np.log(2 * box))

    return Problem(
        "peaks_2d", "18 separated Gaussian peaks (sd 0.3) in U(-10, 10)^2",
        (("x", (2,)),), build, loglike, prior_transform, log_prior, truth,
        mc_check=lambda rng, n: _prior_mc(PROBLEMS["peaks_2d"], rng, n),
    )


# --- Gaussian shells -------------------------------------------------------------------------

SHELL_R, SHELL_W, SHELL_BOX = 2.0, 0.1, 6.0
# Feroz & Hobson (2008) / Feroz, Hobson & Bridges (2009): analytic log Z, to 2 decimals.
SHELL_PUBLISHED = {2: -1.75, 5: -5.67, 10: -14.59, 20: -36.09, 30: -60.13}


def _shell_centres(d: int) -> np.ndarray:
    c = np.zeros((2, d))
    c[:, 0] = (-3.5, 3.5)
    return c


def _shell_log_radial_integral(d: int) -> float:
    """``log int_0^inf rho^(d-1) N(rho; r, w) drho`` by adaptive quadrature (scaled by r^(d-1))."""
    r, w = SHELL_R, SHELL_W

    def f(rho):
        return np.exp((d - 1) * np.log(rho / r) - 0.5 * ((rho - r) / w) ** 2) / (math.sqrt(2 * math.pi) * w)

    # the integrand is negligible (< e^-100 of its peak) outside r +- 15 w and beyond r + 30 w
    value, abserr = integrate.quad(f, r - 15 * w, r + 30 * w, points=[r, r + (d - 1) * w**2 / r], epsrel=1e-12)
    assert abserr < 1e-9 * value
    return float((d - 1) * np.log(r) + np.log(value))


def shells(d: int) -> Problem:
    centres = _shell_centres(d)
    prior_transform, log_prior = _uniform_box(-SHELL_BOX, SHELL_BOX, d)
    log_norm = -0.5 * LOG_2PI - np.log(SHELL_W)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -SHELL_BOX, SHELL_BOX, shape=d)
            dist = pt.sqrt(((x - centres) ** 2).sum(axis=-1))
            pm.Potential("likelihood", pm.math.logsumexp(-0.5 * ((dist - SHELL_R) / SHELL_W) ** 2) + log_norm)
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        dist = np.sqrt(((theta[..., None, :] - centres) ** 2).sum(-1))
        return logsumexp(-0.5 * ((dist - SHELL_R) / SHELL_W) ** 2, axis=-1) + log_norm

    @functools.cache
    def truth():
        # Z = (2 shells) * area(S^(d-1)) * int rho^(d-1) N(rho; r, w) drho / 12^d, the shells being
        # inside the box (checked by --check); area(S^(d-1)) = 2 pi^(d/2) / Gamma(d/2).
        log_area = np.log(2) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d)
        log_z = float(np.log(2) + log_area + _shell_log_radial_integral(d) - d * np.log(2 * SHELL_BOX))
        if d in SHELL_PUBLISHED:  # the published values are rounded to 2 decimals
            assert abs(log_z - SHELL_PUBLISHED[d]) <= 0.0051, (d, log_z, SHELL_PUBLISHED[d])
        return log_z

    def mc_check(rng, n):
        if d <= 5:
            return _prior_mc(PROBLEMS[f"shells_{d}d"], rng, n)
        # prior draws almost never hit a 20-D shell: importance sampling from the shells
        # themselves, q(x) = (1/2) sum_i N(|x - c_i|; r, w) / (area rho^(d-1)) (radius from
        # the radial density on a fine grid, direction uniform), estimating E_q[U(x) L(x) / q(x)]
        return _shell_importance_check(d, rng, n)

    def cross_check():
        inside = _shell_mass_inside_box(d, np.random.default_rng(1), 1_000_000)
        return [f"fraction of each shell's mass inside the box (MC, 10^6 draws): {inside:.7f}",
                f"published (Feroz & Hobson 2008): {SHELL_PUBLISHED.get(d)}"]

    return Problem(
        f"shells_{d}d", f"two Gaussian shells (r 2, w 0.1) in U(-6, 6)^{d}",
        (("x", (d,)),), build, loglike, prior_transform, log_prior, truth,
        mc_check=mc_check, cross_check=cross_check,
    )


def _shell_mass_inside_box(d: int, rng: np.random.Generator, n: int) -> float:
    """Fraction of the shells' mass inside the box, from ``n`` exact draws of the shells (radius
    from ``rho^(d-1) N(rho; r, w)`` by a grid inverse CDF, direction uniform)."""
    grid = np.linspace(SHELL_R - 15 * SHELL_W, SHELL_R + 30 * SHELL_W, 200_001)
    logf = (d - 1) * np.log(grid) + stats.norm.logpdf(grid, SHELL_R, SHELL_W)
    f = np.exp(logf - logf.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(grid))])
    rho = np.interp(rng.uniform(size=n) * cdf[-1], cdf, grid)
    direction = rng.normal(size=(n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    x = _shell_centres(d)[rng.integers(2, size=n)] + rho[:, None] * direction
    return float(np.mean(np.all(np.abs(x) <= SHELL_BOX, axis=1)))


def _shell_importance_check(d: int, rng: np.random.Generator, n: int):
    """Importance sampling from a proposal that is not the target: a shell of radius
    ``N(2.1, 0.15)`` about a centre chosen at random, in a uniform direction, so
    ``q(x) = (1/2) sum_i N(|x - c_i|; 2.1, 0.15) / (area |x - c_i|^(d-1))``. Independent of the
    radial quadrature of the truth."""
    problem = PROBLEMS[f"shells_{d}d"]
    centres = _shell_centres(d)
    q_r, q_w = 2.1, 0.15
    rho = np.abs(rng.normal(q_r, q_w, size=n))  # |.|: P(rho < 0) < 1e-40
    direction = rng.normal(size=(n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    x = centres[rng.integers(2, size=n)] + rho[:, None] * direction
    log_area = np.log(2) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d)
    dist = np.linalg.norm(x[:, None, :] - centres, axis=-1)
    log_q_each = stats.norm.logpdf(dist, q_r, q_w) - log_area - (d - 1) * np.log(dist)
    log_q = logsumexp(log_q_each, axis=1) - np.log(2)
    est, se = _log_mean_exp(problem.log_prior(x) + problem.loglike(x) - log_q)
    return est, se, "importance sampling from shells of radius N(2.1, 0.15)"


# --- gauss_corr_10d --------------------------------------------------------------------------

CORR_D, CORR_RHO, CORR_PRIOR_SD = 10, 0.9, 5.0
CORR_SIGMA = (1 - CORR_RHO) * np.eye(CORR_D) + CORR_RHO * np.ones((CORR_D, CORR_D))
CORR_Y = np.array([1.2, -0.4, 0.9, 2.1, -1.3, 0.3, 1.7, -0.8, 0.5, 1.0])


def gauss_corr_10d() -> Problem:
    lik = stats.multivariate_normal(np.zeros(CORR_D), CORR_SIGMA)

    def build():
        with pm.Model() as model:
            theta = pm.Normal("theta", 0, CORR_PRIOR_SD, shape=CORR_D)
            pm.MvNormal("y", mu=theta, cov=CORR_SIGMA, observed=CORR_Y)
        return model

    def loglike(theta):
        return lik.logpdf(CORR_Y - np.asarray(theta, dtype=float))

    def prior_transform(u):
        return CORR_PRIOR_SD * stats.norm.ppf(u)

    def log_prior(theta):
        return stats.norm.logpdf(theta, 0, CORR_PRIOR_SD).sum(-1)

    @functools.cache
    def truth():
        # y = theta + e with theta ~ N(0, 25 I), e ~ N(0, Sigma): y ~ N(0, Sigma + 25 I)
        cov = CORR_SIGMA + CORR_PRIOR_SD**2 * np.eye(CORR_D)
        return float(stats.multivariate_normal(np.zeros(CORR_D), cov).logpdf(CORR_Y))

    def mc_check(rng, n):
        # L(theta) = N(theta; y, Sigma) as a density in theta, so Z = E_{theta ~ N(y, Sigma)}[prior]
        theta = rng.multivariate_normal(CORR_Y, CORR_SIGMA, size=n)
        return _log_mean_exp(log_prior(theta)) + ("mean prior density over likelihood draws",)

    return Problem(
        "gauss_corr_10d", "10-D Gaussian likelihood, correlation 0.9, N(0, 5^2) prior",
        (("theta", (CORR_D,)),), build, loglike, prior_transform, log_prior, truth, mc_check=mc_check,
    )


# --- gauss_in_box ----------------------------------------------------------------------------

BOX_UPPER, BOX_SD = 10.0, 0.2
BOX_Y = np.array([5.0, 0.0, 9.9])


def gauss_in_box() -> Problem:
    d = len(BOX_Y)
    prior_transform, log_prior = _uniform_box(0.0, BOX_UPPER, d)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", 0, BOX_UPPER, shape=d)
            pm.Normal("y", mu=x, sigma=BOX_SD, observed=BOX_Y)
        return model

    def loglike(theta):
        return stats.norm.logpdf(BOX_Y, np.asarray(theta, dtype=float), BOX_SD).sum(-1)

    @functools.cache
    def truth():
        # Z = 10^-3 prod_k P(0 < x_k < 10) under x_k ~ N(y_k, 0.2)
        mass = stats.norm.cdf(BOX_UPPER, BOX_Y, BOX_SD) - stats.norm.cdf(0.0, BOX_Y, BOX_SD)
        return float(np.log(mass).sum() - d * np.log(BOX_UPPER))

    def mc_check(rng, n):
        # L is N(x; y, 0.2^2 I) as a density in x: Z = E_{x ~ N(y, 0.2^2 I)}[prior density]
        x = rng.normal(BOX_Y, BOX_SD, size=(n, d))
        return _log_mean_exp(log_prior(x)) + ("mean prior density over likelihood draws",)

    return Problem(
        "gauss_in_box", "narrow Gaussian (sd 0.2) in U(0, 10)^3, cut by two faces",
        (("x", (d,)),), build, loglike, prior_transform, log_prior, truth, mc_check=mc_check,
    )


# --- rosenbrock_2d ---------------------------------------------------------------------------

ROSEN_BOX = 5.0


def rosenbrock_2d() -> Problem:
    prior_transform, log_prior = _uniform_box(-ROSEN_BOX, ROSEN_BOX, 2)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -ROSEN_BOX, ROSEN_BOX)
            y = pm.Uniform("y", -ROSEN_BOX, ROSEN_BOX)
            pm.Potential("likelihood", -((1 - x) ** 2 + 100 * (y - x**2) ** 2))
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        x, y = theta[..., 0], theta[..., 1]
        return -((1 - x) ** 2 + 100 * (y - x**2) ** 2)

    def inner(x):
        # int_{-5}^{5} exp(-100 (y - x^2)^2) dy = sqrt(pi / 100) P(-5 < N(x^2, 1/200) < 5)
        s = 1 / math.sqrt(200)
        return math.sqrt(math.pi / 100) * (stats.norm.cdf(ROSEN_BOX, x**2, s) - stats.norm.cdf(-ROSEN_BOX, x**2, s))

    @functools.cache
    def truth():
        # Z = (1/100) int_{-5}^{5} exp(-(1 - x)^2) inner(x) dx, inner() dropping to 0 at x^2 = 5
        cut = math.sqrt(ROSEN_BOX)
        value, abserr = integrate.quad(
            lambda x: np.exp(-((1 - x) ** 2)) * inner(x), -ROSEN_BOX, ROSEN_BOX,
            points=[-cut, 1.0, cut], epsabs=0, epsrel=1e-12, limit=200,
        )
        assert abserr < 1e-9 * value
        return float(np.log(value) - 2 * np.log(2 * ROSEN_BOX))

    def cross_check():
        x, y = np.linspace(-ROSEN_BOX, ROSEN_BOX, 4001), np.linspace(-ROSEN_BOX, ROSEN_BOX, 8001)
        grid = _grid_integral(lambda a, b: loglike(np.stack(np.broadcast_arrays(a, b), -1)), x, y)
        return [f"dense 4001 x 8001 trapezoid grid: log Z = {np.log(grid) - 2 * np.log(10):.6f}"]

    return Problem(
        "rosenbrock_2d", "Rosenbrock likelihood (a = 1, b = 100) in U(-5, 5)^2",
        (("x", ()), ("y", ())), build, loglike, prior_transform, log_prior, truth,
        mc_check=lambda rng, n: _prior_mc(PROBLEMS["rosenbrock_2d"], rng, n), cross_check=cross_check,
    )


# --- cauchy_2d -------------------------------------------------------------------------------

CAUCHY_Y = np.array([-4.2, -3.9, -4.0, -3.6, 3.8, 4.1, 4.4, 0.3])
CAUCHY_MU_SD, CAUCHY_SIGMA_SD = 10.0, 3.0


def cauchy_2d() -> Problem:
    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, CAUCHY_MU_SD)
            sigma = pm.HalfNormal("sigma", CAUCHY_SIGMA_SD)
            pm.Cauchy("y", alpha=mu, beta=sigma, observed=CAUCHY_Y)
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        mu, sigma = theta[..., 0, None], theta[..., 1, None]
        return stats.cauchy.logpdf(CAUCHY_Y, mu, sigma).sum(-1)

    def prior_transform(u):
        u = np.asarray(u, dtype=float)
        mu = CAUCHY_MU_SD * stats.norm.ppf(u[..., 0])
        # sigma > 0 for u in (0, 1); the floor guards against u = 0 exactly
        sigma = np.maximum(CAUCHY_SIGMA_SD * stats.norm.ppf(0.5 + 0.5 * u[..., 1]), 1e-300)
        return np.stack([mu, sigma], axis=-1)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        return stats.norm.logpdf(theta[..., 0], 0, CAUCHY_MU_SD) + stats.halfnorm.logpdf(
            theta[..., 1], scale=CAUCHY_SIGMA_SD
        )

    # the integrand is scaled by exp(-SHIFT) (about its maximum) to keep quad's tolerances relative
    shift = 20.0

    log_prior_norm = -LOG_2PI + math.log(2 / (CAUCHY_MU_SD * CAUCHY_SIGMA_SD))

    def integrand(mu, sigma):  # log_prior + loglike written out, for speed
        log_f = (
            log_prior_norm - 0.5 * (mu / CAUCHY_MU_SD) ** 2 - 0.5 * (sigma / CAUCHY_SIGMA_SD) ** 2
            - len(CAUCHY_Y) * math.log(math.pi * sigma) - np.log1p(((CAUCHY_Y - mu) / sigma) ** 2).sum()
        )
        return math.exp(log_f + shift)

    @functools.cache
    def truth():
        # Z = int_0^inf int_R p(mu) p(sigma) prod_i Cauchy(y_i; mu, sigma) dmu dsigma; beyond
        # |mu| > 60 or sigma > 40 the integrand is below e^-70 of its peak (prior and tails)
        def over_mu(sigma):
            return integrate.quad(integrand, -60, 60, args=(sigma,), points=[-4.0, 0.3, 4.0],
                                  epsabs=0, epsrel=1e-10, limit=200)[0]

        value, abserr = integrate.quad(over_mu, 0, 40, points=[0.5, 2.0, 5.0], epsabs=0, epsrel=1e-9, limit=200)
        assert abserr < 1e-7 * value
        return float(np.log(value) - shift)

    def cross_check():
        mu, sigma = np.linspace(-60, 60, 12001), np.linspace(1e-6, 40, 4001)

        def log_f(a, b):
            theta = np.stack(np.broadcast_arrays(a, b), -1)
            return log_prior(theta) + loglike(theta) + shift

        grid = _grid_integral(log_f, mu, sigma)
        return [f"dense 12001 x 4001 trapezoid grid: log Z = {np.log(grid) - shift:.6f}"]

    return Problem(
        "cauchy_2d", "Cauchy likelihood, 8 points in two clusters; mu ~ N(0, 10), sigma ~ HN(3)",
        (("mu", ()), ("sigma", ())), build, loglike, prior_transform, log_prior, truth,
        mc_check=lambda rng, n: _prior_mc(PROBLEMS["cauchy_2d"], rng, n), cross_check=cross_check,
    )


# --- eight_schools ---------------------------------------------------------------------------

SCHOOLS_Y, SCHOOLS_SIGMA = datasets.EIGHT_SCHOOLS_Y, datasets.EIGHT_SCHOOLS_SIGMA
SCHOOLS_MU_SD, SCHOOLS_TAU_SCALE = datasets._SCHOOLS_MU_SD, datasets._SCHOOLS_TAU_SCALE


def _schools_log_marginal(mu, tau):
    """``log p(y | mu, tau)`` with ``theta`` integrated out: ``y_j ~ N(mu, sigma_j^2 + tau^2)``."""
    return stats.norm.logpdf(SCHOOLS_Y, mu, np.sqrt(SCHOOLS_SIGMA**2 + tau**2)).sum()


def eight_schools() -> Problem:
    j = len(SCHOOLS_Y)

    def build():
        return datasets.eight_schools_model()

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        means = theta[..., 0, None] + theta[..., 1, None] * theta[..., 2:]
        return stats.norm.logpdf(SCHOOLS_Y, means, SCHOOLS_SIGMA).sum(-1)

    def prior_transform(u):
        u = np.asarray(u, dtype=float)
        mu = SCHOOLS_MU_SD * stats.norm.ppf(u[..., :1])
        tau = SCHOOLS_TAU_SCALE * np.tan(0.5 * np.pi * u[..., 1:2])
        return np.concatenate([mu, tau, stats.norm.ppf(u[..., 2:])], axis=-1)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        return (
            stats.norm.logpdf(theta[..., 0], 0, SCHOOLS_MU_SD)
            + stats.halfcauchy.logpdf(theta[..., 1], scale=SCHOOLS_TAU_SCALE)
            + stats.norm.logpdf(theta[..., 2:]).sum(-1)
        )

    @functools.cache
    def truth():
        # Z = int_0^1 p(y | tau(v)) dv with tau = 5 tan(pi v / 2) (the HalfCauchy(5) quantile)
        return datasets.eight_schools_log_marginal_likelihood()

    def cross_check():
        shift = -_schools_log_marginal(5.0, 5.0)

        def f(mu, v):
            tau = SCHOOLS_TAU_SCALE * np.tan(0.5 * np.pi * v)
            return np.exp(stats.norm.logpdf(mu, 0, SCHOOLS_MU_SD) + _schools_log_marginal(mu, tau) + shift)

        value, _ = integrate.dblquad(f, 0, 1, -50, 50, epsabs=0, epsrel=1e-9)
        return [f"2-D quadrature over (mu, tau), theta integrated analytically: "
                f"log Z = {np.log(value) - shift:.6f}"]

    return Problem(
        "eight_schools", "eight schools, non-centred (10 parameters)",
        (("mu", ()), ("tau", ()), ("theta_tilde", (j,))), build, loglike, prior_transform, log_prior,
        truth, mc_check=lambda rng, n: _prior_mc(PROBLEMS["eight_schools"], rng, n),
        cross_check=cross_check,
    )


# --- hier_gauss_11d --------------------------------------------------------------------------

# tests/targets.py::hierarchical_linear_gaussian: mu_a ~ N(0, 2), a_j ~ N(mu_a, 0.5),
# b ~ N(0, 1)^2, y_i ~ N(a_{g_i} + X_i b, 0.8); the data here are simulated once (seed 11)
HIER_GROUPS, HIER_PER_GROUP = 8, 4
HIER_S_MU, HIER_TAU, HIER_S_B, HIER_SIGMA = 2.0, 0.5, 1.0, 0.8


def _hier_data():
    rng = np.random.default_rng(11)
    group = np.repeat(np.arange(HIER_GROUPS), HIER_PER_GROUP)
    X = rng.normal(size=(len(group), 2))
    a_true = rng.normal(1.0, HIER_TAU, size=HIER_GROUPS)
    y = a_true[group] + X @ np.array([0.5, -0.7]) + rng.normal(0, HIER_SIGMA, size=len(group))
    return group, X, y


def hier_gauss_11d() -> Problem:
    group, X, y = _hier_data()
    g = HIER_GROUPS

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        a, b = theta[..., 1 : 1 + g], theta[..., 1 + g :]
        mean = a[..., group] + np.einsum("nk,...k->...n", X, b)
        return stats.norm.logpdf(y, mean, HIER_SIGMA).sum(-1)

    def prior_transform(u):
        z = stats.norm.ppf(np.asarray(u, dtype=float))
        mu_a = HIER_S_MU * z[..., :1]
        return np.concatenate([mu_a, mu_a + HIER_TAU * z[..., 1 : 1 + g], HIER_S_B * z[..., 1 + g :]], axis=-1)

    def log_prior(theta):
        theta = np.asarray(theta, dtype=float)
        mu_a = theta[..., 0]
        return (
            stats.norm.logpdf(mu_a, 0, HIER_S_MU)
            + stats.norm.logpdf(theta[..., 1 : 1 + g], mu_a[..., None], HIER_TAU).sum(-1)
            + stats.norm.logpdf(theta[..., 1 + g :], 0, HIER_S_B).sum(-1)
        )

    @functools.cache
    def truth():
        return hierarchical_linear_gaussian(data=(group, X, y))[1]  # closed form (y is Gaussian)

    return Problem(
        "hier_gauss_11d", "hierarchical linear-Gaussian, 8 groups x 4 obs (tests/targets.py)",
        (("mu_a", ()), ("a", (g,)), ("b", (2,))),
        lambda: hierarchical_linear_gaussian(data=(group, X, y))[0],
        loglike, prior_transform, log_prior, truth,
    )


# --- spike_slab_* ----------------------------------------------------------------------------

SPIKE_SD, SLAB_SD, SPIKE_HALF_WIDTH = 0.01, 0.1, 0.5
SPIKE_SHARES = {"spike": 0.99, "even": 0.5, "slab": 0.01}


def spike_slab(ndim: int, kind: str) -> Problem:
    share = SPIKE_SHARES[kind]
    half = SPIKE_HALF_WIDTH
    prior_transform, log_prior = _uniform_box(-half, half, ndim)
    log_share, log_rest = math.log(share), math.log1p(-share)

    def build():
        with pm.Model() as model:
            x = pm.Uniform("x", -half, half, shape=ndim)
            spike = log_share + pt.sum(pm.logp(pm.Normal.dist(0.0, SPIKE_SD), x))
            slab = log_rest + pt.sum(pm.logp(pm.Normal.dist(0.0, SLAB_SD), x))
            pm.Potential("likelihood", pt.logaddexp(spike, slab))
        return model

    def loglike(theta):
        theta = np.asarray(theta, dtype=float)
        spike = log_share + stats.norm.logpdf(theta, 0.0, SPIKE_SD).sum(-1)
        return np.logaddexp(spike, log_rest + stats.norm.logpdf(theta, 0.0, SLAB_SD).sum(-1))

    @functools.cache
    def truth():
        # the box holds prod_k P(|x_k| < 1/2) of each normalised Gaussian; its volume is 1
        def inside(sd):
            return ndim * math.log(stats.norm.cdf(half / sd) - stats.norm.cdf(-half / sd))

        return float(np.logaddexp(log_share + inside(SPIKE_SD), log_rest + inside(SLAB_SD)))

    def mc_check(rng, n):
        # L is a normalised mixture density: Z = P(x in the box) for x drawn from it (volume 1)
        sd = np.where(rng.uniform(size=n) < share, SPIKE_SD, SLAB_SD)
        x = rng.normal(0.0, sd[:, None], size=(n, ndim))
        return _log_mean_exp(log_prior(x)) + ("share of mixture draws inside the box",)

    return Problem(
        f"spike_slab_{ndim}d_{kind}",
        f"{share:.0%} spike (sd {SPIKE_SD}) on a slab (sd {SLAB_SD}) in U(-{half}, {half})^{ndim}",
        (("x", (ndim,)),), build, loglike, prior_transform, log_prior, truth, mc_check=mc_check,
    )


PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in (
        peaks_2d(), shells(2), shells(5), shells(20), gauss_corr_10d(), gauss_in_box(),
        rosenbrock_2d(), cauchy_2d(), eight_schools(), hier_gauss_11d(),
        *(spike_slab(d, kind) for kind in SPIKE_SHARES for d in (5, 10, 20)),
    )
}


# ---------------------------------------------------------------------------------------------
# Verification of the truths
# ---------------------------------------------------------------------------------------------


def check_problems(names, n_mc: int = 1_000_000) -> bool:
    """PyMC logp = log prior + loglike at prior draws, prior_transform draws match the PyMC
    prior (two-sample KS per coordinate), the truth against its Monte Carlo check and cross
    checks. Returns True when every check passes."""
    from pymc.model.transform.conditioning import remove_value_transforms

    all_ok = True
    for name in names:
        problem = PROBLEMS[name]
        rng = np.random.default_rng(2024)
        start = time.perf_counter()
        log_z = problem.log_z
        print(f"## {name} (ndim {problem.ndim}): log Z = {log_z:.6f}   [{problem.description}]")
        model = problem.build()
        logp = remove_value_transforms(model).compile_logp(jacobian=False)
        theta = problem.prior_transform(rng.uniform(size=(5, problem.ndim)))
        diffs = [float(logp(problem.point(t))) - float(problem.log_prior(t) + problem.loglike(t)) for t in theta]
        scale = max(1.0, *(abs(float(problem.loglike(t))) for t in theta))
        logp_ok = max(abs(d) for d in diffs) < 1e-9 * scale + 1e-6
        print(f"   PyMC logp - (log prior + loglike) at 5 prior draws: max |diff| = {max(map(abs, diffs)):.2e}"
              f" (|loglike| up to {scale:.3g})"
              f" {'ok' if logp_ok else 'MISMATCH'}")
        names_shapes = problem.params
        pymc_draws = pm.draw([model[n] for n, _ in names_shapes], draws=20_000, random_seed=rng)
        pymc_flat = np.concatenate([np.asarray(d).reshape(20_000, -1) for d in pymc_draws], axis=1)
        ours = problem.prior_transform(rng.uniform(size=(20_000, problem.ndim)))
        pvals = [stats.ks_2samp(pymc_flat[:, i], ours[:, i]).pvalue for i in range(problem.ndim)]
        prior_ok = min(pvals) * problem.ndim > 1e-3
        print(f"   prior_transform vs pm.draw, KS per coordinate: min p = {min(pvals):.3g}"
              f" {'ok' if prior_ok else 'MISMATCH'}")
        mc_ok = True
        if problem.mc_check is not None:
            est, se, how = problem.mc_check(rng, n_mc)
            # every draw counted alike (a box holding all of them): the error is below 1 / n
            z = (est - log_z) / se if se > 0 else (0.0 if abs(est - log_z) < 1.0 / n_mc else math.inf)
            mc_ok = abs(z) < 4
            print(f"   Monte Carlo ({how}, n = {n_mc}): {est:.4f} +- {se:.4f}, z = {z:+.2f}"
                  f" {'ok' if mc_ok else 'DISAGREES'}")
        else:
            print("   Monte Carlo: not feasible here (closed form from tests/targets.py)")
        for line in problem.cross_check() if problem.cross_check else []:
            print(f"   {line}")
        print(f"   ({time.perf_counter() - start:.1f} s)")
        all_ok &= logp_ok and prior_ok and mc_ok
    return all_ok


# ---------------------------------------------------------------------------------------------
# One case (run in its own process)
# ---------------------------------------------------------------------------------------------


def run_case(name: str, method: str, seed: int, quick: bool = False, smc_cores: int | None = None) -> dict:
    """Run one (problem, method, seed) case in this process; returns its record."""
    warnings.simplefilter("ignore")
    quiet_loggers()
    problem = PROBLEMS[name]
    row = {"problem": name, "method": method, "seed": seed, "estimate": None, "se": None,
           "reliable": None, "problems": [], "seconds": None, "error_message": None, "quick": quick}
    if method in ("ct", "pe", "pe_base", "smc"):  # smc: its estimate is read by the library
        import pymc_tempering as pmt
    elif method == "dynesty":
        import dynesty
    start = time.perf_counter()
    try:
        if method in ("ct", "pe", "pe_base"):
            with problem.build():
                if method == "ct":
                    idata = pmt.sample_ct(random_seed=seed, progressbar=False)
                elif method == "pe":
                    idata = pmt.sample_pe(random_seed=seed, progressbar=False)
                else:
                    base = pmt.fit_base(method="laplace", random_seed=seed, progressbar=False)
                    idata = pmt.sample_pe(proposal=base, random_seed=seed, progressbar=False)
            try:
                lml = pmt.log_marginal_likelihood(idata)
            except ValueError as exc:
                row["error_message"] = f"ValueError: {exc}"
            else:
                row["estimate"], row["se"] = lml.estimate, lml.standard_error
                row["reliable"] = bool(lml.reliable)
                row["problems"] = [p[:300] for p in lml.problems[:5]]
        elif method == "smc":
            with problem.build():
                idata = pm.sample_smc(draws=500 if quick else 2000, chains=2, random_seed=seed,
                                      progressbar=False, cores=smc_cores)
            # the library reads SMC results: each chain's last finite value, marked unreliable
            per_chain = pmt.log_marginal_likelihood(idata).per_chain
            row["per_chain"] = [finite(v) for v in per_chain]
            if np.all(np.isfinite(per_chain)):
                row["estimate"] = float(per_chain.mean())
                row["se"] = float(per_chain.std(ddof=1) / math.sqrt(len(per_chain)))
            else:
                row["error_message"] = "SMC gave no finite log marginal likelihood in some chain"
        elif method == "dynesty":
            sampler = dynesty.NestedSampler(
                lambda t: float(problem.loglike(t)), problem.prior_transform, problem.ndim,
                nlive=100 if quick else 500, rstate=np.random.default_rng(seed),
            )
            sampler.run_nested(dlogz=0.1, print_progress=False)
            results = sampler.results
            row["estimate"], row["se"] = float(results.logz[-1]), float(results.logzerr[-1])
            row["n_loglike_calls"] = int(np.sum(results.ncall))
        else:
            raise ValueError(f"unknown method {method!r}")
    except Exception as exc:  # noqa: BLE001 - recorded, the suite goes on
        import traceback

        traceback.print_exc()
        row["error_message"] = f"{type(exc).__name__}: {exc}"[:2000]
    row["seconds"] = time.perf_counter() - start
    row["estimate"], row["se"] = finite(row["estimate"]), finite(row["se"])
    return row


# ---------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------


def _spawn_case(name, method, seed, args) -> dict:
    """Run one case in a subprocess (its own process group, killed on timeout)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", name, method, str(seed)]
    if args.quick:
        cmd.append("--quick")
    if args.smc_cores is not None:
        cmd += ["--smc-cores", str(args.smc_cores)]
    failed = {"problem": name, "method": method, "seed": seed, "estimate": None, "se": None,
              "reliable": None, "problems": [], "quick": args.quick}
    return run_case_process(cmd, args.timeout, RESULT_PREFIX, failed)


def _settings(args) -> dict:
    return {"quick": args.quick, "smc_draws": 500 if args.quick else 2000, "smc_chains": 2,
            "smc_cores": args.smc_cores, "dynesty_nlive": 100 if args.quick else 500,
            "dynesty_dlogz": 0.1, "timeout": args.timeout}


def run_suite(args, problems, methods):
    out = Path(args.out)
    settings = _settings(args)
    if args.resume and out.exists():
        data = json.loads(out.read_text())
        if data.get("settings") != settings:
            raise SystemExit(f"--resume: {out} was written with settings {data.get('settings')}, "
                             f"not {settings}; use another --out.")
    else:
        data = {"settings": settings, "truths": {}, "runs": []}
    data["versions"] = versions(("pymc-tempering", "pymc", "pytensor", "nutpie", "dynesty", "numpy"))
    for name in problems:
        data["truths"][name] = PROBLEMS[name].log_z
    done = {(r["problem"], r["method"], r["seed"]) for r in data["runs"]}
    cases = [(name, method, seed) for seed in range(args.seeds) for name in problems for method in methods
             if (name, method, seed) not in done]
    print(f"{len(cases)} cases to run ({len(done)} already in {out})", flush=True)
    for i, (name, method, seed) in enumerate(cases, 1):
        row = _spawn_case(name, method, seed, args)
        truth = data["truths"][name]
        row["truth"] = truth
        row["error"] = None if row["estimate"] is None else row["estimate"] - truth
        row["z"] = (row["error"] / row["se"]) if row["error"] is not None and row["se"] else None
        data["runs"].append(row)
        write_json(out, data)
        status = (f"{row['estimate']:.3f} +- {row['se'] if row['se'] is not None else float('nan'):.3f} "
                  f"(error {row['error']:+.3f}, z {row['z'] if row['z'] is not None else float('nan'):+.2f}, "
                  f"reliable {row['reliable']})" if row["estimate"] is not None
                  else f"FAILED: {str(row['error_message'])[:150]}")
        seconds = row["seconds"] if row["seconds"] is not None else float("nan")
        print(f"[{i}/{len(cases)}] {name} {method} seed {seed}: {status}  {seconds:.1f} s", flush=True)
    return data


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _fmt(value, spec=".3f"):
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def summarise(data) -> list[dict]:
    """One summary row per (problem, method), in the order of PROBLEMS and METHODS."""
    rows = []
    order = [p for p in PROBLEMS if p in data["truths"]] + [p for p in data["truths"] if p not in PROBLEMS]
    for name in order:
        for method in METHODS:
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method]
            if not runs:
                continue
            ok = [r for r in runs if r.get("error") is not None]
            err = np.array([r["error"] for r in ok])
            se = np.array([r["se"] if r["se"] is not None else np.nan for r in ok])
            z = np.array([r["z"] if r["z"] is not None else np.nan for r in ok])
            rel = [r["reliable"] for r in ok if r["reliable"] is not None]
            good_or_flagged = [
                (r["z"] is not None and abs(r["z"]) < 3 and r["se"] <= 0.3) or r["reliable"] is False for r in ok
            ]
            seconds = [r["seconds"] for r in runs if r.get("seconds") is not None]
            finite_z = z[np.isfinite(z)]
            rows.append({
                "problem": name, "method": method, "runs": len(runs), "failed": len(runs) - len(ok),
                "median_abs_error": float(np.median(np.abs(err))) if ok else None,
                "rmse": float(np.sqrt(np.mean(err**2))) if ok else None,
                "median_se": float(np.nanmedian(se)) if np.isfinite(se).any() else None,
                "sd_z": float(np.std(finite_z, ddof=1)) if finite_z.size > 1 else None,
                "max_abs_z": float(np.max(np.abs(finite_z))) if finite_z.size else None,
                "frac_abs_z_below_3": float(np.mean(np.abs(finite_z) < 3)) if finite_z.size else None,
                "frac_reliable": float(np.mean(rel)) if rel else None,
                "frac_ok_or_flagged": float(np.mean(good_or_flagged)) if ok else None,
                "median_seconds": float(np.median(seconds)) if seconds else None,
            })
    return rows


def report(data, figure: Path | None):
    rows = summarise(data)
    settings = data.get("settings", {})
    print(f"\nEvidence suite ({'QUICK settings, ' if settings.get('quick') else ''}"
          f"{len(data['runs'])} runs). error = estimate - true log Z; z = error / se; statistics "
          f"over runs with an estimate; 'ok|flag' = fraction with (|z| < 3 and se <= 0.3) or "
          f"reliable == False.\n")
    header = ("| problem | log Z | method | runs | failed | med abs err | RMSE | med se | sd z | max abs z "
              "| frac abs z<3 | frac reliable | ok/flag | med s |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print(f"| {r['problem']} | {data['truths'][r['problem']]:.3f} | {r['method']} | {r['runs']} | {r['failed']} "
              f"| {_fmt(r['median_abs_error'])} | {_fmt(r['rmse'])} | {_fmt(r['median_se'])} | {_fmt(r['sd_z'], '.2f')} "
              f"| {_fmt(r['max_abs_z'], '.2f')} | {_fmt(r['frac_abs_z_below_3'], '.2f')} "
              f"| {_fmt(r['frac_reliable'], '.2f')} | {_fmt(r['frac_ok_or_flagged'], '.2f')} "
              f"| {_fmt(r['median_seconds'], '.1f')} |")
    print("\nPer problem (the page's table):\n")
    print(compact_table(rows, data["truths"]))
    failures = [r for r in data["runs"] if r.get("error_message")]
    if failures:
        print("\nMessages (first of each problem/method):")
        seen = set()
        for r in failures:
            if (r["problem"], r["method"]) not in seen:
                seen.add((r["problem"], r["method"]))
                print(f"- {r['problem']} / {r['method']} (seed {r['seed']}): {r['error_message'][:300]}")
    if figure is not None:
        plot(data, figure)
        print(f"\nFigure: {figure}")
    return rows


def compact_table(rows, truths) -> str:
    """One Markdown row per problem: sample_ct's runs that do not mislead and its errors, beside
    SMC's and dynesty's errors, and sample_ct's median time over SMC's."""
    by = {(r["problem"], r["method"]): r for r in rows}
    lines = ["| problem | log Z | CT: ok/flag | reliable | med abs err | med se | SMC: med abs err "
             "| max abs z | dynesty: med abs err | med se | CT time / SMC |", "|" + "---|" * 11]
    for name in dict.fromkeys(r["problem"] for r in rows):
        ct, smc, dyn = (by.get((name, m), {}) for m in ("ct", "smc", "dynesty"))
        ratio = (ct["median_seconds"] / smc["median_seconds"]
                 if ct.get("median_seconds") and smc.get("median_seconds") else None)
        ok = (f"{round(ct['frac_ok_or_flagged'] * ct['runs'])}/{ct['runs']}"
              if ct.get("frac_ok_or_flagged") is not None else "-")
        lines.append(
            f"| {name} | {truths[name]:.3f} | {ok} | {_fmt(ct.get('frac_reliable'), '.1f')} "
            f"| {_fmt(ct.get('median_abs_error'))} | {_fmt(ct.get('median_se'))} "
            f"| {_fmt(smc.get('median_abs_error'))} | {_fmt(smc.get('max_abs_z'), '.1f')} "
            f"| {_fmt(dyn.get('median_abs_error'))} | {_fmt(dyn.get('median_se'))} | {_fmt(ratio, '.1f')} |"
        )
    return "\n".join(lines)


def plot(data, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    names = [p for p in PROBLEMS if p in data["truths"]]
    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    colours = dict(zip(METHODS, ("C0", "C1", "C4", "C2", "C3"), strict=True))
    offsets = dict(zip(METHODS, (-0.3, -0.15, 0.0, 0.15, 0.3), strict=True))
    for ax, name in zip(axes.flat, names, strict=False):
        for method in METHODS:
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method]
            ok = [r for r in runs if r.get("error") is not None]
            if ok:
                x = np.array([r["seed"] for r in ok]) + offsets[method]
                err = np.array([r["error"] for r in ok])
                se = np.array([r["se"] if r["se"] is not None else 0.0 for r in ok])
                ax.errorbar(x, err, yerr=se, fmt="o", ms=3, color=colours[method], label=method)
                flagged = [r["reliable"] is False for r in ok]
                if any(flagged):
                    ax.scatter(x[flagged], err[flagged], s=40, facecolors="none", edgecolors="k", lw=0.8)
            failed = [r for r in runs if r.get("error") is None]
            if failed:
                ax.scatter(np.array([r["seed"] for r in failed]) + offsets[method], np.zeros(len(failed)),
                           marker="x", color=colours[method])
        ax.axhline(0, color="k", lw=0.6)
        errors = [abs(r["error"]) for r in data["runs"] if r["problem"] == name and r.get("error") is not None]
        if errors and max(errors) > 3:  # a missed mode can be off by tens of nats
            ax.set_yscale("symlog", linthresh=1.0)
            low, high = ax.get_ylim()
            ax.set_yticks([v for v in (-20, -10, -5, -2, -1, -0.5, 0, 0.5, 1, 2, 5, 10, 20)
                           if low <= v <= high])
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        seeds = sorted({r["seed"] for r in data["runs"]})
        ax.set_xticks(seeds)
        ax.set_xlim(min(seeds) - 0.5, max(seeds) + 0.5)
        ax.set_title(f"{name} (log Z = {data['truths'][name]:.2f})", fontsize=9)
        ax.set_xlabel("seed", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("estimate - log Z  (+- se)", fontsize=8)
    present = [m for m in METHODS if any(r["method"] == m for r in data["runs"])]
    handles = [Line2D([], [], color=colours[m], marker="o", ls="", label=m) for m in present]
    fig.legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle("Evidence suite: error +- standard error per run (x: failed; ring: marked unreliable; "
                 "symlog scale beyond 1 nat where errors exceed 3)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.95, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 10; 1 with --quick)")
    parser.add_argument("--problems", default=None, help=f"comma-separated, of: {','.join(PROBLEMS)}")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of: " + ",".join(METHODS))
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON")
    parser.add_argument("--figure", default=str(DEFAULT_FIGURE), help="figure path ('' for none)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    parser.add_argument("--quick", action="store_true",
                        help="plumbing run: 1 seed, 3 cheap problems, SMC draws 500, dynesty nlive 100")
    parser.add_argument("--smc-cores", type=int, default=None, help="pm.sample_smc's cores (default PyMC's)")
    parser.add_argument("--resume", action="store_true", help="skip the cases already in --out")
    parser.add_argument("--report", action="store_true", help="only print the table and plot from --out")
    parser.add_argument("--check", action="store_true", help="verify the problems' truths and exit")
    parser.add_argument("--case", nargs=3, metavar=("PROBLEM", "METHOD", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.case:
        name, method, seed = args.case
        row = run_case(name, method, int(seed), quick=args.quick, smc_cores=args.smc_cores)
        print(RESULT_PREFIX + json.dumps(row), flush=True)
        return

    problems = args.problems.split(",") if args.problems else list(QUICK_PROBLEMS if args.quick else PROBLEMS)
    methods = args.methods.split(",")
    unknown = [p for p in problems if p not in PROBLEMS] + [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown problem(s)/method(s): {unknown}")
    figure = Path(args.figure) if args.figure else None

    if args.check:
        sys.exit(0 if check_problems(problems) else 1)
    if args.report:
        report(json.loads(Path(args.out).read_text()), figure)
        return
    if args.seeds is None:
        args.seeds = 1 if args.quick else 10
    data = run_suite(args, problems, methods)
    report(data, figure)


if __name__ == "__main__":
    main()
