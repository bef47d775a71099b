"""A sweep of 16 regressions of the radon data: serially and on a LocalCluster of two workers.

Variable selection on the Minnesota radon data (919 households): every subset of four
candidate predictors of ``log_radon`` (``floor``, ``log_uppm``, ``log_uppm^2`` and
``floor * log_uppm``) with an intercept, ``N(0, 10^2)`` priors on the coefficients and a
``HalfNormal(5)`` noise scale: 16 models, each run by ``pmt.sample_ct`` at its defaults
(base search, bootstrap, 4 chains of 1000 draws); ``--models 32`` adds the same 16 with a
fifth predictor, ``log_uppm^3``. Each model's exact log marginal likelihood
comes from a one-dimensional quadrature over the noise scale (given it, the data are Gaussian),
so the table shows how far each estimate is from the truth in standard errors.

The same sweep (same root seed, so the same seed per model) runs three ways, each in a fresh
Python process timed from its start to its exit (imports, compiles and, for the cluster, its
start and stop included, as a user's script pays them), each writing to its own store:

- ``cluster``: ``pmt.sample_many`` on a ``LocalCluster`` of two one-thread worker processes,
  each model with ``cores=1`` (its chains one after another on its worker's core).
- ``serial_1core``: ``client="serial"``, ``cores=1``: one model after another on one core.
- ``serial``: ``client="serial"`` at ``pm.sample``'s default ``cores`` (the chains of each
  model in parallel on both cores): the loop a user would write without a cluster.

Speed-ups are ``serial_1core / cluster`` (what the second core buys a sweep) and
``serial / cluster`` (against the plain loop), from the least and the median wall time of
``--repeats`` rounds of the three runs, interleaved. Every run must give identical numbers.
An untimed warm-up sweep at a few draws first fills PyTensor's compile cache on disk, so that
no run pays for compiling graphs the others found cached. The machine's load average is
recorded before and after each run: other processes slow the cluster (two busy cores) more
than the one-core loop. Each model's own seconds (``Sweep.durations``) are recorded too: their
sum against the wall time separates the fixed costs (start, imports, the cluster's start and
stop) from the models' work.

It is not problems x methods x seeds on ``benchmarks/harness.py``'s cases because what it
times is a whole sweep of many models in a fresh process per run, three ways interleaved; it uses
the harness's command line (``--out``, ``--figure``, ``--quick``, ``--report``; not
``--problems``, ``--methods`` or ``--seeds``: ``--repeats`` sets the rounds) and writes
:func:`harness.results_file`: one record per run and round (problem ``radon_sweep_N``, the run's
name as its method, the round as its seed: wall seconds, load averages, each model's seconds),
the evidence table, the speed-ups and whether every run gave identical numbers.

Usage::

    .venv/bin/python benchmarks/sweep.py                # 16 models, three runs
    .venv/bin/python benchmarks/sweep.py --repeats 3    # three rounds of them
    .venv/bin/python benchmarks/sweep.py --quick        # 4 models, short runs
    .venv/bin/python benchmarks/sweep.py --models 32    # the subsets with log_uppm^3 too
    .venv/bin/python benchmarks/sweep.py --report --out benchmarks/results/sweep.json

Writes ``benchmarks/results/sweep.json`` and ``sweep.png`` (``sweep_quick.*`` with ``--quick``,
``sweep_<N>.*`` for ``--models N`` other than 16; or ``--out`` and ``--figure``), and prints
Markdown tables.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from scipy.special import logsumexp
from scipy.stats import halfnorm

import pymc_tempering as pmt
from pymc_tempering.problems.radon import load_radon
from pymc_tempering.sweep import read_store

import harness

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CANDIDATES = ("floor", "log_uppm", "log_uppm2", "floor_x_log_uppm")
EXTRA = "log_uppm3"  # a fifth candidate, for sweeps of more than 16 models
PRIOR_SD, SIGMA_SD = 10.0, 5.0
SEED = 2026


def design(predictors: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)``: an intercept column and the chosen predictors; ``log_radon``."""
    data = load_radon()
    columns = {
        "floor": data["floor"].to_numpy(float),
        "log_uppm": data["log_uppm"].to_numpy(float),
        "log_uppm2": data["log_uppm"].to_numpy(float) ** 2,
        "log_uppm3": data["log_uppm"].to_numpy(float) ** 3,
        "floor_x_log_uppm": (data["floor"] * data["log_uppm"]).to_numpy(float),
    }
    X = np.column_stack([np.ones(len(data))] + [columns[p] for p in predictors])
    return X, data["log_radon"].to_numpy(float)


