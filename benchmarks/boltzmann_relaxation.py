"""Section 7.2 of the CT paper: Gaussian mixture relaxations of Boltzmann machines.

Boltzmann machines with 22 units are generated as in appendix B by
:mod:`pymc_tempering.problems.boltzmann` (``relaxation_machines``: eigenvalues ``6 tanh(2 n)``,
Haar rotation, zero diagonal, biases ``N(0, 0.1^2)``); ``D`` solves the SDP (46), here by
subgradient descent on ``lambda_max - lambda_min`` of ``W + diag(d)`` followed by a shift that
puts ``lambda_min`` at 0. Ground truth log Z (eq. 52), mean (53) and covariance (54) come from
exhaustive enumeration of the ``2^22`` states. The benchmark's base is the moment-matched
mixture of mean-field variational fits of the Boltzmann machine (section 6), ``log zeta`` its
bound. Errors are reported divided by those of that base (below 1 = better than the variational
base), as in Fig. 2.

It runs on ``benchmarks/harness.py`` (problems x methods x seeds, one fresh process per case,
its command line and JSON), in one of two forms:

* by default each method at its defaults, as a user calls it (``pmt.sample_ct(model=model,
  random_seed=seed)`` and so on, each fitting its own base), on the problems ``relaxation_0`` to
  ``relaxation_4`` of :mod:`pymc_tempering.problems` (the proper-prior form,
  ``x ~ N(0, I)`` and the cosh terms as a potential; the paper's flat prior has no marginal
  likelihood). Methods ``joint_ct``, ``gibbs_ct``, ``st`` and ``ais`` (the names shadow the
  harness's, which they call, adding ``diagnose``'s problems). Issue 17's goal: log Z RMSE at
  most 0.3 of the base's, the mean's at most 0.7.
* ``--paper``: the paper's experiment, on this script's problems ``relaxation_flat_0`` to
  ``relaxation_flat_4`` (the flat form, :func:`pymc_tempering.problems.boltzmann.boltzmann_relaxation_model`),
  every method with the shared variational base and a fixed run length, the methods
  ``joint_ct_250``, ``joint_ct_1000``, ``joint_ct_4000``, the same for ``gibbs_ct`` and ``st``,
  and ``ais_200``, ``ais_1000``, ``ais_5000`` (``_200`` and ``ais_100`` for ``--quick``); each
  case first runs its method once, untimed, so compilation is excluded from its seconds.

Every record has ``log_z`` (the run's ``attrs["log_marginal_likelihood"]``) and its standard
error, ``mean_rmse`` and ``cov_rmse`` of the weighted moments, the base's errors
(``base_log_z_error``, ``base_mean_rmse``, ``base_cov_rmse``), ``extensions`` and ``problems``
(how many ``pmt.diagnose`` names).

Run::

    .venv/bin/python benchmarks/boltzmann_relaxation.py --seeds 3 \
        --out benchmarks/results/boltzmann_relaxation_defaults.json \
        --figure benchmarks/results/boltzmann_relaxation_defaults.png
    .venv/bin/python benchmarks/boltzmann_relaxation.py --methods joint_ct --seeds 10 --out /tmp/joint_ct.json
    .venv/bin/python benchmarks/boltzmann_relaxation.py --paper --out /tmp/paper.json   # ~15 min
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

PROBLEMS = tuple(f"relaxation_{k}" for k in range(5))
FLAT = tuple(f"relaxation_flat_{k}" for k in range(5))
DEFAULT_METHODS = ("joint_ct", "gibbs_ct", "st", "ais")
PAPER_METHODS = tuple(f"{m}_{b}" for m in ("joint_ct", "gibbs_ct", "st") for b in (250, 1000, 4000)) + (
    "ais_200", "ais_1000", "ais_5000")
LABELS = {"joint_ct": "joint CT", "gibbs_ct": "Gibbs CT", "st": "simulated tempering", "ais": "AIS"}


# ----------------------------------------------------------------------------- the problems
def _machine(k: int) -> dict:
    """Machine ``k`` of :func:`pymc_tempering.problems.boltzmann.relaxation_machines`."""
    from pymc_tempering.problems.boltzmann import relaxation_machines

    for i, m in enumerate(relaxation_machines(n_machines=k + 1, truths=False)):
        if i == k:
            return m
    raise AssertionError(k)


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
                    description=f"Boltzmann machine relaxation {k}, the paper's flat form")


for _k in range(5):
    _flat_problem(_k)


# ---------------------------------------------------------------------------- the methods
def weighted_moments(idata):
    """The run's log Z and the weighted mean and covariance of its draws of ``x``."""
    x = idata["posterior"]["x"].values.reshape(-1, idata["posterior"]["x"].shape[-1])
    lw = idata["sample_stats"]["log_weight"].values.ravel()
    w = np.exp(lw - logsumexp(lw))
    mean = w @ x
    cov = (x - mean).T @ ((x - mean) * w[:, None])
    return float(idata.attrs["log_marginal_likelihood"]), mean, cov


