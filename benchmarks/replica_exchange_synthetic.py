"""The poster's synthetic experiments for replica exchange with stochastic-gradient thermostats.

What is measured
----------------
Two targets of the poster (``papers/replica-exchange-sg-thermostats-poster.md``):

* ``four_gaussians_1d``: means -6, -2, 2, 6, sd 0.6, weights 0.1, 0.2, 0.3, 0.4;
* ``five_modes_2d``: five modes on a ring of radius 4, sd 0.5, weights 0.1, 0.15, 0.2, 0.25, 0.3,

with energy and gradient noise of variance 0.25 (sd 0.5), unknown to the samplers. Every
method starts all its chains in one mode (the lightest). For each method and target we report
the mode weights of the draws (draws assigned to the nearest mode), ``estimate - truth`` with
an MCSE from the ESS of the mode indicator (arviz-stats, chains pooled), the largest absolute
error, and the wall time. Methods:

* ``hmc``: PyMC NUTS (``pm.sample``) on the exact model, **without noise** (reference
  single-chain gradient sampler; plain HMC on noisy gradients has no correct target);
* ``sgnht``: ``pmt.sample_tact(variant="sgnht")`` (Nosé-Hoover thermostats, no tempering);
* ``tact``: ``pmt.sample_tact(variant="tact")`` (TACT-HMC);
* ``replica_exchange``: ``pmt.sample_replica_exchange`` with 10 replicas on a geometric ladder
  T = 1..10, minibatch (noise-corrected logistic) exchange test, draws of the T = 1 replica.

How the noise is injected
-------------------------
``sample_replica_exchange`` has no ``gradient_noise`` testing aid (``sample_tact`` does), and
library code is not edited here, so the noise comes from the PyMC model itself: an observed
``pm.CustomDist`` on ``pm.Minibatch`` data with ``total_size=N`` adds, per datum ``i``, the
term ``sum_k a_ik sin(w x_k) + b_ik cos(w x_k)``. The columns ``a_k, b_k`` are exactly centred
(and mutually orthogonal), so over the full data set the term is 0 and the target is exact; on a
minibatch of ``m`` rows (drawn with replacement) the scaled estimate has, at any ``x``, energy
noise of variance ``N^2/m * d * s^2`` and gradient noise per coordinate ``N^2/m * w^2 s^2``;
with ``s^2 = 0.25 m / (N^2 d)`` and ``w = sqrt(d)`` both are 0.25. A fresh minibatch is drawn
at every gradient evaluation, so the noise is hidden from the dynamics. Unlike the poster's
independent noise, it is smooth in ``x`` (energy differences between nearby points are less
noisy). The replica-exchange test estimates its noise from the same minibatch, as designed.
SGNHT and TACT-HMC run on the **same** noisy minibatch model (not their ``gradient_noise``
option), so all three stochastic methods see identical noise.

A third problem, ``four_gaussians_1d_exact``, is the 1-D target with exact energies (no noise
term), on which ``single_replica`` runs the same thermostat dynamics as ``replica_exchange``
with one replica: what the exchanges add.

Reductions (to stay under about 8 minutes on 2 shared cores): 4 chains per method
(the poster does not say how many), ``--draws`` draws per chain (default 3000), step size 0.01.

It runs on ``benchmarks/harness.py`` (problems x methods x seeds, one process per case, its
command line and JSON; each record holds the mode table ``modes``, ``max_abs_error``, a
histogram of the draws for the figure and the sampler's own statistics).

Rerun (from the repo root)::

    .venv/bin/python benchmarks/replica_exchange_synthetic.py --figure benchmarks/results/replica_exchange_synthetic.png
    .venv/bin/python benchmarks/replica_exchange_synthetic.py --defaults --draws 1000 \
        --out benchmarks/results/replica_exchange_synthetic_defaults.json
    .venv/bin/python benchmarks/replica_exchange_synthetic.py --problems four_gaussians_1d_exact \
        --methods replica_exchange,single_replica --out benchmarks/results/replica_exchange.json
    .venv/bin/python benchmarks/replica_exchange_synthetic.py --report --out FILE   # the table
    .venv/bin/python benchmarks/replica_exchange_synthetic.py --quick   # smoke: 1-D, 100 draws

``--defaults``: SGNHT, TACT-HMC and replica exchange at their default settings (the
``step_size="auto"`` warm-up, default ``tune``, ``steps_per_sample``, ladder and
``exchange_every``; only the draws, chains, start and seed given), NUTS left out.
"""

