"""A Bayes factor between two radon models: one intercept for the state against one per county.

Both models regress a household's log radon on whether it was measured on the first floor
(the Minnesota radon data of Gelman and Hill, :func:`pymc_tempering.datasets.load_radon`):

- ``pooled``: one intercept for all 919 households (4 parameters);
- ``hierarchical``: an intercept per county (85), drawn around a common mean with a half-normal
  scale (89 parameters).

Each model's log marginal likelihood comes from ``pmt.sample_ct`` with its standard error;
``pmt.bayes_factor`` gives the log Bayes factor with the two errors added in quadrature and
``pmt.compare_evidence`` the table with posterior model probabilities.

Run: ``python examples/bayes_factor.py [--draws 1000] [--seed 1]`` (a few minutes on 2 cores).
Writes nothing.
"""

import argparse
import logging

import numpy as np
import pymc as pm

import pymc_tempering as pmt
from pymc_tempering.datasets import load_radon

logging.getLogger("pymc").setLevel(logging.ERROR)


def pooled_model(data) -> pm.Model:
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 10.0)
        beta = pm.Normal("beta", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        mean = alpha + beta * data["floor"].to_numpy(dtype=float)
        pm.Normal("log_radon", mean, sigma, observed=data["log_radon"].to_numpy())
    return model


def hierarchical_model(data) -> pm.Model:
    county = data["county_code"].to_numpy()
    n_counties = int(county.max()) + 1
    with pm.Model(coords={"county": np.arange(n_counties)}) as model:
        mu_alpha = pm.Normal("mu_alpha", 0.0, 10.0)
        sigma_alpha = pm.HalfNormal("sigma_alpha", 5.0)
        alpha = pm.Normal("alpha", mu_alpha, sigma_alpha, dims="county")
        beta = pm.Normal("beta", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        mean = alpha[county] + beta * data["floor"].to_numpy(dtype=float)
        pm.Normal("log_radon", mean, sigma, observed=data["log_radon"].to_numpy())
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000, help="sample_ct draws per chain")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    data = load_radon()
    results = {}
    for name, build in (("pooled", pooled_model), ("hierarchical", hierarchical_model)):
        with build(data):
            results[name] = pmt.sample_ct(draws=args.draws, random_seed=args.seed,
                                          progressbar=False)
        lml = pmt.log_marginal_likelihood(results[name])
        print(f"{name:>12}: log Z = {lml.estimate:.3f} ± {lml.standard_error:.3f}"
              f"   per chain {np.round(lml.per_chain, 2)}"
              f"   diagnostics {'ok' if pmt.diagnose(results[name]).ok else 'NOT ok'}")

    log_bf = pmt.bayes_factor(results["hierarchical"], results["pooled"])
    print(f"\nlog Bayes factor, hierarchical vs pooled: {log_bf}")
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
