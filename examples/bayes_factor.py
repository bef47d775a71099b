"""A Bayes factor between two radon models: one intercept for the state against one per county.

Both models regress a household's log radon on whether it was measured on the first floor
(the Minnesota radon data of Gelman and Hill, :func:`pymc_tempering.problems.radon.load_radon`):

- ``pooled``: one intercept for all 919 households (3 parameters,
  :func:`pymc_tempering.problems.radon.radon_pooled_model`);
- ``hierarchical``: an intercept per county (85), drawn around a common mean with a half-normal
  scale (89 parameters, :func:`pymc_tempering.problems.radon.radon_intercepts_model`).

Each model's log marginal likelihood comes from ``pmt.sample_ct`` with its standard error,
printed next to the exact value (closed form and quadrature,
:func:`pymc_tempering.problems.radon.radon_log_marginal_likelihood`);
``pmt.bayes_factor`` gives the log Bayes factor with the two errors added in quadrature and
``pmt.compare_evidence`` the table with posterior model probabilities.

Run: ``python examples/bayes_factor.py [--draws 1000] [--seed 1]`` (a few minutes on 2 cores).
Writes nothing.
"""

import argparse
import logging

import numpy as np

import pymc_tempering as pmt
from pymc_tempering.problems.radon import (
    load_radon,
    radon_intercepts_model,
    radon_log_marginal_likelihood,
    radon_pooled_model,
)

logging.getLogger("pymc").setLevel(logging.ERROR)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000, help="sample_ct draws per chain")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    data = load_radon()
    models = {"pooled": (radon_pooled_model, "pooled"),
              "hierarchical": (radon_intercepts_model, "intercepts")}
    results, exact = {}, {}
    for name, (build, which) in models.items():
        with build(data):
            results[name] = pmt.sample_ct(draws=args.draws, random_seed=args.seed,
                                          progressbar=False)
        lml = pmt.log_marginal_likelihood(results[name])
        exact[name] = radon_log_marginal_likelihood(data, model=which)
        print(f"{name:>12}: log Z = {lml.estimate:.3f} ± {lml.standard_error:.3f}"
              f"   exact {exact[name]:.3f}"
              f"   per chain {np.round(lml.per_chain, 2)}"
              f"   diagnostics {'ok' if pmt.diagnose(results[name]).ok else 'NOT ok'}")

    log_bf = pmt.bayes_factor(results["hierarchical"], results["pooled"])
    print(f"\nlog Bayes factor, hierarchical vs pooled: {log_bf}"
          f"   exact {exact['hierarchical'] - exact['pooled']:.3f}")
    print("\ncompare_evidence:")
    table = pmt.compare_evidence(results)
    print(table.to_string(formatters={
        "log_marginal_likelihood": "{:.3f}".format,
        "standard_error": "{:.4f}".format,
        "log_bayes_factor": "{:.3f}".format,
        "log_bayes_factor_se": "{:.4f}".format,
        "posterior_probability": "{:.4g}".format,
    }))


if __name__ == "__main__":
    main()
