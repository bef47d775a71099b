"""A multimodal posterior with plots: four separated modes in two dimensions.

The prior is ``x ~ N(0, 5^2 I)`` in 2-D and the likelihood (a ``pm.Potential``) a mixture of
four narrow Gaussians (sd 0.3) at ``(+-2.5, +-2.5)`` with weights 0.4, 0.3, 0.2, 0.1. Everything
is known in closed form: the log marginal likelihood is
``log sum_k w_k N(m_k; 0, (25 + 0.09) I)`` and the posterior mass of mode ``k`` is proportional
to ``w_k N(m_k; 0, (25 + 0.09) I)``. Plain NUTS chains each stay in the mode they start in;
continuous tempering moves between them through the inverse temperature.

Three plots are saved into one PNG: :func:`pymc_tempering.plot_joint` (the draws against the
inverse temperature), :func:`pymc_tempering.plot_log_marginal_likelihood` (the estimate against
the number of draws), and :func:`pymc_tempering.plot_inverse_temperature` (its trace, a second
PNG beside the first).

Run: ``python examples/multimodal.py [OUTPUT.png] [--draws 2000] [--seed 1]`` (about two minutes
on 2 cores). Without OUTPUT the figures go to a new temporary directory, never into the
repository; the paths are printed.
"""

import argparse
import logging
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_tempering as pmt  # noqa: E402
from _four_modes import MEANS, build_model, exact, mode_masses, mode_of  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="PNG path (default: a new temporary directory)")
    parser.add_argument("--draws", type=int, default=2000, help="sample_ct draws per chain")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output else Path(tempfile.mkdtemp()) / "multimodal.png"
    output.parent.mkdir(parents=True, exist_ok=True)

    model = build_model()
    exact_log_z, exact_mass = exact()

    with model:
        plain = pm.sample(chains=4, random_seed=args.seed, progressbar=False)
    plain_modes = mode_of(plain["posterior"]["x"].values)
    print("plain NUTS: modes visited per chain:",
          [sorted(set(np.unique(c).tolist())) for c in plain_modes])

    with model:
        base = pmt.fit_base(method="prior", random_seed=args.seed, progressbar=False)
        idata = pmt.sample_ct(base=base, draws=args.draws, bootstrap=1, random_seed=args.seed,
                              progressbar=False)

    lml = pmt.log_marginal_likelihood(idata)
    print(f"\nlog marginal likelihood: {lml.estimate:.3f} ± {lml.standard_error:.3f}"
          f"   (exact: {exact_log_z:.3f})")
    print("per chain:", np.round(lml.per_chain, 3))

    print("\nmode  mass (CT, weighted)  exact")
    for k, (mass, mcse) in enumerate(mode_masses(idata)):
        print(f"{str(MEANS[k]):>12}  {mass:.3f} ± {mcse:.3f}  {exact_mass[k]:.3f}")
    print("\n" + str(pmt.diagnose(idata)))

    fig = plt.figure(figsize=(10, 7))
    ax_joint = [fig.add_subplot(2, 2, 1), fig.add_subplot(2, 2, 2)]
    pmt.plot_joint(idata, "x", ax=ax_joint)
    pmt.plot_log_marginal_likelihood(idata, ax=fig.add_subplot(2, 1, 2))
    fig.axes[2].axhline(exact_log_z, color="k", ls=":", label="exact")
    fig.axes[2].legend(loc="best")
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    trace_path = output.with_name(output.stem + "_inverse_temperature.png")
    pc = pmt.plot_inverse_temperature(idata)
    pc.savefig(trace_path)
    print(f"\nfigures: {output}\n         {trace_path}")


if __name__ == "__main__":
    main()