def radon_regression(predictors: tuple[str, ...]) -> pm.Model:
    """``log_radon ~ N(X beta, sigma)``, ``beta ~ N(0, 10^2)``, ``sigma ~ HalfNormal(5)``."""
    X, y = design(predictors)
    with pm.Model(coords={"coef": ["intercept", *predictors]}) as model:
        beta = pm.Normal("beta", 0.0, PRIOR_SD, dims="coef")
        sigma = pm.HalfNormal("sigma", SIGMA_SD)
        pm.Normal("log_radon", pm.math.dot(X, beta), sigma, observed=y)
    return model


def exact_log_evidence(predictors: tuple[str, ...]) -> float:
    """log p(y) by quadrature over log sigma of the Gaussian marginal p(y | sigma).

    Given sigma, ``y ~ N(0, sigma^2 I + s0^2 X X')``; its log density uses the ``p x p``
    matrix ``A = X'X + (sigma / s0)^2 I`` (matrix determinant lemma and Woodbury). The
    posterior of log sigma is narrow (sd about ``1 / sqrt(2 n)``): a trapezoid rule on 20001
    points over +-0.6 around its mode is exact to far below the estimates' standard errors.
    """
    X, y = design(predictors)
    n, p = X.shape
    XtX, Xty, yty = X.T @ X, X.T @ y, y @ y

    def log_joint(u):  # log p(y | sigma) + log p(sigma) + log |d sigma / d u|, sigma = e^u
        s2 = np.exp(2 * u)
        A = XtX + s2 / PRIOR_SD**2 * np.eye(p)
        quad = (yty - Xty @ np.linalg.solve(A, Xty)) / s2
        logdet = (n - p) * np.log(s2) + np.linalg.slogdet(A)[1] + 2 * p * np.log(PRIOR_SD)
        return -0.5 * (n * np.log(2 * np.pi) + logdet + quad) + halfnorm.logpdf(
            np.exp(u), scale=SIGMA_SD) + u

    coarse = np.linspace(-3, 2, 2001)
    mode = coarse[np.argmax([log_joint(u) for u in coarse])]
    grid = np.linspace(mode - 0.6, mode + 0.6, 20001)
    values = np.array([log_joint(u) for u in grid])
    weights = np.full(grid.size, grid[1] - grid[0])
    weights[[0, -1]] /= 2
    return float(logsumexp(values, b=weights))


def models(n_models: int) -> dict:
    """The first ``n_models`` (at most 32) of: the 16 subsets of :data:`CANDIDATES`, by size,
    then the same with :data:`EXTRA` added."""
    subsets = [s for k in range(len(CANDIDATES) + 1) for s in itertools.combinations(CANDIDATES, k)]
    subsets = (subsets + [(*s, EXTRA) for s in subsets])[:n_models]
    return {"+".join(("1", *s)): functools.partial(radon_regression, s) for s in subsets}


#: The three ways the sweep runs: sample_many's keywords for each.
RUNS = {
    "cluster": dict(client=None, n_workers=2, cores=1),
    "serial_1core": dict(client="serial", cores=1),
    "serial": dict(client="serial"),
}


