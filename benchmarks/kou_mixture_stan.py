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

Rerun
-----
    python benchmarks/kou_mixture_stan.py --scenario a --n-pseudo 2 --seeds 20 \\
        --warmup 5000 --draws 50000

Output: ``benchmarks/results/kou_mixture_stan.json`` (one entry per scenario and N, added to
what the file holds).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import logsumexp

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


def main(argv=None):
    import stan

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=["a", "b"], default="a")
    parser.add_argument("--n-pseudo", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5000)
    parser.add_argument("--draws", type=int, default=50000)
    args = parser.parse_args(argv)

    comp = pd.read_csv(ROOT / "pymc_tempering" / "data" / "kou_mixture_components.csv")
    mu = comp[["mu1", "mu2"]].to_numpy()
    w = comp["w_a" if args.scenario == "a" else "w_b_normalised"].to_numpy()
    var = comp["var_a" if args.scenario == "a" else "var_b"].to_numpy()
    truth = json.loads((ROOT / "pymc_tempering" / "data" / "kou_mixture_exact_moments.json")
                       .read_text())[args.scenario]

    def log_pi(x):  # (..., 2) -> (...)
        d2 = ((x[..., None, :] - mu) ** 2).sum(-1)
        return logsumexp(np.log(w) - np.log(2 * np.pi * var) - d2 / (2 * var), axis=-1)

    data = {"K": len(mu), "N": args.n_pseudo, "mu": mu.tolist(), "log_w": np.log(w).tolist(),
            "sd_": np.sqrt(var).tolist()}
    estimates, times, divergences = [], [], []
    for i in range(args.seeds):
        seed = 1000 + i
        rng = np.random.default_rng(seed)
        init = [{"x": rng.uniform(0, 1, size=(args.n_pseudo, 2)).tolist(),
                 "beta": [0.5] * args.n_pseudo}]
        start = time.perf_counter()
        fit = stan.build(PROGRAM, data=data, random_seed=seed).sample(
            num_chains=1, num_samples=args.draws, num_warmup=args.warmup, init=init
        )
        x = np.moveaxis(np.asarray(fit["x"]), -1, 0)  # (draws, N, 2)
        beta = np.asarray(fit["beta"]).T  # (draws, N)
        log_weight = (1 - beta) * log_pi(x)
        weight = np.exp(log_weight - logsumexp(log_weight, axis=1, keepdims=True))
        feats = np.concatenate([x, x**2], axis=-1)
        estimates.append((weight[..., None] * feats).sum(axis=1).mean(axis=0))
        times.append(time.perf_counter() - start)
        divergences.append(int(np.sum(fit["divergent__"])))
        print(seed, np.round(estimates[-1], 3), f"{times[-1]:.1f} s", flush=True)
    est = np.array(estimates)
    row = {"scenario": args.scenario, "n_pseudo": args.n_pseudo, "warmup": args.warmup,
           "draws": args.draws, "truth": [truth[k] for k in ("E_x1", "E_x2", "E_x1sq", "E_x2sq")],
           "mean": est.mean(0).tolist(), "sd": est.std(0, ddof=1).tolist(),
           "time_s": float(np.mean(times)), "divergences": divergences,
           "estimates": est.tolist(), "stan": stan.__version__}
    print(f"({args.scenario}) N={args.n_pseudo} mean {np.round(row['mean'], 3)} "
          f"sd {np.round(row['sd'], 3)} time {row['time_s']:.1f} s")
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    results[f"{args.scenario}_N{args.n_pseudo}"] = row
    OUT.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
