"""Is the reported standard error of sample_ct's log marginal likelihood honest, and does the
verdict (``reliable``) catch the runs where it is not?

Runs ``pmt.sample_ct`` at its defaults (``with model: pmt.sample_ct(random_seed=seed)``;
``--sampler sample_gibbs_ct`` for the Gibbs form) over many seeds on models whose log Z is known exactly, and reports per model the z-scores
``(estimate - truth) / standard_error`` of the runs marked reliable and the fraction marked
reliable. Issue 17's goal: among reliable runs the z sd within [0.7, 1.5] and no |z| > 4 (every
run beyond |z| = 4 marked unreliable), at least 95% reliable on all but the relaxations.

Problems (``--problems``, comma-separated, of :mod:`pymc_tempering.problems`; default all but
the opt-in ones):

- ``conjugate_normal``: the conjugate normal of the tests (1 parameter, closed form);
- ``linear_gaussian``: the tests' hierarchical linear-Gaussian model (53 parameters, closed form);
- ``radon_alpha``: ``problems.radon_model(non_centered="alpha")`` (92 parameters; exact by
  closed form and quadrature over the three scales);
- ``radon_intercepts``: ``problems.radon_intercepts_model()``, the centred varying-intercept
  model (89 parameters; exact likewise);
- ``eight_schools``: the evidence suite's eight schools (non-centred; 1-D quadrature);
- ``eight_schools_centred``: the same eight schools written centred (``theta ~ N(mu, tau)``, the
  same log Z), whose funnel's neck NUTS does not enter; opt-in: the estimate takes the neck's
  mass from the target's profile (``funnel_correction``) and the ``funnel_mass`` check flags
  the draws that lack it (a problem of the draws, not of the evidence);
- ``relaxations`` (``relaxation_0`` to ``relaxation_4``): the five 22-unit Boltzmann
  relaxations of ``boltzmann_relaxation.py``
  (exact by enumeration), written with ``x ~ N(0, I)`` as a proper prior and the log cosh terms
  as a potential (the benchmark's ``pm.Flat`` form has no marginal likelihood); opt-in: about
  half an hour for 20 seeds.

Run: ``.venv/bin/python benchmarks/evidence_calibration.py [--seeds 20] [--problems a,b]
[--methods gibbs_ct]``, on ``benchmarks/harness.py`` (one process per run; seeds from
``--first-seed``, default 1000). Writes ``benchmarks/results/evidence_calibration.json`` (or
``--out``) and a figure beside it (``--figure``).
"""

import json
from pathlib import Path

import numpy as np

import harness
from harness import _fmt

DEFAULT_PROBLEMS = ("conjugate_normal", "linear_gaussian", "radon_alpha", "radon_intercepts",
                    "eight_schools")
OPT_IN = ("eight_schools_centred", *(f"relaxation_{k}" for k in range(5)))
DEFAULT_OUT = harness.RESULTS / "evidence_calibration.json"
#: Within this of the truth a run counts as close (nats).
CLOSE = 0.1


def summarise(data: dict) -> dict:
    """Per problem and method: runs, the share marked reliable, the z-scores of the reliable
    runs, |z| > 4 flagged or not, mean standard error, RMSE, runs within 0.1 nats, median
    seconds."""
    summary = {}
    for name in data["truths"]:
        for method in dict.fromkeys(r["method"] for r in data["runs"]):
            sel = [r for r in data["runs"] if r["problem"] == name and r["method"] == method
                   and r.get("log_z_error") is not None]
            if not sel:
                continue
            z = np.array([r["z"] if r.get("z") is not None else np.nan for r in sel])
            ok = np.array([bool(r["reliable"]) for r in sel])
            err = np.array([r["log_z_error"] for r in sel])
            zr = z[ok & np.isfinite(z)]
            summary[f"{name} {method}"] = {
                "problem": name, "method": method, "runs": len(sel),
                "fraction_reliable": float(ok.mean()),
                "z_sd_reliable": float(zr.std(ddof=1)) if zr.size > 1 else None,
                "z_mean_reliable": float(zr.mean()) if zr.size else None,
                "max_abs_z_reliable": float(np.abs(zr).max()) if zr.size else None,
                "beyond_4_unflagged": int(np.sum((np.abs(z) > 4) & ok)),
                "beyond_4_flagged": int(np.sum((np.abs(z) > 4) & ~ok)),
                "mean_standard_error": float(np.mean([r["log_z_se"] for r in sel])),
                "rmse": float(np.sqrt(np.mean(err**2))),
                "within_close": int(np.sum(np.abs(err) <= CLOSE)),
                "median_seconds": float(np.median([r["seconds"] for r in sel])),
            }
    return summary


def report(data: dict) -> None:
    """Print the page's table, one row per problem and method."""
    print("| problem | method | exact log Z | runs | reliable | mean SE | RMSE | within 0.1 nats "
          "| z mean | z sd | max abs z | abs z > 4 unflagged | median s |")
    print("|" + "---|" * 13)
    for s in summarise(data).values():
        print(f"| {s['problem']} | {s['method']} | {data['truths'][s['problem']]['log_z']:.4f} "
              f"| {s['runs']} | {round(s['fraction_reliable'] * s['runs'])} "
              f"| {_fmt(s['mean_standard_error'])} | {_fmt(s['rmse'], '.2g')} | {s['within_close']} "
              f"| {_fmt(s['z_mean_reliable'], '.2f')} | {_fmt(s['z_sd_reliable'], '.2f')} "
              f"| {_fmt(s['max_abs_z_reliable'], '.2f')} | {s['beyond_4_unflagged']} "
              f"| {_fmt(s['median_seconds'], '.0f')} |")


def plot(data: dict, path: Path) -> None:
    """Each run's z-score against its seed, one panel per problem (x: marked unreliable)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(data["truths"])
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        sel = [r for r in data["runs"] if r["problem"] == name and r.get("z") is not None]
        for flag, marker in ((True, "o"), (False, "x")):
            pts = [(i, r["z"]) for i, r in enumerate(sel) if r["reliable"] == flag]
            if pts:
                i, z = zip(*pts, strict=True)
                ax.plot(i, np.clip(z, -8, 8), marker, ls="", label="reliable" if flag else "flagged")
        for level in (-4, -2, 0, 2, 4):
            ax.axhline(level, color="k", lw=0.5 if level else 1, ls=":" if abs(level) == 4 else "-")
        ax.set(title=name, xlabel="run", ylabel="z = error / SE (clipped at ±8)", ylim=(-8.5, 8.5))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=DEFAULT_PROBLEMS, methods=("ct",),
                       out=DEFAULT_OUT, seeds=20)
    p.set_defaults(first_seed=1000)
    args = harness.parse(p, argv)
    args.problems = ",".join(
        ",".join(f"relaxation_{k}" for k in range(5)) if name == "relaxations" else name
        for name in args.problems.split(","))
    problems, methods, seeds = harness.selection(args, ("conjugate_normal", "eight_schools"))
    if args.report:
        data = json.loads(args.out.read_text())
    else:
        data = harness.run_suite("evidence_calibration", problems, methods, seeds, args.out,
                                 harness.settings_from(args), resume=args.resume,
                                 timeout=args.timeout)
    report(data)
    plot(data, Path(args.figure) if args.figure else Path(args.out).with_suffix(".png"))


if __name__ == "__main__":
    main()