from __future__ import annotations

import numpy as np

import harness
from harness import _fmt

NOISE_VAR = 0.25
N_DATA, BATCH = 1000, 100
CHAINS = 4
DRAWS = 3000
STEP = 0.01
DEFAULT_OUT = harness.RESULTS / "replica_exchange_synthetic.json"


def ring(n, radius):
    a = 2 * np.pi * np.arange(n) / n
    return radius * np.stack([np.cos(a), np.sin(a)], 1)


#: name -> (weights, means, sd, noisy)
TARGETS = {
    "four_gaussians_1d": (np.array([0.1, 0.2, 0.3, 0.4]), np.array([[-6.0], [-2.0], [2.0], [6.0]]), 0.6, True),
    "five_modes_2d": (np.array([0.1, 0.15, 0.2, 0.25, 0.3]), ring(5, 4.0), 0.5, True),
    "four_gaussians_1d_exact": (np.array([0.1, 0.2, 0.3, 0.4]), np.array([[-6.0], [-2.0], [2.0], [6.0]]), 0.6, False),
}
LABELS = {
    "hmc": "HMC (NUTS, no noise)",
    "sgnht": "SGNHT",
    "tact": "TACT-HMC",
    "replica_exchange": "replica exchange (R=10)",
    "single_replica": "one replica",
}


def noise_columns(d, rng):
    """(N, 2d) exactly centred, orthogonal columns with population variance s^2."""
    s2 = NOISE_VAR * BATCH / (N_DATA**2 * d)
    z = rng.standard_normal((N_DATA, 2 * d + 1))
    z[:, 0] = 1.0
    q, _ = np.linalg.qr(z)  # column 0 spans the ones vector; the rest are orthogonal to it
    cols = q[:, 1:] * np.sqrt(N_DATA)  # population variance 1, mean 0
    return cols * np.sqrt(s2)


def target_model(w, mus, sd, noisy, rng):
    """The poster's potential ``U(theta)``: the mixture as a ``pm.Potential`` on a flat ``x``
    (replica exchange tempers the likelihood, observed variables and potentials, not the prior:
    a mixture written as the prior of ``x`` would not be tempered at all), and with ``noisy``
    the minibatched noise term."""
    import pymc as pm
    import pytensor.tensor as pt

    d = mus.shape[1]
    with pm.Model() as model:
        x = pm.Flat("x", shape=d)
        comps = [pm.logp(pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(d)), x) + np.log(wk)
                 for m, wk in zip(mus, w, strict=True)]
        pm.Potential("mixture", pm.math.logsumexp(pt.stack(comps)))
        if noisy:
            freq = np.sqrt(d)

            def logp(value, xx, _shape):
                return pt.sum(value[..., :d] * pt.sin(freq * xx) + value[..., d:] * pt.cos(freq * xx), axis=-1)

            batch = pm.Minibatch(noise_columns(d, rng), batch_size=BATCH)
            pm.CustomDist("noise", x, np.zeros(2 * d), logp=logp, observed=batch, total_size=N_DATA,
                          signature="(d),(k)->(k)")
    return model


def _register(name):
    w, mus, sd, noisy = TARGETS[name]

    def label(draws):
        x = draws["x"].reshape(draws["x"].shape[:2] + (-1,))
        return np.argmin(np.sum((x[..., None, :] - mus) ** 2, -1), -1)

    def truth():
        from pymc_tempering.problems import Truth

        return Truth(mode_probabilities=w)

    harness.problem(name, lambda: target_model(w, mus, sd, noisy, np.random.default_rng(0)),
                    truth=truth, modes=[f"w{k + 1}" for k in range(len(w))], label=label,
                    description="mixture as a pm.Potential on a flat x" + (", noisy" if noisy else ""))


for _name in TARGETS:
    _register(_name)


