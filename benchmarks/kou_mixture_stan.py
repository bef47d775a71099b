"""Pseudo-extended HMC on the Kou mixture with Stan's NUTS, to compare with Table 1.

What it measures
----------------
The paper's Table 1 PE rows come from Stan. Our ``sample_pe`` runs (``kou_mixture.py``) spread
over seeds more than those rows in scenario (a). This script runs the same extended target,
eq. (8) with the tempered proposal and beta on (0.001, 1) as in the paper's code, under Stan's
NUTS (pystan 3), one chain per seed as the paper did, and computes the moments with the same
per-draw normalised weights ``pi(x_i)^(1 - beta_i)`` as ``sample_pe``. If Stan's spreads over
seeds match ours, the gap to the paper is not in our implementation.

Stan is not a dependency of the project: run this in a separate environment with
``pip install pystan pandas scipy`` (httpstan ships Stan in its wheel; a C++ compiler is
needed). Seeds are 1000 + i, initial ``x`` uniform on [0, 1]^2, beta 0.5.

It is not problems x methods x seeds on ``benchmarks/harness.py``'s cases because it runs in
a separate environment without PyMC, where the harness's case processes (which import
``pymc_tempering``) cannot run; it uses the harness's command line (``--seeds``,
``--first-seed``, ``--draws``, ``--out``, ``--quick``, ``--report``; not ``--problems`` or
``--methods``) and writes :func:`harness.results_file` (the harness module imports only NumPy
and the standard library): one record per seed, problem ``kou_mixture_a`` or ``kou_mixture_b``
as in ``kou_mixture.py``, method ``stan_peN``, with its ``moments``, seconds and divergences.

Rerun
-----
::

    python benchmarks/kou_mixture_stan.py --scenario a --n-pseudo 2 --seeds 20 \\
        --warmup 5000 --draws 50000
    python benchmarks/kou_mixture_stan.py --report     # the table from --out
    python benchmarks/kou_mixture_stan.py --quick      # smoke: 1 seed, 200 draws

Output: ``benchmarks/results/kou_mixture_stan.json`` (or ``--out``; a run replaces the records
of its scenario and N and keeps the others).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import harness

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "kou_mixture_stan.json"

PROGRAM = """
data {
  int<lower=1> K;
  int<lower=1> N;
  array[K] vector[2] mu;
  vector[K] log_w;
  vector[K] sd_;
}
parameters {
  array[N] vector[2] x;
  vector<lower=0.001, upper=1>[N] beta;
}
model {
  vector[N] log_pi;
  for (i in 1:N) {
    vector[K] terms;
    for (k in 1:K) terms[k] = log_w[k] + normal_lpdf(x[i] | mu[k], sd_[k]);
    log_pi[i] = log_sum_exp(terms);
  }
  // eq. (8), tempered proposal: prod_i pi(x_i)^beta_i * (1/N) sum_i pi(x_i)^(1 - beta_i)
  target += sum(beta .* log_pi) + log_sum_exp((1 - beta) .* log_pi) - log(N);
}
"""


def report(data: dict) -> None:
    """Per scenario and N: the mean and (sd) over seeds of each moment, the mean seconds and
    the divergences."""
    print("| scenario, method | seeds | E x1 | E x2 | E x1² | E x2² | mean s | divergences |")
    print("|---|---|---|---|---|---|---|---|")
    for key in dict.fromkeys((r["problem"], r["method"]) for r in data["runs"]):
        runs = [r for r in data["runs"] if (r["problem"], r["method"]) == key]
        est = np.array([r["moments"] for r in runs])
        sd = est.std(0, ddof=1) if len(runs) > 1 else np.full(4, np.nan)
        seconds = [r["seconds"] for r in runs if r.get("seconds") is not None]
        print(f"| {key[0]}, {key[1]} | {len(runs)} | "
              + " | ".join(f"{m:.3f} ({s:.3f})" for m, s in zip(est.mean(0), sd, strict=True))
              + f" | {np.mean(seconds):.1f} | {sum(r['divergences'] for r in runs)} |")


def main(argv=None):
    parser = harness.parser(__doc__.split("\n")[0], out=OUT, seeds=20)
    parser.set_defaults(first_seed=1000)
    parser.add_argument("--scenario", choices=["a", "b"], default="a")
    parser.add_argument("--n-pseudo", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5000)
    args = harness.parse(parser, argv)
    if args.report:
        report(harness.load(args.out))
        return
    import pandas as pd
    import stan
    from scipy.special import logsumexp

    n_seeds = args.seeds if args.seeds is not None else (1 if args.quick else args.default_seeds)
    draws = args.draws or (200 if args.quick else 50000)
    warmup = 200 if args.quick else args.warmup

    comp = pd.read_csv(ROOT / "pymc_tempering" / "data" / "kou_mixture_components.csv")
    mu = comp[["mu1", "mu2"]].to_numpy()
    w = comp["w_a" if args.scenario == "a" else "w_b_normalised"].to_numpy()
    var = comp["var_a" if args.scenario == "a" else "var_b"].to_numpy()

    def log_pi(x):  # (..., 2) -> (...)
        d2 = ((x[..., None, :] - mu) ** 2).sum(-1)
        return logsumexp(np.log(w) - np.log(2 * np.pi * var) - d2 / (2 * var), axis=-1)

    data = {"K": len(mu), "N": args.n_pseudo, "mu": mu.tolist(), "log_w": np.log(w).tolist(),
            "sd_": np.sqrt(var).tolist()}
    problem, method = f"kou_mixture_{args.scenario}", f"stan_pe{args.n_pseudo}"
    records = []
    for seed in range(args.first_seed, args.first_seed + n_seeds):
        rng = np.random.default_rng(seed)
        init = [{"x": rng.uniform(0, 1, size=(args.n_pseudo, 2)).tolist(),
                 "beta": [0.5] * args.n_pseudo}]
        start = time.perf_counter()
        fit = stan.build(PROGRAM, data=data, random_seed=seed).sample(
            num_chains=1, num_samples=draws, num_warmup=warmup, init=init
        )
        x = np.moveaxis(np.asarray(fit["x"]), -1, 0)  # (draws, N, 2)
        beta = np.asarray(fit["beta"]).T  # (draws, N)
        log_weight = (1 - beta) * log_pi(x)
        weight = np.exp(log_weight - logsumexp(log_weight, axis=1, keepdims=True))
        feats = np.concatenate([x, x**2], axis=-1)
        moments = (weight[..., None] * feats).sum(axis=1).mean(axis=0)
        records.append({**harness.empty_record(problem, method, seed),
                        "seconds": time.perf_counter() - start, "moments": moments.tolist(),
                        "divergences": int(np.sum(fit["divergent__"])),
                        "warmup": warmup, "draws": draws})
        print(seed, np.round(moments, 3), f"{records[-1]['seconds']:.1f} s", flush=True)
    truth = json.loads((ROOT / "pymc_tempering" / "data" / "kou_mixture_exact_moments.json")
                       .read_text())[args.scenario]
    kept = harness.load(args.out) if Path(args.out).exists() else {"runs": [], "truths": {}}
    runs = [r for r in kept["runs"] if (r["problem"], r["method"]) != (problem, method)] + records
    truths = {**kept.get("truths", {}), problem: {
        "log_z": None, "moments": [truth[k] for k in ("E_x1", "E_x2", "E_x1sq", "E_x2sq")]}}
    out = harness.results_file("kou_mixture_stan", {"stan": stan.__version__, "quick": bool(args.quick)},
                               runs, truths=truths)
    harness.write_json(args.out, out)
    report(out)


if __name__ == "__main__":
    main()
