"""What tempering costs on a unimodal posterior: `sample_ct` against plain `pm.sample`.

For each model, in ONE process with the model built once (a session's later calls), both
with 4 chains at their defaults: a first call of each (compilation), then ``--calls`` timed
calls of each with seeds 1, 2, ... one after the other. Per method it reports the median wall
time of the timed calls, the fewest effective draws per chain over the posterior's entries
(``sample_ct``: ``ess_mean`` of ``pmt.weighted_summary``, the weights' autocorrelation
included; ``pm.sample``: ArviZ's ``ess_bulk``), the same per gradient evaluation (nutpie's
``n_steps`` over the draws), and whether ``sample_ct`` flagged its posterior.

Models: ``eight_schools`` (non-centred), a non-centred hierarchical normal model with 100 and
with 400 groups (``y_j ~ N(mu + tau z_j, 1)``, five observations per group, simulated with
seed 0), and the posteriordb-style radon models of :mod:`pymc_tempering.problems`
(``radon_pooled``, ``radon_intercepts``, ``radon_non_centred``).

Run::

    .venv/bin/python benchmarks/unimodal_cost.py            # every model, 2 timed calls each
    .venv/bin/python benchmarks/unimodal_cost.py --models eight_schools --calls 3
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

MODELS = ("eight_schools", "hier_normal_100", "hier_normal_400", "radon_pooled",
          "radon_intercepts", "radon_non_centred")


def hierarchical_normal(groups: int, per_group: int = 5, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    theta = rng.normal(1.0, 0.5, size=groups)
    y = rng.normal(theta[:, None], 1.0, size=(groups, per_group)).mean(axis=1)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 2.5)
        z = pm.Normal("z", 0.0, 1.0, shape=groups)
        pm.Normal("y", mu + tau * z, 1.0 / np.sqrt(per_group), observed=y)
    return model


def build(name: str) -> pm.Model:
    if name.startswith("hier_normal_"):
        return hierarchical_normal(int(name.rsplit("_", 1)[1]))
    from pymc_tempering.problems import get

    return get(name).build()


def run(name: str, method: str, model, seed: int) -> dict:
    import arviz as az

    import pymc_tempering as pmt

    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "ct":
            idata = pmt.sample_ct(model=model, random_seed=seed, progressbar=False)
        else:
            idata = pm.sample(model=model, chains=4, random_seed=seed, progressbar=False)
    seconds = time.perf_counter() - began
    chains = idata["posterior"].sizes["chain"]
    if method == "ct":
        names = [rv.name for rv in model.free_RVs]
        ess = float(pmt.weighted_summary(idata, var_names=names)["ess_mean"].min())
        flagged = not idata.attrs.get("posterior_reliable", True)
    else:
        ess = float(az.summary(idata)["ess_bulk"].min())
        flagged = None
    stats = idata["sample_stats"]
    steps = float(stats["n_steps"].sum()) if "n_steps" in stats else None
    return {"seconds": seconds, "ess_per_chain": ess / chains,
            "ess_per_gradient": ess / steps if steps else None, "flagged": flagged}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--calls", type=int, default=2)
    args = p.parse_args(argv)
    print("| model | ct / pm.sample (later calls) | ct min ESS per chain | pm.sample min ESS per "
          "chain | ESS per gradient, ct / pm.sample | ct flagged |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = build(name)
        for method in ("ct", "nuts"):
            run(name, method, model, 0)  # the first call: compilation
        rows = {m: [run(name, m, model, seed) for seed in range(1, args.calls + 1)]
                for m in ("ct", "nuts")}

        def med(method, key):
            values = [r[key] for r in rows[method] if r[key] is not None]
            return float(np.median(values)) if values else float("nan")

        ratio = med("ct", "seconds") / med("nuts", "seconds")
        per_gradient = med("ct", "ess_per_gradient") / med("nuts", "ess_per_gradient")
        flagged = sum(bool(r["flagged"]) for r in rows["ct"])
        print(f"| {name} | {ratio:.2f} | {med('ct', 'ess_per_chain'):.0f} | "
              f"{med('nuts', 'ess_per_chain'):.0f} | {per_gradient:.2f} | "
              f"{flagged}/{args.calls} |", flush=True)


if __name__ == "__main__":
    main()
