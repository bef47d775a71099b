"""Replica exchange at its defaults on a minibatched logistic regression (a model no test uses).

An intercept and three slopes, 50,000 simulated points whose columns have scales 1, 10 and 0.1,
``pm.Minibatch(X, y, batch_size=500)``. The reference is the full-data optimum and its Laplace
standard deviations (``pm.find_MAP``, ``pm.find_hessian``): at this data size the posterior is
Gaussian to well within the Monte Carlo error. Prints the posterior means' distance from the
optimum in Laplace sds, the sds' ratio to the Laplace ones, the ladder, the exact-swap pairs
(``exchange_batches`` 0) and the skipped swaps.

Run: ``.venv/bin/python benchmarks/replica_exchange_logreg.py`` (about 6 minutes on 2 cores).
"""

import time

import numpy as np
import pymc as pm

import pymc_tempering as pmt

rng = np.random.default_rng(11)
n = 50_000
X = rng.normal(size=(n, 3)) * [1.0, 10.0, 0.1]  # other units per column
beta_true = np.array([0.5, -0.05, 3.0])
y = rng.binomial(1, 1 / (1 + np.exp(-(X @ beta_true - 0.3)))).astype("int32")

with pm.Model():
    b0 = pm.Normal("b0", 0, 5)
    b = pm.Normal("b", 0, 5, shape=3)
    pm.Bernoulli("y", logit_p=b0 + pm.math.dot(X, b), observed=y)
    optimum = pm.find_MAP(progressbar=False)
    hessian = pm.find_hessian(optimum, vars=[b0, b])
sd_laplace = np.sqrt(np.diag(np.linalg.inv(hessian)))
mode = np.concatenate([[optimum["b0"]], optimum["b"]])
print("full-data optimum", mode, "Laplace sd", sd_laplace)

with pm.Model():
    xb, yb = pm.Minibatch(X, y, batch_size=500)
    b0 = pm.Normal("b0", 0, 5)
    b = pm.Normal("b", 0, 5, shape=3)
    pm.Bernoulli("y", logit_p=b0 + pm.math.dot(xb, b), observed=yb, total_size=n)
    start = time.time()
    idata = pmt.sample_replica_exchange(random_seed=1)
    print("replica exchange: wall time", round(time.time() - start, 1), "s")

post = idata.posterior
mean = np.concatenate([[float(post.b0.mean())], post.b.mean(("chain", "draw")).values])
sd = np.concatenate([[float(post.b0.std())], post.b.std(("chain", "draw")).values])
print("(mean - optimum) / Laplace sd", (mean - mode) / sd_laplace)
print("sd / Laplace sd", sd / sd_laplace)
print("replicas", idata.attrs["n_replicas"], "max temperature", idata.attrs["max_temperature"],
      "exchange_batches", idata["warmup"]["exchange_batches"].values)
ex = idata["replica_exchange"]
print("swaps skipped", int(ex["swap_skipped"].sum()), "of", int(ex["swap_attempted"].sum()))
