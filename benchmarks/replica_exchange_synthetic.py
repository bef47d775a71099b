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

Reductions (to stay under about 8 minutes on 2 shared cores): 4 chains per method
(the poster does not say how many), ``DRAWS`` draws per chain, step size 0.01, one seed.

Outputs: ``benchmarks/results/replica_exchange_synthetic.json`` and ``.png`` (histograms).

Rerun: ``.venv/bin/python benchmarks/replica_exchange_synthetic.py`` (from the repo root).
``--defaults [DRAWS]``: SGNHT, TACT-HMC and replica exchange at their default settings (the
``step_size="auto"`` warm-up, default ``tune``, ``steps_per_sample``, ladder and
``exchange_every``; only the draws, chains, start and seed given), NUTS left out; results in
``replica_exchange_synthetic_defaults.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from arviz_stats.base.array import array_stats
from scipy.stats import norm

import pymc_tempering as pmt

OUT = Path(__file__).parent / "results"
NOISE_VAR = 0.25
N_DATA, BATCH = 1000, 100
CHAINS = 4
DRAWS = 3000
SEED = 0
STEP = 0.01


def ring(n, radius):
    a = 2 * np.pi * np.arange(n) / n
    return radius * np.stack([np.cos(a), np.sin(a)], 1)


TARGETS = {
    "four_gaussians_1d": (np.array([0.1, 0.2, 0.3, 0.4]), np.array([[-6.0], [-2.0], [2.0], [6.0]]), 0.6),
    "five_modes_2d": (np.array([0.1, 0.15, 0.2, 0.25, 0.3]), ring(5, 4.0), 0.5),
}
METHODS = {
    "hmc": "HMC (NUTS, no noise)",
    "sgnht": "SGNHT",
    "tact": "TACT-HMC",
    "replica_exchange": "replica exchange (R=10)",
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
    a mixture written as the prior of ``x`` would not be tempered at all; before 2026-11-24 it
    was ``pm.NormalMixture`` / ``pm.Mixture``, the same density), and with ``noisy`` the
    minibatched noise term."""
    d = mus.shape[1]
    with pm.Model() as model:
        x = pm.Flat("x", shape=d)
        comps = [pm.logp(pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(d)), x) + np.log(wk)
                 for m, wk in zip(mus, w, strict=True)]
        pm.Potential("mixture", pm.math.logsumexp(pt.stack(comps)))
        xv = x
        if noisy:
            freq = np.sqrt(d)

            def logp(value, xx, _shape):
                return pt.sum(value[..., :d] * pt.sin(freq * xx) + value[..., d:] * pt.cos(freq * xx), axis=-1)

            batch = pm.Minibatch(noise_columns(d, rng), batch_size=BATCH)
            pm.CustomDist("noise", xv, np.zeros(2 * d), logp=logp, observed=batch, total_size=N_DATA,
                          signature="(d),(k)->(k)")
    return model


def mode_table(x, w, mus):
    """x: (chains, draws, d) -> per-mode weight, truth, error, mcse, ess."""
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


DEFAULTS = False


def run_method(method, name, w, mus, sd, rng):
    d = mus.shape[1]
    start = np.tile(mus[0], (CHAINS, 1))
    extra = {}
    t0 = time.perf_counter()
    if method == "hmc":
        model = target_model(w, mus, sd, noisy=False, rng=rng)
        with model:
            idata = pm.sample(DRAWS, tune=1000, chains=CHAINS, cores=1, random_seed=SEED, progressbar=False,
                              initvals=[{"x": mus[0]}] * CHAINS, compute_convergence_checks=False)
        x = idata.posterior["x"].values.reshape(CHAINS, DRAWS, d)
    elif method in ("sgnht", "tact"):
        model = target_model(w, mus, sd, noisy=True, rng=rng)
        tuned = {} if DEFAULTS else dict(tune=20, step_size=STEP, steps_per_sample=20)
        idata = pmt.sample_tact(DRAWS, model=model, chains=CHAINS, variant=method,
                                initial_points=start, random_seed=SEED, progressbar=False, **tuned)
        x = idata.posterior["x"].values.reshape(CHAINS, DRAWS, d)
        extra = {"steps": int(idata.attrs["n_steps"]),
                 "thermostat_theta_mean": float(idata.sample_stats["thermostat_theta"].values.mean())}
    else:
        model = target_model(w, mus, sd, noisy=True, rng=rng)
        tuned = {} if DEFAULTS else dict(n_temperatures=10, max_temperature=10.0, exchange_every=10,
                                         minibatch=True, step_size=STEP, steps_per_sample=10, tune=200)
        idata = pmt.sample_replica_exchange(DRAWS, model=model, chains=CHAINS, initial_points=start,
                                            random_seed=SEED, progressbar=False, **tuned)
        x = idata.posterior["x"].values.reshape(CHAINS, DRAWS, d)
        rex = idata["replica_exchange"]
        extra = {"swap_acceptance_rate": rex["swap_acceptance_rate"].mean("chain").values.round(3).tolist(),
                 "swaps_skipped": int(idata.attrs.get("swaps_skipped", rex["swap_skipped"].values.sum())),
                 "swaps_attempted": int(rex["swap_attempted"].values.sum()),
                 "exchange_noise_sd_max": float(rex["exchange_noise_sd_max"].values.max())}
    wall = time.perf_counter() - t0
    rows = mode_table(x, w, mus)
    res = {"modes": rows, "max_abs_error": float(max(abs(r["error"]) for r in rows)), "wall_s": wall, **extra}
    return res, x.reshape(-1, d)


def plot(samples):
    fig, axes = plt.subplots(2, 5, figsize=(17, 6.5))
    # 1-D
    w, mus, sd = TARGETS["four_gaussians_1d"]
    g = np.linspace(-9, 9, 600)
    dens = np.sum(w * norm.pdf(g[:, None], mus[:, 0], sd), 1)
    axes[0, 0].plot(g, dens, "C0")
    axes[0, 0].set_title("1-D target (4 Gaussians)")
    for ax, (m, label) in zip(axes[0, 1:], METHODS.items()):
        ax.hist(samples[("four_gaussians_1d", m)][:, 0], bins=120, range=(-9, 9), density=True, color="C1", alpha=0.7)
        ax.plot(g, dens, "C0", lw=0.8)
        ax.set_title(label)
    # 2-D
    w, mus, sd = TARGETS["five_modes_2d"]
    g = np.linspace(-6.5, 6.5, 200)
    X, Y = np.meshgrid(g, g)
    pts = np.stack([X, Y], -1)[..., None, :]
    dens = np.sum(w * np.exp(-np.sum((pts - mus) ** 2, -1) / (2 * sd**2)), -1)
    axes[1, 0].imshow(dens, origin="lower", extent=(-6.5, 6.5, -6.5, 6.5), cmap="viridis")
    axes[1, 0].set_title("2-D target (5 modes)")
    for ax, (m, label) in zip(axes[1, 1:], METHODS.items()):
        s = samples[("five_modes_2d", m)]
        ax.hist2d(s[:, 0], s[:, 1], bins=80, range=[[-6.5, 6.5], [-6.5, 6.5]], cmap="viridis")
        ax.set_title(label)
    fig.suptitle("Energy and gradient noise of variance 0.25 (HMC: no noise); all chains start in the lightest mode")
    fig.tight_layout()
    fig.savefig(OUT / "replica_exchange_synthetic.png", dpi=100)


def main():
    global DEFAULTS, DRAWS
    import sys

    if "--defaults" in sys.argv:
        DEFAULTS = True
        rest = sys.argv[sys.argv.index("--defaults") + 1:]
        DRAWS = int(rest[0]) if rest else DRAWS
    OUT.mkdir(exist_ok=True)
    rng = np.random.default_rng(SEED)
    results, samples = {}, {}
    t_all = time.perf_counter()
    for name, (w, mus, sd) in TARGETS.items():
        for m in METHODS:
            if DEFAULTS and m == "hmc":
                continue
            res, s = run_method(m, name, w, mus, sd, rng)
            results[f"{name}/{m}"] = res
            samples[(name, m)] = s
            print(name, m, f"max|err|={res['max_abs_error']:.3f}", f"{res['wall_s']:.1f}s",
                  " ".join(f"{r['error']:+.3f}±{r['mcse'] or float('nan'):.3f}" for r in res["modes"]), flush=True)
    meta = {"noise_variance": NOISE_VAR, "noise_injection": "pm.Minibatch sinusoidal term (see docstring)",
            "n_data": N_DATA, "batch_size": BATCH, "chains": CHAINS, "draws_per_chain": DRAWS, "seed": SEED,
            "step_size": "auto" if DEFAULTS else STEP, "replicas": 10, "max_temperature": 10.0,
            "defaults": DEFAULTS, "total_wall_s": time.perf_counter() - t_all}
    suffix = "_defaults" if DEFAULTS else ""
    (OUT / f"replica_exchange_synthetic{suffix}.json").write_text(json.dumps({"settings": meta, "results": results}, indent=1))
    if not DEFAULTS:
        plot(samples)


if __name__ == "__main__":
    main()