def _fields(problem, idata) -> dict:
    """The record's fields: log Z, the moments' errors, the base's, extensions, problems."""
    import pymc_tempering as pmt

    log_z, mean, cov = weighted_moments(idata)
    moments = problem.truths.moments
    return {"log_z": log_z, "log_z_se": float(idata.attrs.get("log_marginal_likelihood_se", np.nan)),
            "mean_rmse": float(np.sqrt(np.mean((mean - moments["mean"]) ** 2))),
            "cov_rmse": float(np.sqrt(np.mean((cov - moments["cov"]) ** 2))),
            **{k: float(v) for k, v in moments.items() if k.startswith("base_")},
            "extensions": int(idata.attrs.get("extensions", 0)),
            "problems": len(pmt.diagnose(idata).problems)}


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
    # the run lengths are fixed: no extension (it would repeat the run with more draws)
    fixed = dict(max_extensions=0, target_se=None)
    if method == "joint_ct":
        return pmt.sample_ct(budget, tune=budget, chains=4, random_seed=seed,
                             log_zeta=base.log_zeta, bootstrap=0, **fixed, **common)
    if method == "gibbs_ct":
        return pmt.sample_gibbs_ct(budget, tune=budget, chains=4, random_seed=seed,
                                   log_zeta=base.log_zeta, cores=1, **fixed, **common)
    if method == "st":
        return pmt.sample_simulated_tempering(budget, tune=budget, chains=4,
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


for _method, _budgets in (("joint_ct", (200, 250, 1000, 4000)), ("gibbs_ct", (200, 250, 1000, 4000)),
                          ("st", (200, 250, 1000, 4000)), ("ais", (100, 200, 1000, 5000))):
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
    """One row per method: the RMSEs over runs divided by the base's (as in Fig. 2), the log Z
    RMSE and mean error, the RMSE per machine, the z-scores' sd and largest, the runs that
    ``diagnose`` found nothing wrong with, and the median wall time."""
    rows = []
    for method in dict.fromkeys(r["method"] for r in data["runs"]):
        rs = [r for r in data["runs"] if r["method"] == method and r.get("log_z_error") is not None]
        if not rs:
            continue
        err = np.array([r["log_z_error"] for r in rs])
        z = np.array([r["z"] for r in rs if r.get("z") is not None])

        def rel(key, base_key):
            return float(np.sqrt(np.mean([r[key] ** 2 for r in rs]))
                         / np.sqrt(np.mean([r[base_key] ** 2 for r in rs])))

        rows.append({
            "method": method, "runs": len(rs),
            "rel_log_z": float(np.sqrt(np.mean(err**2))
                               / np.sqrt(np.mean([r["base_log_z_error"] ** 2 for r in rs]))),
            "rel_mean": rel("mean_rmse", "base_mean_rmse"), "rel_cov": rel("cov_rmse", "base_cov_rmse"),
            "log_z_rmse": float(np.sqrt(np.mean(err**2))), "mean_error": float(err.mean()),
            "rmse_per_machine": [float(np.sqrt(np.mean([r["log_z_error"] ** 2 for r in rs
                                                        if r["problem"] == name])))
                                 for name in data["truths"] if any(r["problem"] == name for r in rs)],
            "sd_z": float(np.std(z, ddof=1)) if z.size > 1 else None,
            "max_abs_z": float(np.max(np.abs(z))) if z.size else None,
            "without_problems": sum(r.get("problems") == 0 for r in rs),
            "median_seconds": harness._median([r.get("seconds") for r in rs])})
    return sorted(rows, key=lambda r: (_label(r["method"]).lower(), r["method"]))


def _bold(value, goal):
    text = f"{value:.2f}"
    return f"**{text}**" if goal is not None and value <= goal else text


def report(data: dict) -> None:
    """The table of ``docs/benchmarks.md``: one row per method (bold: the goal met)."""
    print("| method | runs | rel. log Z (goal 0.3) | rel. mean (goal 0.7) | rel. cov | log Z RMSE (nats) "
          "| mean error | RMSE per machine | z sd | max abs z | runs without a problem | median s |")
    print("|" + "---|" * 12)
    for r in summary(data):
        print(f"| {_label(r['method'])} | {r['runs']} | {_bold(r['rel_log_z'], 0.3)} "
              f"| {_bold(r['rel_mean'], 0.7)} | {r['rel_cov']:.2f} | {r['log_z_rmse']:.3f} "
              f"| {r['mean_error']:+.3f} | {', '.join(f'{v:.2f}' for v in r['rmse_per_machine'])} "
              f"| {_fmt(r['sd_z'], '.2f')} | {_fmt(r['max_abs_z'], '.2f')} "
              f"| {r['without_problems']} of {r['runs']} | {_fmt(r['median_seconds'], '.1f')} |")


def plot(data: dict, path) -> None:
    """The RMSEs divided by the base's against the mean wall time, one line per method over its
    run lengths (Fig. 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary(data)
    seconds = {m: float(np.mean([r["seconds"] for r in data["runs"] if r["method"] == m]))
               for m in {r["method"] for r in rows}}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, title in zip(axes, ("rel_log_z", "rel_mean", "rel_cov"),
                              ("log Z", "mean", "covariance"), strict=True):
        for family in LABELS:
            fam = sorted((r for r in rows if _family(r["method"]) == family),
                         key=lambda r: seconds[r["method"]])
            if fam:
                ax.plot([seconds[r["method"]] for r in fam], [r[key] for r in fam], "o-", label=family)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("wall time (s)")
        ax.set_title(f"RMSE of {title} / base's")
    axes[0].legend()
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
        args.methods = ("joint_ct_200,gibbs_ct_200,st_200,ais_100" if args.quick
                        else ",".join(PAPER_METHODS))
    elif args.quick and not args.methods_given:
        args.methods = "joint_ct"
    harness.run_or_report(args, "boltzmann_relaxation", harness.settings_from(args),
                          report=report, plot=plot,
                          quick_problems=("relaxation_flat_0",) if args.paper else ("relaxation_0",))


if __name__ == "__main__":
    main()
