"""First-call benchmark: one model sampled once in a fresh process, ``sample_ct`` against SMC.

What it measures (issue 66): the wall time of a whole process that imports the libraries,
builds one model of the posterior suite (:data:`posterior_suite.MODELS`) and calls
``pmt.sample_ct()`` once at its defaults, against the same process calling
``pm.sample_smc(draws=2000, chains=2)`` instead, the rest of the script equal. The two run in
turn (ct, smc, ct, smc, ...) with the same seed per pair, so that a drift of the machine's
speed falls on both; the ratio is taken pair by pair and its median reported, beside the
medians of each. Each ``sample_ct`` process also reports its call's phases (the result's
``timing`` group: mode search, base fit, compilation, tuning, sampling, weights, checks), and
how long the imports and the model's building took.

With ``--warm`` (the default) a second set of processes measures what a notebook user meets
when re-running the model's cell: each process makes one call, then builds the model again (a
new model object of the same graph) and calls again; the second call's seconds are reported,
for ``sample_ct`` and for SMC.

The compile caches are whatever the machine has (PyTensor's and Numba's, in PyTensor's
compile directory): run once first, or pass ``--warmup``, to measure a machine that has seen
the models before; ``--compiledir DIR`` points the processes at another directory (an empty
one measures a fresh machine).

Run::

    .venv/bin/python benchmarks/first_call.py                        # 3 models x 3 runs
    .venv/bin/python benchmarks/first_call.py --models quickstart --runs 5 --out /tmp/f.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "FIRST_CALL "
DEFAULT_MODELS = ("quickstart", "label_switching", "label_switching_3")
METHODS = ("ct", "smc")


# ------------------------------------------------------------------------------- one process
def child(model: str, method: str, seed: int, again: bool) -> None:
    """One process: import, build ``model``, call ``method`` once (twice with ``again``, the
    second on a new model object), print a JSON line of seconds and phases."""
    started = time.perf_counter()
    import logging
    import warnings

    warnings.simplefilter("ignore")
    import pymc as pm

    import pymc_tempering as pmt

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import posterior_suite  # noqa: F401 - registers the suite's own problems
    from harness import get_problem

    for name in ("pymc", "pytensor", "pymc_tempering", "nutpie", "arviz"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    problem = get_problem(model)
    record = {"model": model, "method": method, "seed": seed,
              "imports": time.perf_counter() - started}

    def call():
        began = time.perf_counter()
        built = problem.build()
        build_seconds = time.perf_counter() - began
        with built:
            if method == "ct":
                idata = pmt.sample_ct(random_seed=seed, progressbar=False)
            else:
                idata = pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)
        seconds = time.perf_counter() - began
        phases = {}
        if "timing" in idata.children:
            phases = {k: float(v) for k, v in idata["timing"].to_dataset().items()}
        return {"build": build_seconds, "seconds": seconds, "phases": phases}

    record["first"] = call()
    if again:
        record["again"] = call()
    if method == "ct":  # how nutpie's compilations were found (compiled, loaded, reused)
        from pymc_tempering.extended.nutpie_cache import callback_compilations

        record["nutpie_cache"] = callback_compilations()
    print(PREFIX + json.dumps(record), flush=True)


def spawn(model: str, method: str, seed: int, again: bool, env: dict, timeout: float) -> dict:
    """Run :func:`child` in a fresh process; its record with the process's wall seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", model, method, str(seed)]
    if again:
        cmd.append("--again")
    began = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    wall = time.perf_counter() - began
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(PREFIX):
            return json.loads(line[len(PREFIX):]) | {"process": wall}
    return {"model": model, "method": method, "seed": seed, "process": wall,
            "error": f"exit {out.returncode}: {out.stderr[-1500:]}"}


# --------------------------------------------------------------------------------- the runs
def run(models, runs: int, seed: int, warm: bool, warmup: bool, env: dict, timeout: float,
        out: Path | None) -> dict:
    records = []
    for model in models:
        if warmup:  # fills the compile caches; not counted
            for method in METHODS:
                spawn(model, method, seed, False, env, timeout)
        passes = [False, True] if warm else [False]
        for again in passes:
            for i in range(runs):
                for method in METHODS:
                    record = spawn(model, method, seed + i, again, env, timeout)
                    record["pass"] = "warm" if again else "first"
                    records.append(record)
                    print(status(record), flush=True)
                    if out is not None:
                        out.write_text(json.dumps({"records": records}, indent=1))
    return {"records": records}


