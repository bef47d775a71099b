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

It runs on ``benchmarks/harness.py`` (problems x methods x seeds, one fresh process per case,
its command line and JSON): the problems ``ergodic_ring``, ``ergodic_gauss`` and ``ergodic_mog``
of :mod:`pymc_tempering.problems`; the methods ``hei``, ``hei_emlbo_p0`` and ``hmc_untuned``
(the paper's configuration, the record's ``histogram`` of 20,000 draws on [-5, 5]^2 for the
figure), ``stop_gradient`` (the timing above, on any target; ``ergodic_ring`` in the paper) and
``defaults``; the seed is ``fit_ergodic``'s ``random_seed`` (the draws use 2 and the Stein gap
3, as before). ``--draws`` sets the draws (default 100,000).

Run::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/ergodic_2d.py --first-seed 1 \\
        --out benchmarks/results/ergodic_2d_defaults.json                     # the defaults
    .venv/bin/python benchmarks/ergodic_2d.py --paper --first-seed 1 --figure /tmp/ergodic_2d.png
    .venv/bin/python benchmarks/ergodic_2d.py --report --out benchmarks/results/ergodic_2d_defaults.json
    .venv/bin/python benchmarks/ergodic_2d.py --quick            # smoke: ergodic_gauss, 2000 draws

``defaults``: ``fit_ergodic(model=model, random_seed=seed)`` at every default (P_0 from the mode
search: the moment-matched Gaussian of the optima's Laplace Gaussians, twice its sds;
Stein-calibrated scale; T = 10, 1000 Adam iterations, 200 particles) on the same targets, 100k
draws each of the fitted P_T (``run_chain``) and of ``approx.sample()`` at its defaults (further
cycles of the T transitions until the draws stop moving), with the covariance against
quadrature.

