"""Table 1 and Figure 4 of the pseudo-extended paper: the 20-component bivariate mixture.

What it measures
----------------
The mixture of Kou, Zhou & Wong (2006), section 4.1 of Nemeth et al., in scenario (a) (equal
weights, component sd 0.1, well separated) and (b) (weights and variances growing with the
distance to (5, 5)); definitions and exact moments in ``pymc_tempering/data/README.md``. For each
scenario, method and seed the script estimates ``E x1, E x2, E x1^2, E x2^2`` and reports, over
the seeds, the mean and the standard deviation of each estimate (Table 1), and the mean squared
error averaged over the four moments times the mean wall time of a run (Figure 4, ``MSE x CT``).
Truth is the exact value from ``kou_mixture_exact_moments.json`` (the paper's Table 1 "Truth"
row for scenario (b) differs from it in the second moments by 0.11: we use the exact ones).

Methods
-------
``nuts``
    ``pm.sample`` on the mixture itself (PyMC 6's default NUTS, nutpie here).
``pe2, pe5, pe10, pe20``
    :func:`pymc_tempering.sample_pe` with ``N = 2, 5, 10, 20`` pseudo-samples and the tempered
    proposal (defaults: ``beta_min = 1e-3``, ``target_accept = 0.9``).
``ct``
    :func:`pymc_tempering.sample_ct` with a wide Gaussian base ``N((5, 5), 3.5^2 I)`` (covering
    the box [0, 10]^2 that holds the modes; the model has no prior to fit a base from) and the
    default importance-sampling ``log_zeta``.

Every run: ``--chains`` chains (default 4), ``--tune`` tuning and ``--draws`` kept draws per
chain, initial point (0.5, 0.5) plus PyMC's jitter (the paper draws it from [0, 1]^2);
``--target-accept`` and ``--nuts-sampler`` go to ``pm.sample``. The paper runs 20 seeds of one
chain of 50,000 draws; the defaults here are smaller (see ``docs/benchmarks.md`` for what was
run). Wall time includes compilation and tuning, on whatever machine runs it: compare methods
within one run only.

Outputs: ``benchmarks/results/kou_mixture.json`` and ``benchmarks/results/kou_mixture.png``.

Rerun
-----
    .venv/bin/python benchmarks/kou_mixture.py --seeds 20 --draws 12500
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_tempering as pmt
from pymc_tempering.problems.mixtures import kou_mixture_model, kou_mixture_moments

RESULTS = Path(__file__).parent / "results"
METHODS = ("nuts", "pe2", "pe5", "pe10", "pe20", "ct")


def _moments(values: np.ndarray, log_weight: np.ndarray | None) -> np.ndarray:
    """Weighted moments from draws ``(chain, draw[, pseudo], 2)`` and log weights."""
    feats = np.concatenate([values, values**2], axis=-1)
    if log_weight is None:
        return feats.reshape(-1, 4).mean(axis=0)
    w = np.exp(log_weight - log_weight.max()).ravel()
    return (w[:, None] * feats.reshape(-1, 4)).sum(axis=0) / w.sum()


def run_one(
    scenario: str, method: str, seed: int, draws: int, tune: int, chains: int = 4, **sample_kwargs
) -> tuple[np.ndarray, float]:
    model = kou_mixture_model(scenario)
    kwargs = dict(draws=draws, tune=tune, chains=chains, random_seed=seed, progressbar=False,
                  **sample_kwargs)
    start = time.perf_counter()
    if method == "nuts":
        idata = pm.sample(model=model, **kwargs)
        est = _moments(idata["posterior"]["x"].transpose("chain", "draw", ...).values, None)
    elif method.startswith("pe"):
        idata = pmt.sample_pe(n_pseudo=int(method[2:]), model=model, **kwargs)
        x = idata["posterior"]["x"].transpose("chain", "draw", "pseudo_sample", ...).values
        est = _moments(x, idata["sample_stats"]["log_weight"].values)
    elif method == "ct":
        base = pmt.Base.from_moments([5.0, 5.0], [3.5**2, 3.5**2])
        idata = pmt.sample_ct(model=model, base=base, **kwargs)
        x = idata["posterior"]["x"].transpose("chain", "draw", ...).values
        est = _moments(x, idata["sample_stats"]["log_weight"].values)
    else:
        raise ValueError(method)
    return est, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--draws", type=int, default=2500)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--scenarios", nargs="+", default=["a", "b"])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--target-accept", type=float, default=None,
                        help="passed to pm.sample (default: each method's own)")
    parser.add_argument("--nuts-sampler", default=None, help="passed to pm.sample")
    parser.add_argument("--out", default=str(RESULTS / "kou_mixture.json"))
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    sample_kwargs = {k: v for k, v in (("target_accept", args.target_accept),
                                       ("nuts_sampler", args.nuts_sampler)) if v is not None}

    results = {"settings": vars(args), "scenarios": {}}
    for scenario in args.scenarios:
        truth = kou_mixture_moments(scenario)
        rows = {}
        for method in args.methods:
            ests, times = [], []
            for seed in range(args.seeds):
                est, elapsed = run_one(scenario, method, 1000 + seed, args.draws, args.tune,
                                       args.chains, **sample_kwargs)
                ests.append(est)
                times.append(elapsed)
            ests = np.array(ests)
            mse = float(np.mean((ests - truth) ** 2))
            rows[method] = {
                "mean": ests.mean(axis=0).tolist(),
                "sd": ests.std(axis=0, ddof=1).tolist() if len(ests) > 1 else [float("nan")] * 4,
                "mse": mse,
                "time_s": float(np.mean(times)),
                "mse_x_time": mse * float(np.mean(times)),
                "estimates": ests.tolist(),
            }
            cells = " ".join(
                f"{m:.3f} ({s:.3f})" for m, s in zip(rows[method]["mean"], rows[method]["sd"])
            )
            print(f"({scenario}) {method:5s} {cells}  mse {mse:.4g} time {np.mean(times):.1f}s",
                  flush=True)
            # Written after every method, so that an interrupted run keeps what it measured.
            results["scenarios"][scenario] = {"truth": truth.tolist(), "methods": rows}
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1))
    _plot(results, Path(args.out).with_suffix(".png"))


def _plot(results, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    scenarios = results["scenarios"]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 3.5), squeeze=False)
    for ax, (scenario, res) in zip(axes[0], scenarios.items()):
        pe = [(int(m[2:]), r["mse_x_time"]) for m, r in res["methods"].items() if m.startswith("pe")]
        if pe:
            n, v = zip(*sorted(pe))
            ax.plot(n, v, "o-", label="sample_pe")
        for m, style in (("nuts", "k--"), ("ct", "r:")):
            if m in res["methods"]:
                ax.axhline(res["methods"][m]["mse_x_time"], ls=style[1:], color=style[0], label=m)
        ax.set_yscale("log")
        ax.set_xlabel("pseudo-samples N")
        ax.set_ylabel("MSE x time (s)")
        ax.set_title(f"scenario ({scenario})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
