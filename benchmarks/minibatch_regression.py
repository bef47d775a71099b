"""The minibatch samplers at their defaults on a linear regression with a noise scale.

A model no test was written for before 2026-11-24: an intercept, a slope on a covariate of
mean 50 and sd 10 (so the two are correlated about -0.99 in the posterior) and a half-normal
noise scale, ``N`` simulated points in ``pm.Minibatch`` batches of 300. The reference is the
full-data optimum and its Laplace sds in the unconstrained space (``pm.find_MAP``,
``pm.find_hessian``; Gaussian to well within the Monte Carlo error at these sizes). For each
sampler at its defaults: whether it finished, the post-warm-up divergences, the posterior means'
distance from the optimum in Laplace sds, the sds' ratio to the Laplace ones, the wall time.

Run: ``.venv/bin/python benchmarks/minibatch_regression.py [--sizes 3000 30000] [--seeds 1 2 3]``
(about 2 minutes per size and seed on 2 cores); writes
``benchmarks/results/minibatch_regression.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_tempering as pmt

from pymc_tempering.problems.minibatch import minibatch_regression

OUT = Path(__file__).parent / "results" / "minibatch_regression.json"
BATCH = 300
NAMES = ("a", "b", "s_log__")


def laplace(n):
    with minibatch_regression(n):
        optimum = pm.find_MAP(progressbar=False)
        cov = np.linalg.inv(pm.find_hessian(optimum))
    return np.array([optimum[k] for k in NAMES]), np.sqrt(np.diag(cov))


def run(sampler, n, seed, mode, sd):
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with minibatch_regression(n, batch_size=BATCH):
                idata = getattr(pmt, sampler)(random_seed=seed, progressbar=False)
        except Exception as err:  # noqa: BLE001 - a benchmark records the failure
            return {"finished": False, "error": f"{type(err).__name__}: {str(err)[:200]}",
                    "seconds": time.perf_counter() - start}
    out = {"finished": True, "seconds": time.perf_counter() - start,
           "divergences": int(idata["sample_stats"]["diverging"].values.sum()),
           "warnings": sorted({str(w.message)[:120] for w in caught
                               if issubclass(w.category, UserWarning)})}
    for k, name in enumerate(NAMES):
        group = "unconstrained_posterior" if name.endswith("__") else "posterior"
        d = idata[group][name].values
        out[name] = {"mean_z": float((d.mean() - mode[k]) / sd[k]),
                     "sd_ratio": float(d.std() / sd[k])}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[3000, 30000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--samplers", nargs="+",
                        default=["sample_replica_exchange", "sample_tact"])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    records = []
    for n in args.sizes:
        mode, sd = laplace(n)
        for seed in args.seeds:
            for sampler in args.samplers:
                rec = {"n": n, "seed": seed, "sampler": sampler, **run(sampler, n, seed, mode, sd)}
                records.append(rec)
                print(json.dumps(rec), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
