"""Is the reported standard error of sample_ct's log marginal likelihood honest, and does the
verdict (``reliable``) catch the runs where it is not?

Runs ``pmt.sample_ct`` at its defaults (``with model: pmt.sample_ct(random_seed=seed)``;
``--sampler sample_gibbs_ct`` for the Gibbs form) over many seeds on models whose log Z is known exactly, and reports per model the z-scores
``(estimate - truth) / standard_error`` of the runs marked reliable and the fraction marked
reliable. Issue 17's goal: among reliable runs the z sd within [0.7, 1.5] and no |z| > 4 (every
run beyond |z| = 4 marked unreliable), at least 95% reliable on all but the relaxations.

Models (``--models``, comma-separated; default all but the relaxations):

- ``conjugate``: the conjugate normal of the tests (1 parameter, closed form);
- ``linear_gaussian``: the tests' hierarchical linear-Gaussian model (53 parameters, closed form);
- ``radon_alpha``: ``datasets.radon_model(non_centered="alpha")`` (92 parameters; exact by
  closed form and quadrature over the three scales);
- ``radon_intercepts``: ``datasets.radon_intercepts_model()``, the centred varying-intercept
  model (89 parameters; exact likewise);
- ``eight_schools``: the evidence suite's eight schools (non-centred; 1-D quadrature);
- ``eight_schools_centred``: the same eight schools written centred (``theta ~ N(mu, tau)``, the
  same log Z), whose funnel's neck NUTS does not enter; opt-in: the estimate takes the neck's
  mass from the target's profile (``funnel_correction``) and the ``funnel_mass`` check flags
  the draws that lack it (a problem of the draws, not of the evidence);
- ``relaxations``: the five 22-unit Boltzmann relaxations of ``boltzmann_relaxation.py``
  (exact by enumeration), written with ``x ~ N(0, I)`` as a proper prior and the log cosh terms
  as a potential (the benchmark's ``pm.Flat`` form has no marginal likelihood); opt-in: about
  half an hour for 20 seeds.

Run: ``.venv/bin/python benchmarks/evidence_calibration.py [--seeds 20] [--models a,b]``.
Each run is one process (the cases do not share compiled code or caches). Writes
``benchmarks/results/evidence_calibration.json`` (or ``--out``) and a figure beside it.
"""

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEFAULT_MODELS = ("conjugate", "linear_gaussian", "radon_alpha", "radon_intercepts", "eight_schools")
OPT_IN = ("eight_schools_centred",)
RELAXATIONS = tuple(f"relaxation_{k}" for k in range(5))
RELAXATION_TRUTH: dict[str, dict] = {}


def build(name: str):
    """``(model, log Z)`` of a model by name."""
    from pymc_tempering import datasets

    if name == "conjugate":
        from targets import conjugate_normal

        return conjugate_normal()[:2]
    if name == "linear_gaussian":
        from targets import hierarchical_linear_gaussian

        return hierarchical_linear_gaussian()[:2]
    if name == "radon_alpha":
        return datasets.radon_model(non_centered="alpha"), datasets.radon_log_marginal_likelihood()
    if name == "radon_intercepts":
        return (
            datasets.radon_intercepts_model(),
            datasets.radon_log_marginal_likelihood(model="intercepts"),
        )
    if name in ("eight_schools", "eight_schools_centred"):
        return (
            datasets.eight_schools_model(non_centered=name == "eight_schools"),
            datasets.eight_schools_log_marginal_likelihood(),
        )
    if name.startswith("relaxation_"):
        import boltzmann_relaxation as br

        # the benchmark's five machines, in its order and from its seed
        rng = np.random.default_rng(20170328)
        for k in range(int(name.rsplit("_", 1)[1]) + 1):
            w, b = br.boltzmann_machine(22, rng)
            q, d = br.relaxation(w, b)
            # the benchmark's other draws from rng: its base, then its sampling seed
            base = br.variational_base(w, b, q, d, rng)
            rng.integers(2**31)
        # eq. (51) with its Gaussian factor as a proper prior (the benchmark's pm.Flat version
        # has no marginal likelihood for log_marginal_likelihood to report)
        model, shift = br.proper_relaxation_model(q, b)
        log_z_flat, mean, cov = br.truth(w, b, q, d)
        log_z = float(log_z_flat) + shift
        # the moments by exact enumeration and the benchmark's variational base's errors, for
        # the relaxation benchmark's relative RMSEs at the defaults (run_case)
        RELAXATION_TRUTH[name] = {
            "mean": mean,
            "cov": cov,
            "base_log_z_error": abs(base.log_zeta - log_z_flat),
            "base_mean_rmse": float(np.sqrt(np.mean((base.mean - mean) ** 2))),
            "base_cov_rmse": float(np.sqrt(np.mean((base.cov - cov) ** 2))),
        }
        return model, log_z
    raise ValueError(f"unknown model {name!r}")


