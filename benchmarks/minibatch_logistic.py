"""The minibatch samplers at their defaults on a logistic regression (a model no test uses).

An intercept and three slopes, 50,000 simulated points whose columns have scales 1, 10 and 0.1,
``pm.Minibatch(X, y, batch_size=500)``. The reference is the full-data optimum and its Laplace
standard deviations (``pm.find_MAP``, ``pm.find_hessian``): at this data size the posterior is
Gaussian to well within the Monte Carlo error. For each sampler: the posterior means' distance
from the optimum in Laplace sds, the sds' ratio to the Laplace ones with the ratio's Monte Carlo
standard error (from the ESS of the squared deviations), the wall time and the warnings.
Samplers: ``sample_tact`` with its default ``thermostat="diagonal"`` and with the paper's
``"scalar"``, and ``sample_replica_exchange`` (its ladder, exact-swap pairs and skipped swaps are
printed too).

Run: ``.venv/bin/python benchmarks/minibatch_logistic.py [--seeds 1] [--first-seed 1]``
(about 8 minutes per seed on 2 cores); writes ``benchmarks/results/minibatch_logistic.json``.
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

import pymc_tempering as pmt

OUT = Path(__file__).parent / "results" / "minibatch_logistic.json"
N, BATCH = 50_000, 500
NAMES = ("intercept", "x1 (scale 1)", "x2 (scale 10)", "x3 (scale 0.1)")


def data():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(N, 3)) * [1.0, 10.0, 0.1]  # other units per column
    beta_true = np.array([0.5, -0.05, 3.0])
    y = rng.binomial(1, 1 / (1 + np.exp(-(x @ beta_true - 0.3)))).astype("int32")
    return x, y


def laplace(x, y):
    """The full-data optimum of ``(b0, b)`` and its Laplace sds."""
    with pm.Model():
        b0 = pm.Normal("b0", 0, 5)
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=b0 + pm.math.dot(x, b), observed=y)
        optimum = pm.find_MAP(progressbar=False)
        hessian = pm.find_hessian(optimum, vars=[b0, b])
    mode = np.concatenate([[optimum["b0"]], optimum["b"]])
    return mode, np.sqrt(np.diag(np.linalg.inv(hessian)))


def model(x, y):
    with pm.Model() as m:
        xb, yb = pm.Minibatch(x, y, batch_size=BATCH)
        b0 = pm.Normal("b0", 0, 5)
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=b0 + pm.math.dot(xb, b), observed=yb, total_size=N)
    return m


def run(method: str, seed: int, x, y, mode, sd) -> dict:
    sampler, kwargs = {
        "tact_diagonal": (pmt.sample_tact, {}),
        "tact_scalar": (pmt.sample_tact, {"thermostat": "scalar"}),
        "replica_exchange": (pmt.sample_replica_exchange, {}),
    }[method]
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = sampler(model=model(x, y), random_seed=seed, progressbar=False, **kwargs)
    seconds = time.perf_counter() - start
    post = idata["posterior"]
    draws = np.concatenate([post["b0"].values[..., None], post["b"].values], -1)  # (c, d, 4)
    mean, spread = draws.mean((0, 1)), draws.std((0, 1))
    ratio_se = []
    for i in range(draws.shape[-1]):
        sq = (draws[..., i] - mean[i]) ** 2
        ess = float(array_stats.ess(sq, method="mean", chain_axis=0, draw_axis=1))
        ratio_se.append(float(np.sqrt(2 / ess) / 2))
    extra = {}
    if method == "replica_exchange":
        ex = idata["replica_exchange"]
        extra = {
            "n_replicas": int(idata.attrs["n_replicas"]),
            "max_temperature": float(idata.attrs["max_temperature"]),
            "exchange_batches": idata["warmup"]["exchange_batches"].values.tolist(),
            "swaps_skipped": int(ex["swap_skipped"].sum()),
            "swaps_attempted": int(ex["swap_attempted"].sum()),
        }
    return {
        "method": method, "seed": seed, "seconds": seconds, **extra,
        "mean_error_in_sds": ((mean - mode) / sd).tolist(),
        "sd_ratio": (spread / sd).tolist(), "sd_ratio_se": ratio_se,
        "warnings": sorted({str(w.message)[:120] for w in caught}),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    x, y = data()
    mode, sd = laplace(x, y)
    print("full-data optimum", mode, "Laplace sd", sd)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for method in ("tact_diagonal", "tact_scalar", "replica_exchange"):
            rows.append(run(method, seed, x, y, mode, sd))
            r = rows[-1]
            print(f"{method:17s} seed {seed}: sd / Laplace sd {np.round(r['sd_ratio'], 3)} "
                  f"(se {max(r['sd_ratio_se']):.3f}), (mean - optimum) / Laplace sd "
                  f"{np.round(r['mean_error_in_sds'], 2)}, {r['seconds']:.0f} s", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(
                {"n": N, "batch": BATCH, "coordinates": NAMES, "optimum": mode.tolist(),
                 "laplace_sd": sd.tolist(), "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