Both mixtures inside a log are written with ``logaddexp``, as a PyMC user would: the naive
``-log(0.5 e^a + 0.5 e^b)`` of the mixture of Gaussians underflows to ``log 0`` away from the
modes, where the Stein calibration went (a ``DivergenceError`` at the defaults).
"""

from __future__ import annotations

import time

import numpy as np

import harness

T, LEAPFROG, N_ITER, N_PARTICLES, N_DRAWS = 10, 5, 200, 100, 100_000
PROBLEMS = ("ergodic_ring", "ergodic_gauss", "ergodic_mog")
PAPER_METHODS = ("hei", "hei_emlbo_p0", "hmc_untuned", "stop_gradient")
#: the entropy of N(0, I): the bound passed for the flat prior (below H(N(0, 3I)) = 3.94)
ENTROPY_BOUND = float(np.log(2 * np.pi) + 1)


def _paper_kwargs(model) -> dict:
    import pymc_tempering as pmt

    p0 = pmt.Base.from_moments(np.zeros(2), 3.0 * np.eye(2))
    return dict(model=model, n_steps=T, n_leapfrog=LEAPFROG, initial=p0, n_particles=N_PARTICLES,
                entropy_lower_bound=ENTROPY_BOUND, progressbar=False)


def _paper(label):
    def run(problem, seed, settings):
        from pymc_tempering.methods.ergodic import fit_ergodic

        n_draws = settings.get("draws") or N_DRAWS
        kw = _paper_kwargs(problem.build())
        t0 = time.perf_counter()
        if label == "hmc_untuned":
            approx = fit_ergodic(n_iterations=0, random_seed=seed, **kw)
        else:
            approx = fit_ergodic(n_iterations=N_ITER, learning_rate=0.05, random_seed=seed,
                                 tune_initial="stein" if label == "hei" else True, **kw)
        fit_s = time.perf_counter() - t0
        approx.run_chain(10, random_seed=0)  # compile first: time the sampling alone
        t0 = time.perf_counter()
        x, lp, acc = approx.run_chain(n_draws, random_seed=2)
        dt = time.perf_counter() - t0
        gap, gap_mcse = approx.stein_gap(n_draws, random_seed=3)
        hist = np.histogram2d(x[:20000, 0], x[:20000, 1], bins=80, range=[[-5, 5], [-5, 5]])[0]
        return None, {"truth": problem.truths.moments["expected_u"], "fit_seconds": fit_s,
                      "calibration_scale": approx.settings.get("calibration_scale"),
                      "neg_E_log_pi": float(-lp[-1].mean()), "stein_gap": gap,
                      "stein_gap_mcse": gap_mcse, "mcse": float(lp[-1].std() / np.sqrt(n_draws)),
                      "seconds_per_100k": dt * 1e5 / n_draws, "acceptance": float(acc.mean()),
                      "histogram": hist.astype(int).tolist()}

    return run


for _label in PAPER_METHODS[:3]:
    harness.method(_label, f"fit_ergodic, the paper's configuration ({_label})")(_paper(_label))


@harness.method("stop_gradient", "seconds per 100 Adam iterations with and without the stop-gradient")
def _stop_gradient(problem, seed, settings):
    from pymc_tempering.methods.ergodic import fit_ergodic

    timing = {}
    for sg in (True, False):
        approx = fit_ergodic(n_iterations=100, stop_gradient=sg, random_seed=seed,
                             **_paper_kwargs(problem.build()))
        # the optimisation loop alone, without compilation (recorded by fit_ergodic)
        timing["stop_gradient" if sg else "full_gradient"] = 100 * approx.settings["seconds_per_iteration"]
    timing["speed_up"] = timing["full_gradient"] / timing["stop_gradient"]
    return None, {"seconds_per_100_iterations": timing}


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


@harness.method("defaults", "fit_ergodic at every default; run_chain's and sample()'s draws")
def _defaults(problem, seed, settings):
    """The fitted P_T's draws (``run_chain``, the paper's) and ``approx.sample()``'s (further
    cycles of the T transitions until the draws stop moving)."""
    from pymc_tempering.methods.ergodic import fit_ergodic

    n_draws = settings.get("draws") or N_DRAWS
    truth = problem.truths.moments
    t0 = time.perf_counter()
    approx = fit_ergodic(model=problem.build(), random_seed=seed, progressbar=False)
    fit_s = time.perf_counter() - t0
    x, lp, acc = approx.run_chain(n_draws, random_seed=2)
    gap, gap_mcse = approx.stein_gap(n_draws, random_seed=3)
    t0 = time.perf_counter()
    idata = approx.sample(n_draws // 4, chains=4, random_seed=2)
    sample_s = time.perf_counter() - t0
    sampled = _moments(idata["posterior"]["z"].values.reshape(-1, 2),
                       idata["sample_stats"]["lp"].values.ravel())
    return None, {
        "truth": truth["expected_u"], "fit_seconds": fit_s, **_moments(x, lp[-1]),
        "mean_truth": np.asarray(truth["mean"]).tolist(), "cov_truth": np.asarray(truth["cov"]).tolist(),
        "initial_modes": approx.settings.get("initial_modes"), "stein_gap": gap,
        "stein_gap_mcse": gap_mcse, "acceptance": float(acc.mean()),
        "calibration_scale": approx.settings.get("calibration_scale"),
        "calibration_gap_mcse": approx.settings.get("calibration_gap_mcse"),
        "skipped_iterations": approx.settings["skipped_iterations"],
        "initial_mean": approx.initial_mean.tolist(), "initial_std": approx.initial_std.tolist(),
        "sample": {**sampled, "seconds": sample_s, "cycles": idata.attrs["cycles"],
                   "cycle_drift": idata.attrs["cycle_drift"],
                   "cycle_drift_critical": idata.attrs["cycle_drift_critical"]}}


# ----------------------------------------------------------------------------------- report
def _target(name: str) -> str:
    return name.removeprefix("ergodic_")


def report(data: dict) -> None:
    """The defaults' table (z-scores by the draws' MCSE, the covariance's upper triangle) and
    the paper configuration's."""
    runs = [r for r in data["runs"] if r["method"] == "defaults" and not r.get("error_message")]
    if runs:
        print("| target | draws | `-E[log pi*]` (truth) | z | covariance | z | cycles | seconds |")
        print("|---|---|---|---|---|---|---|---|")
        for r in runs:
            cov_truth = np.array(r["cov_truth"])
            for label, m, cycles, seconds in (("`P_T`", r, 1, ""),
                                              ("`sample()`", r["sample"], r["sample"]["cycles"],
                                               f"{r['sample']['seconds']:.1f}")):
                cov, mcse = np.array(m["cov"]), np.array(m["cov_mcse"])
                tri = [(0, 0), (0, 1), (1, 1)]
                value = f"{m['neg_E_log_pi']:.4f}" + (f" ({r['truth']:.4f})" if m is r else "")
                print(f"| {_target(r['problem'])} | {label} | {value} "
                      f"| {(m['neg_E_log_pi'] - r['truth']) / m['mcse']:.1f} "
                      f"| {', '.join(f'{cov[i, j]:.3f}' for i, j in tri)} "
                      f"| {', '.join(f'{(cov[i, j] - cov_truth[i, j]) / mcse[i, j]:.1f}' for i, j in tri)} "
                      f"| {cycles} | {seconds} |")
    paper = [r for r in data["runs"] if r["method"] in PAPER_METHODS[:3] and not r.get("error_message")]
    if paper:
        print("\n| target | method | `-E[log pi*]` (truth) | z | Stein gap | s per 100k draws | acceptance |")
        print("|---|---|---|---|---|---|---|")
        for r in paper:
            print(f"| {_target(r['problem'])} | {r['method']} | {r['neg_E_log_pi']:.4f} ({r['truth']:.4f}) "
                  f"| {(r['neg_E_log_pi'] - r['truth']) / r['mcse']:.1f} "
                  f"| {r['stein_gap']:+.4f} ± {r['stein_gap_mcse']:.4f} | {r['seconds_per_100k']:.2f} "
                  f"| {r['acceptance']:.3f} |")
    for r in data["runs"]:
        if r.get("seconds_per_100_iterations"):
            t = r["seconds_per_100_iterations"]
            print(f"\n{_target(r['problem'])}: {t['stop_gradient']:.2f} s per 100 iterations with the "
                  f"stop-gradient, {t['full_gradient']:.2f} s without (x{t['speed_up']:.2f})")
    for r in data["runs"]:
        if r.get("error_message"):
            print(f"{r['problem']} {r['method']} seed {r['seed']} FAILED: {r['error_message'][:200]}")


