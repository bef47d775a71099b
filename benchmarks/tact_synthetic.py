"""Section 5.1 of Luo et al. (2018): TACT-HMC and its ablations on three synthetic targets.

A 1-D mixture of three Gaussians (Fig. 1) and two 2-D mixtures (Fig. 2), each with Gaussian
noise (sd ``NOISE``) added to the energy and the gradient, unknown to the samplers. Every
sampler starts all chains in one mode. It runs on ``benchmarks/harness.py`` (problems x
methods x seeds, one fresh process per case, its command line and JSON): the targets are this
script's problems (``three_gaussians_1d``, ``four_corners_2d``, ``ring_of_five_2d``), the
variants its methods (``tact``, ``tempering_only``, ``sgnht``); each record holds the mode
weights with MCSEs, the far-from-mode mass, the thermostat average against Theorem 1, and a
histogram of the draws for the figures (like Fig. 1a and Fig. 2; ``--figure PATH`` writes
``PATH`` with ``_1d`` and ``_2d`` before its suffix).

With ``--defaults`` the samplers run at their default settings (``step_size="auto"`` warm-up,
``tune=1000`` iterations of the default ``steps_per_sample=50``) instead of the tuned
``SETTINGS``.

Run::

    .venv/bin/python benchmarks/tact_synthetic.py --draws 3000 \
        --out benchmarks/results/tact_synthetic.json --figure benchmarks/results/tact_synthetic.png
    .venv/bin/python benchmarks/tact_synthetic.py --draws 1000 --defaults \
        --out benchmarks/results/tact_synthetic_defaults.json
    .venv/bin/python benchmarks/tact_synthetic.py --report --out benchmarks/results/tact_synthetic.json
    .venv/bin/python benchmarks/tact_synthetic.py --quick          # smoke: the 1-D target, tact
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.stats import norm

import harness

NOISE = 3.0
SETTINGS = dict(
    step_size=0.01,
    step_size_tempering=0.001,
    noise=0.05,
    noise_tempering=0.05,
    steps_per_sample=20,
    tune=20,  # warm-up iterations of 20 steps (the former default burn-in of 400 steps)
    gradient_noise=NOISE,
)
VARIANTS = {"tact": "TACT-HMC", "tempering_only": "tempered, no thermostats", "sgnht": "thermostats, no tempering"}


def ring(n, radius):
    a = 2 * np.pi * np.arange(n) / n
    return radius * np.stack([np.cos(a), np.sin(a)], 1)


TARGETS = {
    "three_gaussians_1d": (np.array([0.2, 0.3, 0.5]), np.array([[-5.0], [0.0], [5.0]]), 0.6),
    "four_corners_2d": (
        np.array([0.1, 0.2, 0.3, 0.4]),
        np.array([[-3.0, -3.0], [-3.0, 3.0], [3.0, -3.0], [3.0, 3.0]]),
        0.5,
    ),
    "ring_of_five_2d": (np.full(5, 0.2), ring(5, 4.0), 0.5),
}


def model_for(w, mus, sd):
    """The mixture as a PyMC model of ``x``."""
    import pymc as pm

    with pm.Model() as model:
        if mus.shape[1] == 1:
            pm.NormalMixture("x", w=w, mu=mus[:, 0], sigma=sd)
        else:
            comps = [pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(2)) for m in mus]
            pm.Mixture("x", w=w, comp_dists=comps)
    return model


def mean_mcse(series):
    """Mean, its MCSE from arviz-stats' ESS, and the ESS."""
    from arviz_stats.base.array import array_stats

    ess = float(array_stats.ess(series, method="mean"))
    return float(series.mean()), float(series.std() / np.sqrt(ess)), ess


for _name, (_w, _mus, _sd) in TARGETS.items():
    harness.problem(_name, lambda w=_w, mus=_mus, sd=_sd: model_for(w, mus, sd),
                    description=f"{len(_w)}-component mixture, noise sd {NOISE} on energy and gradient")


