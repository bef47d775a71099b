"""Run the default test suite under shifted seeds and report which tests fail for which seed.

Every seed the tests use comes from ``tests/checks.py::seed``, which adds the environment
variable ``PMT_TEST_SEED``. This script reruns the suite (or the tests ``-k`` selects) with
``PMT_TEST_SEED = 1, ..., N`` and collects each test's outcome from pytest's JUnit XML. A test
that fails for some seed is fixed (a longer run, a tolerance from a standard error), never
re-seeded: every statistical test should fail with probability below 1e-3 per seed.

It is not problems x methods x seeds on ``benchmarks/harness.py``'s cases because what it runs
per seed is the whole test suite, not a method on a problem; it uses the harness's command line
(``--seeds``, ``--first-seed``, ``--out``, ``--report``, ``--quick``: one seed; not
``--problems`` or ``--methods``) and writes :func:`harness.results_file`: one record per seed
(problem ``test_suite``, method ``pytest``: its wall seconds, pytest's return code and each
test's outcome) and the per-test table (``tests``, ``failures``).

Usage::

    .venv/bin/python benchmarks/seed_sweep.py                  # 10 seeds, default suite
    .venv/bin/python benchmarks/seed_sweep.py --seeds 3 -k estimators --jobs 2
    .venv/bin/python benchmarks/seed_sweep.py --first-seed 6 --seeds 5 --out /tmp/b.json   # a share
    .venv/bin/python benchmarks/seed_sweep.py --report         # the table from --out

Writes ``benchmarks/results/seed_sweep.json`` (or ``--out``) and prints a Markdown table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness

ROOT = harness.ROOT
RESULTS = harness.RESULTS / "seed_sweep.json"


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
    return {**harness.empty_record("test_suite", "pytest", seed), "seconds": wall,
            "returncode": proc.returncode, "tests": parse_junit(xml)}


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


def markdown(data: dict) -> str:
    """The failing tests, their seeds and (where the file says) their fix."""
    runs, table = data["runs"], data["tests"]
    fixes = data.get("fixed_after_the_sweep", {})
    seeds = [r["seed"] for r in runs]
    lines = [
        f"Seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs); "
        f"wall time per run {min(r['seconds'] for r in runs):.0f}-"
        f"{max(r['seconds'] for r in runs):.0f} s.",
        "",
        "| test | runs | failures | failing seeds |" + (" fix |" if fixes else ""),
        "|---|---:|---:|---|" + ("---|" if fixes else ""),
    ]
    failing = {k: v for k, v in table.items() if v["failed_seeds"]}
    for name, row in sorted(failing.items()):
        seeds_text = ", ".join(map(str, row["failed_seeds"]))
        lines.append(f"| `{name}` | {row['runs']} | {len(row['failed_seeds'])} | {seeds_text} |"
                     + (f" {fixes.get(name, '')} |" if fixes else ""))
    passed = len(table) - len(failing)
    lines.append(f"| (all {passed} other tests) | {len(seeds)} each | 0 | |" + (" |" if fixes else ""))
    return "\n".join(lines)


def results(runs: list[dict], pytest_args: list[str], argv) -> dict:
    """The results file: the per-seed records, the per-test table and the failures."""
    table = summarise(runs)
    command = " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    return harness.results_file(
        "seed_sweep", {"pytest_args": pytest_args, "command": command}, runs, tests=table,
        failures={k: v["failed_seeds"] for k, v in table.items() if v["failed_seeds"]})


def main(argv=None) -> int:
    parser = harness.parser(__doc__.splitlines()[0], out=RESULTS, seeds=10)
    parser.set_defaults(first_seed=1)
    parser.add_argument("-k", default=None, help="pytest -k expression (pass-through)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once (default 1)")
    parser.add_argument("pytest_args", nargs="*", help="further pytest arguments (after --)")
    args = harness.parse(parser, argv)
    if args.report:
        print(markdown(harness.load(args.out)))
        return 0

    pytest_args = list(args.pytest_args)
    if args.k:
        pytest_args += ["-k", args.k]
    n_seeds = args.seeds if args.seeds is not None else (1 if args.quick else args.default_seeds)
    seeds = list(range(args.first_seed, args.first_seed + n_seeds))
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            # the file is rewritten after every seed, so a sweep cut short still says something
            for run in pool.map(lambda s: run_seed(s, pytest_args, Path(tmp)), seeds):
                runs.append(run)
                data = results(runs, pytest_args, argv)
                harness.write_json(args.out, data)
    print(markdown(data))
    out = Path(args.out)
    print(f"\nWritten to {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 1 if data["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
