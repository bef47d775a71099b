"""One benchmark harness: problems x methods x seeds -> one JSON -> one report and figure.

Problems are the records of :mod:`pymc_tempering.problems`; methods are the entries of
:data:`METHODS`, each returning the same record (:func:`empty_record`): wall time, log Z and its
standard error with the evidence's verdict, mode probabilities with their standard errors and
the posterior's verdict, the warnings the run gave and its error message if it failed. Each
(problem, method, seed) case runs in a fresh process (``harness.py --case``), so every method
pays the same imports and compilation, caches are as a user would have them, and a crash or a
timeout loses one case. Cases run seed-major (for each seed every problem, for each problem
every method), one at a time; the JSON is rewritten after every case and ``--resume`` skips the
cases it holds.

The results file::

    {"suite": ..., "settings": {...}, "versions": {...},
     "truths": {problem: {"log_z": ..., "modes": [...], "probabilities": [...]}},
     "runs": [record, ...]}

A script extends it without a harness of its own: ``@harness.method`` registers its own
runners (a runner returns ``(idata or None, fields)``; the fields are the record's extra
entries, e.g. ``phase_seconds`` from :func:`timed_phases`, or a ``curve`` over run length),
:func:`problem` its own problems, and the case processes run that script (its
:func:`parse` runs a ``--case``), so they know both. ``run_suite(..., in_process=True)`` runs
the cases in one process, for measurements of warm runs. A script whose measurement is not
problems x methods x seeds still parses :func:`parser`'s command line and writes
:func:`results_file` through :func:`write_json`.

Run it directly for any problems and methods, or through a suite (``posterior_suite.py``,
``evidence_suite.py``, ``evidence_calibration.py``), which sets the defaults and adds its own
tables::

    .venv/bin/python benchmarks/harness.py --problems quickstart,gauss_in_box \\
        --methods ct,smc --seeds 2 --out /tmp/h.json
    .venv/bin/python benchmarks/harness.py --report --out /tmp/h.json
    .venv/bin/python benchmarks/harness.py --quick          # smoke: 1 seed, 2 problems, tiny runs
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CASE_PREFIX = "HARNESS_CASE "
#: The settings of a ``--quick`` smoke run: tiny draws for every method.
QUICK = {"draws": 100, "tune": 100, "smc_draws": 200, "dynesty_nlive": 50}
QUICK_PROBLEMS = ("quickstart", "gauss_in_box")
TOLERANCE = 0.03  # a mode probability within this of the truth counts as right


# ------------------------------------------------------------------------------------ records
def empty_record(problem: str, method: str, seed: int) -> dict:
    """The record every method returns (None where it has nothing to say)."""
    return {"problem": problem, "method": method, "seed": seed, "seconds": None,
            "log_z": None, "log_z_se": None, "reliable": None, "evidence_problems": [],
            "probabilities": None, "probabilities_se": None, "posterior_reliable": None,
            "warnings": [], "error_message": None}


def finite(value):
    """A JSON-safe float: None for None, NaN or infinity."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# ------------------------------------------------------------------------------------ methods
@dataclass(frozen=True)
class Method:
    """A method of the registry: ``run(problem, seed, settings) -> (idata or None, fields)``,
    the fields updating the record (the harness reads evidence and modes from ``idata``)."""

    name: str
    description: str
    run: Callable


METHODS: dict[str, Method] = {}


def method(name: str, description: str):
    """Register ``run`` as the method ``name``."""

    def register(run):
        METHODS[name] = Method(name, description, run)
        return run

    return register


def _draws(settings) -> dict:
    """``draws`` and ``tune`` where the settings give numbers (else the sampler's defaults)."""
    return {k: settings[k] for k in ("draws", "tune") if isinstance(settings.get(k), int)}


def _tempering(sampler_name):
    def run(problem, seed, settings):
        import pymc_tempering as pmt

        with problem.build():
            return getattr(pmt, sampler_name)(random_seed=seed, progressbar=False,
                                              **_draws(settings)), {}

    return run


for _name, _sampler, _text in (
    ("ct", "sample_ct", "pmt.sample_ct at its defaults"),
    ("gibbs_ct", "sample_gibbs_ct", "pmt.sample_gibbs_ct at its defaults"),
    ("pe", "sample_pe", "pmt.sample_pe at its defaults"),
    ("ais", "sample_ais", "pmt.sample_ais at its defaults"),
    ("st", "sample_simulated_tempering", "pmt.sample_simulated_tempering at its defaults"),
):
    method(_name, _text)(_tempering(_sampler))


