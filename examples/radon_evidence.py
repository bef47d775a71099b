"""The radon hierarchical model's log marginal likelihood: ``pmt.sample_ct`` against ``pm.sample_smc``.

The model is the 92-parameter hierarchical regression of section 7.3 of the continuous tempering
paper (:func:`pymc_tempering.problems.radon.radon_model`: the Minnesota radon data of Gelman and Hill,
919 households in 85 counties, county intercepts drawn around a common mean, half-Cauchy scales).
Both estimates are compared with the exact value,
:func:`pymc_tempering.problems.radon.radon_log_marginal_likelihood` (given the three scales the model
is linear-Gaussian, so 89 parameters integrate out in closed form and the scales by quadrature).
``sample_ct`` reports a standard error, ``pm.sample_smc`` does not (its two chains' spread is the
only hint, and a poor one: see ``docs/marginal_likelihood.md``).

``pm.sample_smc`` stores ``log_marginal_likelihood`` as an object array per chain and per stage;
``pmt.log_marginal_likelihood`` reads it (each chain's last finite value; no standard error).

Run: ``python examples/radon_evidence.py [--draws 1000] [--smc-draws 2000] [--seed 1]``
(a few minutes on 2 cores). Writes nothing.
"""

import argparse
import logging
import time

import numpy as np
import pymc as pm

import pymc_tempering as pmt
from pymc_tempering.problems.radon import radon_log_marginal_likelihood, radon_model

logging.getLogger("pymc").setLevel(logging.ERROR)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000, help="sample_ct draws per chain")
    parser.add_argument("--smc-draws", type=int, default=2000, help="pm.sample_smc draws")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    model = radon_model()
    n_params = sum(int(np.prod(model.initial_point()[v.name].shape)) for v in model.value_vars)
    print(f"radon model: {n_params} parameters")

    with model:
        start = time.perf_counter()
        ct = pmt.sample_ct(draws=args.draws, random_seed=args.seed, progressbar=False)
        ct_seconds = time.perf_counter() - start
    lml = pmt.log_marginal_likelihood(ct)
    diagnosis = pmt.diagnose(ct)

    with model:
        start = time.perf_counter()
        smc = pm.sample_smc(draws=args.smc_draws, chains=2, random_seed=args.seed,
                            progressbar=False)
        smc_seconds = time.perf_counter() - start
    smc_chains = pmt.log_marginal_likelihood(smc).per_chain

    print(f"\nsample_ct      log Z = {lml.estimate:9.3f} ± {lml.standard_error:.3f}"
          f"   ({ct_seconds:5.1f} s)")
    print("  per chain:", np.round(lml.per_chain, 3))
    print(f"pm.sample_smc  log Z = {smc_chains.mean():9.3f}  (no SE)"
          f"   ({smc_seconds:5.1f} s)")
    print("  per chain:", np.round(smc_chains, 3))
    exact = radon_log_marginal_likelihood()
    print(f"exact          log Z = {exact:9.3f}")
    print(f"errors: sample_ct {lml.estimate - exact:+.3f} nats "
          f"({(lml.estimate - exact) / lml.standard_error:+.1f} standard errors), "
          f"pm.sample_smc {smc_chains.mean() - exact:+.3f} nats")
    print("\nsample_ct diagnostics:")
    print(diagnosis)


if __name__ == "__main__":
    main()
