"""Section 7.3 of the continuous tempering paper: the radon model's log marginal likelihood.

What it measures
----------------
The hierarchical regression of log radon on floor and county log uranium (Gelman and Hill's
Minnesota data: 919 households, 85 counties), non-centred as in the paper's factor graph, with
half-Cauchy(5) scales: 92 parameters (:func:`pymc_tempering.problems.radon_model` with
``non_centered=True``). For each seed, in one run and interleaved, every method estimates log Z
and the script records its estimate, its reported standard error and its wall time (everything
the call does: base fits, compilation, tuning, sampling):

``ct-nutpie``, ``ct-pymc``, ``ct-numpyro``
    :func:`pymc_tempering.sample_ct` with ``nuts_sampler`` set to each installed NUTS backend
    (blackjax is left out: ``pm.sample(nuts_sampler="blackjax")`` fails upstream in PyMC 6.4),
    mixture base, ``--ct-bootstrap`` bootstrap rounds (default 2), ``--ct-target-accept``
    (default: the backend's), 4 chains x ``--ct-draws``
    draws (default 2500, the paper's run length; with 1000 the estimates came out 0.37 nats low
    on average, see ``docs/benchmarks.md``).
``smc`` (and ``smc-DRAWS``)
    ``pm.sample_smc(draws=--smc-draws, chains=2)`` (or ``DRAWS`` draws), read by
    :func:`pymc_tempering.log_marginal_likelihood`: each chain's last finite value, averaged.
``ais``
    :func:`pymc_tempering.sample_ais`: 100 independent runs of ``--ais-temperatures``
    temperatures (HMC transitions, 10 leapfrog steps, step sizes tuned by a pilot), from the
    same kind of base as ``sample_ct``.

The reference is exact: :func:`pymc_tempering.problems.radon_log_marginal_likelihood`
(-1048.4930; the 89 Gaussian coefficients integrate out in closed form, the three scales by
quadrature). It is not ``pm.sample_smc``. ``--reference`` runs the independent cross-check the
issue asked for before the exact value existed: long AIS runs (100 runs of 10,000
temperatures, as in the paper) on both parameterisations and a long ``sample_ct`` on the
centred model, each compared with the exact value.

``--non-centered`` picks the parameterisation: ``both`` (default, the paper's model), ``alpha``
(county intercepts non-centred, regression coefficients centred) or ``none``. Every method
runs on the chosen one; the marginal likelihood is the same. CT runs record their number of
divergent transitions, which :func:`pymc_tempering.diagnose` flags.

Goal (issue 9): ``sample_ct`` within 0.2 nats of the reference in less wall time than SMC needs
for the same accuracy.

Rerun
-----
    .venv/bin/python benchmarks/radon.py --reference      # the cross-check, about 6 minutes
    .venv/bin/python benchmarks/radon.py --seeds 10       # the comparison, about 35 minutes
    .venv/bin/python benchmarks/radon.py --seeds 2 --methods smc-8000 --append  # SMC, 4x draws
    .venv/bin/python benchmarks/radon.py --seeds 5 --first-seed 100 --methods ct-nutpie \
        --fixed-base-seed 0 --out benchmarks/results/radon_fixed_base.json    # one base

Outputs ``benchmarks/results/radon_reference.json``, ``benchmarks/results/radon.json`` and
``benchmarks/results/radon.png`` (estimates against wall time, like Fig. 3b).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_tempering as pmt
from pymc_tempering.problems.radon import radon_log_marginal_likelihood, radon_model

RESULTS = Path(__file__).parent / "results"
CT_SAMPLERS = ("nutpie", "pymc", "numpyro")
PARAMETERISATIONS = {"both": True, "alpha": "alpha", "none": False}
METHODS = tuple(f"ct-{s}" for s in CT_SAMPLERS) + ("ct-defaults", "smc", "ais")


def run_one(model, method: str, seed: int, args, base=None) -> dict:
    start = time.perf_counter()
    extra = {}
    with warnings.catch_warnings(), model:
        warnings.simplefilter("ignore")
        if method == "ct-defaults":
            # what a user gets from `with model: pmt.sample_ct()`
            idata = pmt.sample_ct(random_seed=seed, progressbar=False)
        elif method.startswith("ct-"):
            idata = pmt.sample_ct(
                draws=args.ct_draws, bootstrap=args.ct_bootstrap, nuts_sampler=method[3:],
                base=base, random_seed=seed, progressbar=False,
                **({} if args.ct_target_accept is None else {"target_accept": args.ct_target_accept}),
            )
        if method.startswith("ct-"):
            lml = pmt.log_marginal_likelihood(idata)
            est, se = lml.estimate, lml.standard_error
            extra["reliable"] = bool(lml.reliable)
            extra["diagnostics_ok"] = bool(pmt.diagnose(idata).ok)
            extra["divergences"] = int(idata["sample_stats"]["diverging"].sum())
        elif method == "smc" or method.startswith("smc-"):
            draws = args.smc_draws if method == "smc" else int(method[4:])
            idata = pm.sample_smc(draws=draws, chains=2, random_seed=seed, progressbar=False)
            est, se = pmt.log_marginal_likelihood(idata).estimate, float("nan")
        elif method == "ais":
            idata = pmt.sample_ais(
                draws=25, tune=64, chains=4, n_temperatures=args.ais_temperatures,
                random_seed=seed, progressbar=False,
            )
            est, se = idata.attrs["log_marginal_likelihood"], idata.attrs["log_marginal_likelihood_se"]
        else:
            raise ValueError(method)
    return {"method": method, "seed": seed, "estimate": float(est), "se": float(se),
            "seconds": time.perf_counter() - start, **extra}


def reference(args) -> None:
    """Long AIS on both parameterisations (the paper's 100 runs of 10,000 temperatures) and a
    long ``sample_ct`` on the centred model: three independent estimates of one number."""
    rows = []
    for name in args.ref_ais_models:
        model = radon_model(non_centered=name == "non-centred")
        start = time.perf_counter()
        with warnings.catch_warnings(), model:
            warnings.simplefilter("ignore")
            idata = pmt.sample_ais(
                draws=args.ref_runs // 4, tune=64, chains=4,
                n_temperatures=args.ref_temperatures, random_seed=12345, progressbar=True,
            )
        rows.append({
            "method": f"ais-{args.ref_temperatures}", "model": name,
            "runs": 4 * (args.ref_runs // 4),
            "estimate": float(idata.attrs["log_marginal_likelihood"]),
            "se": float(idata.attrs["log_marginal_likelihood_se"]),
            "seconds": time.perf_counter() - start,
        })
        print(rows[-1], flush=True)
    model = radon_model(non_centered=False)
    start = time.perf_counter()
    with warnings.catch_warnings(), model:
        warnings.simplefilter("ignore")
        idata = pmt.sample_ct(draws=args.ref_ct_draws, bootstrap=2, random_seed=12345,
                              progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    rows.append({"method": f"ct-{args.ref_ct_draws}", "model": "centred",
                 "estimate": lml.estimate, "se": lml.standard_error,
                 "diagnostics_ok": bool(pmt.diagnose(idata).ok),
                 "seconds": time.perf_counter() - start})
    print(rows[-1], flush=True)
    est = np.array([r["estimate"] for r in rows])
    se = np.array([r["se"] for r in rows])
    # Inverse-variance combination, and the chi-square check that the three agree.
    w = 1 / se**2
    combined = float(np.sum(w * est) / np.sum(w))
    chi2 = float(np.sum(w * (est - combined) ** 2))
    exact = radon_log_marginal_likelihood()
    for row in rows:
        row["z_vs_exact"] = float((row["estimate"] - exact) / row["se"])
    out = {"settings": vars(args), "runs": rows, "log_z": combined,
           "log_z_se": float(np.sqrt(1 / np.sum(w))), "agreement_chi2": chi2,
           "agreement_dof": len(rows) - 1, "exact": exact,
           "combined_z_vs_exact": float((combined - exact) * np.sqrt(np.sum(w)))}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "radon_reference.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="run seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--append", action="store_true",
                        help="add the runs to those already in --out instead of replacing them")
    parser.add_argument("--methods", nargs="+", default=list(METHODS),
                        help=f"any of {', '.join(METHODS)}, or smc-DRAWS (SMC with DRAWS draws)")
    parser.add_argument("--ct-draws", type=int, default=2500)
    parser.add_argument("--ct-bootstrap", type=int, default=2)
    parser.add_argument("--ct-target-accept", type=float, default=None,
                        help="target_accept for sample_ct (default: the backend's)")
    parser.add_argument("--fixed-base-seed", type=int, default=None,
                        help="fit one mixture base with this seed for every sample_ct run")
    parser.add_argument("--smc-draws", type=int, default=2000)
    parser.add_argument("--ais-temperatures", type=int, default=2000)
    parser.add_argument("--reference", action="store_true",
                        help="run the AIS and long-CT cross-check of the exact value instead")
    parser.add_argument("--summarise", action="store_true",
                        help="recompute the summary and plot of --out against the exact value")
    parser.add_argument("--ref-temperatures", type=int, default=10000)
    parser.add_argument("--ref-runs", type=int, default=100)
    parser.add_argument("--ref-ais-models", nargs="+", default=["centred", "non-centred"],
                        choices=["centred", "non-centred"])
    parser.add_argument("--ref-ct-draws", type=int, default=10000)
    parser.add_argument("--non-centered", default="both", choices=list(PARAMETERISATIONS),
                        help="groups to non-centre: both (the paper's model), alpha (county "
                             "intercepts only) or none")
    parser.add_argument("--out", default=str(RESULTS / "radon.json"))
    args = parser.parse_args(argv)
    for method in args.methods:
        if method not in METHODS and not (method.startswith("smc-") and method[4:].isdigit()):
            parser.error(f"unknown method {method!r}")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    if args.reference:
        reference(args)
        return

    settings = vars(args)
    if args.summarise:
        stored = json.loads(Path(args.out).read_text())
        rows, settings = stored["runs"], stored["settings"]
    else:
        model = radon_model(non_centered=PARAMETERISATIONS[args.non_centered])
        rows = []
        if args.append:
            stored = json.loads(Path(args.out).read_text())
            rows = stored["runs"]
            settings = {**stored["settings"],
                        "appended": stored["settings"].get("appended", []) + [vars(args)]}
        base = None
        if args.fixed_base_seed is not None:
            # One mixture base for every sample_ct run: only the sampling seed varies.
            with warnings.catch_warnings(), model:
                warnings.simplefilter("ignore")
                base = pmt.fit_base(method="mixture", random_seed=args.fixed_base_seed,
                                    progressbar=False)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for method in args.methods:
                rows.append(run_one(model, method, seed, args, base))
                print(rows[-1], flush=True)
    out = summarise(rows, settings)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out["summary"], indent=1))
    _plot(out, Path(args.out).with_suffix(".png"))


def summarise(rows: list[dict], settings: dict) -> dict:
    """Per-method mean, spread, error against the exact log Z and wall time."""
    ref = {"log_z": radon_log_marginal_likelihood(), "log_z_se": 0.0}
    summary = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        sel = [r for r in rows if r["method"] == method]
        est = np.array([r["estimate"] for r in sel])
        summary[method] = {
            "runs": len(sel),
            "mean": float(est.mean()),
            "sd": float(est.std(ddof=1)) if len(est) > 1 else float("nan"),
            "mean_reported_se": float(np.nanmean([r["se"] for r in sel])),
            "median_seconds": float(np.median([r["seconds"] for r in sel])),
        }
        err = est - ref["log_z"]
        summary[method]["rmse_vs_reference"] = float(np.sqrt(np.mean(err**2)))
        summary[method]["max_abs_error"] = float(np.max(np.abs(err)))
        summary[method]["within_0.2"] = int(np.sum(np.abs(err) <= 0.2))
        se = np.array([r["se"] for r in sel])
        if np.all(np.isfinite(se)):
            # errors in units of the reported standard error: sd about 1 when it is honest
            z = err / se
            summary[method]["z_rms"] = float(np.sqrt(np.mean(z**2)))
            summary[method]["z_max_abs"] = float(np.max(np.abs(z)))
        if "diagnostics_ok" in sel[0]:
            summary[method]["diagnostics_ok"] = int(sum(r["diagnostics_ok"] for r in sel))
        if "divergences" in sel[0]:
            div = np.array([r["divergences"] for r in sel])
            summary[method]["runs_without_divergences"] = int(np.sum(div == 0))
            summary[method]["median_divergences"] = float(np.median(div))
    return {"settings": settings, "reference": ref, "runs": rows, "summary": summary}


def _plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"ct-nutpie": "C2", "ct-pymc": "C0", "ct-numpyro": "C4", "smc": "C3", "ais": "C1"}
    others = sorted({r["method"] for r in results["runs"]} - set(colors))
    colors.update({m: f"C{5 + i}" for i, m in enumerate(others)})
    ref = results.get("reference")
    for k, ax in enumerate(axes):
        for method, color in colors.items():
            sel = [r for r in results["runs"] if r["method"] == method]
            if not sel:
                continue
            t = [r["seconds"] for r in sel]
            est = [r["estimate"] for r in sel]
            se = [0.0 if not np.isfinite(r["se"]) else r["se"] for r in sel]
            ax.errorbar(t, est, yerr=se, fmt="o", ms=4, color=color, label=method, alpha=0.8)
        if ref:
            ax.axhline(ref["log_z"], color="k", ls="--", label="exact")
            ax.axhspan(ref["log_z"] - 0.2, ref["log_z"] + 0.2, color="k", alpha=0.1,
                       label="±0.2 nats")
            if k == 1:
                ax.set_ylim(ref["log_z"] - 1.5, ref["log_z"] + 1.5)
        ax.set_xscale("log")
        ax.set_xlabel("wall time per run (s)")
        ax.set_ylabel("log marginal likelihood estimate")
    groups = {"both": "non-centred", "alpha": "alpha non-centred", "none": "centred"}[
        results["settings"].get("non_centered", "both")]
    axes[0].set_title(f"radon, {groups}, 92 parameters: every run")
    axes[1].set_title("zoom: exact ± 1.5 nats")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
