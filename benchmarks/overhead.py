"""Overhead of the continuously tempered (extended) model over the original model.

What it measures
----------------
The cost of ONE log-density + gradient evaluation of the jointly continuously tempered model
built by :func:`pymc_tempering.continuously_tempered_model` (the original model's unconstrained
variables plus ``temperature_control``), divided by the cost of one log-density + gradient
evaluation of the original model. The model is the radon hierarchical regression
(:func:`pymc_tempering.problems.radon_model`: 92 parameters, 919 observations). Two bases:

* mean-field: a Gaussian base with a diagonal covariance (``base.diagonal is True``);
* full-rank: a Gaussian base with a dense covariance (``base.diagonal is False``).

By default both are made with :meth:`pymc_tempering.Base.from_moments` from a random mean near
the model's initial point and random variances (mean-field) or a random SPD covariance
(full-rank): the cost of an evaluation does not depend on the base's values, and this avoids two
ADVI fits. ``--fit-bases`` fits them with ``pmt.fit_base`` (``"advi"``, ``"fullrank_advi"``)
instead. Both models are evaluated at the original model's initial point, the extended one with
``temperature_control = 0`` (inverse temperature 1/2); ``log_zeta = 0``.

Three ways of evaluating, i.e. three backends:

``nutpie``
    The numba kernel that nutpie (PyMC 6's default sampler) compiles
    (``nutpie.compile_pymc_model(model, backend="numba")``), called in a loop inside numba, so
    without any Python overhead: this is the per-gradient cost nutpie's Rust sampler pays.
    Falls back to the kernel of ``model.logp_dlogp_function(mode="NUMBA")`` when nutpie is not
    installed.
``pymc-numba``
    ``model.logp_dlogp_function(ravel_inputs=True)`` in PyTensor's default mode, called from
    Python the way ``pm.sample(nuts_sampler="pymc")`` calls it in every leapfrog step. NOTE: in
    PyTensor 3.3 the default mode uses the numba linker, not the C backend.
``pymc-c``
    The same function compiled with PyTensor's C backend (``mode="CVM"``), PyTensor's former
    default.

Timing is interleaved so that the ratios are fair on a noisy shared machine: each of
``--blocks`` blocks times ``--calls`` consecutive evaluations of every (backend, model) pair, in
an order that rotates from block to block, with the garbage collector off. The ratio of a block
is (time of the extended model) / (time of the original model) for the same backend in the same
block; the script reports the median over blocks and the interquartile range of the per-block
ratios. Absolute times depend on the machine and are kept in the JSON only as context.

Goals (from the issue): at most 1.15x for a mean-field base and 1.3x for a full-rank base.

It is not problems x methods x seeds on ``benchmarks/harness.py``'s cases because its ratios come
from blocks that interleave every backend and model in one process, which separate cases per
backend would lose; it uses the harness's command line (``--methods``: the backends,
``--first-seed``: the seed of the random bases, ``--out``, ``--figure``, ``--quick``,
``--report``; not ``--problems``) and writes :func:`harness.results_file` (one record per
backend, problem ``radon_centred``: its median microseconds per call and its ratios).

Outputs: ``benchmarks/results/overhead.json`` and ``benchmarks/results/overhead.png``.

Rerun
-----
::

    .venv/bin/python benchmarks/overhead.py            # ~35 s on 2 cores with warm compile
                                                       # caches, 1-2 minutes cold (mostly
                                                       # compiling: 9 functions)
    .venv/bin/python benchmarks/overhead.py --quick    # 15 blocks of 200 calls instead of
                                                       # 100 of 1000
    .venv/bin/python benchmarks/overhead.py --report   # the table (and --figure) from --out

Other options: ``--methods nutpie,pymc-numba``, ``--fit-bases``, ``--blocks N``,
``--calls N``, ``--first-seed N``. BLAS is limited to one thread (as one chain
per core would have it) unless ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS``
are already set.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import gc  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import harness  # noqa: E402

GOALS = {"mean-field": 1.15, "full-rank": 1.3}
BASES = ("mean-field", "full-rank")
BACKENDS = ("nutpie", "pymc-numba", "pymc-c")
BACKEND_LABELS = {
    "nutpie": "nutpie numba kernel\n(no Python overhead)",
    "pymc-numba": "pm.sample NUTS, default mode\n(numba, called from Python)",
    "pymc-c": "pm.sample NUTS, C backend\n(mode='CVM', called from Python)",
}
PROBLEM = "radon_centred"  # radon_model()'s default form


# --------------------------------------------------------------------------- models and points
def build_cases(seed: int, fit_bases: bool, advi_n: int):
    """The original radon model, the two bases, the two extended models and the points."""
    import pymc_tempering as pmt
    from pymc_tempering.problems.radon import radon_model

    model = radon_model()
    target = pmt.Target(model)
    n = target.ndim
    x0 = target.ravel(model.initial_point())
    rng = np.random.default_rng(seed)

    if fit_bases:
        bases = {
            "mean-field": pmt.fit_base(
                model, method="advi", n=advi_n, random_seed=seed, progressbar=False
            ),
            "full-rank": pmt.fit_base(
                model, method="fullrank_advi", n=advi_n, random_seed=seed, progressbar=False
            ),
        }
        base_source = f"pmt.fit_base(method='advi' / 'fullrank_advi', n={advi_n})"
    else:
        mean = x0 + 0.1 * rng.standard_normal(n)
        sd = rng.uniform(0.05, 0.5, n)
        # A random correlation matrix (normalised Wishart draw) scaled by sd: dense and SPD.
        a = rng.standard_normal((n, n + 10))
        s = a @ a.T / (n + 10)
        corr = s / np.sqrt(np.outer(np.diag(s), np.diag(s)))
        bases = {
            "mean-field": pmt.Base.from_moments(mean, sd**2),  # 1-D variances: diagonal
            "full-rank": pmt.Base.from_moments(mean, np.outer(sd, sd) * corr),
        }
        base_source = (
            "pmt.Base.from_moments: random mean near the initial point; variances "
            "(mean-field) or a random dense SPD covariance (full-rank)"
        )
    if not bases["mean-field"].diagonal or bases["full-rank"].diagonal:
        raise RuntimeError("Expected a diagonal mean-field base and a dense full-rank base.")

    log_zeta = 0.0
    u0 = 0.0
    extended = {
        name: pmt.continuously_tempered_model(model, base, log_zeta=log_zeta)
        for name, base in bases.items()
    }
    models = {"original": model, **extended}

    # The point each model is evaluated at: the original initial point, plus u for the
    # extended models; flattened in the order of the model's value variables.
    point = {name: value for name, value in zip(target.names, target.unravel(x0).values())}
    points = {}
    for key, m in models.items():
        p = dict(point)
        if key != "original":
            p["temperature_control"] = np.asarray(u0)
        points[key] = np.concatenate([np.ravel(p[v.name]) for v in m.value_vars]).astype(float)

    # Expected log densities, from the library's numeric interface: eq. (15) of the paper.
    logp_x = float(target.logp(x0))
    beta = 1.0 / (1.0 + np.exp(-u0))
    expected = {"original": logp_x}
    for name, base in bases.items():
        expected[name] = (
            beta * (logp_x - log_zeta)
            + (1 - beta) * float(base.logp(x0))
            + np.log(beta * (1 - beta))
        )
    n_obs = int(sum(np.size(model.rvs_to_values[rv].data) for rv in model.observed_RVs))
    info = {
        "model": "radon hierarchical regression (pymc_tempering.problems.radon_model)",
        "n_params": n,
        "n_params_extended": n + 1,
        "n_obs": n_obs,
        "base_source": base_source,
        "base_diagonal": {name: bool(b.diagonal) for name, b in bases.items()},
        "log_zeta": log_zeta,
        "temperature_control": u0,
        "evaluation_point": "original model's initial point (+ temperature_control for the "
        "extended models)",
    }
    return models, points, expected, info


# --------------------------------------------------------------------------- compiled functions
_LOOP = None


def _numba_loop():
    """A numba loop that calls a numba-compiled logp+grad kernel ``n`` times."""
    global _LOOP
    if _LOOP is None:
        import numba

        @numba.njit
        def loop(fn, x, n):
            acc = 0.0
            for _ in range(n):
                out = fn(x)
                acc += out[1][0]  # use the result so nothing is optimised away
            return acc

        _LOOP = loop
    return _LOOP


def _kernel_runner(jit_fn, x):
    loop = _numba_loop()

    def run(n_calls):
        start = time.perf_counter()
        loop(jit_fn, x, n_calls)
        return time.perf_counter() - start

    def evaluate():
        logp, grad = jit_fn(x)
        return float(logp), np.asarray(grad)

    return run, evaluate


def _python_runner(fn, x):
    def run(n_calls):
        start = time.perf_counter()
        for _ in range(n_calls):
            fn(x)
        return time.perf_counter() - start

    def evaluate():
        logp, grad = fn(x)
        return float(logp), np.asarray(grad)

    return run, evaluate


def compile_runner(backend: str, model, x):
    """(run(n_calls) -> seconds, evaluate() -> (logp, grad), description) for one model."""
    if backend == "nutpie":
        try:
            import nutpie
        except ImportError:
            nutpie = None
        if nutpie is not None:
            compiled = nutpie.compile_pymc_model(model, backend="numba")
            fn = compiled.logp_func
            if not fn.get_shared():
                run, evaluate = _kernel_runner(fn.vm.jit_fn, x)
                return run, evaluate, "nutpie.compile_pymc_model(backend='numba').logp_func kernel"
        vgf = model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
        vgf.set_extra_values({})
        run, evaluate = _kernel_runner(vgf._pytensor_function.vm.jit_fn, x)
        return run, evaluate, "model.logp_dlogp_function(mode='NUMBA') kernel (nutpie missing)"
    if backend == "pymc-numba":
        vgf = model.logp_dlogp_function(ravel_inputs=True)
        desc = "model.logp_dlogp_function(ravel_inputs=True), default mode, Python call"
    elif backend == "pymc-c":
        vgf = model.logp_dlogp_function(ravel_inputs=True, mode="CVM")
        desc = "model.logp_dlogp_function(ravel_inputs=True, mode='CVM'), Python call"
    else:
        raise ValueError(f"Unknown backend {backend!r}.")
    vgf.set_extra_values({})
    # pm.sample's leapfrog integrator calls the compiled function directly, like this.
    run, evaluate = _python_runner(vgf._pytensor_function, x)
    return run, evaluate, desc


# --------------------------------------------------------------------------- measurement
def measure(runners, blocks: int, calls: int, warmup_blocks: int = 3):
    """Interleaved timing; returns {backend: {model: array of seconds per call, by block}}."""
    keys = list(runners)
    models_by_backend = {b: list(runners[b]) for b in keys}
    times = {b: {m: [] for m in models_by_backend[b]} for b in keys}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for block in range(warmup_blocks + blocks):
            backends = keys[block % len(keys) :] + keys[: block % len(keys)]
            for backend in backends:
                order = models_by_backend[backend]
                shift = block % len(order)
                order = order[shift:] + order[:shift]
                if block % 2:
                    order = order[::-1]
                for name in order:
                    elapsed = runners[backend][name][0](calls)
                    if block >= warmup_blocks:
                        times[backend][name].append(elapsed / calls)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {b: {m: np.asarray(v) for m, v in d.items()} for b, d in times.items()}


def summarize(times):
    results = {}
    for backend, by_model in times.items():
        orig = by_model["original"]
        results[backend] = {
            "median_us_per_call": {m: float(np.median(t) * 1e6) for m, t in by_model.items()},
            "ratios": {},
        }
        for base in BASES:
            ratio = by_model[base] / orig
            q25, q50, q75 = np.percentile(ratio, [25, 50, 75])
            results[backend]["ratios"][base] = {
                "median": float(q50),
                "q25": float(q25),
                "q75": float(q75),
                "n_blocks": int(ratio.size),
                "goal": GOALS[base],
                "goal_met": bool(q50 <= GOALS[base]),
            }
    return results


# --------------------------------------------------------------------------- output
def _versions():
    out = {"python": platform.python_version()}
    for pkg in ("pymc", "pytensor", "numba", "nutpie", "numpy", "pymc-tempering"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def by_backend(data: dict) -> dict:
    """``{backend: {"median_us_per_call": ..., "ratios": ...}}`` from the records."""
    return {r["method"]: {k: r[k] for k in ("median_us_per_call", "ratios")} for r in data["runs"]}


def plot(results, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping the plot.", file=sys.stderr)
        return False

    per_backend = by_backend(results)
    backends = list(per_backend)
    colors = {"mean-field": "tab:blue", "full-rank": "tab:orange"}
    width = 0.36
    x = np.arange(len(backends))
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    for i, base in enumerate(BASES):
        r = [per_backend[b]["ratios"][base] for b in backends]
        med = np.array([v["median"] for v in r])
        err = np.array([[v["median"] - v["q25"] for v in r], [v["q75"] - v["median"] for v in r]])
        pos = x + (i - 0.5) * width
        ax.bar(pos, med, width, yerr=err, capsize=4, color=colors[base], label=f"{base} base")
        for p, m, v in zip(pos, med, r, strict=True):
            ax.annotate(f"{m:.2f}", (p, v["q75"]), xytext=(0, 5), textcoords="offset points",
                        ha="center", fontsize=8)
        ax.axhline(GOALS[base], color=colors[base], linestyle="--", linewidth=1.2,
                   label=f"goal {base}: {GOALS[base]}x")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [BACKEND_LABELS[b] for b in backends], fontsize=8)
    ax.set_ylabel("time(extended) / time(original)\nper logp + gradient evaluation")
    top = max(v["q75"] for b in backends for v in per_backend[b]["ratios"].values())
    ax.set_ylim(0.0, max(2.1, top * 1.15))
    m = results["model"]
    ax.set_title(
        f"Overhead of the continuously tempered model, radon "
        f"({m['n_params']} params, {m['n_obs']} obs)\nmedian over {results['settings']['blocks']} "
        f"interleaved blocks, bars: interquartile range",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper right", ncols=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def print_table(results):
    """The median ratio, its interquartile range and the goal, per backend and base."""
    print()
    print(f"{'backend':<12} {'base':<11} {'median':>7} {'IQR':>15} {'goal':>6}  met")
    for backend, r in by_backend(results).items():
        for base, v in r["ratios"].items():
            print(
                f"{backend:<12} {base:<11} {v['median']:>6.3f}x "
                f"[{v['q25']:.3f}, {v['q75']:.3f}] {v['goal']:>5.2f}x  "
                f"{'yes' if v['goal_met'] else 'NO'}"
            )


def main(argv=None):
    parser = harness.parser(__doc__.split("\n\n")[0], methods=BACKENDS,
                            out=harness.RESULTS / "overhead.json",
                            figure=harness.RESULTS / "overhead.png", seeds=1)
    parser.set_defaults(first_seed=20240)
    parser.add_argument("--blocks", type=int, default=None, help="timed blocks (default 100)")
    parser.add_argument("--calls", type=int, default=None, help="calls per block (default 1000)")
    parser.add_argument("--fit-bases", action="store_true", help="fit the bases with ADVI")
    parser.add_argument("--advi-n", type=int, default=3000, help="ADVI iterations")
    args = harness.parse(parser, argv)
    if args.report:
        results = harness.load(args.out)
    else:
        results = measure_all(args, argv)
        harness.write_json(args.out, results)
    plotted = bool(args.figure) and plot(results, Path(args.figure))
    print_table(results)
    print(f"\n{'read' if args.report else 'wrote'} {args.out}" + (f"; wrote {args.figure}" if plotted else ""))
    return results


def measure_all(args, argv) -> dict:
    """Compile and check every (backend, model) pair, time them in interleaved blocks and
    return the results file."""
    backends = [b for b in args.methods.split(",") if b]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        raise SystemExit(f"unknown backend(s) {sorted(unknown)}; of {', '.join(BACKENDS)}")
    blocks = args.blocks or (15 if args.quick else 100)
    calls = args.calls or (200 if args.quick else 1000)
    seed = args.first_seed

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    import pytensor

    t0 = time.perf_counter()
    models, points, expected, info = build_cases(seed, args.fit_bases, args.advi_n)

    runners, descriptions = {}, {}
    for backend in backends:
        runners[backend] = {}
        for name, model in models.items():
            t = time.perf_counter()
            run, evaluate, desc = compile_runner(backend, model, points[name])
            logp, grad = evaluate()
            if not np.isclose(logp, expected[name], rtol=1e-9, atol=1e-6):
                raise RuntimeError(
                    f"{backend}/{name}: logp {logp} differs from the expected {expected[name]}: "
                    "the point is not what it should be."
                )
            if grad.shape != points[name].shape or not np.all(np.isfinite(grad)):
                raise RuntimeError(f"{backend}/{name}: bad gradient.")
            run(2)  # compiles the numba loop for this kernel
            runners[backend][name] = (run, evaluate)
            descriptions[backend] = desc
            print(f"compiled {backend:<10} {name:<10} in {time.perf_counter() - t:5.1f} s",
                  flush=True)

    t_measure = time.perf_counter()
    times = measure(runners, blocks, calls)
    settings = {
        "blocks": blocks,
        "calls_per_block": calls,
        "warmup_blocks": 3,
        "quick": bool(args.quick),
        "seed": seed,
        "interleaving": "every block times every (backend, model) pair; the order rotates "
        "and reverses from block to block; gc disabled while timing",
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "pytensor_default_linker": type(pytensor.compile.mode.get_default_mode().linker).__name__,
        "pytensor_blas__ldflags": pytensor.config.blas__ldflags,
    }
    records = [{**harness.empty_record(PROBLEM, backend, seed), **summary}
               for backend, summary in summarize(times).items()]
    return harness.results_file(
        "overhead", settings, records,
        benchmark="overhead of the continuously tempered model per logp+gradient evaluation",
        metric="time(extended model) / time(original model), per-block ratios of interleaved "
        "timings; median and interquartile range over blocks",
        command=" ".join(["python", "benchmarks/overhead.py", *(argv or sys.argv[1:])]),
        model=info, goals=GOALS, backends=descriptions,
        machine={"platform": platform.platform(),
                 "processor": platform.processor() or platform.machine(),
                 "cpu_count": os.cpu_count()},
        package_versions=_versions(),
        timing_seconds={"compile_and_check": round(t_measure - t0, 1),
                        "measure": round(time.perf_counter() - t_measure, 1)},
    )


if __name__ == "__main__":
    main()
