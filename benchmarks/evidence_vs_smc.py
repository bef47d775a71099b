"""Log marginal likelihood: sample_ct at its defaults against pm.sample_smc.

The hierarchical linear-Gaussian model on the radon data (85 counties, 919 households, 88
parameters, known scales: the evidence is analytic). For each of ``--seeds`` seeds, in one run,
``pmt.sample_ct()`` at its defaults (mixture base, two bootstrap rounds, 4 chains x 1000 draws,
nutpie) and ``pm.sample_smc(draws=2000, chains=2)`` (its log marginal likelihood: each chain's
last finite value, averaged over chains). Reports the RMSE against the analytic value and the
wall time of each. Goal (issue 3): RMSE at most 0.15 nats in no more wall time than SMC.

Run: ``.venv/bin/python benchmarks/evidence_vs_smc.py [--seeds 5]`` (about 10 minutes).
Writes ``benchmarks/results/evidence_vs_smc.json``.
"""

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pymc_tempering as pmt  # noqa: E402
from targets import radon_linear_gaussian  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    model, log_z, _ = radon_linear_gaussian()
    rows = []
    for seed in range(args.seeds):
        for method in ("sample_ct", "sample_smc"):
            start = time.perf_counter()
            with warnings.catch_warnings(), model:
                warnings.simplefilter("ignore")
                if method == "sample_ct":
                    idata = pmt.sample_ct(random_seed=seed, progressbar=False)
                    lml = pmt.log_marginal_likelihood(idata)
                    est, se = lml.estimate, lml.standard_error
                else:
                    idata = pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)
                    est, se = pmt.log_marginal_likelihood(idata).estimate, float("nan")
            seconds = time.perf_counter() - start
            rows.append({"method": method, "seed": seed, "error": est - log_z, "se": se, "seconds": seconds})
            print(rows[-1], flush=True)
    summary = {}
    for method in ("sample_ct", "sample_smc"):
        sel = [r for r in rows if r["method"] == method]
        err = np.array([r["error"] for r in sel])
        summary[method] = {
            "rmse": float(np.sqrt(np.mean(err**2))),
            "mean_error": float(err.mean()),
            "sd_error": float(err.std(ddof=1)) if len(err) > 1 else float("nan"),
            "median_seconds": float(np.median([r["seconds"] for r in sel])),
            "mean_reported_se": float(np.nanmean([r["se"] for r in sel])),
        }
    summary["time_ratio_ct_over_smc"] = (
        summary["sample_ct"]["median_seconds"] / summary["sample_smc"]["median_seconds"]
    )
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "evidence_vs_smc.json").write_text(
        json.dumps({"log_z": log_z, "runs": rows, "summary": summary}, indent=2)
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
