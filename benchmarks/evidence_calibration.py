"""Is the reported standard error of sample_ct's log marginal likelihood honest?

Runs ``pmt.sample_ct`` with its defaults (mixture base, one bootstrap round, log_zeta = max(ELBO, IS
estimate), 4 chains x 1000 draws, nutpie) on the closed-form models of the test suite, over
several seeds, and reports the z-scores ``(estimate - truth) / standard_error``. With an honest
standard error they look standard normal: mean near 0, sd near 1, |z| < 2 about 95% of the time.

Run: ``.venv/bin/python benchmarks/evidence_calibration.py [--seeds 10]`` (a few minutes).
Writes ``benchmarks/results/evidence_calibration.json`` and ``.png``.
"""

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pymc_tempering as pmt  # noqa: E402
from targets import conjugate_normal, hierarchical_linear_gaussian  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    models = {
        "conjugate normal (1 parameter)": conjugate_normal()[:2],
        "hierarchical linear-Gaussian (53 parameters)": hierarchical_linear_gaussian()[:2],
    }
    results = {}
    for name, (model, log_z) in models.items():
        rows = []
        for seed in range(args.seeds):
            start = time.perf_counter()
            idata = pmt.sample_ct(model=model, random_seed=1000 + seed, progressbar=False)
            lml = pmt.log_marginal_likelihood(idata)
            rows.append(
                {
                    "seed": 1000 + seed,
                    "estimate": lml.estimate,
                    "standard_error": lml.standard_error,
                    "error": lml.estimate - log_z,
                    "z": (lml.estimate - log_z) / lml.standard_error,
                    "log_zeta_error": idata.attrs["log_zeta"] - log_z,
                    "seconds": time.perf_counter() - start,
                }
            )
            print(name, rows[-1], flush=True)
        z = np.array([r["z"] for r in rows])
        results[name] = {
            "log_z": log_z,
            "runs": rows,
            "z_mean": float(z.mean()),
            "z_sd": float(z.std(ddof=1)),
            "fraction_abs_z_below_2": float((np.abs(z) < 2).mean()),
            "max_abs_z": float(np.abs(z).max()),
            "mean_standard_error": float(np.mean([r["standard_error"] for r in rows])),
        }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "evidence_calibration.json").write_text(json.dumps(results, indent=2))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5))
    for ax, (name, res) in zip(np.atleast_1d(axes), results.items(), strict=True):
        err = [r["error"] for r in res["runs"]]
        se = [r["standard_error"] for r in res["runs"]]
        ax.errorbar(range(len(err)), err, yerr=2 * np.array(se), fmt="o")
        ax.axhline(0, color="k", lw=1)
        ax.set(title=name, xlabel="seed", ylabel="estimate - exact log Z (±2 SE)")
    fig.tight_layout()
    fig.savefig(out / "evidence_calibration.png", dpi=100)
    for name, res in results.items():
        print(f"{name}: z mean {res['z_mean']:.2f}, z sd {res['z_sd']:.2f}, "
              f"|z|<2 in {res['fraction_abs_z_below_2']:.0%}, max |z| {res['max_abs_z']:.2f}, "
              f"mean SE {res['mean_standard_error']:.3f}")


if __name__ == "__main__":
    main()
