"""Pseudo-extended NUTS on the warped Gaussian ("banana") of section 4.3 of Nemeth et al.

``pi(x) = N(x1 | 0, nu) N(x2 | b (x1^2 - nu), 1)`` with ``b = 0.1`` and ``nu = 100`` (a variance,
as in the paper's code ``y1 = x1 / sqrt(v)``). Plain NUTS and ``sample_pe(n_pseudo=2)``, 5,000
draws each after 5,000 tuning steps (one chain, as in the paper's Figure 8); the pseudo-extended
draws are resampled to one pseudo-sample per draw (appendix B).

Run: ``.venv/bin/python examples/pe_banana.py [out.png]``
"""

import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

import pymc_tempering as pmt

B, NU = 0.1, 100.0


def banana_model() -> pm.Model:
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Potential(
            "banana",
            pm.logp(pm.Normal.dist(0, np.sqrt(NU)), x[0])
            + pm.logp(pm.Normal.dist(B * (x[0] ** 2 - NU), 1.0), x[1]),
        )
    return model


def log_density(x1, x2):
    return -0.5 * x1**2 / NU - 0.5 * (x2 - B * (x1**2 - NU)) ** 2


def main(out=None):
    if out is None:  # never into the working directory unless asked
        out = str(Path(tempfile.mkdtemp()) / "pe_banana.png")
    model = banana_model()
    kwargs = dict(draws=5000, tune=5000, chains=1, random_seed=1, progressbar=False)
    nuts = pm.sample(model=model, **kwargs)["posterior"]["x"].values[0]
    pe = pmt.sample_pe(n_pseudo=2, model=model, **kwargs)
    pe_draws = pmt.resample(pe, random_seed=1)["posterior"]["x"].values[0]
    summary = pmt.weighted_summary(pe)
    print(summary[["mean", "sd", "mcse_mean"]])
    print("truth: E x = (0, 0), sd x1 = 10, sd x2 = sqrt(1 + 2 b^2 nu^2) =", np.sqrt(1 + 2 * B**2 * NU**2))
    g1, g2 = np.meshgrid(np.linspace(-35, 35, 300), np.linspace(-20, 80, 300))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True, sharey=True)
    for ax, draws, title in [(axes[0], nuts, "NUTS"), (axes[1], pe_draws, "pseudo-extended NUTS, N = 2")]:
        ax.contour(g1, g2, log_density(g1, g2), levels=np.arange(-12, 0, 1.5), colors="grey")
        ax.plot(draws[:, 0], draws[:, 1], "-", lw=0.2, alpha=0.5)
        ax.plot(draws[:, 0], draws[:, 1], ".", ms=1)
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
