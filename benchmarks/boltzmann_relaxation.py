"""Section 7.2 of the CT paper: Gaussian mixture relaxations of Boltzmann machines.

Boltzmann machines with 22 and 30 units are generated as in appendix B by
:mod:`pymc_tempering.problems.boltzmann` (``relaxation_machines``: eigenvalues ``6 tanh(2 n)``,
Haar rotation, zero diagonal, biases ``N(0, 0.1^2)``); ``D`` solves the SDP (46), here by
subgradient descent on ``lambda_max - lambda_min`` of ``W + diag(d)`` followed by a shift that
puts ``lambda_min`` at 0. Ground truth log Z (eq. 52), mean (53) and covariance (54) come from
exhaustive enumeration of the ``2^22`` or ``2^30`` states (about a minute for 30 units). The
paper's base is the moment-matched mixture of mean-field variational fits of the Boltzmann
machine (section 6), ``log zeta`` its bound; errors are reported divided by those of that base
(below 1 = better than the variational base), as in Fig. 2.

It runs on ``benchmarks/harness.py`` (problems x methods x seeds, one fresh process per case
unless ``--in-process``, its command line and JSON), in one of two forms:

* by default each method at its defaults, as a user calls it (``pmt.sample_ct(model=model,
  random_seed=seed)`` and so on, each fitting its own base), on the problems ``relaxation_0``
  to ``relaxation_4`` (22 units) and ``relaxation30_0`` to ``relaxation30_4`` (30 units) of
  :mod:`pymc_tempering.problems` (the proper-prior form, ``x ~ N(0, I)`` and the cosh terms as
  a potential; the paper's flat prior has no marginal likelihood). Methods ``joint_ct``,
  ``gibbs_ct``, ``st`` and ``ais`` (the names shadow the harness's, which they call, adding
  ``diagnose``'s problems). On these systems the mode search is far from complete, so
  ``sample_ct`` and ``sample_gibbs_ct`` run their batched chains.
* ``--paper``: the paper's experiment, on this script's problems ``relaxation_flat_0`` to
  ``relaxation_flat_4`` (30 units, the flat form,
  :func:`pymc_tempering.problems.boltzmann.boltzmann_relaxation_model`), every method with the
  shared variational base and its ``log zeta``, tuned on ``relaxation_flat_0`` and fixed
  (HMC in the base's coordinates, the step size adapted to an acceptance of 0.8 in a warm-up
  of 500 iterations, 128 chains batched through one compiled density, no bootstrap and no
  extension): ``joint_ct_<draws>`` and ``gibbs_ct_<draws>`` for 250, 1000 and 2000 draws per
  chain, ``st_<draws>`` with 1000 rungs for 250 and 1000, and ``ais_1000``, ``ais_5000`` and
  ``ais_10000`` (inverse temperatures; 100 runs, 5 leapfrog steps); each case first runs its
  method once, short and untimed, so compilation is excluded from its seconds.

Every record has ``log_z`` (the run's ``attrs["log_marginal_likelihood"]``) and its standard
error, ``mean_rmse`` and ``cov_rmse`` of the weighted moments, the base's errors
(``base_log_z_error``, ``base_mean_rmse``, ``base_cov_rmse``), ``extensions``, ``problems``
(how many ``pmt.diagnose`` names) and ``calibrated`` (:func:`pymc_tempering.checks.calibrated`).

Run::

    .venv/bin/python benchmarks/boltzmann_relaxation.py --methods gibbs_ct,ais,joint_ct \
        --seeds 10 --in-process --out benchmarks/results/boltzmann_relaxation_defaults.json \
        --figure benchmarks/results/boltzmann_relaxation_defaults.png
    .venv/bin/python benchmarks/boltzmann_relaxation.py --paper --seeds 2 --in-process \
        --out benchmarks/results/boltzmann_relaxation_paper.json \
        --figure docs/figures/boltzmann_relaxation_paper.png
    .venv/bin/python benchmarks/boltzmann_relaxation.py --report \
        --out benchmarks/results/boltzmann_relaxation_defaults.json    # the table (--figure too)
    .venv/bin/python benchmarks/boltzmann_relaxation.py --quick        # smoke: relaxation_0, joint_ct
"""

from __future__ import annotations

import time

import numpy as np
from scipy.special import logsumexp

import harness
from harness import _fmt

