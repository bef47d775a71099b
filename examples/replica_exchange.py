"""Replica exchange with thermostats (``pmt.sample_replica_exchange``) on a minibatched model.

The model is the one of ``examples/tact_hmc.py``: ``theta ~ N(0.5, 1.5^2)`` and
``y_i ~ N(theta^2, 10^2)`` for ``N = 1000`` simulated points, written with
``pm.Minibatch(y, batch_size=100)`` and ``total_size=N``. The posterior has two modes near
``+-1`` (the sign is not identified) with a barrier of about 4.6 nats, and the prior makes the
positive one more probable; the exact posterior (full data) is computed by quadrature.

Four chains, each a ladder of 8 replicas at temperatures 1 to 10 (geometric), all started in
the lighter, negative mode. With ``pm.Minibatch`` in the model the swaps use the noise-corrected
logistic test (``minibatch="auto"``), the noise estimated from the minibatch itself; a swap whose
noise sd exceeds 1 is skipped. The same thermostat dynamics with one replica (temperature 1
only) is run for comparison. The script prints ``P(theta > 0)`` ± MCSE (multi-chain ESS of the
indicator) and the sd within each mode for both, next to the exact values, and per pair of
neighbouring temperatures the swap acceptance rate and the fraction of swaps skipped.

The figure shows the histograms of the ``T = 1`` draws over the exact density, the draws of
the coldest and the hottest replica of one chain, and the swap statistics per pair.

Run: ``python examples/replica_exchange.py [OUTPUT.png] [--draws 5000] [--seed 1]`` (under a
minute on 2 cores). Without OUTPUT the figure goes to a new temporary directory, never into the
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
    build_model, exact_posterior, exact_summary, print_theta_summary,
)

logging.getLogger("pymc").setLevel(logging.ERROR)

SETTINGS = dict(chains=4, step_size=2.5e-4, steps_per_sample=40, exchange_every=10)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="PNG path (default: a new temporary directory)")
    parser.add_argument("--draws", type=int, default=5000, help="draws per chain")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output else Path(tempfile.mkdtemp()) / "replica_exchange.png"
    output.parent.mkdir(parents=True, exist_ok=True)

    model = build_model()
    grid = np.linspace(-2.5, 2.5, 2001)
    density = exact_posterior(grid)
    exact_p_pos, exact_sd = exact_summary(grid, density)
    start = np.full((SETTINGS["chains"], 1), -1.0)  # every replica starts in the lighter mode

    results = {}
    for name, n_temperatures in [("replica exchange", 8), ("one replica", 1)]:
        t0 = time.perf_counter()
        results[name] = pmt.sample_replica_exchange(
            args.draws, tune=20, model=model, n_temperatures=n_temperatures, max_temperature=10.0,
            initial_points=start, random_seed=args.seed, progressbar=False, **SETTINGS)
        results[name].attrs["wall_time"] = time.perf_counter() - t0

    print(f"exact (quadrature, full data): P(theta > 0) = {exact_p_pos:.3f}, "
          f"sd within the modes (negative, positive) = {exact_sd[0]:.3f}, {exact_sd[1]:.3f}\n")
    for name, idata in results.items():
        theta = idata["posterior"]["theta"].transpose("chain", "draw").values
        print(f"{name} ({idata.attrs['n_replicas']} replicas, {theta.size} draws at T = 1, "
              f"{idata.attrs['n_steps']} steps, {idata.attrs['wall_time']:.0f} s):")
        print_theta_summary(theta, exact_p_pos, exact_sd)

    re = results["replica exchange"]
    ex = re["replica_exchange"]
    attempted = ex["swap_attempted"].sum("chain").values
    skipped = ex["swap_skipped"].sum("chain").values
    rate = ex["swap_acceptance_rate"].mean("chain").values
    low, high = ex["temperature_low"].values, ex["temperature_high"].values
    print(f"\nexchange test: {re.attrs['exchange_test']}; per pair (chains pooled):")
    print("  temperatures     acceptance  skipped  largest noise sd")
    for k in range(len(low)):
        print(f"  {low[k]:5.2f} - {high[k]:5.2f}   {rate[k]:.3f}       {skipped[k] / attempted[k]:.3f}"
              f"    {float(ex['exchange_noise_sd_max'].isel(pair=k).max()):.2f}")

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for (name, idata), colour in zip(results.items(), ["C0", "C1"], strict=True):
        theta = idata["posterior"]["theta"].values
        axes[0].hist(theta.ravel(), bins=120, range=(-2, 2), density=True, color=colour,
                     label=f"{name}, T = 1", **({"alpha": 0.5} if name == "replica exchange"
                                                else {"histtype": "step", "lw": 1.2}))
    axes[0].plot(grid, density, "k", lw=1, label="exact (full data)")
    axes[0].set(xlabel="theta", ylabel="density", title="draws at temperature 1", xlim=(-2, 2))
    axes[0].legend(loc="upper left", fontsize="small")
    replicas = re["replicas"]["theta"].transpose("chain", "draw", "replica").values[0]
    temps = re["replicas"]["temperature"].values
    for k, colour in [(len(temps) - 1, "C3"), (0, "C0")]:
        axes[1].plot(replicas[:300, k], lw=0.8, color=colour, label=f"replica at T = {temps[k]:.0f}")
    axes[1].set(xlabel="draw", ylabel="theta", title="chain 0: coldest and hottest replica",
                ylim=(-2.2, 2.8))
    axes[1].legend(loc="upper center", ncol=2, fontsize="small")
    pairs = np.arange(len(low))
    axes[2].bar(pairs - 0.2, rate, width=0.4, label="accepted / tested")
    axes[2].bar(pairs + 0.2, skipped / attempted, width=0.4, label="skipped (noise sd > 1)")
    axes[2].set(xticks=pairs, xticklabels=[f"{a:.1f}-{b:.1f}" for a, b in zip(low, high, strict=True)],
                xlabel="pair of temperatures", ylabel="fraction", title="swaps per pair",
                ylim=(0, 0.75))
    axes[2].tick_params(axis="x", labelsize=7)
    axes[2].legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    print(f"\nfigure: {output}")


if __name__ == "__main__":
    main()