def run_child(run: str, n_models: int, size: dict, store: Path) -> None:
    """One sweep, in this (fresh) process, written to ``store``; its failures and each model's
    seconds to ``run.json`` there."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = pmt.sample_many(models(n_models), random_seed=SEED, store=store,
                                progressbar=False, **size, **RUNS[run])
    (store / "run.json").write_text(json.dumps({"failures": sweep.failures,
                                                "durations": sweep.durations}))


def timed_run(run: str, args, store: Path) -> dict:
    """Run one sweep in a fresh Python process and time it from start to exit, imports and the
    cluster's start and stop included, as a user's script would pay them."""
    command = [sys.executable, __file__, "--child", run, "--store", str(store),
               "--models", str(args.models)] + (["--quick"] if args.quick else [])
    load_before = os.getloadavg()
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    record = {"wall_s": wall, "load_before": load_before, "load_after": os.getloadavg()}
    print(f"{run}: {wall:.1f} s, load {load_before[0]:.2f} -> {record['load_after'][0]:.2f}",
          flush=True)
    return record


def identical(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        np.array_equal(a[n]["posterior"]["beta"].values, b[n]["posterior"]["beta"].values)
        and a[n].attrs["log_marginal_likelihood"] == b[n].attrs["log_marginal_likelihood"]
        for n in a
    )


def measure(args, size) -> tuple[dict, list, dict, dict | None]:
    """The warm-up, then ``--repeats`` rounds of the three runs (interleaved, so that a spell
    of load from other processes falls on all three alike). Returns each run's timings, every
    run's results (for the check that all are identical), failures and the warm-up's timing."""
    names = list(models(args.models))
    runs = {run: {"repeats": []} for run in RUNS}
    results, failures, warmup = [], {}, None
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_warmup:
            warmup = timed_run("warmup", args, Path(tmp) / "warmup")
        for repeat in range(args.repeats):
            for run in RUNS:
                store = Path(tmp) / f"{run}_{repeat}"
                record = timed_run(run, args, store)
                stored = read_store(store)
                results.append({name: stored[name] for name in names if name in stored})
                child = json.loads((store / "run.json").read_text())
                failures[f"{run}_{repeat}"] = child["failures"]
                record["model_s"] = child["durations"]
                record["model_s_total"] = sum(child["durations"].values())
                runs[run]["repeats"].append(record)
    for r in runs.values():
        walls = [x["wall_s"] for x in r["repeats"]]
        r["wall_s_min"], r["wall_s_median"] = min(walls), float(np.median(walls))
    return runs, results, failures, warmup


def markdown(table) -> str:
    """A Markdown table of a DataFrame (floats to three decimals)."""
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| model | " + " | ".join(table.columns) + " |",
             "|---" * (len(table.columns) + 1) + "|"]
    lines += ["| " + " | ".join([str(i), *map(cell, row)]) + " |"
              for i, row in zip(table.index, table.itertuples(index=False))]
    return "\n".join(lines)


def plot(table, runs, path):
    """The wall times of the three runs, and each model's evidence against quadrature."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), width_ratios=(1, 2))
    ax1.bar(list(runs), [r["wall_s_min"] for r in runs.values()], color=["C0", "C1", "C2"])
    for i, r in enumerate(runs.values()):
        ax1.plot([i] * len(r["repeats"]), [x["wall_s"] for x in r["repeats"]], "k.")
    ax1.set_ylabel("wall time (s)")
    ax1.set_title("the same sweep three ways\n(bars: the least of the repeats; dots: each)",
                  fontsize=10)
    order = table.sort_values("exact").index
    x = np.arange(len(order))
    ax2.errorbar(x, table.loc[order, "log_marginal_likelihood"] - table.loc[order, "exact"],
                 2 * table.loc[order, "standard_error"], fmt="o", capsize=3)
    ax2.axhline(0, color="k", lw=0.8)
    ax2.set_xticks(x, order, rotation=60, ha="right", fontsize=7)
    ax2.set_ylabel("estimate - exact log Z (+- 2 se)")
    ax2.set_title("sample_ct's evidences against quadrature")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def by_run(data: dict) -> dict:
    """``{run: {"repeats": [...], "wall_s_min": ..., "wall_s_median": ...}}`` from the records."""
    runs = {}
    for r in data["runs"]:
        runs.setdefault(r["method"], {"repeats": []})["repeats"].append(
            {"wall_s": r["seconds"], **{k: r[k] for k in ("load_before", "load_after") if k in r}})
    for r in runs.values():
        walls = [x["wall_s"] for x in r["repeats"]]
        r["wall_s_min"], r["wall_s_median"] = min(walls), float(np.median(walls))
    return runs