PROBLEMS = tuple(f"relaxation_{k}" for k in range(5)) + tuple(f"relaxation30_{k}" for k in range(5))
FLAT = tuple(f"relaxation_flat_{k}" for k in range(5))
PAPER_UNITS = 30
DEFAULT_METHODS = ("joint_ct", "gibbs_ct", "st", "ais")
BUDGETS = {"joint_ct": (250, 1000, 2000), "gibbs_ct": (250, 1000, 2000), "st": (250, 1000),
           "ais": (1000, 5000, 10000)}
PAPER_METHODS = tuple(f"{m}_{b}" for m, budgets in BUDGETS.items() for b in budgets)
PAPER_CHAINS = 128  # the CT and ST chains, batched as AIS's runs are
PAPER_TUNE = 500
LABELS = {"joint_ct": "joint CT", "gibbs_ct": "Gibbs CT", "st": "simulated tempering", "ais": "AIS"}


# ----------------------------------------------------------------------------- the problems
def _machine(k: int) -> dict:
    """Machine ``k`` of the paper's size."""
    from pymc_tempering.problems.boltzmann import relaxation_machine

    return relaxation_machine(k, PAPER_UNITS)


def _flat_problem(k: int):
    def build():
        from pymc_tempering.problems.boltzmann import boltzmann_relaxation_model

        m = _machine(k)
        return boltzmann_relaxation_model(m["q"], m["b"])

    def truth():
        from pymc_tempering.problems import Truth
        from pymc_tempering.problems.boltzmann import boltzmann_relaxation_truth

        m = _machine(k)
        log_z, mean, cov = boltzmann_relaxation_truth(m["w"], m["b"], m["q"], m["d"])
        base = m["base"]
        return Truth(log_z=log_z, moments={
            "mean": mean, "cov": cov, "base_log_z_error": float(abs(base.log_zeta - log_z)),
            "base_mean_rmse": float(np.sqrt(np.mean((base.mean - mean) ** 2))),
            "base_cov_rmse": float(np.sqrt(np.mean((base.cov - cov) ** 2)))})

    harness.problem(f"relaxation_flat_{k}", build, truth=truth,
                    description=f"Boltzmann machine relaxation {k}, {PAPER_UNITS} units, the "
                    "paper's flat form")


for _k in range(5):
    _flat_problem(_k)


# ---------------------------------------------------------------------------- the methods
def weighted_moments(idata):
    """The run's log Z and the weighted mean and covariance of its draws of ``x``
    (:func:`pymc_tempering.weighted_expectation`: a stratified result's modes at their
    probabilities, those the chains barely reached by their own draws)."""
    import pymc_tempering as pmt

    mean = pmt.weighted_expectation(idata, lambda post: post["x"].values)[0]
    second = pmt.weighted_expectation(
        idata, lambda post: np.einsum("cdi,cdj->cdij", post["x"].values, post["x"].values))[0]
    return float(idata.attrs["log_marginal_likelihood"]), mean, second - np.outer(mean, mean)


def _fields(problem, idata) -> dict:
    """The record's fields: log Z, the moments' errors, the base's, extensions, problems."""
    import pymc_tempering as pmt
    from pymc_tempering.checks import Run, calibrated

    log_z, mean, cov = weighted_moments(idata)
    moments = problem.truths.moments
    evidence = pmt.log_marginal_likelihood(idata)
    return {"log_z": log_z, "log_z_se": float(idata.attrs.get("log_marginal_likelihood_se", np.nan)),
            "reliable": bool(evidence.reliable),
            "evidence_problems": [q[:300] for q in evidence.problems[:5]],
            "mean_rmse": float(np.sqrt(np.mean((mean - moments["mean"]) ** 2))),
            "cov_rmse": float(np.sqrt(np.mean((cov - moments["cov"]) ** 2))),
            **{k: float(v) for k, v in moments.items() if k.startswith("base_")},
            "extensions": int(idata.attrs.get("extensions", 0)),
            "problems": len(pmt.diagnose(idata).problems),
            "calibrated": bool("log_base_weight" in idata["sample_stats"] and calibrated(Run(idata))),
            "chains": int(idata["sample_stats"]["log_weight"].shape[0])}


def _at_defaults(sampler_name):
    def run(problem, seed, settings):
        import pymc_tempering as pmt

        with problem.build():
            idata = getattr(pmt, sampler_name)(random_seed=seed, progressbar=False,
                                               **harness._draws(settings))
        return None, _fields(problem, idata)

    return run


for _name, _sampler in (("joint_ct", "sample_ct"), ("gibbs_ct", "sample_gibbs_ct"),
                        ("st", "sample_simulated_tempering"), ("ais", "sample_ais")):
    harness.method(_name, f"pmt.{_sampler} at its defaults, with diagnose's problems")(_at_defaults(_sampler))