def run_case(name: str, seed: int, sampler: str = "sample_ct") -> dict:
    import warnings

    import pymc_tempering as pmt

    logging.getLogger("pymc").setLevel(logging.ERROR)
    model, log_z = build(name)
    start = time.perf_counter()
    with warnings.catch_warnings(), model:
        warnings.simplefilter("ignore")
        idata = getattr(pmt, sampler)(random_seed=seed, progressbar=False)
    seconds = time.perf_counter() - start
    lml = pmt.log_marginal_likelihood(idata)
    extra = {}
    if name in RELAXATION_TRUTH:
        import boltzmann_relaxation as br

        t = RELAXATION_TRUTH[name]
        _, mean, cov = br.weighted_moments(idata)
        extra = {
            "mean_rmse": float(np.sqrt(np.mean((mean - t["mean"]) ** 2))),
            "cov_rmse": float(np.sqrt(np.mean((cov - t["cov"]) ** 2))),
            **{k: float(v) for k, v in t.items() if k.startswith("base_")},
        }
    if "funnel_mass" in idata["base"]:
        # the funnel check's largest missing mass and its standard error
        i = int(np.argmax(idata["base"]["funnel_mass"].values))
        extra["funnel_mass"] = float(idata["base"]["funnel_mass"].values[i])
        extra["funnel_mass_se"] = float(idata["base"]["funnel_mass_se"].values[i])
        # the neck's mass the estimate took from the profile (nats), and the draws' problems
        extra["funnel_correction"] = float(idata.attrs.get("funnel_correction", np.nan))
        extra["draws_only_problems"] = list(pmt.diagnose(idata).draws_only)
    return {
        "model": name,
        "seed": seed,
        "sampler": sampler,
        "log_z": float(log_z),
        "estimate": float(lml.estimate),
        "standard_error": float(lml.standard_error),
        "error": float(lml.estimate - log_z),
        "z": float((lml.estimate - log_z) / lml.standard_error),
        "reliable": bool(lml.reliable),
        "problems": list(lml.problems),
        "base": str(idata.attrs.get("base_method", "")),
        "seconds": seconds,
        **extra,
    }


def summarise(rows: list[dict]) -> dict:
    summary = {}
    for name in dict.fromkeys(r["model"] for r in rows):
        sel = [r for r in rows if r["model"] == name]
        z = np.array([r["z"] for r in sel])
        ok = np.array([r["reliable"] for r in sel])
        zr = z[ok]
        summary[name] = {
            "runs": len(sel),
            "fraction_reliable": float(ok.mean()),
            "z_sd_reliable": float(zr.std(ddof=1)) if zr.size > 1 else float("nan"),
            "z_mean_reliable": float(zr.mean()) if zr.size else float("nan"),
            "max_abs_z_reliable": float(np.abs(zr).max()) if zr.size else float("nan"),
            "beyond_4_unflagged": int(np.sum((np.abs(z) > 4) & ok)),
            "beyond_4_flagged": int(np.sum((np.abs(z) > 4) & ~ok)),
            "mean_standard_error": float(np.mean([r["standard_error"] for r in sel])),
            "median_seconds": float(np.median([r["seconds"] for r in sel])),
        }
    return summary


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        sel = [r for r in rows if r["model"] == name]
        for flag, marker in ((True, "o"), (False, "x")):
            pts = [(i, r["z"]) for i, r in enumerate(sel) if r["reliable"] == flag]
            if pts:
                i, z = zip(*pts, strict=True)
                ax.plot(i, np.clip(z, -8, 8), marker, ls="", label="reliable" if flag else "flagged")
        for level in (-4, -2, 0, 2, 4):
            ax.axhline(level, color="k", lw=0.5 if level else 1, ls=":" if abs(level) == 4 else "-")
        ax.set(title=name, xlabel="seed", ylabel="z = error / SE (clipped at ±8)", ylim=(-8.5, 8.5))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1000,
                        help="the first seed (to add seeds to a run: 1020 after --seeds 20)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"of: {', '.join((*DEFAULT_MODELS, *OPT_IN, 'relaxations'))}")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "evidence_calibration.json"))
    parser.add_argument("--sampler", default="sample_ct", choices=("sample_ct", "sample_gibbs_ct"),
                        help="the continuous tempering method run at its defaults")
    parser.add_argument("--case", nargs=2, metavar=("MODEL", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.sampler)))
        return
    names = []
    for name in args.models.split(","):
        names += list(RELAXATIONS) if name == "relaxations" else [name]
    for name in names:
        if name not in (*DEFAULT_MODELS, *OPT_IN, *RELAXATIONS):
            parser.error(f"unknown model {name!r}")
    out = Path(args.out)
    rows = []
    # Seeds outermost, so that a run stopped part-way has every model at the same seeds.
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name in names:
            proc = subprocess.run(
                [sys.executable, __file__, "--case", name, str(seed), "--sampler", args.sampler],
                capture_output=True, text=True, check=False,
            )
            if proc.returncode != 0:
                print(f"{name} {seed} failed:\n{proc.stderr[-2000:]}", flush=True)
                continue
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{name} {seed}: error {r['error']:+.3f} SE {r['standard_error']:.3f} "
                  f"z {r['z']:+.2f} reliable {r['reliable']} {r['seconds']:.0f}s", flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"runs": rows, "summary": summarise(rows)}, indent=1))
    plot(rows, out.with_suffix(".png"))
    for name, s in summarise(rows).items():
        print(f"{name}: {s['fraction_reliable']:.0%} reliable; among them z sd "
              f"{s['z_sd_reliable']:.2f}, max |z| {s['max_abs_z_reliable']:.2f}; |z| > 4: "
              f"{s['beyond_4_unflagged']} unflagged, {s['beyond_4_flagged']} flagged; "
              f"median {s['median_seconds']:.0f} s")


if __name__ == "__main__":
    main()