def status(r: dict) -> str:
    if "error" in r:
        return f"{r['model']:<18} {r['method']:<4} {r['pass']:<5} FAILED {r['error'][-200:]}"
    text = f"{r['model']:<18} {r['method']:<4} {r['pass']:<5} process {r['process']:6.2f} s"
    call = r["first"]
    if r["pass"] == "warm":  # the phases of the call on a new model object
        text += f"  again {r['again']['seconds']:6.2f} s"
        call = r["again"]
    phases = call["phases"]
    if phases:
        text += "  " + " ".join(f"{k} {v:.2f}" for k, v in phases.items() if k != "total")
    if "nutpie_cache" in r:
        text += "  nutpie callbacks " + " ".join(f"{k} {v}" for k, v in r["nutpie_cache"].items())
    return text


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def _s(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"  # nan: nothing measured


def _phases(phases: list[dict]) -> str:
    """The median seconds of each phase over runs (those of 0.05 s or more)."""
    names = [k for k in (phases[0] if phases else {}) if k != "total"]
    medians = {k: _median([p[k] for p in phases]) for k in names}
    return ", ".join(f"{k} {v:.2f}" for k, v in medians.items() if v >= 0.05)


def report(data: dict) -> str:
    """Per model: the first call's whole-process medians and their pairwise ratio, the phases
    of ``sample_ct``'s call, and the warm second call's medians and ratio."""
    recs = [r for r in data["records"] if "error" not in r]
    lines = ["| model | ct process s | smc process s | ct / smc (pairs) | ct call phases "
             "(median s) | again: ct s | smc s | ct / smc | again: ct phases |",
             "|" + "---|" * 9]
    ratios = []
    for model in dict.fromkeys(r["model"] for r in recs):
        def of(method, pass_, key, _model=model):
            return {r["seed"]: key(r) for r in recs
                    if r["model"] == _model and r["method"] == method and r["pass"] == pass_}

        ct, smc = of("ct", "first", lambda r: r["process"]), of("smc", "first", lambda r: r["process"])
        pairs = [ct[s] / smc[s] for s in ct if s in smc]
        ratios.append(_median(pairs))
        shown = _phases([r["first"]["phases"] for r in recs if r["model"] == model
                         and r["method"] == "ct" and r["pass"] == "first"])
        shown2 = _phases([r["again"]["phases"] for r in recs if r["model"] == model
                          and r["method"] == "ct" and r["pass"] == "warm"])
        ct2 = of("ct", "warm", lambda r: r["again"]["seconds"])
        smc2 = of("smc", "warm", lambda r: r["again"]["seconds"])
        pairs2 = [ct2[s] / smc2[s] for s in ct2 if s in smc2]
        cells = [_s(_median(ct.values())), _s(_median(smc.values())), _s(_median(pairs)), shown,
                 _s(_median(ct2.values())), _s(_median(smc2.values())), _s(_median(pairs2)),
                 shown2]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines.append(f"\nmedian over the models of ct / smc (first call, whole process): "
                 f"{_median(ratios):.2f}; largest {max(ratios, default=float('nan')):.2f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="comma-separated names of posterior_suite.MODELS")
    p.add_argument("--runs", type=int, default=3, help="processes per method and model")
    p.add_argument("--seed", type=int, default=20260)
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="skip the second call on a new model object")
    p.add_argument("--warmup", action="store_true", help="one uncounted run per model first")
    p.add_argument("--compiledir", type=Path, help="PyTensor's base_compiledir for the processes")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    p.add_argument("--out", type=Path, default=Path("/tmp/first_call.json"))
    p.add_argument("--report", action="store_true", help="print the report of --out only")
    p.add_argument("--child", nargs=3, metavar=("MODEL", "METHOD", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--again", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        model, method, seed = args.child
        child(model, method, int(seed), args.again)
        return
    if args.report:
        print(report(json.loads(args.out.read_text())))
        return
    env = dict(os.environ)
    if args.compiledir is not None:
        flags = [f for f in env.get("PYTENSOR_FLAGS", "").split(",") if f and "compiledir" not in f]
        env["PYTENSOR_FLAGS"] = ",".join([*flags, f"base_compiledir={args.compiledir}"])
    data = run(args.models.split(","), args.runs, args.seed, args.warm, args.warmup, env,
               args.timeout, args.out)
    print(report(data))


if __name__ == "__main__":
    main()
