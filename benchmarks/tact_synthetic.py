"""Section 5.1 of Luo et al. (2018): TACT-HMC and its ablations on three synthetic targets.

A 1-D mixture of three Gaussians (Fig. 1) and two 2-D mixtures (Fig. 2), each with Gaussian
noise (sd ``NOISE``) added to the energy and the gradient, unknown to the samplers. Every
sampler starts all chains in one mode. Writes ``benchmarks/results/tact_synthetic.json`` (mode
weights with MCSEs, far-from-mode mass, thermostat averages against Theorem 1, wall times) and
``tact_synthetic_1d.png`` / ``tact_synthetic_2d.png`` (histograms like Fig. 1a and Fig. 2).

Run: ``python benchmarks/tact_synthetic.py [--draws N] [--defaults]``. With ``--defaults`` the
samplers run at their default settings (``step_size="auto"`` warm-up, ``tune=1000`` iterations of
the default ``steps_per_sample=50``) instead of the tuned ``SETTINGS``, and the results go to
``tact_synthetic_defaults.json`` / ``tact_synthetic_defaults_*.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
from arviz_stats.base.array import array_stats
from scipy.stats import norm

from pymc_tempering.methods.tact import TemperingSettings, sample_tact
from pymc_tempering.methods.tact.testing import hooks
from pymc_tempering.kernels.thermostats import TemperingParams, ThermostatParams, thermostat_reference

OUT = Path(__file__).parent / "results"
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
    with pm.Model() as model:
        if mus.shape[1] == 1:
            pm.NormalMixture("x", w=w, mu=mus[:, 0], sigma=sd)
        else:
            comps = [pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(2)) for m in mus]
            pm.Mixture("x", w=w, comp_dists=comps)
    return model


def mean_mcse(series):
    ess = float(array_stats.ess(series, method="mean"))
    return float(series.mean()), float(series.std() / np.sqrt(ess)), ess


def run(draws, seed=0, defaults=False):
    results, samples = {}, {}
    for name, (w, mus, sd) in TARGETS.items():
        model = model_for(w, mus, sd)
        dim = mus.shape[1]
        for variant in VARIANTS:
            t0 = time.perf_counter()
            options = {} if defaults else {
                k: v for k, v in SETTINGS.items() if k not in ("gradient_noise", "step_size_tempering", "noise_tempering")
            }
            if not defaults:
                options["tempering"] = TemperingSettings(step_size=SETTINGS["step_size_tempering"], noise=SETTINGS["noise_tempering"])
            with hooks(gradient_noise=NOISE):
                idata = sample_tact(
                    draws,
                    model=model,
                    variant=variant,
                    initial_points=np.tile(mus[-1], (4, 1)),
                    random_seed=seed,
                    progressbar=False,
                    **options,
                )
            wall = time.perf_counter() - t0
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
            results[f"{name}/{variant}"] = {
                "weights_true": w.tolist(),
                "weights": [[m, se] for m, se, _ in weights],
                "weight_ess": [e for _, _, e in weights],
                "max_abs_weight_error": float(max(abs(m - t) for (m, _, _), t in zip(weights, w))),
                "far_mass": [far[0], far[1]],
                "far_mass_true": far_truth,
                "thermostat_theta_mean": float(z.mean()),
                "thermostat_theta_reference": ref["thermostat_theta"][0] if variant in ("tact", "sgnht") else 0.05,
                "steps": int(idata.attrs["n_steps"]),
                "wall_s": wall,
                **({"preconditioner_scale": idata["warmup"]["preconditioner_scale"].values.tolist(),
                    "step_size": idata.attrs["step_size"],
                    "step_size_tempering": idata.attrs["step_size_tempering"],
                    "warmup_blowups": idata.attrs["warmup_blowups"]} if defaults else {}),
            }
            samples[(name, variant)] = x.reshape(-1, dim)
            print(name, variant, json.dumps(results[f"{name}/{variant}"]), flush=True)
    return results, samples


def plot(samples, suffix=""):
    w, mus, sd = TARGETS["three_gaussians_1d"]
    grid = np.linspace(-9, 9, 600)
    dens = np.sum(w * norm.pdf(grid[:, None], mus[:, 0], sd), 1)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharey=True)
    for ax, (variant, label) in zip(axes, VARIANTS.items()):
        ax.hist(samples[("three_gaussians_1d", variant)][:, 0], bins=120, range=(-9, 9), density=True, color="C1", alpha=0.7)
        ax.plot(grid, dens, "C0")
        ax.set_title(label)
    fig.suptitle(f"Mixture of three Gaussians, noise sd {NOISE} on energy and gradient")
    fig.tight_layout()
    fig.savefig(OUT / f"tact_synthetic{suffix}_1d.png", dpi=110)

    names = ["four_corners_2d", "ring_of_five_2d"]
    fig, axes = plt.subplots(2, 4, figsize=(14, 7))
    for row, name in zip(axes, names):
        w, mus, sd = TARGETS[name]
        g = np.linspace(-6.5, 6.5, 200)
        X, Y = np.meshgrid(g, g)
        pts = np.stack([X, Y], -1)[..., None, :]
        dens = np.sum(w * np.exp(-np.sum((pts - mus) ** 2, -1) / (2 * sd**2)), -1)
        row[0].imshow(dens, origin="lower", extent=(-6.5, 6.5, -6.5, 6.5), cmap="viridis")
        row[0].set_title(f"{name}: target")
        for ax, (variant, label) in zip(row[1:], VARIANTS.items()):
            s = samples[(name, variant)]
            ax.hist2d(s[:, 0], s[:, 1], bins=80, range=[[-6.5, 6.5], [-6.5, 6.5]], cmap="viridis")
            ax.set_title(label)
    fig.tight_layout()
    fig.savefig(OUT / f"tact_synthetic{suffix}_2d.png", dpi=110)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--defaults", action="store_true", help="the samplers' default settings")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    results, samples = run(args.draws, defaults=args.defaults)
    suffix = "_defaults" if args.defaults else ""
    settings = {"gradient_noise": NOISE, "defaults": True} if args.defaults else dict(SETTINGS)
    (OUT / f"tact_synthetic{suffix}.json").write_text(json.dumps({"noise_sd": NOISE, "draws_per_chain": args.draws, "chains": 4, "settings": settings, "results": results}, indent=1))
    plot(samples, suffix)


if __name__ == "__main__":
    main()
