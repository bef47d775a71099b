"""TACT-HMC (``pmt.sample_tact``) on a minibatched model whose posterior has two modes.

The model is the quickstart's unidentified sign, at a data size where minibatches make sense:
``theta ~ N(0.5, 1.5^2)`` and ``y_i ~ N(theta^2, 10^2)`` for ``N = 1000`` simulated points
(true ``theta^2 = 1.44``), written with ``pm.Minibatch(y, batch_size=100)`` and
``total_size=N``. Every gradient the sampler sees is a fresh minibatch estimate; nothing else in
the model is special. The posterior has modes near ``+-1`` with a barrier of about 4.6 nats
between them, and the prior makes the positive one more probable. It is one-dimensional, so the
exact posterior (full data) is computed by quadrature on a grid.

All four chains start in the lighter, negative mode. ``sample_tact`` (thermostats and
continuous tempering up to temperature 10) is run against its ablation without tempering,
``variant="sgnht"`` (thermostats only), with the same step size, steps per draw and seed. The
script prints, for both, ``P(theta > 0)`` ± MCSE (from the multi-chain ESS of the indicator)
next to the exact value, the posterior sd within each mode, and the thermostat's mean
``z_theta`` next to Theorem 1's ``c + eta sigma_f^2 / 2``, with ``sigma_f^2`` the variance of
the minibatch gradient (computed from the full data at each draw), and next to
``1 - sqrt(1 - 2 c - eta sigma_f^2)``, where a thermostat that held the Euler step's momenta at
``E r^2 = eta`` would settle (the library's thermostats read the kinetic energy as the Euler
friction leaves it, which puts them at Theorem 1's value; here ``eta sigma_f^2`` is about 0.4,
not small, and the two differ by 0.03).

The figure shows the histograms of both samplers' draws over the exact posterior density, one
chain's trace of each, and the effective temperature of that TACT chain over its first 400
trajectory records (one every 50 steps).

Run: ``python examples/tact_hmc.py [OUTPUT.png] [--draws 4000] [--seed 1]`` (about a minute and
a half on 2 cores). Without OUTPUT the figure goes to a new temporary directory, never into the
repository; the path is printed. The same ``--seed`` gives the same numbers, minibatches
included.
"""

import argparse
import logging
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import pymc_tempering as pmt  # noqa: E402
from _minibatch_bimodal import (  # noqa: E402
    BATCH, N, NOISE_SD, Y, build_model, exact_posterior, exact_summary, mean_and_mcse,
    print_theta_summary,
)

logging.getLogger("pymc").setLevel(logging.ERROR)

SETTINGS = dict(step_size=1e-3, noise=0.05, max_temperature=10.0, steps_per_sample=50)


def gradient_noise_variance(theta: np.ndarray) -> np.ndarray:
    """Variance of the minibatch estimate of d log p / d theta at theta (draws with replacement):
    ``N^2 / m`` times the variance over the data of the per-datum terms
    ``(y_i - theta^2) 2 theta / sigma^2``."""
    return N**2 / BATCH * (2 * theta / NOISE_SD**2) ** 2 * Y.var()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="PNG path (default: a new temporary directory)")
    parser.add_argument("--draws", type=int, default=4000, help="draws per chain")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output else Path(tempfile.mkdtemp()) / "tact_hmc.png"
    output.parent.mkdir(parents=True, exist_ok=True)

    model = build_model()
    grid = np.linspace(-2.5, 2.5, 2001)
    density = exact_posterior(grid)
    exact_p_pos, exact_sd = exact_summary(grid, density)
    start = np.full((4, 1), -1.0)  # every chain starts in the lighter mode

    results = {}
    for variant in ["tact", "sgnht"]:
        t0 = time.perf_counter()
        results[variant] = pmt.sample_tact(args.draws, tune=20, model=model, variant=variant,
                                           initial_points=start, random_seed=args.seed,
                                           progressbar=False, **SETTINGS)
        results[variant].attrs["wall_time"] = time.perf_counter() - t0

    print(f"exact (quadrature, full data): P(theta > 0) = {exact_p_pos:.3f}, "
          f"sd within the modes (negative, positive) = {exact_sd[0]:.3f}, {exact_sd[1]:.3f}\n")
    for variant, idata in results.items():
        theta = idata["posterior"]["theta"].transpose("chain", "draw").values
        z = idata["sample_stats"]["thermostat_theta"].transpose("chain", "draw").values
        z_mean, z_se = mean_and_mcse(z)
        # Theorem 1: z = c + eta sigma_f^2 / 2. The Euler step r <- (1 - z) r + eta f + N(0, 2 c eta)
        # would keep E r^2 = eta at z (2 - z) = 2 c + eta sigma_f^2, where the old thermostat sat.
        noise = SETTINGS["step_size"] * np.mean(gradient_noise_variance(theta))
        z_theory = SETTINGS["noise"] + noise / 2
        z_euler = 1 - np.sqrt(1 - 2 * SETTINGS["noise"] - noise)
        print(f"{variant} ({theta.size} draws, {idata.attrs['n_steps']} steps, "
              f"{idata.attrs['wall_time']:.0f} s):")
        print_theta_summary(theta, exact_p_pos, exact_sd)
        print(f"  mean z_theta = {z_mean:.3f} ± {z_se:.3f}   (Theorem 1: {z_theory:.3f}, "
              f"holding E r^2 = eta: {z_euler:.3f}; c = {SETTINGS['noise']})")

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    labels = {"tact": "TACT-HMC", "sgnht": "SGNHT (no tempering)"}
    for (variant, idata), colour in zip(results.items(), ["C0", "C1"], strict=True):
        theta = idata["posterior"]["theta"].values
        axes[0].hist(theta.ravel(), bins=120, range=(-2, 2), density=True, color=colour,
                     label=labels[variant], **({"alpha": 0.5} if variant == "tact" else
                                               {"histtype": "step", "lw": 1.2}))
        axes[1].plot(theta[0], lw=0.4, color=colour, label=labels[variant])
    axes[0].plot(grid, density, "k", lw=1, label="exact (full data)")
    axes[0].set(xlabel="theta", ylabel="density", title="draws at temperature 1", xlim=(-2, 2))
    axes[0].legend(loc="upper left", fontsize="small")
    axes[1].set(xlabel="draw", ylabel="theta", title="chain 0, started at theta = -1",
                ylim=(-2, 2.4))
    axes[1].legend(loc="upper center", ncol=2, fontsize="small")
    traj = results["tact"]["tact_trajectory"]
    temp = traj["effective_temperature"].transpose("chain", ...).values[0]
    axes[2].plot(temp[:400], lw=0.8, color="C3")
    axes[2].set(xlabel=f"trajectory record (every {SETTINGS['steps_per_sample']} steps)",
                ylabel="effective temperature", title="TACT-HMC chain 0: first 400 records")
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    print(f"\nfigure: {output}")


if __name__ == "__main__":
    main()
