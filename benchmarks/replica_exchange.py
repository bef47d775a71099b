"""Replica exchange vs one replica on the poster's 1-D mixture of 4 Gaussians (exact energies).

Writes benchmarks/results/replica_exchange.json: mode-weight errors (with MCSE) of the T = 1
replica of ``sample_replica_exchange`` (10 replicas, T = 1..10) and of the same thermostat
dynamics with one replica, and the wall-time ratio measured in the same run.
"""

import json
import pathlib
import time

import numpy as np
import pymc as pm
from arviz_stats.base.array import array_stats

from pymc_tempering.methods.replica_exchange import sample_replica_exchange

MEANS, SD, W = np.array([-6.0, -2.0, 2.0, 6.0]), 0.6, np.array([0.1, 0.2, 0.3, 0.4])


def mode_errors(x):
    mode = np.argmin(np.abs(x[..., None] - MEANS), axis=-1)
    out = []
    for k in range(4):
        ind = (mode == k).astype(float)
        ess = float(array_stats.ess(ind, method="mean"))
        out.append({"weight": float(ind.mean()), "truth": float(W[k]),
                    "mcse": float(ind.std() / np.sqrt(max(ess, 1.0))), "ess": ess})
    return out


def main(draws=3000, chains=4, seed=0):
    with pm.Model() as model:
        pm.Mixture("x", w=W, comp_dists=[pm.Normal.dist(m, SD) for m in MEANS])
    start = np.full((chains, 1), -6.0)
    common = dict(model=model, chains=chains, step_size=0.01, steps_per_sample=10, tune=200,
                  initial_points=start, random_seed=seed, progressbar=False)
    results = {}
    for name, temps in [("replica_exchange_R10", 10), ("single_replica", 1)]:
        t = time.perf_counter()
        res = sample_replica_exchange(draws, n_temperatures=temps, max_temperature=10.0, **common)
        elapsed = time.perf_counter() - t
        results[name] = {"modes": mode_errors(res.posterior["x"].values), "seconds": elapsed}
        if temps > 1:
            results[name]["swap_acceptance_rate"] = res["replica_exchange"]["swap_acceptance_rate"].mean("chain").values.tolist()
    results["time_ratio"] = results["replica_exchange_R10"]["seconds"] / results["single_replica"]["seconds"]
    out = pathlib.Path(__file__).parent / "results" / "replica_exchange.json"
    out.write_text(json.dumps(results, indent=2))
    for name in ("replica_exchange_R10", "single_replica"):
        row = results[name]["modes"]
        print(name, " ".join(f"{m['weight']:.3f}±{m['mcse']:.3f}(true {m['truth']})" for m in row))
    print("time ratio", results["time_ratio"])


if __name__ == "__main__":
    main()
