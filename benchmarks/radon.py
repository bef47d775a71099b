"""Section 7.3 of the continuous tempering paper: the radon model's log marginal likelihood.

What it measures
----------------
The hierarchical regression of log radon on floor and county log uranium (Gelman and Hill's
Minnesota data: 919 households, 85 counties), with half-Cauchy(5) scales: 92 parameters, in
three parameterisations, the problems of :mod:`pymc_tempering.problems` ``radon_non_centred``
(both groups non-centred, the paper's factor graph), ``radon_alpha`` (county intercepts
non-centred, regression coefficients centred) and ``radon_centred``; their log marginal
likelihood is the same. It runs on ``benchmarks/harness.py`` (problems x methods x seeds, one
fresh process per case, its command line and JSON); each method estimates log Z and the record
holds its estimate, its reported standard error and its wall time (everything the call does:
base fits, compilation, tuning, sampling). Methods:

``ct-nutpie``, ``ct-pymc``, ``ct-numpyro``
    :func:`pymc_tempering.sample_ct` with ``nuts_sampler`` set to each installed NUTS backend
    (blackjax is left out: ``pm.sample(nuts_sampler="blackjax")`` fails upstream in PyMC 6.4),
    mixture base, ``--ct-bootstrap`` bootstrap rounds (default 2), ``--ct-target-accept``
    (default: the backend's), 4 chains x ``--draws`` draws (default 2500, the paper's run
    length; with 1000 the estimates came out 0.37 nats low on average, see
    ``docs/benchmarks.md``); the record adds its divergences and whether ``diagnose`` passed.
``ct-defaults``
    ``pmt.sample_ct()`` at its defaults, what a user gets.
``smc``
    The harness's ``pm.sample_smc(draws=--smc-draws, chains=2)``: each chain's last finite
    log Z, averaged.
``ais-paper``
    :func:`pymc_tempering.sample_ais`: 100 independent runs of ``--ais-temperatures``
    temperatures (HMC transitions, 10 leapfrog steps, step sizes tuned by a pilot), from the
    same kind of base as ``sample_ct``.

The reference is exact: :func:`pymc_tempering.problems.radon_log_marginal_likelihood`
(-1048.4930; the 89 Gaussian coefficients integrate out in closed form, the three scales by
quadrature). ``--reference`` runs the independent cross-check the issue asked for before the
exact value existed: long AIS runs (100 runs of 10,000 temperatures, as in the paper) on both
parameterisations and a long ``sample_ct`` on the centred model, each compared with the exact
value (``benchmarks/results/radon_reference.json``).

Goal (issue 9): ``sample_ct`` within 0.2 nats of the reference in less wall time than SMC needs
for the same accuracy.

Rerun
-----
::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/radon.py --seeds 10 \\
        --problems radon_alpha --methods ct-nutpie,smc --out benchmarks/results/radon_alpha_non_centred.json
    .venv/bin/python benchmarks/radon.py --problems radon_alpha --ct-target-accept 0.95 \\
        --methods ct-nutpie --out /tmp/ta095.json --figure /tmp/ta095.png
    .venv/bin/python benchmarks/radon.py --seeds 5 --first-seed 100 --methods ct-nutpie \\
        --fixed-base-seed 0 --out /tmp/radon_fixed_base.json         # one base for every run
    .venv/bin/python benchmarks/radon.py --report --out FILE          # the table (--figure too)
    .venv/bin/python benchmarks/radon.py --reference                  # the cross-check, ~6 min
    .venv/bin/python benchmarks/radon.py --quick                      # smoke: radon_alpha, tiny runs

``--fixed-base-seed``: every ``sample_ct`` case fits one mixture base with this seed, outside
its timed wall time, so only the sampling seed varies.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import harness
from harness import _fmt

CT_SAMPLERS = ("nutpie", "pymc", "numpyro")
PROBLEMS = ("radon_non_centred", "radon_alpha", "radon_centred")
DEFAULT_OUT = harness.RESULTS / "radon.json"
QUICK = {"draws": 100, "tune": 100, "smc_draws": 200, "ct_bootstrap": 0, "ais_temperatures": 20}


def _ct(nuts_sampler):
    def run(problem, seed, settings):
        import pymc_tempering as pmt

        with problem.build():
            base = None
            if settings.get("fixed_base_seed") is not None:
                base = pmt.fit_base(method="mixture", random_seed=settings["fixed_base_seed"],
                                    progressbar=False)
            start = time.perf_counter()
            kwargs = {"draws": settings.get("draws") or 2500, "bootstrap": settings["ct_bootstrap"],
                      "nuts_sampler": nuts_sampler, "base": base}
            if isinstance(settings.get("tune"), int):
                kwargs["tune"] = settings["tune"]
            if settings.get("ct_target_accept") is not None:
                kwargs["target_accept"] = settings["ct_target_accept"]
            idata = pmt.sample_ct(random_seed=seed, progressbar=False, **kwargs)
            seconds = time.perf_counter() - start
        fields = {"diagnostics_ok": bool(pmt.diagnose(idata).ok),
                  "divergences": int(idata["sample_stats"]["diverging"].sum())}
        if base is not None:  # the shared base's fit is not this run's time
            fields["seconds"] = seconds
        return idata, fields

    return run


for _sampler in CT_SAMPLERS:
    harness.method(f"ct-{_sampler}", f"pmt.sample_ct(nuts_sampler={_sampler!r}), mixture base, "
                   "--ct-bootstrap rounds, 4 chains x --draws (2500)")(_ct(_sampler))


@harness.method("ct-defaults", "pmt.sample_ct() at its defaults")
def _ct_defaults(problem, seed, settings):
    import pymc_tempering as pmt

    with problem.build():
        idata = pmt.sample_ct(random_seed=seed, progressbar=False, **harness._draws(settings))
    return idata, {"diagnostics_ok": bool(pmt.diagnose(idata).ok),
                   "divergences": int(idata["sample_stats"]["diverging"].sum())}


@harness.method("ais-paper", "pmt.sample_ais: 100 runs of --ais-temperatures temperatures")
def _ais(problem, seed, settings):
    import pymc_tempering as pmt

    with problem.build():
        idata = pmt.sample_ais(draws=25, tune=64, chains=4,
                               n_temperatures=settings["ais_temperatures"], random_seed=seed,
                               progressbar=False)
    return None, {"log_z": float(idata.attrs["log_marginal_likelihood"]),
                  "log_z_se": float(idata.attrs["log_marginal_likelihood_se"])}


# ----------------------------------------------------------------------------------- report
LABELS = {"radon_non_centred": "non-centred (paper)", "radon_alpha": "alpha non-centred",
          "radon_centred": "centred"}


def _seconds(value):
    return "-" if value is None else f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def summary(runs: list[dict]) -> dict:
    """One (problem, method)'s numbers: errors against the exact log Z, reported standard
    errors, z-scores, divergences, ``diagnose`` verdicts and the median wall time."""
    ok = [r for r in runs if r.get("log_z_error") is not None]
    err = np.array([r["log_z_error"] for r in ok])
    se = np.array([np.nan if r.get("log_z_se") is None else r["log_z_se"] for r in ok])
    out = {"runs": len(runs), "failed": len(runs) - len(ok),
           "mean_error": float(err.mean()) if ok else None,
           "sd": float(err.std(ddof=1)) if len(ok) > 1 else None,
           "rmse": float(np.sqrt(np.mean(err**2))) if ok else None,
           "within_0.2": int(np.sum(np.abs(err) <= 0.2)),
           "mean_reported_se": float(np.nanmean(se)) if np.isfinite(se).any() else None,
           "rms_z": float(np.sqrt(np.mean((err / se) ** 2))) if ok and np.isfinite(se).all() else None,
           "median_seconds": harness._median([r.get("seconds") for r in runs])}
    div = [r["divergences"] for r in runs if r.get("divergences") is not None]
    out["divergences"] = (None if not div else str(min(div)) if min(div) == max(div)
                          else f"{min(div)}-{max(div)}")
    diag = [r["diagnostics_ok"] for r in runs if r.get("diagnostics_ok") is not None]
    out["diagnose_passed"] = sum(diag) if diag else None
    return out


def table(data: dict) -> str:
    """One row per problem and method."""
    lines = ["| model, method | runs | mean error | sd | RMSE | runs within 0.2 | mean reported SE "
             "| rms z | divergences per run | `diagnose` passed | median wall time |",
             "|" + "---|" * 11]
    target_accept = data["settings"].get("ct_target_accept")
    for name in data["truths"]:
        for method_name in dict.fromkeys(r["method"] for r in data["runs"]):
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method_name]
            if not runs:
                continue
            s = summary(runs)
            label = f"{LABELS.get(name, name)}, {method_name}"
            if target_accept is not None and method_name.startswith("ct-"):
                label += f", target_accept={target_accept}"
            lines.append(
                f"| {label} | {s['runs']} | {_fmt(s['mean_error'], '+.3f')} | {_fmt(s['sd'])} "
                f"| {_fmt(s['rmse'])} | {s['within_0.2']} | {_fmt(s['mean_reported_se'])} "
                f"| {_fmt(s['rms_z'], '.2f')} | {s['divergences'] or '-'} "
                f"| {'-' if s['diagnose_passed'] is None else s['diagnose_passed']} "
                f"| {_seconds(s['median_seconds'])} |")
    return "\n".join(lines)


def plot(data: dict, path) -> None:
    """Every run's estimate against its wall time (as the paper's Fig. 3b), and a zoom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    methods = list(dict.fromkeys(r["method"] for r in data["runs"]))
    exact = next((t["log_z"] for t in data["truths"].values() if t.get("log_z") is not None), None)
    for k, ax in enumerate(axes):
        for j, method_name in enumerate(methods):
            sel = [r for r in data["runs"] if r["method"] == method_name and r.get("log_z") is not None]
            ax.errorbar([r["seconds"] for r in sel], [r["log_z"] for r in sel],
                        yerr=[r.get("log_z_se") or 0.0 for r in sel], fmt="o", ms=4,
                        color=f"C{j}", label=method_name, alpha=0.8)
        if exact is not None:
            ax.axhline(exact, color="k", ls="--", label="exact")
            ax.axhspan(exact - 0.2, exact + 0.2, color="k", alpha=0.1, label="±0.2 nats")
            if k == 1:
                ax.set_ylim(exact - 1.5, exact + 1.5)
        ax.set_xscale("log")
        ax.set_xlabel("wall time per run (s)")
        ax.set_ylabel("log marginal likelihood estimate")
    names = ", ".join(LABELS.get(n, n) for n in data["truths"])
    axes[0].set_title(f"radon, {names}, 92 parameters: every run")
    axes[1].set_title("zoom: exact ± 1.5 nats")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------------- reference
