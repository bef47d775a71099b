"""Gradients per second: continuous tempering's batched chains against nutpie on all CPU cores.

One model, one base and ``log zeta`` (the ones ``sample_ct`` prepares), three samplers of the
same continuously tempered density, each timed after a first, untimed run that compiles:

* ``nutpie``: ``nutpie.sample`` of ``continuously_tempered_model`` compiled once, 4 chains on
  every core; gradients are the draws' ``n_steps`` summed (tuning included);
* ``batched_128`` and ``batched_1024``: ``sample_tempered_chains`` (joint), 128 chains with the
  density from PyTensor's default backend and 1024 chains on JAX; gradients are
  ``chains x iterations x (n_leapfrog + 1)``.

Run::

    .venv/bin/python benchmarks/batched_throughput.py --problem relaxation_0
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problem", default="relaxation_0")
    p.add_argument("--draws", type=int, default=500)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import nutpie

    import pymc_tempering as pmt
    from pymc_tempering.bases import prepare_base
    from pymc_tempering.driver.tempered_chains import sample_tempered_chains
    from pymc_tempering.problems import get

    model = get(args.problem).build()
    target, base, log_zeta, _ = prepare_base(model, None, None, 0, False)
    extended = pmt.continuously_tempered_model(model, base, log_zeta)
    rows = []

    compiled = nutpie.compile_pymc_model(extended)

    def run_nutpie(draws):
        start = time.perf_counter()
        idata = nutpie.sample(compiled, draws=draws, tune=draws, chains=4,
                              cores=os.cpu_count(), seed=1, progress_bar=False,
                              save_warmup=True)
        seconds = time.perf_counter() - start
        steps = idata.sample_stats["n_steps"].values.sum()
        warm = getattr(idata, "warmup_sample_stats", None)
        steps += 0 if warm is None else warm["n_steps"].values.sum()
        return seconds, float(steps)

    def batched(chains):
        def run(draws):
            start = time.perf_counter()
            sample_tempered_chains(target, base, log_zeta, kind="joint", draws=draws,
                                   tune=min(draws, 250), chains=chains, seed=1, progressbar=False)
            return time.perf_counter() - start, chains * (draws + min(draws, 250)) * 11.0
        return run

    for name, run in (("nutpie", run_nutpie), ("batched_128", batched(128)),
                      ("batched_1024", batched(1024))):
        run(20)  # compiles
        seconds, gradients = run(args.draws)
        rows.append((name, seconds, gradients))
    print(f"{args.problem}: {target.ndim} parameters, {os.cpu_count()} CPU cores")
    print("| sampler | seconds | gradients | gradients per second | x nutpie |")
    print("|---|---|---|---|---|")
    ref = rows[0][2] / rows[0][1]
    for name, seconds, gradients in rows:
        rate = gradients / seconds
        print(f"| {name} | {seconds:.1f} | {gradients:.3g} | {rate:.3g} | {rate / ref:.2f} |")
    return np.array([r[2] / r[1] for r in rows])


if __name__ == "__main__":
    main()
