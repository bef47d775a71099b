"""Posterior spread of the minibatch samplers at their defaults on a logistic regression.

A model nobody tuned for: ``y_i ~ Bernoulli(logit^-1(a + x_i . b))`` with 20,000 data, four
covariates of different scales, ``a ~ N(0, 10)``, ``b ~ N(0, 10 u)`` and the covariates in
units of ``1 / u`` (``--unit``), written with ``pm.Minibatch(x, y, batch_size=200)``. With this
much data the Laplace approximation at the mode is close to the posterior, so each sampler's
weighted mean and standard deviation of every coordinate are compared with it: the error of
the mean in posterior sds, and the ratio of the sds, with the ratio's Monte Carlo standard
error (from the ESS of the squared deviations).

Run: ``.venv/bin/python benchmarks/minibatch_logistic.py [--seeds 2] [--unit 1]``; writes
``benchmarks/results/minibatch_logistic.json``. It runs ``sample_tact`` with the default
``thermostat="diagonal"`` and the paper's ``"scalar"``, and ``sample_replica_exchange`` at its
defaults (about 6 minutes per seed on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from arviz_stats.base import array_stats
from scipy import optimize

import pymc_tempering as pmt

OUT = Path(__file__).parent / "results" / "minibatch_logistic.json"
N, BATCH = 20_000, 200


def data(unit: float):
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (N, 4)) * np.array([1, 2, 0.5, 1]) / unit
    b_true = np.array([0.5, -1.0, 2.0, 0.0]) * unit
    y = rng.random(N) < 1 / (1 + np.exp(-(0.3 + x @ b_true)))
    return x, y.astype(float)


def laplace(x, y, unit: float):
    """Mode and Laplace sds of ``(a, b)``."""
    prior_var = np.array([100.0] + [100.0 * unit**2] * 4)
    xa = np.column_stack([np.ones(len(y)), x])

    def neg_log_post(t):
        eta = xa @ t
        return -(np.sum(y * eta - np.logaddexp(0, eta)) - 0.5 * np.sum(t**2 / prior_var))

    mode = optimize.minimize(neg_log_post, np.zeros(5), method="BFGS", options={"gtol": 1e-10}).x
    p = 1 / (1 + np.exp(-(xa @ mode)))
    hessian = xa.T @ (xa * (p * (1 - p))[:, None]) + np.diag(1 / prior_var)
    return mode, np.sqrt(np.diag(np.linalg.inv(hessian)))


def model(x, y, unit: float):
    with pm.Model() as m:
        xb, yb = pm.Minibatch(x, y, batch_size=BATCH)
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 10 * unit, shape=4)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(xb, b), observed=yb, total_size=N)
    return m


def run(method: str, seed: int, unit: float, x, y, mode, sd) -> dict:
    sampler, kwargs = {
        "tact_diagonal": (pmt.sample_tact, {}),
        "tact_scalar": (pmt.sample_tact, {"thermostat": "scalar"}),
        "replica_exchange": (pmt.sample_replica_exchange, {}),
    }[method]
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = sampler(model=model(x, y, unit), random_seed=seed, progressbar=False, **kwargs)
    seconds = time.perf_counter() - start
    post = idata["posterior"]
    draws = np.concatenate([post["a"].values[..., None], post["b"].values], -1)  # (c, d, 5)
    mean, spread = draws.mean((0, 1)), draws.std((0, 1))
    ratio_se = []
    for i in range(5):
        sq = (draws[..., i] - mean[i]) ** 2
        ess = float(array_stats.ess(sq, method="mean", chain_axis=0, draw_axis=1))
        ratio_se.append(float(np.sqrt(2 / ess) / 2))
    return {
        "method": method, "seed": seed, "unit": unit, "seconds": seconds,
        "mean_error_in_sds": ((mean - mode) / sd).tolist(),
        "sd_ratio": (spread / sd).tolist(), "sd_ratio_se": ratio_se,
        "warnings": sorted({str(w.message)[:120] for w in caught}),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--unit", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    x, y = data(args.unit)
    mode, sd = laplace(x, y, args.unit)
    rows = []
    for seed in range(args.seeds):
        for method in ("tact_diagonal", "tact_scalar", "replica_exchange"):
            rows.append(run(method, seed, args.unit, x, y, mode, sd))
            r = rows[-1]
            print(f"{method:17s} seed {seed}: sd ratio {np.round(r['sd_ratio'], 2)} "
                  f"(se {max(r['sd_ratio_se']):.3f}), mean error {np.round(r['mean_error_in_sds'], 2)} "
                  f"sds, {r['seconds']:.0f} s", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"n": N, "batch": BATCH, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
