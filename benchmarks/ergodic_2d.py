"""Section 4.1 of the ergodic-inference paper (Table 2, Table 3 left), in a reduced configuration.

Targets (2-D, unnormalised pi* = exp(-U)):

- ``ring``: Rezende & Mohamed's (2015) potential U1 (ring with two lobes), proper on R^2, so it
  can be written as a PyMC model (a pm.Potential on a flat 2-vector);
- ``gauss``: the correlated Gaussian of section 3.3, N(0, [[2, 1.5], [1.5, 1.6]]) (normalised);
- ``mog``: an equal mixture of N((+-1.5, 0), 0.7^2 I) (a mixture-of-Gaussians target in the
  spirit of Levy et al. 2018, with overlapping modes so a T-step chain can cross).

R&M's U2-U4 are not normalisable on R^2 (no decay in z1) and the paper does not say how it
bounded them, so they are left out. Ground truth -E_pi[log pi*] by quadrature on a 1201^2 grid on
[-8, 8]^2. HEI: fit_ergodic with T = 10, 5 leapfrog steps, P_0 = N(0, 3 I) for all targets, its
scale set by the Stein identity (tune_initial="stein"; the flat prior has no entropy, so the bound
is h = log(2 pi e), the entropy of N(0, I)), 200 Adam iterations, 100 particles, 100k draws;
"HEI_emlbo_P0": the same with P_0's mean and scales tuned by the paper's ELBO(P_0) under the bound
(tune_initial=True); baseline: the same chain with its untuned parameters (n_iterations = 0). The
stop-gradient speed-up is timed on the ring: seconds per 100 iterations with and without.

Run: .venv/bin/python benchmarks/ergodic_2d.py [--defaults]

``--defaults``: ``fit_ergodic(model=model, random_seed=1)`` at every default (P_0 from the mode
search: the moment-matched Gaussian of the optima's Laplace Gaussians, twice its sds;
Stein-calibrated scale; T = 10, 1000 Adam iterations, 200 particles) on the same targets, 100k
draws each of the fitted P_T (``run_chain``) and of ``approx.sample()`` at its defaults (further
cycles of the T transitions until the draws stop moving), with the covariance against
quadrature; results in ``ergodic_2d_defaults.json``.

Both mixtures inside a log are written with ``logaddexp``, as a PyMC user would: the naive
``-log(0.5 e^a + 0.5 e^b)`` of the mixture of Gaussians underflows to ``log 0`` away from the
modes, where the Stein calibration went (a ``DivergenceError`` at the defaults).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import sys

import numpy as np

import pymc_tempering as pmt
from pymc_tempering.methods.ergodic import fit_ergodic

from pymc_tempering.problems.ergodic import (
    table_2_gauss_u as u_gauss,
    table_2_model,
    table_2_mog_u,
    table_2_quadrature,
    table_2_ring_u,
)

OUT = Path(__file__).parent / "results"
T, LEAPFROG, N_ITER, N_PARTICLES, N_DRAWS = 10, 5, 200, 100, 100_000

TARGETS = {"ring": table_2_ring_u, "gauss": u_gauss, "mog": table_2_mog_u}


def main():
    p0 = pmt.Base.from_moments(np.zeros(2), 3.0 * np.eye(2))
    results = {"config": dict(T=T, n_leapfrog=LEAPFROG, n_iterations=N_ITER,
                              n_particles=N_PARTICLES, n_draws=N_DRAWS, initial="N(0, 3I)")}
    rows, samples = {}, {}
    for name, u in TARGETS.items():
        model = table_2_model(u)
        truth = table_2_quadrature(u)[0]
        # Flat prior: no prior entropy; bound = H(pi) would need pi. We pass the entropy of the
        # standard normal, log(2 pi e) = 2.84, below H(N(0, 3I)) = 3.94.
        kw = dict(model=model, n_steps=T, n_leapfrog=LEAPFROG, initial=p0,
                  n_particles=N_PARTICLES, entropy_lower_bound=float(np.log(2 * np.pi) + 1),
                  progressbar=False)
        t0 = time.perf_counter()
        hei = fit_ergodic(n_iterations=N_ITER, learning_rate=0.05, random_seed=1,
                          tune_initial="stein", **kw)
        fit_s = time.perf_counter() - t0
        paper = fit_ergodic(n_iterations=N_ITER, learning_rate=0.05, random_seed=1,
                            tune_initial=True, **kw)
        hmc = fit_ergodic(n_iterations=0, random_seed=1, **kw)
        out = {"truth": truth, "fit_seconds": fit_s,
               "calibration_scale": hei.settings["calibration_scale"]}
        for label, approx in [("HEI", hei), ("HEI_emlbo_P0", paper), ("HMC_untuned", hmc)]:
            approx.run_chain(10, random_seed=0)  # compile first: time the sampling alone
            t0 = time.perf_counter()
            x, lp, acc = approx.run_chain(N_DRAWS, random_seed=2)
            dt = time.perf_counter() - t0
            gap, gap_mcse = approx.stein_gap(N_DRAWS, random_seed=3)
            out[label] = {"neg_E_log_pi": float(-lp[-1].mean()),
                          "stein_gap": gap, "stein_gap_mcse": gap_mcse,
                          "mcse": float(lp[-1].std() / np.sqrt(N_DRAWS)),
                          "seconds_per_100k": dt * 1e5 / N_DRAWS,
                          "acceptance": float(acc.mean())}
            samples[(name, label)] = x[:20000]
        rows[name] = out
        print(name, json.dumps(out))
    results["table2"] = rows

    # Stop-gradient speed-up (Table 3, left), same run, ring target.
    model = table_2_model(table_2_ring_u)
    timing = {}
    for sg in (True, False):
        kw = dict(model=model, n_steps=T, n_leapfrog=LEAPFROG, initial=p0,
                  n_particles=N_PARTICLES, entropy_lower_bound=float(np.log(2 * np.pi) + 1),
                  progressbar=False, stop_gradient=sg, random_seed=3)
        approx = fit_ergodic(n_iterations=100, **kw)
        # the optimisation loop alone, without compilation (recorded by fit_ergodic)
        timing["stop_gradient" if sg else "full_gradient"] = (
            100 * approx.settings["seconds_per_iteration"]
        )
    timing["speed_up"] = timing["full_gradient"] / timing["stop_gradient"]
    results["seconds_per_100_iterations"] = timing
    print("timing", timing)
    (OUT / "ergodic_2d.json").write_text(json.dumps(results, indent=2))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = ["HEI", "HEI_emlbo_P0", "HMC_untuned"]
    fig, axes = plt.subplots(len(TARGETS), 3, figsize=(9, 3 * len(TARGETS)))
    for i, name in enumerate(TARGETS):
        for j, label in enumerate(labels):
            x = samples[(name, label)]
            axes[i, j].hist2d(x[:, 0], x[:, 1], bins=80, range=[[-5, 5], [-5, 5]])
            axes[i, j].set_title(f"{name}: {label}", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT / "ergodic_2d.png", dpi=80)


def _moments(x, lp):
    """-E[log pi*], mean and covariance of independent draws, with their MCSEs (sd / sqrt(n))."""
    n = x.shape[0]
    centred = x - x.mean(axis=0)
    products = centred[:, :, None] * centred[:, None, :]
    return {
        "neg_E_log_pi": float(-lp.mean()), "mcse": float(lp.std() / np.sqrt(n)),
        "mean": x.mean(axis=0).tolist(), "mean_mcse": (x.std(axis=0) / np.sqrt(n)).tolist(),
        "cov": np.cov(x.T).tolist(), "cov_mcse": (products.std(axis=0) / np.sqrt(n)).tolist(),
    }


def main_defaults():
    """Each target at the defaults: the fitted P_T's draws (``run_chain``, the paper's) and
    ``approx.sample()``'s (further cycles of the T transitions until the draws stop moving)."""
    rows = {}
    for name, u in TARGETS.items():
        model = table_2_model(u)
        truth, mean_true, cov_true = table_2_quadrature(u)
        t0 = time.perf_counter()
        approx = fit_ergodic(model=model, random_seed=1, progressbar=False)
        fit_s = time.perf_counter() - t0
        x, lp, acc = approx.run_chain(N_DRAWS, random_seed=2)
        gap, gap_mcse = approx.stein_gap(N_DRAWS, random_seed=3)
        t0 = time.perf_counter()
        idata = approx.sample(N_DRAWS // 4, chains=4, random_seed=2)
        sample_s = time.perf_counter() - t0
        sampled = _moments(idata["posterior"]["z"].values.reshape(N_DRAWS, 2),
                           idata["sample_stats"]["lp"].values.ravel())
        rows[name] = {
            "truth": truth, "fit_seconds": fit_s, **_moments(x, lp[-1]),
            "mean_truth": mean_true.tolist(), "cov_truth": cov_true.tolist(),
            "initial_modes": approx.settings.get("initial_modes"),
            "stein_gap": gap,
            "stein_gap_mcse": gap_mcse, "acceptance": float(acc.mean()),
            "calibration_scale": approx.settings.get("calibration_scale"),
            "calibration_gap_mcse": approx.settings.get("calibration_gap_mcse"),
            "skipped_iterations": approx.settings["skipped_iterations"],
            "initial_mean": approx.initial_mean.tolist(), "initial_std": approx.initial_std.tolist(),
            "sample": {**sampled, "seconds": sample_s, "cycles": idata.attrs["cycles"],
                       "cycle_drift": idata.attrs["cycle_drift"],
                       "cycle_drift_critical": idata.attrs["cycle_drift_critical"]},
        }
        print(name, json.dumps(rows[name]), flush=True)
    config = {"defaults": True, "n_draws": N_DRAWS, "random_seed": 1}
    (OUT / "ergodic_2d_defaults.json").write_text(
        json.dumps({"config": config, "table2": rows}, indent=2)
    )


if __name__ == "__main__":
    import sys

    main_defaults() if "--defaults" in sys.argv else main()