def plot(data: dict, path) -> None:
    """The paper configuration's draws, one 2-D histogram per target and method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in data["runs"] if r.get("histogram")]
    targets = list(dict.fromkeys(r["problem"] for r in runs))
    methods = list(dict.fromkeys(r["method"] for r in runs))
    if not runs:
        return
    fig, axes = plt.subplots(len(targets), len(methods), figsize=(3 * len(methods), 3 * len(targets)),
                             squeeze=False)
    for r in runs:
        ax = axes[targets.index(r["problem"]), methods.index(r["method"])]
        ax.imshow(np.array(r["histogram"]).T, origin="lower", extent=[-5, 5, -5, 5])
        ax.set_title(f"{_target(r['problem'])}: {r['method']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=PROBLEMS, methods=("defaults",),
                       out=harness.RESULTS / "ergodic_2d.json", seeds=1)
    p.add_argument("--paper", action="store_true",
                   help="the paper's configuration: hei, hei_emlbo_p0, hmc_untuned and stop_gradient")
    args = harness.parse(p, argv)
    if args.paper and not args.methods_given:
        args.methods = ",".join(PAPER_METHODS)
    harness.run_or_report(args, "ergodic_2d", harness.settings_from(args, quick={"draws": 2000}),
                          report=report, plot=plot, quick_problems=("ergodic_gauss",))


if __name__ == "__main__":
    main()
