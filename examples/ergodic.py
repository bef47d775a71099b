"""Ergodic inference (``pmt.fit_ergodic``) on the correlated 2-D Gaussian of section 3.3.

The target is ``x ~ N(0, Sigma)`` with ``Sigma = [[2, 1.5], [1.5, 1.6]]`` and the chain starts
from ``P_0 = N(0, 3 I)`` as in section 3.3 of the paper: ``T = 9`` HMC transitions of 5 leapfrog
steps each. One fit with ``n_iterations=0`` is the untuned chain (step sizes drawn from
``(0.01, 0.025)``, unit momentum variances). Two fits tune every step size and momentum variance
by the ergodic lower bound (200 Adam iterations): one holds ``P_0`` fixed (``tune_initial=False``,
the paper's setting), the other sets ``P_0``'s scale by the Stein identity
(``tune_initial="stein"``), which removes the over-concentration of the first.

Everything is known in closed form: ``E_pi[log pi(x)] = -H(pi) = -log(2 pi e) - log det(Sigma) / 2``
and the covariance is ``Sigma``. For each chain the script prints, from independent draws of
``P_9`` (each the last state of its own chain), ``E_{p_9}[log pi]``, the covariance entries and
the Stein gap (zero for the target, positive when ``P_9`` is too narrow) with their Monte Carlo
standard errors next to the truth.

The figure has three panels: draws of the three ``P_9`` over the target's
contours; the training curves of ``E_{p_9}[log pi]`` (Fig. 2 of the paper); and
``E_{p_t}[log pi]`` along the chain, ``t = 0..9``.

Run: ``python examples/ergodic.py [OUTPUT.png] [--iterations 200] [--draws 10000] [--seed 1]``
(half a minute to a minute on 2 cores). Without OUTPUT the figure goes to a new
temporary directory, never into the repository; the path is printed.
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
import pymc as pm  # noqa: E402

import pymc_tempering as pmt  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)

SIGMA = np.array([[2.0, 1.5], [1.5, 1.6]])
P0 = pmt.Base.from_moments(np.zeros(2), 3.0 * np.eye(2))
SETTINGS = dict(n_steps=9, n_leapfrog=5, initial=P0, n_particles=100, learning_rate=0.05,
                progressbar=False)


def build_model() -> pm.Model:
    with pm.Model() as model:
        pm.MvNormal("x", mu=np.zeros(2), cov=SIGMA)
    return model


def exact_expected_log_density() -> float:
    """E_pi[log pi] = minus the entropy of N(0, SIGMA)."""
    return -0.5 * np.log(np.linalg.det(2 * np.pi * np.e * SIGMA))


def covariance_and_mcse(x: np.ndarray):
    """Sample covariance of independent draws and the standard error of each entry."""
    centred = x - x.mean(axis=0)
    products = centred[:, :, None] * centred[:, None, :]
    return products.mean(axis=0), products.std(axis=0, ddof=1) / np.sqrt(len(x))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="PNG path (default: a new temporary directory)")
    parser.add_argument("--iterations", type=int, default=200, help="Adam iterations of the fit")
    parser.add_argument("--draws", type=int, default=10_000, help="independent draws of P_T")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output else Path(tempfile.mkdtemp()) / "ergodic.png"
    output.parent.mkdir(parents=True, exist_ok=True)

    model = build_model()
    truth = exact_expected_log_density()
    start = time.perf_counter()
    untuned = pmt.fit_ergodic(model=model, n_iterations=0, tune_initial=False,
                              random_seed=args.seed, **SETTINGS)
    fits = {"untuned": untuned}
    for name, mode in [("P_0 fixed", False), ("stein", "stein")]:
        fits[name] = pmt.fit_ergodic(model=model, n_iterations=args.iterations,
                                     tune_initial=mode, random_seed=args.seed, **SETTINGS)
    print(f"fits: {time.perf_counter() - start:.1f} s (compiling included)")
    print(f"P_0 scale set by the Stein identity: sd {fits['stein'].initial_std[0]:.3f} "
          f"(started at {np.sqrt(3):.3f})")

    runs = {}
    print(f"\n{args.draws} independent draws of P_9 each; estimate ± MCSE (exact)")
    for name, approx in fits.items():
        x, log_density, accepted = approx.run_chain(args.draws, random_seed=args.seed + 100)
        runs[name] = (x, log_density)
        lp = log_density[-1]
        cov, cov_se = covariance_and_mcse(x)
        gap, gap_se = approx.stein_gap(args.draws, random_seed=args.seed + 200)
        print(f"{name:>9}: E[log pi] = {lp.mean():.3f} ± {lp.std(ddof=1) / np.sqrt(lp.size):.3f}"
              f" ({truth:.3f});  Stein gap {gap:+.3f} ± {gap_se:.3f} (0)")
        for i, j in [(0, 0), (0, 1), (1, 1)]:
            print(f"           cov[{i},{j}] = {cov[i, j]:.3f} ± {cov_se[i, j]:.3f} ({SIGMA[i, j]:.1f})")

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    g = np.linspace(-5, 5, 200)
    g1, g2 = np.meshgrid(g, g)
    prec = np.linalg.inv(SIGMA)
    maha = prec[0, 0] * g1**2 + 2 * prec[0, 1] * g1 * g2 + prec[1, 1] * g2**2
    axes[0].contour(g1, g2, maha, levels=[1, 4, 9], colors="k", linewidths=0.8)
    colours = ["C1", "C2", "C0"]
    for (name, (x, _)), colour in zip(runs.items(), colours, strict=True):
        axes[0].plot(x[:700, 0], x[:700, 1], ".", ms=2, alpha=0.5, color=colour,
                     label=f"{name} $P_9$")
    axes[0].set(xlabel="x[0]", ylabel="x[1]", title="draws (700 each) and 1-2-3 sd contours",
                xlim=(-5, 5), ylim=(-5, 5), aspect="equal")
    axes[0].legend(loc="upper left", markerscale=4)
    for name, colour in zip(["P_0 fixed", "stein"], colours[1:], strict=True):
        axes[1].plot(fits[name].expected_log_density, lw=1, color=colour, label=name)
    axes[1].axhline(truth, color="k", ls=":", label=f"exact {truth:.2f}")
    axes[1].set(xlabel="Adam iteration", ylabel=r"$E_{p_9}[\log \pi]$", title="training curve")
    axes[1].legend(loc="lower right")
    for (name, (_, log_density)), colour in zip(runs.items(), colours, strict=True):
        axes[2].plot(log_density.mean(axis=1), "o-", color=colour, label=name)
    axes[2].axhline(truth, color="k", ls=":", label="exact")
    axes[2].set(xlabel="transition t", ylabel=r"$E_{p_t}[\log \pi]$", title="along the chain")
    axes[2].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    print(f"\nfigure: {output}")


if __name__ == "__main__":
    main()
