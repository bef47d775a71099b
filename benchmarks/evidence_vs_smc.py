"""Log marginal likelihood: sample_ct at its defaults against pm.sample_smc.

The hierarchical linear-Gaussian model on the radon data (85 counties, 919 households, 88
parameters, known scales: the evidence is analytic). For each of ``--seeds`` seeds, in one run,
``pmt.sample_ct()`` at its defaults (mixture base, two bootstrap rounds, 4 chains x 1000 draws,
nutpie) and ``pm.sample_smc(draws=2000, chains=2)`` (its log marginal likelihood: each chain's
last finite value, averaged over chains). Reports the RMSE against the analytic value and the
wall time of each. Goal (issue 3): RMSE at most 0.15 nats in no more wall time than SMC.

The problem is ``radon_linear_gaussian`` of :mod:`pymc_tempering.problems`; the cases run on
``benchmarks/harness.py`` (one process each, seed-major).

Run: ``.venv/bin/python benchmarks/evidence_vs_smc.py [--seeds 5]`` (about 10 minutes;
``--report`` prints the table from the JSON, ``--quick`` is a smoke run).
Writes ``benchmarks/results/evidence_vs_smc.json``.
"""

import json

import numpy as np

import harness
from harness import _fmt

DEFAULT_OUT = harness.RESULTS / "evidence_vs_smc.json"


def report(data: dict) -> None:
    """Per method: RMSE, mean and sd of the error, mean reported SE and median wall time; then
    sample_ct's median time over SMC's."""
    print("| method | RMSE (nats) | mean error | sd of error | mean reported SE | median wall time |")
    print("|---|---|---|---|---|---|")
    medians = {}
    for method in dict.fromkeys(r["method"] for r in data["runs"]):
        sel = [r for r in data["runs"] if r["method"] == method and r.get("log_z_error") is not None]
        err = np.array([r["log_z_error"] for r in sel])
        se = [r["log_z_se"] for r in sel if r.get("log_z_se") is not None and method != "smc"]
        medians[method] = float(np.median([r["seconds"] for r in sel]))
        print(f"| {method} | {np.sqrt(np.mean(err**2)):.3f} | {err.mean():+.3f} "
              f"| {_fmt(float(err.std(ddof=1)) if len(err) > 1 else None)} "
              f"| {_fmt(float(np.mean(se)) if se else None)} | {medians[method]:.1f} s |")
    if {"ct", "smc"} <= set(medians):
        print(f"\nTime ratio sample_ct / SMC: {medians['ct'] / medians['smc']:.2f}")


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=("radon_linear_gaussian",),
                       methods=("ct", "smc"), out=DEFAULT_OUT, seeds=5)
    args = harness.parse(p, argv)
    problems, methods, seeds = harness.selection(args, ("radon_linear_gaussian",))
    if args.report:
        data = json.loads(args.out.read_text())
    else:
        data = harness.run_suite("evidence_vs_smc", problems, methods, seeds, args.out,
                                 harness.settings_from(args), resume=args.resume,
                                 timeout=args.timeout)
    report(data)


if __name__ == "__main__":
    main()
