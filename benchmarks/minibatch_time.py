"""Wall time of ``sample_tact`` and ``sample_replica_exchange`` at their defaults on issue 16's
sign-flip posterior, with the weight of the + mode and the spread of ``|theta|``.

``theta ~ N(0, 3)``, ``y ~ N(theta^2, 1)`` with 20,000 data in ``pm.Minibatch`` batches of 200.
One process: a short TACT-HMC run first pays the compilations, then each method at two seeds.
Compare two versions of the package by running this with each (``PYTHONPATH`` at a worktree),
one after the other on a quiet machine: the times are for ratios, not absolutes.

Run: ``.venv/bin/python benchmarks/minibatch_time.py [label]``; prints one line per run.
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
import pymc as pm

import pymc_tempering as pmt


def main(label: str) -> None:
    warnings.filterwarnings("ignore")
    y = np.random.default_rng(5).normal(1.5**2, 1.0, size=20_000)
    with pm.Model() as model:
        batch = pm.Minibatch(y, batch_size=200)
        theta = pm.Normal("theta", 0, 3)
        pm.Normal("y", theta**2, 1.0, observed=batch, total_size=y.size)
    with model:  # compilations
        pmt.sample_tact(draws=20, tune=20, chains=2, random_seed=1, progressbar=False)
    methods = [("tact", pmt.sample_tact), ("replica_exchange", pmt.sample_replica_exchange)]
    for name, sample in methods:
        for seed in (1, 2):
            start = time.perf_counter()
            with model:
                idata = sample(random_seed=seed, progressbar=False)
            draws = idata.posterior["theta"].values
            print(
                f"{label} {name} seed {seed}: {time.perf_counter() - start:.1f} s, "
                f"weight of + {np.mean(draws > 0):.3f}, sd |theta| {np.abs(draws).std():.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