def _run_budget(model, base, method, budget, seed):
    """One run of the paper's experiment: the shared base, a fixed run length."""
    import pymc_tempering as pmt

    common = dict(base=base, model=model, progressbar=False)
    # the run lengths are fixed: no bootstrap, no extension (it would repeat the run)
    fixed = dict(bootstrap=0, max_extensions=0, target_se=None, target_accept=0.8,
                 batched_chains=PAPER_CHAINS, log_zeta=base.log_zeta)
    if method == "joint_ct":
        return pmt.sample_ct(budget, tune=PAPER_TUNE, random_seed=seed, **fixed, **common)
    if method == "gibbs_ct":
        return pmt.sample_gibbs_ct(budget, tune=PAPER_TUNE, random_seed=seed, **fixed, **common)
    if method == "st":
        return pmt.sample_simulated_tempering(budget, tune=PAPER_TUNE, chains=PAPER_CHAINS,
                                              n_temperatures=1000, random_seed=seed,
                                              log_zeta=base.log_zeta, **common)
    return pmt.sample_ais(100, tune=64, chains=1, n_temperatures=budget, n_leapfrog=5,
                          random_seed=seed, **common)


def _budgeted(method, budget):
    def run(problem, seed, settings):
        base = _machine(int(problem.name.rsplit("_", 1)[1]))["base"]
        model = problem.build()
        _run_budget(model, base, method, 20 if method != "ais" else 10, seed)  # compiles, untimed
        start = time.perf_counter()
        idata = _run_budget(model, base, method, budget, seed)
        return None, {"seconds": time.perf_counter() - start, "budget": budget,
                      **_fields(problem, idata)}

    return run


for _method, _budgets in BUDGETS.items():
    for _budget in _budgets:
        harness.method(f"{_method}_{_budget}", f"{_method}, shared base, run length {_budget}")(
            _budgeted(_method, _budget))


# ----------------------------------------------------------------------------------- report
def _family(method: str) -> str:
    return next((f for f in LABELS if method == f or method.startswith(f + "_")), method)


def _label(method: str) -> str:
    family = _family(method)
    return LABELS.get(family, family) + method[len(family):].replace("_", ", ")


def summary(data: dict) -> list[dict]:
    """One row per method and size of machine: the RMSEs over runs divided by the base's (as in
    Fig. 2), the log Z RMSE and mean error, the posterior mean's RMSE, the RMSE per machine, the
    z-scores' sd and largest, the runs that ``diagnose`` found nothing wrong with, and the
    median wall time."""
    rows = []
    for method, units in dict.fromkeys((r["method"], _units(r)) for r in data["runs"]):
        rs = [r for r in data["runs"] if r["method"] == method and _units(r) == units
              and r.get("log_z_error") is not None]
        if not rs:
            continue
        err = np.array([r["log_z_error"] for r in rs])
        z = np.array([r["z"] for r in rs if r.get("z") is not None])

        def rel(key, base_key):
            return float(np.sqrt(np.mean([r[key] ** 2 for r in rs]))
                         / np.sqrt(np.mean([r[base_key] ** 2 for r in rs])))

        rows.append({
            "method": method, "units": units, "runs": len(rs),
            "rel_log_z": float(np.sqrt(np.mean(err**2))
                               / np.sqrt(np.mean([r["base_log_z_error"] ** 2 for r in rs]))),
            "rel_mean": rel("mean_rmse", "base_mean_rmse"), "rel_cov": rel("cov_rmse", "base_cov_rmse"),
            "log_z_rmse": float(np.sqrt(np.mean(err**2))), "mean_error": float(err.mean()),
            "mean_rmse": float(np.sqrt(np.mean([r["mean_rmse"] ** 2 for r in rs]))),
            "rmse_per_machine": [float(np.sqrt(np.mean([r["log_z_error"] ** 2 for r in rs
                                                        if r["problem"] == name])))
                                 for name in data["truths"] if any(r["problem"] == name for r in rs)],
            "sd_z": float(np.std(z, ddof=1)) if z.size > 1 else None,
            "max_abs_z": float(np.max(np.abs(z))) if z.size else None,
            "without_problems": sum(r.get("problems") == 0 for r in rs),
            "calibrated": sum(bool(r.get("calibrated")) for r in rs),
            "calibrated_flagged": sum(bool(r.get("calibrated")) and _flagged(r) for r in rs),
            # the flat forms have no evidence, so no verdict on one: their runs are not judged
            "off_and_reliable": None if any(r["problem"].startswith("relaxation_flat_") for r in rs)
            else sum(r.get("z") is not None and abs(r["z"]) > 3 and not _flagged(r) for r in rs),
            "median_seconds": harness._median([r.get("seconds") for r in rs])})
    return sorted(rows, key=lambda r: (r["units"], _label(r["method"]).lower(), r["method"]))


