"""Run the default test suite under shifted seeds and report which tests fail for which seed.

Every seed the tests use comes from ``tests/checks.py::seed``, which adds the environment
variable ``PMT_TEST_SEED``. This script reruns the suite (or the tests ``-k`` selects) with
``PMT_TEST_SEED = 1, ..., N`` and collects each test's outcome from pytest's JUnit XML. A test
that fails for some seed is fixed (a longer run, a tolerance from a standard error), never
re-seeded: every statistical test should fail with probability below 1e-3 per seed.

Usage::

    .venv/bin/python benchmarks/seed_sweep.py                  # 10 seeds, default suite
    .venv/bin/python benchmarks/seed_sweep.py --seeds 3 -k estimators --jobs 2

Writes ``benchmarks/results/seed_sweep.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "seed_sweep.json"


def parse_junit(path: Path) -> dict[str, dict]:
    """Each test's outcome (``passed``, ``failed``, ``error``, ``skipped``) and message."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or "")[:300]
                break
        outcomes[name] = {"outcome": outcome, "message": message, "time": float(case.get("time", 0))}
    return outcomes


def run_seed(seed: int, pytest_args: list[str], workdir: Path) -> dict:
    """Run pytest once with ``PMT_TEST_SEED=seed``; return its outcomes and wall time."""
    xml = workdir / f"seed_{seed}.xml"
    env = {**os.environ, "PMT_TEST_SEED": str(seed)}
    # a file that fails to import is reported as an error; the other files still run; one
    # process per seed (-n 0, against pyproject's -n 2): --jobs sets the parallelism here
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
           f"--junitxml={xml}", "--continue-on-collection-errors",
           *pytest_args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not xml.exists():
        raise RuntimeError(f"pytest wrote no report for seed {seed}:\n{proc.stdout[-2000:]}"
                           f"\n{proc.stderr[-2000:]}")
    return {"seed": seed, "returncode": proc.returncode, "wall_s": wall, "tests": parse_junit(xml)}


def summarise(runs: list[dict]) -> dict[str, dict]:
    """Per test: the seeds it failed (or errored) for, and how many seeds ran it."""
    table: dict[str, dict] = {}
    for run in runs:
        for name, result in run["tests"].items():
            row = table.setdefault(name, {"runs": 0, "failed_seeds": [], "messages": {}})
            if result["outcome"] == "skipped":
                continue
            row["runs"] += 1
            if result["outcome"] in ("failed", "error"):
                row["failed_seeds"].append(run["seed"])
                row["messages"][str(run["seed"])] = result["message"]
    return table


def markdown(table: dict[str, dict], runs: list[dict]) -> str:
    seeds = [r["seed"] for r in runs]
    lines = [
        f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs); "
        f"wall time per run {min(r['wall_s'] for r in runs):.0f}-"
        f"{max(r['wall_s'] for r in runs):.0f} s.",
        "",
        "| test | runs | failures | failing seeds |",
        "|---|---:|---:|---|",
    ]
    failing = {k: v for k, v in table.items() if v["failed_seeds"]}
    for name, row in sorted(failing.items()):
        seeds_text = ", ".join(map(str, row["failed_seeds"]))
        lines.append(f"| `{name}` | {row['runs']} | {len(row['failed_seeds'])} | {seeds_text} |")
    passed = len(table) - len(failing)
    lines.append(f"| (all {passed} other tests) | {len(seeds)} each | 0 | |")
    return "\n".join(lines)


def _report(runs: list[dict], pytest_args: list[str], argv) -> dict:
    table = summarise(runs)
    return {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "pytest_args": pytest_args,
        "seeds": [r["seed"] for r in runs],
        "wall_s": {str(r["seed"]): round(r["wall_s"], 1) for r in runs},
        "tests": table,
        "failures": {k: v["failed_seeds"] for k, v in table.items() if v["failed_seeds"]},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="number of shifted seeds (1..N)")
    parser.add_argument("--first", type=int, default=1, help="first seed (default 1)")
    parser.add_argument("-k", default=None, help="pytest -k expression (pass-through)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once (default 1)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("pytest_args", nargs="*", help="further pytest arguments (after --)")
    args = parser.parse_args(argv)

    pytest_args = list(args.pytest_args)
    if args.k:
        pytest_args += ["-k", args.k]
    seeds = list(range(args.first, args.first + args.seeds))
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            # the report is rewritten after every seed, so a sweep cut short still says something
            for run in pool.map(lambda s: run_seed(s, pytest_args, Path(tmp)), seeds):
                runs.append(run)
                report = _report(runs, pytest_args, argv)
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(json.dumps(report, indent=2) + "\n")
    table = summarise(runs)
    print(markdown(table, runs))
    print(f"\nWritten to {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