@method("pe_base", "pmt.sample_pe proposing from the covering base sample_ct fits")
def _pe_base(problem, seed, settings):
    import pymc_tempering as pmt

    with problem.build():
        base = pmt.fit_base(method="laplace", random_seed=seed, progressbar=False)
        return pmt.sample_pe(proposal=base, random_seed=seed, progressbar=False,
                             **_draws(settings)), {}


@method("smc", "pm.sample_smc(draws=2000, chains=2)")
def _smc(problem, seed, settings):
    import pymc as pm

    with problem.build():
        return pm.sample_smc(draws=settings.get("smc_draws") or 2000, chains=2, random_seed=seed,
                             progressbar=False, cores=settings.get("smc_cores")), {}


@method("nuts", "pm.sample at PyMC's defaults")
def _nuts(problem, seed, settings):
    import pymc as pm

    with problem.build():
        return pm.sample(random_seed=seed, progressbar=False, **_draws(settings)), {}


@method("dynesty", "static nested sampling, 500 live points, dlogz 0.1")
def _dynesty(problem, seed, settings):
    import dynesty

    nested = problem.nested
    if nested is None:
        raise ValueError(f"{problem.name} has no nested-sampling form")
    sampler = dynesty.NestedSampler(
        lambda t: float(nested.loglike(t)), nested.prior_transform, nested.ndim,
        nlive=settings.get("dynesty_nlive") or 500, rstate=np.random.default_rng(seed),
    )
    sampler.run_nested(dlogz=0.1, print_progress=False)
    results = sampler.results
    return None, {"log_z": float(results.logz[-1]), "log_z_se": float(results.logzerr[-1]),
                  "n_loglike_calls": int(np.sum(results.ncall))}


# ------------------------------------------------------------------- a script's own problems
#: Problems a script registers for itself (:func:`problem`): models with no exact truth or with
#: settings of the script's own (a data size, injected noise), beside
#: :data:`pymc_tempering.problems.PROBLEMS`.
LOCAL_PROBLEMS: dict = {}


def problem(name: str, build: Callable, *, truth: Callable | None = None, description: str = "",
            modes=(), label: Callable | None = None):
    """Register a script's own problem (a :class:`pymc_tempering.problems.Problem`) and return it.

    Parameters
    ----------
    name : str
        Its name on the command line (``--problems``) and in the records.
    build : callable
        ``build() -> pymc.Model``.
    truth : callable, optional
        ``truth() -> pymc_tempering.problems.Truth`` (default: nothing known).
    description, modes, label
        As :class:`pymc_tempering.problems.Problem`'s.
    """
    from pymc_tempering.problems import Problem, Truth

    record = Problem(name=name, family="benchmark", build=build, truth=truth or Truth,
                     description=description, modes=tuple(modes), label=label)
    LOCAL_PROBLEMS[name] = record
    return record


def get_problem(name: str):
    """The problem ``name``: a script's own (:func:`problem`) or one of
    :mod:`pymc_tempering.problems`."""
    if name in LOCAL_PROBLEMS:
        return LOCAL_PROBLEMS[name]
    from pymc_tempering.problems import get

    return get(name)


@contextlib.contextmanager
def timed_phases(targets):
    """Time the phases of a run by wrapping the functions that do them.

    Parameters
    ----------
    targets : iterable of (object, str, str)
        ``(owner, attribute, phase)``: the function ``owner.attribute`` is replaced, while the
        context lasts, by one that adds its seconds to ``phase``.

    Yields
    ------
    dict
        Seconds per phase, filled in as the run goes (the record's ``phase_seconds``).
    """
    spent: dict[str, float] = {}
    originals = []
    for owner, attribute, phase in targets:
        inner = getattr(owner, attribute)
        originals.append((owner, attribute, inner))

        def timed(*args, _inner=inner, _phase=phase, **kwargs):
            began = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[_phase] = spent.get(_phase, 0.0) + time.perf_counter() - began

        setattr(owner, attribute, timed)
    try:
        yield spent
    finally:
        for owner, attribute, inner in reversed(originals):
            setattr(owner, attribute, inner)


# ------------------------------------------------------------------------------ reading a run
def _draws_and_weights(idata, names):
    """Posterior arrays ``(chain, draw, ...)`` and log weights ``(chain, draw)`` or None;
    pseudo-samples (``pe``) pooled within each chain."""
    post = idata["posterior"]
    stats_ = idata["sample_stats"] if "sample_stats" in idata.children else None
    log_weight = stats_["log_weight"] if stats_ is not None and "log_weight" in stats_ else None
    draws = {}
    for name in names:
        da = post[name]
        if "pseudo_sample" in da.dims:
            vals = da.transpose("chain", "draw", "pseudo_sample", ...).values
            draws[name] = vals.reshape((vals.shape[0], vals.shape[1] * vals.shape[2]) + vals.shape[3:])
        else:
            draws[name] = da.transpose("chain", "draw", ...).values
    if log_weight is not None:
        dims = ("chain", "draw", "pseudo_sample") if "pseudo_sample" in log_weight.dims else ("chain", "draw")
        lw = log_weight.transpose(*dims).values
        log_weight = lw.reshape(lw.shape[0], -1)
    return draws, log_weight