def mode_table(x, w, mus):
    """x: (chains, draws, d) -> per-mode weight, truth, error, mcse, ess."""
    from arviz_stats.base.array import array_stats

    lab = np.argmin(np.sum((x[..., None, :] - mus) ** 2, -1), -1)
    rows = []
    for k in range(len(w)):
        ind = (lab == k).astype(float)
        ess = float(array_stats.ess(ind, method="mean")) if ind.std() > 0 else float("nan")
        mcse = float(ind.std() / np.sqrt(ess)) if ess == ess and ess > 0 else None  # None: one mode only
        ess = ess if ess == ess else None
        rows.append({"truth": float(w[k]), "weight": float(ind.mean()), "error": float(ind.mean() - w[k]),
                     "mcse": mcse, "ess": ess})
    return rows


def histogram(x) -> dict:
    """The draws' histogram for the figure: 120 bins on [-9, 9] in 1-D, 60 x 60 on
    [-6.5, 6.5]^2 in 2-D."""
    if x.shape[-1] == 1:
        counts, _ = np.histogram(x[..., 0].ravel(), bins=120, range=(-9, 9))
        return {"range": [-9, 9], "counts": counts.tolist()}
    counts, _, _ = np.histogram2d(x[..., 0].ravel(), x[..., 1].ravel(), bins=60,
                                  range=[[-6.5, 6.5], [-6.5, 6.5]])
    return {"range": [-6.5, 6.5], "counts": counts.astype(int).tolist()}


def _run(method, problem, seed, settings):
    """One method on one target: the mode table, the histogram and the sampler's statistics."""
    import pymc as pm

    import pymc_tempering as pmt

    w, mus, sd, noisy = TARGETS[problem.name]
    d = mus.shape[1]
    draws, defaults = settings.get("draws") or DRAWS, settings.get("defaults", False)
    rng = np.random.default_rng(seed)
    start = np.tile(mus[0], (CHAINS, 1))
    extra = {}
    if method == "hmc":
        with target_model(w, mus, sd, noisy=False, rng=rng):
            idata = pm.sample(draws, tune=settings.get("tune") or 1000, chains=CHAINS, cores=1,
                              random_seed=seed, progressbar=False,
                              initvals=[{"x": mus[0]}] * CHAINS, compute_convergence_checks=False)
    elif method in ("sgnht", "tact"):
        tuned = {} if defaults else dict(tune=20, step_size=STEP, steps_per_sample=20)
        idata = pmt.sample_tact(draws, model=target_model(w, mus, sd, noisy, rng), chains=CHAINS,
                                variant=method, initial_points=start, random_seed=seed,
                                progressbar=False, **tuned)
        extra = {"steps": int(idata.attrs["n_steps"]),
                 "thermostat_theta_mean": float(idata.sample_stats["thermostat_theta"].values.mean())}
    else:
        replicas = 1 if method == "single_replica" else 10
        tuned = ({} if defaults and replicas > 1 else
                 dict(n_temperatures=replicas, max_temperature=10.0, exchange_every=10,
                      minibatch=noisy, step_size=STEP, steps_per_sample=10, tune=200))
        idata = pmt.sample_replica_exchange(draws, model=target_model(w, mus, sd, noisy, rng),
                                            chains=CHAINS, initial_points=start,
                                            random_seed=seed, progressbar=False, **tuned)
        if replicas > 1:
            rex = idata["replica_exchange"]
            extra = {"swap_acceptance_rate": rex["swap_acceptance_rate"].mean("chain").values.round(3).tolist(),
                     "swaps_skipped": int(idata.attrs.get("swaps_skipped", rex["swap_skipped"].values.sum())),
                     "swaps_attempted": int(rex["swap_attempted"].values.sum()),
                     "exchange_noise_sd_max": float(rex["exchange_noise_sd_max"].values.max())}
    x = idata.posterior["x"].values.reshape(CHAINS, draws, d)
    rows = mode_table(x, w, mus)
    return None, {"modes": rows, "probabilities": [r["weight"] for r in rows],
                  "probabilities_se": [r["mcse"] for r in rows],
                  "max_abs_error": float(max(abs(r["error"]) for r in rows)),
                  "histogram": histogram(x), **extra}


for _method in LABELS:
    harness.method(_method, LABELS[_method])(
        lambda problem, seed, settings, _m=_method: _run(_m, problem, seed, settings))


