"""Continuous tempering under NumPyro on a GPU against nutpie on every CPU core: draws per second.

A logistic regression with 10^5 rows (``--rows``) and 20 standardised features: the log density
is one large matrix-vector product per gradient, which a GPU does in parallel over the rows and
NumPyro's ``chain_method="vectorized"`` also over the chains. The same continuously tempered
model runs twice, from the same base and ``log_zeta``:

- ``numpyro``: ``pmt.sample_ct(nuts_sampler="numpyro", nuts={"chain_method": "vectorized"},
  chains=--gpu-chains)``, on JAX's default device (the GPU when JAX sees one);
- ``nutpie``: ``pmt.sample_ct(nuts_sampler="nutpie", chains=--cpu-chains, cores=<all cores>)``,
  one chain per core.

The base (``fit_base(method="laplace")``, the default's mode search and Laplace fit, on the CPU
through PyTensor) is fitted once, timed apart, and given to both, with ``bootstrap=0``, so the
two timings differ only by the NUTS backend (its compile included: one call, as a user makes it).
For each run: the call's wall time, the weighted effective draws (``ess_mean`` of
``pmt.weighted_summary``, the weakest coefficient and the median) and those per second, the log
marginal likelihood with its standard error (the two must agree within their errors), the
divergences.

It is not problems x methods x seeds on ``benchmarks/harness.py``'s cases because its two
backends run in one process from one base fitted once, timed apart, so they are one measurement;
it uses the harness's command line (``--methods``: ``numpyro``, ``nutpie`` or both, ``--draws``,
``--out``, ``--quick``, ``--report``; not ``--problems`` or ``--seeds``) and writes
:func:`harness.results_file`, one record per backend (its wall seconds, log Z with its standard
error, effective draws). The harness adds no import beyond NumPy and the standard library.

Usage::

    python benchmarks/jax_gpu.py                        # 1e5 rows, 128 GPU chains
    python benchmarks/jax_gpu.py --quick                # 2000 rows, short runs (CPU is fine)
    python benchmarks/jax_gpu.py --methods numpyro --gpu-chains 256
    python benchmarks/jax_gpu.py --report --out benchmarks/results/jax_gpu.json

Needs the ``jax`` extra (JAX, NumPyro) and, for a GPU, a CUDA build of jaxlib. Writes
``benchmarks/results/jax_gpu.json`` (``jax_gpu_quick.json`` with ``--quick``; ``--out`` to
change) and prints a Markdown table. Not part of any test run.
"""

from __future__ import annotations

import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_tempering as pmt

import harness

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SEED = 52


def logistic_model(n_rows: int, n_features: int, seed: int = SEED) -> pm.Model:
    """``y_i ~ Bernoulli(logit^-1(a + x_i' b))``, ``a ~ N(0, 2.5^2)``, ``b_k ~ N(0, 1)``.

    Synthetic data with a fixed seed: standard normal features, true coefficients drawn from
    ``N(0, 0.5^2)`` and intercept 0.3.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    b_true = rng.normal(0.0, 0.5, n_features)
    y = rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + X @ b_true)))
    with pm.Model(coords={"feature": np.arange(n_features)}) as model:
        a = pm.Normal("a", 0.0, 2.5)
        b = pm.Normal("b", 0.0, 1.0, dims="feature")
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y.astype("int64"))
    return model


def devices() -> dict:
    try:
        import jax
    except ImportError:
        return {"jax": None}
    kinds = {}
    for d in jax.devices():  # PyMC asks XLA for 100 host devices: count them, not list them
        kinds[f"{d.platform}: {d.device_kind}"] = kinds.get(f"{d.platform}: {d.device_kind}", 0) + 1
    return {"jax": jax.__version__, "default_backend": jax.default_backend(), "devices": kinds}


def run(label: str, model: pm.Model, base, log_zeta: float, args, **sample_kwargs) -> dict:
    """One ``sample_ct`` call, timed; its effective draws, evidence and divergences."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pmt.sample_ct(
            args.draws, args.tune, model=model, random_seed=SEED, progressbar=False, base=base,
            log_zeta=log_zeta, bootstrap=0, **sample_kwargs,
        )
    wall = time.perf_counter() - start
    ess = pmt.weighted_summary(idata, var_names=["a", "b"])["ess_mean"]
    lml = pmt.log_marginal_likelihood(idata)
    out = {
        "seconds": wall,
        "log_z": lml.estimate,
        "log_z_se": lml.standard_error,
        "chains": int(idata["posterior"].sizes["chain"]),
        "draws": args.draws,
        "tune": args.tune,
        "ess_min": float(ess.min()),
        "ess_median": float(ess.median()),
        "ess_min_per_s": float(ess.min()) / wall,
        "ess_median_per_s": float(ess.median()) / wall,
        "reliable": bool(lml.reliable),
        "divergences": int(idata["sample_stats"]["diverging"].sum()),
        "sampling_time_s": idata["posterior"].attrs.get("sampling_time"),
        "sampler_settings": sample_kwargs,
    }
    print(f"{label}: {wall:.1f} s, ess min {out['ess_min']:.0f} ({out['ess_min_per_s']:.1f}/s), "
          f"log Z {lml.estimate:.3f} ± {lml.standard_error:.3f}", flush=True)
    return out