def evidence_table(data: dict):
    """The first run's evidences with the exact values, as a DataFrame indexed by model."""
    import pandas as pd

    return pd.DataFrame(data["table"]).set_index("model")


def report(data: dict) -> None:
    """The wall times and speed-ups, then the evidences against quadrature."""
    runs = by_run(data)
    speedup = data["speedup"]
    n = max(len(r["repeats"]) for r in runs.values())
    print(f"| run | wall (s), least of {n} | median | cluster's speed-up (least; median) |")
    print("|---|---:|---:|---|")
    labels = {"cluster": "`LocalCluster`, 2 one-thread workers", "serial_1core": "serial, `cores=1`",
              "serial": "serial, default cores"}
    for name, r in runs.items():
        gain = (f"{speedup[f'min_vs_{name}']:.2f}x; {speedup[f'median_vs_{name}']:.2f}x"
                if f"min_vs_{name}" in speedup else "")
        print(f"| {labels.get(name, name)} | {r['wall_s_min']:.1f} | {r['wall_s_median']:.1f} | {gain} |")
    print(f"\nidentical: {data['identical']}; failures: "
          f"{ {k: v for k, v in data['failures'].items() if v} or 'none'}\n")
    table = evidence_table(data)
    cols = ["log_marginal_likelihood", "standard_error", "exact", "error_in_se",
            "log_bayes_factor", "posterior_probability", "reliable"]
    print(markdown(table[cols]))


def main(argv=None):
    parser = harness.parser(__doc__.splitlines()[0], out=None, figure=None, seeds=1)
    parser.add_argument("--models", type=int, default=16,
                        help="up to 32 (the subsets with a fifth candidate, log_uppm^3, follow)")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of the three runs, interleaved (min and median reported)")
    parser.add_argument("--child", choices=[*RUNS, "warmup"], help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = harness.parse(parser, argv)
    args.models = min(args.models, 4) if args.quick else args.models
    name = "sweep_quick" if args.quick else "sweep" if args.models == 16 else f"sweep_{args.models}"
    args.out = Path(args.out or RESULTS / f"{name}.json")
    args.figure = args.figure or ("" if args.report else str(args.out.with_suffix(".png")))
    size = dict(draws=200, tune=200) if args.quick else {}
    if args.child == "warmup":
        return run_child("serial_1core", args.models, dict(draws=50, tune=50, chains=1),
                         args.store)
    if args.child:
        return run_child(args.child, args.models, size, args.store)
    if args.report:
        data = harness.load(args.out)
        report(data)
        if args.figure:
            plot(evidence_table(data), by_run(data), args.figure)
        return

    runs, results, failures, warmup = measure(args, size)
    table = pmt.compare_evidence(results[0])
    table["exact"] = [exact_log_evidence(tuple(n.split("+")[1:])) for n in table.index]
    table["error_in_se"] = (table["log_marginal_likelihood"] - table["exact"]) / table[
        "standard_error"]
    records = [{**harness.empty_record(f"radon_sweep_{args.models}", run, repeat),
                "seconds": x["wall_s"], **{k: v for k, v in x.items() if k != "wall_s"}}
               for run, r in runs.items() for repeat, x in enumerate(r["repeats"])]
    data = harness.results_file(
        "sweep", {"random_seed": SEED, **size, "runs": RUNS, "quick": bool(args.quick)}, records,
        models=args.models, cpu_count=os.cpu_count(), warmup=warmup, failures=failures,
        speedup={f"{stat}_vs_{run}": runs[run][f"wall_s_{stat}"] / runs["cluster"][f"wall_s_{stat}"]
                 for stat in ("min", "median") for run in ("serial_1core", "serial")},
        identical=all(identical(results[0], other) for other in results[1:]),
        table=json.loads(table.reset_index().to_json(orient="records")))
    harness.write_json(args.out, data)
    plot(table, runs, args.figure)
    report(data)
    print(f"\nwrote {args.out} and {args.figure}")


if __name__ == "__main__":
    main()