def read_evidence(idata, method_name: str) -> dict:
    """log Z, its standard error and the verdict as ``pmt.log_marginal_likelihood`` reads them;
    for SMC each chain's last finite value, averaged, with the chains' spread as its error."""
    import pymc_tempering as pmt

    try:
        lml = pmt.log_marginal_likelihood(idata)
    except ValueError as exc:
        return {"evidence_message": f"ValueError: {exc}"[:300]}
    if method_name == "smc":
        per_chain = np.asarray(lml.per_chain, dtype=float)
        if not np.all(np.isfinite(per_chain)):
            return {"per_chain": [finite(v) for v in per_chain],
                    "evidence_message": "SMC gave no finite log marginal likelihood in some chain"}
        return {"per_chain": [finite(v) for v in per_chain], "log_z": float(per_chain.mean()),
                "log_z_se": float(per_chain.std(ddof=1) / math.sqrt(len(per_chain)))}
    return {"log_z": finite(lml.estimate), "log_z_se": finite(lml.standard_error),
            "reliable": bool(lml.reliable), "evidence_problems": [q[:300] for q in lml.problems[:5]]}


def read_modes(problem, idata, model, method_name: str) -> dict:
    """Each mode's probability and standard error: weighted (stratified where the run is) for
    the tempering methods, plain means for SMC and NUTS (NUTS's error from ArviZ's mcse, None
    where a mode's indicator never changes within any chain)."""
    import arviz as az

    import pymc_tempering as pmt
    from pymc_tempering.estimators import weighted_mean

    draws, log_weight = _draws_and_weights(idata, [v.name for v in model.free_RVs])
    onehot = (problem.label(draws)[..., None] == np.arange(len(problem.modes))).astype(float)
    out = {}
    if log_weight is not None and method_name not in ("smc", "nuts"):
        if method_name.startswith("pe"):
            p, se = weighted_mean(onehot, log_weight)
        else:
            names = [v.name for v in model.free_RVs]

            def indicators(post):  # a function, evaluated at the mode draws too
                values = {n: post[n].transpose("chain", "draw", ...).values for n in names}
                return problem.label(values)[..., None] == np.arange(len(problem.modes))

            p, se = pmt.weighted_expectation(idata, indicators)
        out["posterior_reliable"] = idata.attrs.get("posterior_reliable")
        out["posterior_problems"] = str(idata.attrs.get("posterior_problems", ""))[:600]
        if "mode_probabilities" in idata.children:
            out["mode_method"] = idata["mode_probabilities"].attrs.get("method")
    else:
        p = onehot.mean(axis=(0, 1))
        se = [None] * len(p)
        if method_name == "nuts":
            se = [None if np.all(np.ptp(onehot[..., k], axis=1) == 0)
                  else az.mcse(onehot[..., k]) for k in range(onehot.shape[-1])]
    out["probabilities"] = [float(v) for v in p]
    out["probabilities_se"] = [finite(s) for s in se]
    return out


def read_extras(problem, idata) -> dict:
    """The funnel check's numbers where the run has them, and moment errors against exact
    ``mean`` and ``cov`` for a model with one free variable (the relaxations)."""
    extra = {}
    if "base" in idata.children and "funnel_mass" in idata["base"]:
        import pymc_tempering as pmt

        i = int(np.argmax(idata["base"]["funnel_mass"].values))
        extra["funnel_mass"] = float(idata["base"]["funnel_mass"].values[i])
        extra["funnel_mass_se"] = float(idata["base"]["funnel_mass_se"].values[i])
        extra["funnel_correction"] = finite(idata.attrs.get("funnel_correction", np.nan))
        extra["draws_only_problems"] = list(pmt.diagnose(idata).draws_only)
    moments = problem.truths.moments or {}
    post = idata["posterior"]
    if {"mean", "cov"} <= set(moments) and "x" in post and "log_weight" in idata["sample_stats"]:
        from scipy.special import logsumexp

        x = post["x"].values.reshape(-1, post["x"].shape[-1])
        lw = idata["sample_stats"]["log_weight"].values.ravel()
        w = np.exp(lw - logsumexp(lw))
        mean = w @ x
        cov = (x - mean).T @ ((x - mean) * w[:, None])
        extra["mean_rmse"] = float(np.sqrt(np.mean((mean - moments["mean"]) ** 2)))
        extra["cov_rmse"] = float(np.sqrt(np.mean((cov - moments["cov"]) ** 2)))
        extra.update({k: float(v) for k, v in moments.items() if k.startswith("base_")})
    return extra