def report(data: dict) -> None:
    """One row per backend: chains, wall time, effective draws and per second, log Z."""
    print("| backend | chains | wall (s) | ess min | ess min / s | ess median / s | log Z |")
    print("|---|---|---|---|---|---|---|")
    for r in data["runs"]:
        print(f"| {r['method']} | {r['chains']} | {r['seconds']:.1f} | {r['ess_min']:.0f} | "
              f"{r['ess_min_per_s']:.1f} | {r['ess_median_per_s']:.1f} | "
              f"{r['log_z']:.3f} ± {r['log_z_se']:.3f} |")
    if "speedup_ess_min_per_s" in data:
        print(f"\nnumpyro / nutpie, min ESS per second: {data['speedup_ess_min_per_s']:.2f}; "
              f"log Z difference {data['lml_difference_in_se']:.4f} standard errors")


def main(argv=None):
    parser = harness.parser(__doc__.splitlines()[0], methods=("numpyro", "nutpie"), out=None, seeds=1)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--gpu-chains", type=int, default=128)
    parser.add_argument("--cpu-chains", type=int, default=os.cpu_count())
    parser.add_argument("--tune", type=int, default=1000)
    args = harness.parse(parser, argv)
    path = Path(args.out or RESULTS / ("jax_gpu_quick.json" if args.quick else "jax_gpu.json"))
    if args.report:
        report(harness.load(path))
        return
    backends = [b for b in args.methods.split(",") if b]
    if set(backends) - {"numpyro", "nutpie"}:
        raise SystemExit(f"--methods: numpyro and/or nutpie, not {args.methods}")
    args.draws = args.draws or 1000
    if args.quick:
        args.rows, args.features, args.draws, args.tune = 2000, 5, 200, 200
        args.gpu_chains = args.cpu_chains = 4
    model = logistic_model(args.rows, args.features)

    start = time.perf_counter()
    base = pmt.fit_base(model, method="laplace", random_seed=SEED, progressbar=False)
    estimate = pmt.estimate_log_zeta(pmt.Target(model), base, random_seed=SEED)
    log_zeta = estimate if base.log_zeta is None else max(base.log_zeta, estimate)  # sample_ct's
    base_s = time.perf_counter() - start
    print(f"base: {base_s:.1f} s, log_zeta {log_zeta:.3f}", flush=True)

    problem = f"logistic_{args.rows}x{args.features}"
    runs = {}
    if "numpyro" in backends:
        runs["numpyro"] = run("numpyro", model, base, log_zeta, args, chains=args.gpu_chains,
                              nuts_sampler="numpyro", nuts={"chain_method": "vectorized"})
    if "nutpie" in backends:
        runs["nutpie"] = run("nutpie", model, base, log_zeta, args, chains=args.cpu_chains,
                             nuts_sampler="nutpie", cores=os.cpu_count())
    extra = {}
    if len(runs) == 2:
        extra["speedup_ess_min_per_s"] = (runs["numpyro"]["ess_min_per_s"]
                                          / runs["nutpie"]["ess_min_per_s"])
        extra["lml_difference_in_se"] = (
            (runs["numpyro"]["log_z"] - runs["nutpie"]["log_z"])
            / np.hypot(runs["numpyro"]["log_z_se"], runs["nutpie"]["log_z_se"]))
    data = harness.results_file(
        "jax_gpu", {"rows": args.rows, "features": args.features, "draws": args.draws,
                    "tune": args.tune, "quick": bool(args.quick)},
        [{**harness.empty_record(problem, label, SEED), **r} for label, r in runs.items()],
        rows=args.rows, features=args.features, random_seed=SEED, base_s=base_s, log_zeta=log_zeta,
        machine={"cpu_count": os.cpu_count(), "platform": platform.platform(),
                 "python": platform.python_version(), **devices()},
        command=" ".join(["python benchmarks/jax_gpu.py", *sys.argv[1:]]), **extra)
    harness.write_json(path, data)
    print()
    report(data)
    print(f"\nwritten to {path}; devices: {data['machine'].get('devices')}")


if __name__ == "__main__":
    main()