def reference(args) -> None:
    """Long AIS on both parameterisations (the paper's 100 runs of 10,000 temperatures) and a
    long ``sample_ct`` on the centred model: three independent estimates of one number, written
    to ``benchmarks/results/radon_reference.json`` in the harness's format."""
    import pymc_tempering as pmt
    from pymc_tempering.problems.radon import radon_log_marginal_likelihood

    exact = radon_log_marginal_likelihood()
    harness.quiet_loggers()
    rows = []
    for name in ("radon_centred", "radon_non_centred"):
        start = time.perf_counter()
        with warnings.catch_warnings(), harness.get_problem(name).build():
            warnings.simplefilter("ignore")
            idata = pmt.sample_ais(draws=25, tune=64, chains=4, n_temperatures=10_000,
                                   random_seed=12345, progressbar=False)
        rows.append({**harness.empty_record(name, "ais-10000", 12345), "runs": 100,
                     "log_z": float(idata.attrs["log_marginal_likelihood"]),
                     "log_z_se": float(idata.attrs["log_marginal_likelihood_se"]),
                     "seconds": time.perf_counter() - start})
        print(harness.status_line(rows[-1]), flush=True)
    start = time.perf_counter()
    with warnings.catch_warnings(), harness.get_problem("radon_centred").build():
        warnings.simplefilter("ignore")
        idata = pmt.sample_ct(draws=10_000, bootstrap=2, random_seed=12345, progressbar=False)
    lml = pmt.log_marginal_likelihood(idata)
    rows.append({**harness.empty_record("radon_centred", "ct-10000", 12345),
                 "log_z": lml.estimate, "log_z_se": lml.standard_error,
                 "diagnostics_ok": bool(pmt.diagnose(idata).ok),
                 "seconds": time.perf_counter() - start})
    print(harness.status_line(rows[-1]), flush=True)
    est = np.array([r["log_z"] for r in rows])
    w = 1 / np.array([r["log_z_se"] for r in rows]) ** 2
    # Inverse-variance combination, and the chi-square check that the three agree.
    combined = float(np.sum(w * est) / np.sum(w))
    truths = {n: {"log_z": exact} for n in ("radon_centred", "radon_non_centred")}
    data = harness.results_file(
        "radon_reference", {"ais_temperatures": 10_000, "ais_runs": 100, "ct_draws": 10_000},
        [harness.score(r, truths[r["problem"]]) for r in rows], truths=truths,
        combined={"log_z": combined, "log_z_se": float(np.sqrt(1 / np.sum(w))),
                  "agreement_chi2": float(np.sum(w * (est - combined) ** 2)),
                  "agreement_dof": len(rows) - 1,
                  "z_vs_exact": float((combined - exact) * np.sqrt(np.sum(w)))})
    harness.write_json(harness.RESULTS / "radon_reference.json", data)
    print(data["combined"])


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=("radon_non_centred",),
                       methods=("ct-nutpie", "smc"), out=DEFAULT_OUT, seeds=10)
    p.add_argument("--ct-bootstrap", type=int, default=2, help="sample_ct's bootstrap rounds")
    p.add_argument("--ct-target-accept", type=float, default=None,
                   help="target_accept for sample_ct (default: the backend's)")
    p.add_argument("--fixed-base-seed", type=int, default=None,
                   help="fit one mixture base with this seed for every sample_ct run")
    p.add_argument("--smc-draws", type=int, default=2000, help="pm.sample_smc's draws per chain")
    p.add_argument("--ais-temperatures", type=int, default=2000, help="ais-paper's temperatures")
    p.add_argument("--reference", action="store_true",
                   help="run the AIS and long-CT cross-check of the exact value instead")
    args = harness.parse(p, argv)
    if args.reference:
        reference(args)
        return
    settings = harness.settings_from(
        args, quick=QUICK, ct_bootstrap=args.ct_bootstrap, ct_target_accept=args.ct_target_accept,
        fixed_base_seed=args.fixed_base_seed, smc_draws=args.smc_draws,
        ais_temperatures=args.ais_temperatures)
    if args.quick:  # tiny runs whatever the defaults
        settings.update({k: v for k, v in QUICK.items() if k != "draws" or not args.draws})
    harness.run_or_report(args, "radon", settings, report=lambda data: print(table(data)),
                          plot=plot, quick_problems=("radon_alpha",))


if __name__ == "__main__":
    main()