def _run(variant, problem, seed, settings):
    from pymc_tempering.kernels.thermostats import TemperingParams, ThermostatParams, thermostat_reference
    from pymc_tempering.methods.tact import TemperingSettings, sample_tact
    from pymc_tempering.methods.tact.testing import hooks

    w, mus, sd = TARGETS[problem.name]
    draws, defaults = settings.get("draws") or 4000, settings["defaults"]
    dim = mus.shape[1]
    options = {} if defaults else {
        k: v for k, v in SETTINGS.items() if k not in ("gradient_noise", "step_size_tempering", "noise_tempering")
    }
    if not defaults:
        options["tempering"] = TemperingSettings(step_size=SETTINGS["step_size_tempering"], noise=SETTINGS["noise_tempering"])
    with hooks(gradient_noise=NOISE):
        idata = sample_tact(draws, model=problem.build(), variant=variant,
                            initial_points=np.tile(mus[-1], (4, 1)), random_seed=seed,
                            progressbar=False, **options)
    x = idata.posterior["x"].values.reshape(4, draws, dim)
    dist = np.sqrt(np.sum((x[..., None, :] - mus) ** 2, -1))
    lab = np.argmin(dist, -1)
    weights = [mean_mcse((lab == k).astype(float)) for k in range(len(w))]
    far = mean_mcse((dist.min(-1) > 2.5 * sd).astype(float))
    far_truth = 2 * norm.sf(2.5) if dim == 1 else float(np.exp(-(2.5**2) / 2))
    z = idata.sample_stats["thermostat_theta"].values
    s = ThermostatParams(0.01, 0.05, 1.0, tempering=TemperingParams(0.001, 0.05, 1.0))
    if defaults:  # the noise in the preconditioned units: sigma * scale per coordinate
        scale = idata["warmup"]["preconditioner_scale"].values
        s = s._replace(eta_theta=idata.attrs["step_size"],
                       tempering=s.tempering._replace(eta_xi=idata.attrs["step_size_tempering"]))
        ref = thermostat_reference(s, dim, NOISE * float(np.sqrt(np.mean(scale**2))), NOISE)
    else:
        ref = thermostat_reference(s, dim, NOISE, NOISE)
    flat = x.reshape(-1, dim)
    histogram = (np.histogram(flat[:, 0], bins=120, range=(-9, 9))[0] if dim == 1
                 else np.histogram2d(flat[:, 0], flat[:, 1], bins=80, range=[[-6.5, 6.5], [-6.5, 6.5]])[0])
    return None, {
        "weights_true": w.tolist(),
        "weights": [[m, se] for m, se, _ in weights],
        "weight_ess": [e for _, _, e in weights],
        "max_abs_weight_error": float(max(abs(m - t) for (m, _, _), t in zip(weights, w, strict=True))),
        "far_mass": [far[0], far[1]],
        "far_mass_true": far_truth,
        "thermostat_theta_mean": float(z.mean()),
        "thermostat_theta_reference": ref["thermostat_theta"][0] if variant in ("tact", "sgnht") else 0.05,
        "steps": int(idata.attrs["n_steps"]),
        "histogram": histogram.astype(int).tolist(),
        **({"preconditioner_scale": idata["warmup"]["preconditioner_scale"].values.tolist(),
            "step_size": idata.attrs["step_size"],
            "step_size_tempering": idata.attrs["step_size_tempering"],
            "warmup_blowups": idata.attrs["warmup_blowups"]} if defaults else {}),
    }


for _variant, _text in VARIANTS.items():
    harness.method(_variant, f"pmt.sample_tact(variant={_variant!r}): {_text}")(
        lambda problem, seed, settings, _v=_variant: _run(_v, problem, seed, settings))