def report(data) -> None:
    """One row per run: each mode's estimate - truth +- MCSE, the largest error, the seconds."""
    print("| target | method | seed | " + " | ".join(f"w{k}" for k in range(1, 6))
          + " | max abs error | s |")
    print("|" + "---|" * 10)
    for r in data["runs"]:
        if r.get("modes") is None:
            print(f"| {r['problem']} | {r['method']} | {r['seed']} | FAILED: {r.get('error_message')} |")
            continue
        cells = [f"{m['error']:+.3f} ± {_fmt(m['mcse'])}" for m in r["modes"]]
        cells += [""] * (5 - len(cells))
        print(f"| {r['problem']} | {r['method']} | {r['seed']} | " + " | ".join(cells)
              + f" | {r['max_abs_error']:.3f} | {_fmt(r.get('seconds'), '.0f')} |")
    by = {(r["problem"], r["method"]): r for r in data["runs"]}
    one, many = by.get(("four_gaussians_1d_exact", "single_replica")), by.get(
        ("four_gaussians_1d_exact", "replica_exchange"))
    if one and many and one.get("seconds") and many.get("seconds"):
        print(f"\nWall time, 10 replicas / 1: {many['seconds'] / one['seconds']:.1f}")


def plot(data, path) -> None:
    """Histograms of each run's draws over the target's density: one row per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import norm

    runs = [r for r in data["runs"] if r.get("histogram")]
    targets = list(dict.fromkeys(r["problem"] for r in runs))
    methods = list(dict.fromkeys(r["method"] for r in runs))
    fig, axes = plt.subplots(len(targets), len(methods) + 1, squeeze=False,
                             figsize=(3.4 * (len(methods) + 1), 3.2 * len(targets)))
    for row, name in zip(axes, targets, strict=True):
        w, mus, sd, _ = TARGETS[name]
        if mus.shape[1] == 1:
            g = np.linspace(-9, 9, 600)
            dens = np.sum(w * norm.pdf(g[:, None], mus[:, 0], sd), 1)
            row[0].plot(g, dens, "C0")
        else:
            g = np.linspace(-6.5, 6.5, 200)
            pts = np.stack(np.meshgrid(g, g), -1)[..., None, :]
            dens = np.sum(w * np.exp(-np.sum((pts - mus) ** 2, -1) / (2 * sd**2)), -1)
            row[0].imshow(dens, origin="lower", extent=(-6.5, 6.5, -6.5, 6.5), cmap="viridis")
        row[0].set_title(name, fontsize=9)
        for ax, method in zip(row[1:], methods, strict=True):
            r = next((r for r in runs if r["problem"] == name and r["method"] == method), None)
            if r is None:
                ax.axis("off")
                continue
            lo, hi = r["histogram"]["range"]
            counts = np.asarray(r["histogram"]["counts"], dtype=float)
            if counts.ndim == 1:
                edges = np.linspace(lo, hi, counts.size + 1)
                ax.stairs(counts / counts.sum() / np.diff(edges), edges, fill=True, color="C1", alpha=0.7)
                ax.plot(g, dens, "C0", lw=0.8)
            else:
                ax.imshow(counts.T, origin="lower", extent=(lo, hi, lo, hi), cmap="viridis")
            ax.set_title(LABELS[method], fontsize=9)
    fig.suptitle("Energy and gradient noise of variance 0.25 (HMC and *_exact: no noise); "
                 "all chains start in the lightest mode", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=("four_gaussians_1d", "five_modes_2d"),
                       methods=("hmc", "sgnht", "tact", "replica_exchange"), out=DEFAULT_OUT,
                       seeds=1)
    p.add_argument("--defaults", action="store_true",
                   help="the samplers at their defaults (NUTS left out unless --methods names it)")
    args = harness.parse(p, argv)
    if args.defaults and not any(a.startswith("--methods") for a in (argv or __import__("sys").argv)):
        args.methods = "sgnht,tact,replica_exchange"
    settings = harness.settings_from(args, quick={"draws": 100, "tune": 100},
                                     defaults=args.defaults, chains=CHAINS)
    harness.run_or_report(args, "replica_exchange_synthetic", settings, report=report, plot=plot,
                          quick_problems=("four_gaussians_1d",))


if __name__ == "__main__":
    main()
