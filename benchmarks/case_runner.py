"""What the suites that run each case in a fresh process share (``evidence_suite.py``,
``posterior_suite.py``): the case's subprocess with its timeout, JSON-safe numbers, package
versions for the results file, and an atomic write of it.

A case prints its record as one JSON line after a prefix; :func:`run_case_process` reads it
back, or returns the suite's failure record with the reason.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quiet_loggers() -> None:
    """Silence the libraries' loggers in a case process."""
    for name in ("pymc", "pytensor", "pymc_tempering", "nutpie", "arviz"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def finite(value):
    """A JSON-safe float: None for None, NaN or infinity."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def run_case_process(cmd: list[str], timeout: float, prefix: str, failed: dict) -> dict:
    """Run one case's command in its own process group (killed, with any workers it started,
    on timeout) and return the record it printed after ``prefix``; else ``failed`` with the
    seconds and the reason."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return failed | {"seconds": float(timeout), "error_message": f"timeout after {timeout} s"}
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            return json.loads(line[len(prefix):])
    return failed | {"seconds": None,
                     "error_message": f"case process exited with {proc.returncode}: {stderr[-1500:]}"}


def versions(packages) -> dict:
    """The installed versions of ``packages``, and the commit and whether the package's files
    differ from it."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in packages:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "pymc_tempering"], cwd=ROOT,
                               capture_output=True, text=True).stdout
        out["git_commit"], out["pymc_tempering_dirty"] = commit.strip(), bool(dirty.strip())
    except OSError:
        pass
    return out


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` through a temporary file, so an interrupted suite keeps the
    last complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