def report(data: dict) -> None:
    """One row per target and variant: the weights, their smallest ESS, the far mass, the
    thermostat average against Theorem 1, and the seconds."""
    print("| target | variant | true weights | weights | min ESS | far mass | z_theta (ref) | s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in data["runs"]:
        if r.get("error_message"):
            print(f"| {r['problem']} | {r['method']} | FAILED: {r['error_message'][:100]} |")
            continue
        w = r["weights_true"]
        true = f"{w[0]} each" if len(set(w)) == 1 else " / ".join(f"{v:.2f}" for v in w)
        never_left = all(se == 0 for _, se in r["weights"])
        if never_left:
            weights = " / ".join(f"{m:.0f}" for m, _ in r["weights"]) + " (never left)"
        else:
            weights = " / ".join(f"{m:.3f}±{se:.3f}" for m, se in r["weights"])
        far, far_se = r["far_mass"]
        print(f"| {r['problem']} | {r['method']} | {true} | {weights} "
              f"| {'–' if never_left else format(min(r['weight_ess']), '.0f')} "
              f"| {far:.4f}±{far_se:.4f} (true {r['far_mass_true']:.4f}) "
              f"| {r['thermostat_theta_mean']:.4f} ({r['thermostat_theta_reference']:.4f}) "
              f"| {harness._fmt(r.get('seconds'), '.0f')} |")


def plot(data: dict, path) -> None:
    """The draws' histograms: the 1-D target against its density (``PATH_1d``), the 2-D
    targets beside theirs (``PATH_2d``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    runs = {(r["problem"], r["method"]): np.array(r["histogram"]) for r in data["runs"] if r.get("histogram")}
    if ("three_gaussians_1d", "tact") in runs or any(k[0] == "three_gaussians_1d" for k in runs):
        w, mus, sd = TARGETS["three_gaussians_1d"]
        grid = np.linspace(-9, 9, 600)
        dens = np.sum(w * norm.pdf(grid[:, None], mus[:, 0], sd), 1)
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharey=True)
        edges = np.linspace(-9, 9, 121)
        for ax, (variant, label) in zip(axes, VARIANTS.items(), strict=True):
            counts = runs.get(("three_gaussians_1d", variant))
            if counts is not None:
                ax.stairs(counts / counts.sum() / np.diff(edges), edges, fill=True, color="C1", alpha=0.7)
            ax.plot(grid, dens, "C0")
            ax.set_title(label)
        fig.suptitle(f"Mixture of three Gaussians, noise sd {NOISE} on energy and gradient")
        fig.tight_layout()
        fig.savefig(path.with_name(f"{path.stem}_1d{path.suffix}"), dpi=110)
        plt.close(fig)
    names = [n for n in ("four_corners_2d", "ring_of_five_2d") if any(k[0] == n for k in runs)]
    if names:
        fig, axes = plt.subplots(len(names), 4, figsize=(14, 3.5 * len(names)), squeeze=False)
        for row, name in zip(axes, names, strict=True):
            w, mus, sd = TARGETS[name]
            g = np.linspace(-6.5, 6.5, 200)
            X, Y = np.meshgrid(g, g)
            pts = np.stack([X, Y], -1)[..., None, :]
            dens = np.sum(w * np.exp(-np.sum((pts - mus) ** 2, -1) / (2 * sd**2)), -1)
            row[0].imshow(dens, origin="lower", extent=(-6.5, 6.5, -6.5, 6.5), cmap="viridis")
            row[0].set_title(f"{name}: target")
            for ax, (variant, label) in zip(row[1:], VARIANTS.items(), strict=True):
                if (name, variant) in runs:
                    ax.imshow(runs[(name, variant)].T, origin="lower", extent=(-6.5, 6.5, -6.5, 6.5),
                              cmap="viridis")
                ax.set_title(label)
        fig.tight_layout()
        fig.savefig(path.with_name(f"{path.stem}_2d{path.suffix}"), dpi=110)
        plt.close(fig)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=tuple(TARGETS), methods=tuple(VARIANTS),
                       out=harness.RESULTS / "tact_synthetic.json", seeds=1)
    p.add_argument("--defaults", action="store_true", help="the samplers' default settings")
    args = harness.parse(p, argv)
    if args.quick and not args.methods_given:
        args.methods = "tact"
    settings = harness.settings_from(args, quick={"draws": 200}, defaults=args.defaults,
                                     **({"gradient_noise": NOISE} if args.defaults else SETTINGS))
    harness.run_or_report(args, "tact_synthetic", settings, report=report, plot=plot,
                          quick_problems=("three_gaussians_1d",))


if __name__ == "__main__":
    main()