def _flagged(record) -> bool:
    """Whether ``diagnose`` found a problem in the run's evidence (``reliable``), or, in a record
    without that verdict, any problem (``problems``: how many it found)."""
    if record.get("reliable") is not None:
        return not record["reliable"]
    return bool(record.get("problems"))


def _units(record) -> int:
    return 30 if record["problem"].startswith(("relaxation30_", "relaxation_flat_")) else 22


def _bold(value, goal):
    text = f"{value:.2f}"
    return f"**{text}**" if goal is not None and value <= goal else text


def report(data: dict) -> None:
    """The table of ``docs/benchmarks.md``: one row per method (bold: the goal met)."""
    print("| method | units | runs | rel. log Z (goal 0.3) | rel. mean (goal 0.7) | rel. cov "
          "| log Z RMSE (nats) | mean error | mean's RMSE | RMSE per machine | z sd | max abs z "
          "| calibrated | of them flagged | > 3 SE and reliable | median s |")
    print("|" + "---|" * 16)
    for r in summary(data):
        print(f"| {_label(r['method'])} | {r['units']} | {r['runs']} | {_bold(r['rel_log_z'], 0.3)} "
              f"| {_bold(r['rel_mean'], 0.7)} | {r['rel_cov']:.2f} | {r['log_z_rmse']:.3f} "
              f"| {r['mean_error']:+.3f} | {r['mean_rmse']:.3f} "
              f"| {', '.join(f'{v:.2f}' for v in r['rmse_per_machine'])} "
              f"| {_fmt(r['sd_z'], '.2f')} | {_fmt(r['max_abs_z'], '.2f')} "
              f"| {r['calibrated']} of {r['runs']} "
              f"| {_fmt(None if r['off_and_reliable'] is None else r['calibrated_flagged'], 'd')} "
              f"| {_fmt(r['off_and_reliable'], 'd')} | {_fmt(r['median_seconds'], '.1f')} |")


def plot(data: dict, path) -> None:
    """The RMSEs divided by the base's against the median wall time, one line per method and
    size of machine over its run lengths (Fig. 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    runs = [r for r in data["runs"] if r.get("log_z_error") is not None]
    groups: dict = {}
    for r in runs:
        groups.setdefault((_family(r["method"]), _units(r)), {}).setdefault(r["method"], []).append(r)

    def rel(rs, key, base_key):
        return float(np.sqrt(np.mean([r[key] ** 2 for r in rs]) / np.mean([r[base_key] ** 2 for r in rs])))

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, base_key, title) in zip(axes, (
            ("log_z_error", "base_log_z_error", "log Z"), ("mean_rmse", "base_mean_rmse", "mean"),
            ("cov_rmse", "base_cov_rmse", "covariance")), strict=True):
        for (family, units), methods in sorted(groups.items()):
            points = sorted((float(np.median([r["seconds"] for r in rs])), rel(rs, key, base_key))
                            for rs in methods.values())
            ax.plot(*zip(*points), "o-" if units == 22 else "s--",
                    label=f"{LABELS.get(family, family)}, {units} units")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        low, high = ax.get_xlim()
        if high > 3 * low:  # run lengths over a decade or so; else a linear axis shows them
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")
        ax.set_xlabel("median wall time (s)")
        ax.set_title(f"RMSE of {title} / base's")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=PROBLEMS, methods=DEFAULT_METHODS,
                       out=harness.RESULTS / "boltzmann_relaxation.json", seeds=1)
    p.add_argument("--paper", action="store_true",
                   help="the paper's experiment: flat forms, the shared base, fixed run lengths")
    args = harness.parse(p, argv)
    if args.paper and not args.problems_given:
        args.problems = ",".join(FLAT)
    if args.paper and not args.methods_given:
        args.methods = ("joint_ct_250,ais_1000" if args.quick else ",".join(PAPER_METHODS))
    elif args.quick and not args.methods_given:
        args.methods = "joint_ct"
    harness.run_or_report(args, "boltzmann_relaxation", harness.settings_from(args),
                          report=report, plot=plot, in_process=args.in_process,
                          quick_problems=("relaxation_flat_0",) if args.paper else ("relaxation_0",))


if __name__ == "__main__":
    main()
