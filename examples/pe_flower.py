"""Pseudo-extended NUTS on the flower target of section 4.3 of Nemeth et al.

``log pi(x) = log N(||x|| | r + A cos(w atan2(x2, x1)), sigma)`` with ``r = 10``, ``A = 6``,
``w = 6``, ``sigma = 1`` (as in the paper's Stan code ``pseudo-extended_flower.stan``). Plain NUTS
and ``sample_pe(n_pseudo=2)``, 5,000 draws each after 5,000 tuning steps (one chain, as in the
paper's Figure 8); the pseudo-extended draws are resampled to one pseudo-sample per draw.

Run: ``.venv/bin/python examples/pe_flower.py [out.png]``
"""

import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
import pytensor.tensor as pt

import pymc_tempering as pmt

R, A, W, SIGMA = 10.0, 6.0, 6.0, 1.0


def flower_model() -> pm.Model:
    with pm.Model() as model:
        x = pm.Flat("x", shape=2, initval=np.array([R, 0.5]))
        radius = pt.sqrt(pt.sum(x**2))
        mu = R + A * pt.cos(W * pt.arctan2(x[1], x[0]))
        pm.Potential("flower", pm.logp(pm.Normal.dist(mu, SIGMA), radius))
    return model


def log_density(x1, x2):
    mu = R + A * np.cos(W * np.arctan2(x2, x1))
    return -0.5 * ((np.hypot(x1, x2) - mu) / SIGMA) ** 2


def main(out=None):
    if out is None:  # never into the working directory unless asked
        out = str(Path(tempfile.mkdtemp()) / "pe_flower.png")
    model = flower_model()
    kwargs = dict(draws=5000, tune=5000, chains=1, random_seed=1, progressbar=False)
    nuts = pm.sample(model=model, **kwargs)["posterior"]["x"].values[0]
    pe = pmt.sample_pe(n_pseudo=2, model=model, **kwargs)
    pe_draws = pmt.resample(pe, random_seed=1)["posterior"]["x"].values[0]
    for name, d in [("NUTS", nuts), ("PE", pe_draws)]:
        petals = np.histogram(np.mod(np.arctan2(d[:, 1], d[:, 0]) + np.pi / W, 2 * np.pi),
                              bins=6, range=(0, 2 * np.pi))[0]
        print(f"{name}: draws per petal {petals}")
    g = np.linspace(-18, 18, 300)
    g1, g2 = np.meshgrid(g, g)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
    for ax, draws, title in [(axes[0], nuts, "NUTS"), (axes[1], pe_draws, "pseudo-extended NUTS, N = 2")]:
        ax.contour(g1, g2, log_density(g1, g2), levels=[-8, -4.5, -2, -0.5], colors="grey")
        ax.plot(draws[:, 0], draws[:, 1], "-", lw=0.2, alpha=0.5)
        ax.plot(draws[:, 0], draws[:, 1], ".", ms=1)
        ax.set_title(title)
        ax.set_aspect("equal")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
