"""Where `sample_ct`'s wall time goes, beside `pm.sample_smc`'s, on the evidence suite's problems.

For each problem of :mod:`pymc_tempering.problems` (default: the evidence suite's), in one process, after a
warm-up run that pays the one-off imports and numba compilation: ``pmt.sample_ct()`` at its
defaults with its phases timed by wrapping the functions that do them, then
``pm.sample_smc(draws=2000, chains=2)`` on the same model. Phases:

- ``mode search``: the L-BFGS runs of :func:`pymc_tempering.find_modes` (with the compilation
  of the model's log density and of its prior draws);
- ``ADVI``: the ADVI fits of the mixture base (compilation included);
- ``log_zeta``: the importance-sampling estimates of log zeta;
- ``NUTS compile``: ``nutpie.compile_pymc_model``, once per run (bootstrap round, final run,
  extensions);
- ``NUTS sampling``: ``nutpie.sample``;
- ``other``: the rest (building the tempered models, the result trees, ``diagnose``).

The radon models of :mod:`pymc_tempering.problems` are problems too: ``radon_alpha``
(``radon_model(non_centered="alpha")``), ``radon_intercepts`` and ``radon_pooled``, with their
exact log Z.

Run: ``.venv/bin/python benchmarks/ct_time.py [--problems a,b] [--seed 0] [--seeds 1] [--draws N]
[--out PATH]`` (``--draws``: ``sample_ct``'s draws per chain instead of its default).
Writes ``benchmarks/results/ct_time.json`` (or ``--out``) and prints a markdown table. Timings are of one run each on
a shared machine: compare the ratios within a row, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import pymc as pm

import nutpie
from evidence_suite import PROBLEMS

import pymc_tempering as pmt
from pymc_tempering.bases import fit as fit_module
from pymc_tempering.bases import modes as modes_module
from pymc_tempering.extended import tempered as ct_module
from pymc_tempering.problems import get

OUT = Path(__file__).parent / "results" / "ct_time.json"
PHASES = ("mode search", "ADVI", "log_zeta", "NUTS compile", "NUTS sampling")
TIMES: dict[str, float] = {}


def _timed(owner, name, phase):
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            TIMES[phase] = TIMES.get(phase, 0.0) + time.perf_counter() - start

    setattr(owner, name, wrapper)


def _instrument():
    _timed(modes_module, "search_modes", "mode search")  # through find_modes
    _timed(fit_module, "search_modes", "mode search")  # the bases' own searches
    _timed(fit_module, "fit_advi", "ADVI")
    _timed(fit_module, "estimate_log_zeta", "log_zeta")
    _timed(ct_module, "estimate_log_zeta", "log_zeta")
    _timed(nutpie, "compile_pymc_model", "NUTS compile")
    _timed(nutpie, "sample", "NUTS sampling")


RADON = ("radon_alpha", "radon_intercepts", "radon_pooled")


def run(name: str, seed: int, draws: int | None = None) -> dict:
    problem = get(name)
    TIMES.clear()
    start = time.perf_counter()
    with problem.build():
        kwargs = {} if draws is None else {"draws": draws}
        idata = pmt.sample_ct(random_seed=seed, progressbar=False, **kwargs)
    total = time.perf_counter() - start
    lml = pmt.log_marginal_likelihood(idata)
    row = {"problem": name, "seed": seed, "ct_total": total, **{p: TIMES.get(p, 0.0) for p in PHASES}}
    row["other"] = total - sum(TIMES.values())
    # bootstrap rounds, the final run, extensions
    row["nuts_runs"] = 1 + int(idata.attrs["bootstrap"]) + int(idata.attrs["extensions"])
    row["ct_error"] = lml.estimate - problem.log_z
    row["ct_se"] = lml.standard_error
    row["ct_reliable"] = bool(lml.reliable)
    start = time.perf_counter()
    with problem.build():
        smc = pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)
    row["smc_total"] = time.perf_counter() - start
    row["smc_error"] = pmt.log_marginal_likelihood(smc).estimate - problem.log_z
    return row


def table(rows) -> str:
    head = "| problem | seed | ct total s | " + " | ".join(PHASES) + " | other | NUTS runs | SMC s | ct / SMC | ct error | ct SE | reliable | SMC error |"
    lines = [head, "|" + "---|" * (len(PHASES) + 11)]
    for r in rows:
        lines.append(
            f"| {r['problem']} | {r['seed']} | {r['ct_total']:.1f} | "
            + " | ".join(f"{r[p]:.1f}" for p in PHASES)
            + f" | {r['other']:.1f} | {r['nuts_runs']} | {r['smc_total']:.1f} | {r['ct_total'] / r['smc_total']:.1f} |"
            + f" {r['ct_error']:+.3f} | {r['ct_se']:.3f} | {r['ct_reliable']} | {r['smc_error']:+.3f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS),
                        help=f"of: {', '.join([*PROBLEMS, *RADON])}")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds, each over every problem")
    parser.add_argument("--draws", type=int, default=None,
                        help="sample_ct's draws per chain (default: its default)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    _instrument()
    run("gauss_in_box", args.seed + 1000)  # warm-up, not reported
    rows = []
    for seed in range(args.seed, args.seed + args.seeds):
        for name in args.problems.split(","):
            rows.append(run(name, seed, args.draws))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
