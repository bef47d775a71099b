"""Gibbs continuous tempering against its baselines, AIS and simulated tempering.

The model is the four-mode posterior of ``examples/multimodal.py``: prior ``x ~ N(0, 5^2 I)``
in 2-D, likelihood a mixture of four narrow Gaussians (sd 0.3) at ``(+-2.5, +-2.5)`` with
weights 0.4, 0.3, 0.2, 0.1, so the log marginal likelihood and each mode's posterior mass are
known in closed form. All three samplers get the same base, ``fit_base(method="prior")``, a
Gaussian that covers the four modes:

- ``pmt.sample_gibbs_ct``: PyMC's NUTS on ``x`` given ``beta`` and an exact Gibbs draw of
  ``beta`` given ``x`` (one bootstrap round, then the final run);
- ``pmt.sample_ais``: independent annealed importance sampling runs from the base;
- ``pmt.sample_simulated_tempering``: a discrete ladder of 101 inverse temperatures.

For each it prints the log marginal likelihood ± its standard error and the weighted posterior
mass of each mode ± MCSE next to the exact values. The figure shows the Gibbs CT draws against
the inverse temperature (``pmt.plot_joint``; point area proportional to the weight at
``beta = 1``) and the three methods' log Z and mode masses with two-standard-error bars.

Run: ``python examples/gibbs_ct.py [OUTPUT.png] [--draws 2000] [--seed 1]`` (20 to 30
seconds on 2 cores). Without OUTPUT the figure goes to a new temporary directory, never into
the repository; the path is printed.
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
from _four_modes import MEANS, build_model, exact, mode_masses  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="PNG path (default: a new temporary directory)")
    parser.add_argument("--draws", type=int, default=2000,
                        help="draws per chain of Gibbs CT and simulated tempering (AIS: runs / 4)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output else Path(tempfile.mkdtemp()) / "gibbs_ct.png"
    output.parent.mkdir(parents=True, exist_ok=True)

    model = build_model()
    exact_log_z, exact_mass = exact()
    seed = args.seed
    with model:
        base = pmt.fit_base(method="prior", random_seed=seed, progressbar=False)
        samplers = {
            "Gibbs CT": lambda: pmt.sample_gibbs_ct(base=base, draws=args.draws, random_seed=seed,
                                                    progressbar=False),
            "AIS": lambda: pmt.sample_ais(max(args.draws // 8, 25), tune=64, chains=4, base=base,
                                          random_seed=seed, progressbar=False),
            "simulated tempering": lambda: pmt.sample_simulated_tempering(
                base=base, draws=args.draws, random_seed=seed, progressbar=False),
        }
        results = {}
        for name, sample in samplers.items():
            start = time.perf_counter()
            results[name] = sample()
            results[name].attrs["wall_time"] = time.perf_counter() - start

    print(f"exact log marginal likelihood: {exact_log_z:.3f}")
    print(f"exact mode masses: {np.round(exact_mass, 3)}  (modes {MEANS.tolist()})\n")
    lmls, masses = {}, {}
    for name, idata in results.items():
        lmls[name] = pmt.log_marginal_likelihood(idata)
        masses[name] = mode_masses(idata)
        n = idata["posterior"].sizes["chain"] * idata["posterior"].sizes["draw"]
        print(f"{name} ({n} draws, {idata.attrs['wall_time']:.0f} s):")
        print(f"  log Z = {lmls[name].estimate:.3f} ± {lmls[name].standard_error:.3f}"
              f"   (exact {exact_log_z:.3f})")
        print("  mode masses:", "  ".join(f"{m:.3f} ± {s:.3f}" for m, s in masses[name]))
    print("\nGibbs CT diagnostics:\n" + str(pmt.diagnose(results["Gibbs CT"])))

    fig = plt.figure(figsize=(11, 7))
    pmt.plot_joint(results["Gibbs CT"], "x", ax=[fig.add_subplot(2, 2, 1), fig.add_subplot(2, 2, 2)])
    fig.axes[0].set_title("Gibbs CT: draws against beta (area = weight)")
    ax_z, ax_m = fig.add_subplot(2, 2, 3), fig.add_subplot(2, 2, 4)
    names = list(results)
    ax_z.errorbar(range(len(names)), [lmls[n].estimate for n in names],
                  yerr=[2 * lmls[n].standard_error for n in names], fmt="o", capsize=4)
    ax_z.axhline(exact_log_z, color="k", ls=":", label="exact")
    ax_z.set(xticks=range(len(names)), xticklabels=names, ylabel="log marginal likelihood",
             title="log Z ± 2 SE")
    ax_z.legend(loc="best")
    for i, name in enumerate(names):
        ax_m.errorbar(np.arange(len(MEANS)) + 0.15 * (i - 1), masses[name][:, 0],
                      yerr=2 * masses[name][:, 1], fmt="o", capsize=3, label=name)
    ax_m.plot(np.arange(len(MEANS)), exact_mass, "k_", ms=20, mew=2, label="exact")
    ax_m.set(xticks=range(len(MEANS)), xticklabels=[f"({m[0]:+.1f}, {m[1]:+.1f})" for m in MEANS],
             xlabel="mode", ylabel="posterior mass", title="mode masses ± 2 MCSE")
    ax_m.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    print(f"\nfigure: {output}")


if __name__ == "__main__":
    main()
