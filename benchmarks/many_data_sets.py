"""A simulation study's cost: `sample_many` over one model on many data sets, or a model per set.

The sign-flip model of the quickstart (``y_i ~ N(theta^2, 1)``, ten observations, ``theta ~
N(0.5, 1.5^2)``) with its data in ``pm.Data``, on ``--sets`` data sets simulated from it
(``theta`` drawn from the prior, seed 0), every set run by ``pmt.sample_ct`` at its defaults
through ``pmt.sample_many``:

- ``--mode kept``: ``sample_many(model, data=sets)``, one model given each set by
  ``pm.set_data``: one compilation per process;
- ``--mode each``: ``sample_many({name: builder})``, a model built per set (the same graph):
  one compilation per set.

Both serially in one process by default (``--workers N``: a local Dask cluster of N one-thread
workers, ``cores=1``). Prints the wall time of the sweep and, over the sets, the mean of log Z
and the share of runs flagged. Time the two modes side by side with ``farm-bench``::

    farm-bench -n 1 --vs '.venv/bin/python benchmarks/many_data_sets.py --mode each' \\
        -- .venv/bin/python benchmarks/many_data_sets.py --mode kept
"""

from __future__ import annotations

import argparse
import functools
import time
import warnings

import numpy as np
import pymc as pm

N_OBS = 10


def sign_flip(y=None):
    """The quickstart's model with ``y`` as ``pm.Data`` (zeros until a set is given)."""
    with pm.Model() as model:
        data = pm.Data("y", np.zeros(N_OBS) if y is None else y)
        theta = pm.Normal("theta", 0.5, 1.5)
        pm.Normal("obs", theta**2, 1.0, observed=data, shape=data.shape)
    return model


def data_sets(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.5, 1.5, size=n)
    return {f"set{k:03d}": {"y": rng.normal(t**2, 1.0, size=N_OBS)} for k, t in enumerate(theta)}


def main(argv=None):
    import pymc_tempering as pmt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("kept", "each"), default="kept")
    p.add_argument("--sets", type=int, default=50)
    p.add_argument("--workers", type=int, default=0, help="0: serial, in this process")
    args = p.parse_args(argv)
    sets = data_sets(args.sets)
    client = "serial" if args.workers == 0 else None
    options = {} if args.workers == 0 else {"n_workers": args.workers, "cores": 1}
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if args.mode == "kept":
            sweep = pmt.sample_many(sign_flip(), data=sets, client=client, random_seed=1,
                                    progressbar=False, **options)
        else:
            builders = {name: functools.partial(sign_flip, s["y"]) for name, s in sets.items()}
            sweep = pmt.sample_many(builders, client=client, random_seed=1, progressbar=False,
                                    **options)
    seconds = time.perf_counter() - began
    log_z = [r.attrs["log_marginal_likelihood"] for r in sweep.results.values()]
    flagged = np.mean([not pmt.log_marginal_likelihood(r).reliable for r in sweep.results.values()])
    print(f"{args.mode}: {len(sweep.results)} sets, {len(sweep.failures)} failed, "
          f"{seconds:.1f} s ({seconds / args.sets:.2f} s per set); mean log Z "
          f"{np.mean(log_z):.3f}, flagged {flagged:.0%}")


if __name__ == "__main__":
    main()