# --------------------------------------------------------------------------------- one case
def quiet_loggers() -> None:
    """Silence the libraries' loggers in a case process."""
    for name in ("pymc", "pytensor", "pymc_tempering", "nutpie", "arviz"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


#: With ``--in-process``: each problem's model, built once (:func:`keep_models`).
KEPT_MODELS: dict | None = None
#: With ``--in-process``: how many times each (problem, method) ran in this process.
CALLS: dict = {}


def keep_models() -> None:
    """From now on, build each problem's model once in this process and keep it, as a user's
    session would: a method's later calls on it find what its first call compiled."""
    global KEPT_MODELS
    KEPT_MODELS = {} if KEPT_MODELS is None else KEPT_MODELS


def _kept(problem):
    if KEPT_MODELS is None:
        return problem
    def build():
        if problem.name not in KEPT_MODELS:
            KEPT_MODELS[problem.name] = problem.build()
        return KEPT_MODELS[problem.name]
    return dataclasses.replace(problem, build=build)


def run_case(problem_name: str, method_name: str, seed: int, settings: dict) -> dict:
    """Run one case in this process and return its record (a failure is recorded, not raised).

    The record's ``call`` counts the runs of the method on the problem in this process (1: the
    first), and ``phases`` holds the result's phase report (its ``timing`` group), if any."""
    quiet_loggers()
    problem = _kept(get_problem(problem_name))
    record = empty_record(problem_name, method_name, seed)
    CALLS[problem_name, method_name] = CALLS.get((problem_name, method_name), 0) + 1
    record["call"] = CALLS[problem_name, method_name]
    # nutpie's compilation of an extended model (pymc_tempering's own cached compiler, which
    # takes what nutpie.compile_pymc_model would) and of plain models (pm.sample's nutpie)
    import nutpie

    from pymc_tempering.extended import compiled

    start = time.perf_counter()
    try:
        with (warnings.catch_warnings(record=True) as caught,
              timed_phases([(nutpie, "compile_pymc_model", "compile"),
                             (compiled, "compile_pymc_model", "compile")]) as compile_seconds):
            warnings.simplefilter("always")
            idata, fields = METHODS[method_name].run(problem, seed, settings)
            record["seconds"] = time.perf_counter() - start
        record["nutpie_compile_seconds"] = compile_seconds.get("compile", 0.0)
        seen = list(dict.fromkeys(
            f"{w.category.__name__}: {w.message}"[:300] for w in caught
            if not issubclass(w.category, DeprecationWarning | FutureWarning)))
        record["warnings"] = seen[:8]
        record.update(fields)
        if idata is not None and "timing" in getattr(idata, "children", {}):
            record["phases"] = {k: float(v) for k, v in idata["timing"].to_dataset().items()}
        if idata is not None:
            record.update(read_evidence(idata, method_name))
            if problem.label is not None:
                record.update(read_modes(problem, idata, problem.build(), method_name))
            record.update(read_extras(problem, idata))
    except Exception as exc:  # noqa: BLE001 - recorded, the suite goes on
        import traceback

        traceback.print_exc()
        record["error_message"] = f"{type(exc).__name__}: {exc}"[:2000]
        if record["seconds"] is None:
            record["seconds"] = time.perf_counter() - start
    record["log_z"], record["log_z_se"] = finite(record["log_z"]), finite(record["log_z_se"])
    return record


def case_script() -> Path:
    """The script a case process runs: the one that was started (``__main__``), whose import
    registers its own methods and problems and whose :func:`parse` runs the case; this file
    where that is not a script."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return Path(main).resolve() if main and main.endswith(".py") else Path(__file__).resolve()


def spawn_case(problem: str, method_name: str, seed: int, settings: dict, timeout: float) -> dict:
    """Run one case in a fresh process of :func:`case_script` (its own process group, killed
    with any workers it started on timeout) and return its record, or a failed record with
    the reason."""
    cmd = [sys.executable, str(case_script()), "--case", problem, method_name,
           str(seed), "--settings", json.dumps(settings)]
    failed = empty_record(problem, method_name, seed)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return failed | {"seconds": float(timeout), "error_message": f"timeout after {timeout} s"}
    for line in reversed(stdout.splitlines()):
        if line.startswith(CASE_PREFIX):
            return json.loads(line[len(CASE_PREFIX):])
    return failed | {"error_message": f"case process exited with {proc.returncode}: {stderr[-1500:]}"}


# -------------------------------------------------------------------------------- the suite
def versions(packages=("pymc-tempering", "pymc", "pytensor", "nutpie", "dynesty", "numpy")) -> dict:
    """The installed versions of ``packages``, the commit, and whether the package's files
    differ from it."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in packages:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "pymc_tempering"], cwd=ROOT,
                               capture_output=True, text=True).stdout
        out["git_commit"], out["pymc_tempering_dirty"] = commit.strip(), bool(dirty.strip())
    except OSError:
        pass
    return out


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` through a temporary file, so an interrupted run keeps the last whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def results_file(suite: str, settings: dict, runs: list, *, truths: dict | None = None,
                 **extra) -> dict:
    """A results file in the harness's format for a script that does not run
    :func:`run_suite` (its records are its own): ``suite``, ``settings``, ``versions``,
    ``truths``, ``runs`` and any ``extra`` top-level entries."""
    return {"suite": suite, "settings": settings, "versions": versions(), "truths": truths or {},
            "runs": list(runs), **extra}


def load(path) -> dict:
    """A results file, as :func:`write_json` wrote it."""
    return json.loads(Path(path).read_text())


def run_or_report(args, suite: str, settings: dict, *, report: Callable | None = None,
                  plot: Callable | None = None, quick_problems=QUICK_PROBLEMS,
                  in_process: bool = False, warm_up: Callable | None = None) -> dict:
    """The common flow of a suite: with ``--report`` read ``--out``, else run the selection of
    the command line (:func:`selection`) on :func:`run_suite`; then print ``report(data)``
    (default :func:`table`) and, with ``--figure``, draw ``plot(data, path)`` (default
    :func:`plot_errors`). Returns the results file's content."""
    if args.report:
        data = load(args.out)
    else:
        problems, methods, seeds = selection(args, quick_problems)
        data = run_suite(suite, problems, methods, seeds, args.out, settings,
                         resume=args.resume, timeout=args.timeout, in_process=in_process,
                         warm_up=warm_up)
    if report is None:
        print(table(data))
    else:
        report(data)
    if args.figure:
        (plot or plot_errors)(data, Path(args.figure))
        print(f"wrote {args.figure}")
    return data


def truth_entry(problem) -> dict:
    """A problem's truths as the results file holds them."""
    truth = problem.truths
    entry = {"log_z": finite(truth.log_z)}
    if truth.mode_probabilities is not None:
        entry["modes"] = list(problem.modes)
        entry["probabilities"] = [float(v) for v in truth.mode_probabilities]
    return entry


def score(record: dict, truth: dict) -> dict:
    """The record's errors against the truth: ``log_z_error``, ``z``, and the largest
    mode-probability error with its mode and standard error."""
    record = dict(record)
    exact = truth.get("log_z")
    record["log_z_error"] = (record["log_z"] - exact
                             if record.get("log_z") is not None and exact is not None else None)
    se = record.get("log_z_se")
    record["z"] = record["log_z_error"] / se if record["log_z_error"] is not None and se else None
    record["max_error"] = record["max_error_mode"] = record["max_error_se"] = None
    if record.get("probabilities") is not None and truth.get("probabilities") is not None:
        errors = np.abs(np.array(record["probabilities"]) - np.array(truth["probabilities"]))
        k = int(np.argmax(errors))
        record["max_error"], record["max_error_mode"] = float(errors[k]), truth["modes"][k]
        ses = record.get("probabilities_se")
        record["max_error_se"] = ses[k] if ses else None
    return record


def run_suite(suite: str, problems, methods, seeds, out: Path, settings: dict, *,
              resume: bool = False, timeout: float = 900.0, in_process: bool = False,
              warm_up: Callable | None = None) -> dict:
    """Run every (problem, method, seed) case, seed-major; rewrite ``out`` after every case.

    Parameters
    ----------
    suite : str
        The suite's name, stored in the file.
    problems, methods, seeds : sequence
        The cases: names of problems (:func:`get_problem`), of methods (:data:`METHODS`) and
        integer seeds.
    out : Path
        The results JSON.
    settings : dict
        Passed to every method runner and stored in the file.
    resume : bool
        Keep the cases ``out`` holds (its settings must agree) and run the others.
    timeout : float
        Seconds per case (a case process is killed past it; ignored ``in_process``).
    in_process : bool
        Run the cases one after the other in this process instead of one fresh process each:
        for a measurement of warm runs (compilation caches filled by ``warm_up`` or an earlier
        case), which a fresh process would not show.
    warm_up : callable, optional
        ``warm_up(settings)``, called once before the cases when ``in_process``, its time not
        recorded.

    Returns
    -------
    dict
        The results file's content.
    """
    out = Path(out)
    settings = {**settings, "timeout": timeout}
    data = {"suite": suite, "settings": settings, "truths": {}, "runs": []}
    if resume and out.exists():
        data = json.loads(out.read_text())
        if data.get("settings") != settings:
            raise SystemExit(f"--resume: {out} was written with settings {data.get('settings')}, "
                             f"not {settings}; use another --out.")
    data["versions"] = versions()
    for name in problems:
        data["truths"][name] = truth_entry(get_problem(name))
    done = {(r["problem"], r["method"], r["seed"]) for r in data["runs"]}
    cases = [(p, m, s) for s in seeds for p in problems for m in methods if (p, m, s) not in done]
    print(f"{len(cases)} cases to run ({len(done)} already in {out})", flush=True)
    if in_process:
        keep_models()
    if in_process and warm_up is not None and cases:
        quiet_loggers()
        warm_up(settings)
    for i, (name, method_name, seed) in enumerate(cases, 1):
        record = (run_case(name, method_name, seed, settings) if in_process
                  else spawn_case(name, method_name, seed, settings, timeout))
        record = score(record, data["truths"][name])
        data["runs"].append(record)
        write_json(out, data)
        print(f"[{i}/{len(cases)}] {status_line(record)}", flush=True)
    return data


def status_line(r: dict) -> str:
    """One line about a run, for the log."""
    head = f"{r['problem']} {r['method']} seed {r['seed']}:"
    if r.get("error_message") and r.get("log_z") is None and r.get("probabilities") is None:
        return f"{head} FAILED: {str(r['error_message'])[:200]}"
    parts = []
    if r.get("log_z") is not None:
        parts.append(f"log Z {r['log_z']:.3f} +- {_fmt(r.get('log_z_se'))} "
                     f"(error {_fmt(r.get('log_z_error'), '+.3f')}, reliable {r.get('reliable')})")
    if r.get("max_error") is not None:
        parts.append(f"largest mode error {r['max_error']:.3f} ({r['max_error_mode']})")
    return f"{head} {'; '.join(parts) or 'no estimate'}  {_fmt(r.get('seconds'), '.1f')} s"


# --------------------------------------------------------------------------------- reports
def _fmt(value, spec=".3f"):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def summarise(data: dict, methods=None) -> list[dict]:
    """One row per (problem, method) in the file's order: failures, the evidence's errors and
    z-scores, the runs that do not mislead (``|z| < 3`` with ``se <= 0.3``, or flagged), the
    mode probabilities' errors and verdicts, and the median wall time."""
    methods = methods or list(dict.fromkeys(r["method"] for r in data["runs"]))
    rows = []
    for name in data["truths"]:
        for method_name in methods:
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method_name]
            if runs:
                rows.append({"problem": name, "method": method_name, "runs": len(runs),
                             **_evidence_summary(runs), **_modes_summary(runs),
                             "median_seconds": _median([r.get("seconds") for r in runs])})
    return rows


def _median(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def _evidence_summary(runs) -> dict:
    ok = [r for r in runs if r.get("log_z_error") is not None]
    err = np.array([r["log_z_error"] for r in ok])
    se = np.array([r["log_z_se"] if r.get("log_z_se") is not None else np.nan for r in ok])
    z = np.array([r["z"] for r in ok if r.get("z") is not None])
    rel = [r["reliable"] for r in ok if r.get("reliable") is not None]
    good = [(r.get("z") is not None and abs(r["z"]) < 3 and r["log_z_se"] <= 0.3)
            or r.get("reliable") is False for r in ok]
    return {
        "failed": sum(r.get("log_z") is None and r.get("probabilities") is None for r in runs),
        "median_abs_error": float(np.median(np.abs(err))) if ok else None,
        "rmse": float(np.sqrt(np.mean(err**2))) if ok else None,
        "median_se": float(np.nanmedian(se)) if np.isfinite(se).any() else None,
        "z_mean": float(z.mean()) if z.size else None,
        "sd_z": float(np.std(z, ddof=1)) if z.size > 1 else None,
        "max_abs_z": float(np.max(np.abs(z))) if z.size else None,
        "frac_abs_z_below_3": float(np.mean(np.abs(z) < 3)) if z.size else None,
        "frac_reliable": float(np.mean(rel)) if rel else None,
        "frac_ok_or_flagged": float(np.mean(good)) if ok else None,
    }


def _modes_summary(runs) -> dict:
    ok = [r for r in runs if r.get("max_error") is not None]
    post = [r["posterior_reliable"] for r in ok if r.get("posterior_reliable") is not None]
    ses = [r["max_error_se"] for r in ok if r.get("max_error_se") is not None]
    return {
        "within": sum(r["max_error"] <= TOLERANCE for r in ok) if ok else None,
        "with_modes": len(ok),
        "largest_error": max(r["max_error"] for r in ok) if ok else None,
        "median_mode_se": float(np.median(ses)) if ses else None,
        "frac_posterior_reliable": float(np.mean(post)) if post else None,
        "off_unflagged": (sum(r["max_error"] > 0.05 and r.get("posterior_reliable") is True
                              for r in ok) if post else None),
    }


def cost_table(data: dict, method: str = "ct", against: str = "smc") -> str:
    """Wall time of ``method`` against ``against`` per problem: the ratio of their median
    seconds, over the first calls in the process and over the later ones (runs made with
    ``--in-process``; others count as first calls), with the phases of ``method``'s later
    calls (median seconds, from its ``timing`` group)."""
    from pymc_tempering.timing import PHASES

    def median(problem, name, later):
        values = [r["seconds"] for r in data["runs"]
                  if r["problem"] == problem and r["method"] == name and r.get("seconds")
                  and (r.get("call", 1) > 1) == later]
        return (float(np.median(values)), len(values)) if values else (None, 0)

    lines = [f"| problem | {method} / {against}, first call | later calls (runs) | "
             + " | ".join(PHASES) + " |", "|" + "---|" * (3 + len(PHASES))]
    ratios = []
    for problem in dict.fromkeys(r["problem"] for r in data["runs"]):
        cells = []
        for later in (False, True):
            (a, n), (b, _) = median(problem, method, later), median(problem, against, later)
            ratio = a / b if a is not None and b else None
            cells.append(f"{_fmt(ratio, '.2f')}" + (f" ({n})" if later else ""))
            if later and ratio is not None:
                ratios.append(ratio)
        phases = [r["phases"] for r in data["runs"] if r["problem"] == problem
                  and r["method"] == method and r.get("call", 1) > 1 and r.get("phases")]
        cells += [_fmt(float(np.median([p[k] for p in phases])), ".2f") if phases else "-"
                  for k in PHASES]
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    if ratios:
        lines.append(f"\nLater calls: median ratio {np.median(ratios):.2f}, "
                     f"{sum(r <= 1.0 for r in ratios)} of {len(ratios)} problems at most 1.0x, "
                     f"largest {max(ratios):.2f}.")
    return "\n".join(lines)


def table(data: dict) -> str:
    """The generic Markdown table: one row per problem and method."""
    lines = ["| problem | method | runs | failed | med abs err | RMSE | med se | sd z | max abs z "
             f"| ok/flag | reliable | within {TOLERANCE} | largest mode error | posterior reliable "
             "| med s |", "|" + "---|" * 15]
    for r in summarise(data):
        within = f"{r['within']}/{r['with_modes']}" if r["with_modes"] else "-"
        lines.append(
            f"| {r['problem']} | {r['method']} | {r['runs']} | {r['failed']} "
            f"| {_fmt(r['median_abs_error'])} | {_fmt(r['rmse'])} | {_fmt(r['median_se'])} "
            f"| {_fmt(r['sd_z'], '.2f')} | {_fmt(r['max_abs_z'], '.2f')} "
            f"| {_fmt(r['frac_ok_or_flagged'], '.2f')} | {_fmt(r['frac_reliable'], '.2f')} "
            f"| {within} | {_fmt(r['largest_error'])} | {_fmt(r['frac_posterior_reliable'], '.2f')} "
            f"| {_fmt(r['median_seconds'], '.1f')} |")
    return "\n".join(lines)


def plot_errors(data: dict, path: Path) -> None:
    """Each run's log Z error (left) and largest mode-probability error (right), per problem,
    one colour per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(data["truths"])
    methods = list(dict.fromkeys(r["method"] for r in data["runs"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.4 * len(names) + 1.5), sharey=True)
    for j, method_name in enumerate(methods):
        for i, name in enumerate(names):
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method_name]
            y = i + (j - (len(methods) - 1) / 2) * 0.8 / max(len(methods), 1)
            for ax, key in zip(axes, ("log_z_error", "max_error"), strict=True):
                vals = [r[key] for r in runs if r.get(key) is not None]
                ax.scatter(vals, np.full(len(vals), y), s=12, color=f"C{j}", alpha=0.7,
                           label=method_name if i == 0 and key == "max_error" else None)
    axes[0].axvline(0, color="k", lw=0.6)
    axes[0].set_xscale("symlog", linthresh=0.1)
    axes[0].set_xlabel("log Z error (nats)")
    axes[1].axvline(TOLERANCE, color="k", lw=0.8, ls="--")
    axes[1].set_xlabel("largest mode-probability error")
    axes[0].set_yticks(range(len(names)), names)
    axes[0].invert_yaxis()
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- command line
def parser(description: str, *, problems=(), methods=(), out: Path | None = None,
           figure: Path | None = None, seeds: int = 10) -> argparse.ArgumentParser:
    """The common command line: ``--problems``, ``--methods``, ``--seeds``, ``--first-seed``,
    ``--out``, ``--figure``, ``--quick``, ``--report``, ``--resume``, ``--timeout``,
    ``--draws`` (and the hidden ``--case``)."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problems", default=",".join(problems),
                   help="comma-separated names of pymc_tempering.problems.PROBLEMS")
    p.add_argument("--methods", default=",".join(methods),
                   help=f"comma-separated, of: {', '.join(METHODS)}")
    p.add_argument("--seeds", type=int, default=None, help=f"how many seeds (default {seeds}; 1 with --quick)")
    p.add_argument("--first-seed", type=int, default=0, help="the first seed")
    p.add_argument("--out", type=Path, default=out, help="the results JSON")
    p.add_argument("--figure", default=str(figure or ""), help="the figure's path ('' for none)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 seed, the first problems, tiny draws for every method")
    p.add_argument("--report", action="store_true", help="print the tables from --out and stop")
    p.add_argument("--resume", action="store_true", help="skip the cases --out holds")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    p.add_argument("--in-process", action="store_true",
                   help="run every case in this process, each problem's model built once and "
                        "kept across seeds and methods (a session's calls: the first compiles, "
                        "later ones find the compilation); records say which call they were")
    p.add_argument("--draws", type=int, default=None, help="draws per chain (default: each method's)")
    p.add_argument("--case", nargs=3, metavar=("PROBLEM", "METHOD", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    p.set_defaults(default_seeds=seeds)
    return p


def selection(args, quick_problems=QUICK_PROBLEMS):
    """``(problems, methods, seeds)`` from the parsed command line, checked."""
    from pymc_tempering.problems import PROBLEMS

    problems = [p for p in args.problems.split(",") if p]
    if args.quick and not args.problems_given:
        problems = list(quick_problems)
    methods = [m for m in args.methods.split(",") if m]
    unknown = ([p for p in problems if p not in PROBLEMS and p not in LOCAL_PROBLEMS]
               + [m for m in methods if m not in METHODS])
    if unknown:
        raise SystemExit(f"unknown problem(s) or method(s): {unknown}")
    n_seeds = args.seeds if args.seeds is not None else (1 if args.quick else args.default_seeds)
    return problems, methods, list(range(args.first_seed, args.first_seed + n_seeds))


def parse(p: argparse.ArgumentParser, argv=None):
    """Parse, noting whether ``--problems`` and ``--methods`` were given (``problems_given``,
    ``methods_given``: ``--quick`` picks its own otherwise)."""
    args = p.parse_args(argv)
    if args.case:  # a case process (spawn_case): run it, print its record and stop
        name, method_name, seed = args.case
        record = run_case(name, method_name, int(seed), json.loads(args.settings))
        print(CASE_PREFIX + json.dumps(record), flush=True)
        raise SystemExit(0)
    argv = sys.argv[1:] if argv is None else argv
    args.problems_given = any(a == "--problems" or a.startswith("--problems=") for a in argv)
    args.methods_given = any(a == "--methods" or a.startswith("--methods=") for a in argv)
    return args


def settings_from(args, quick=QUICK, **extra) -> dict:
    """The case settings: ``--quick``'s tiny runs, or ``--draws`` for every sampler, and a
    script's own ``extra`` settings (which its method runners read)."""
    settings = dict(quick) if args.quick else {}
    if args.draws:
        settings["draws"] = args.draws
    return {"quick": bool(args.quick), **settings, **extra}


def main(argv=None):
    p = parser(__doc__.splitlines()[0], problems=QUICK_PROBLEMS, methods=("ct", "smc"),
               out=Path("/tmp/harness.json"), seeds=1)
    args = parse(p, argv)
    run_or_report(args, "harness", settings_from(args))


if __name__ == "__main__":
    main()
