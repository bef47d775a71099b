"""The minibatch samplers at their defaults on models with ``pm.Minibatch`` data.

Problems (this script's own, :func:`harness.problem`; none has an exact truth):

``logistic_50000``
    An intercept and three slopes, 50,000 simulated points whose columns have scales 1, 10 and
    0.1, ``pm.Minibatch(X, y, batch_size=500)`` (a model no test uses).
``regression_3000``, ``regression_30000``
    ``pymc_tempering.problems.minibatch.minibatch_regression``: ``y ~ N(a + b x, s)`` with a
    covariate of mean 50 and sd 10 (``a`` and ``b`` correlated about -0.99), ``N`` points in
    batches of 300.
``sign_flip_20000``
    ``theta ~ N(0, 3)``, ``y ~ N(theta^2, 1)``, 20,000 data in batches of 200: two modes,
    ``theta > 0`` and ``theta < 0``, of equal mass.

For the unimodal problems the reference is the full-data optimum and its Laplace standard
deviations in the unconstrained space (``pm.find_MAP``, ``pm.find_hessian``; Gaussian to well
within the Monte Carlo error at these sizes). Each record has, per unconstrained coordinate, the
posterior mean's distance from the optimum in Laplace sds (``mean_error_in_sds``), the sd's ratio
to the Laplace one (``sd_ratio``) with its Monte Carlo error from the ESS of the squared
deviations (``sd_ratio_se``); for the sign flip the mass of ``theta > 0``. Every record has the
divergences, the warm-up kicks undone (``attrs["warmup_kicks_undone"]``) and the warnings.

Methods: ``tact`` (``pmt.sample_tact`` at its defaults, ``thermostat="diagonal"``),
``tact_scalar`` (the paper's ``thermostat="scalar"``) and ``replica_exchange``
(``pmt.sample_replica_exchange``; its ladder and skipped swaps recorded too).

It runs on ``benchmarks/harness.py`` (one process per case, its command line and JSON).
``--in-process`` runs the cases in one process after a short TACT-HMC run that pays the
compilations: the wall times of warm runs, for comparing two versions of the package one after
the other on a quiet machine (``PYTHONPATH`` at a worktree of the other version; read ratios).

Run::

    .venv/bin/python benchmarks/minibatch.py --problems logistic_50000 --first-seed 1 \\
        --out benchmarks/results/minibatch_logistic.json            # about 8 minutes a seed
    .venv/bin/python benchmarks/minibatch.py --problems regression_3000,regression_30000 \\
        --methods replica_exchange,tact --seeds 3 --first-seed 1 \\
        --out benchmarks/results/minibatch_regression.json
    .venv/bin/python benchmarks/minibatch.py --problems sign_flip_20000 --methods tact,replica_exchange \\
        --seeds 2 --first-seed 1 --in-process --out /tmp/after.json   # warm wall times
    .venv/bin/python benchmarks/minibatch.py --report --out FILE        # the table
    .venv/bin/python benchmarks/minibatch.py --quick                    # smoke: regression_3000
"""

from __future__ import annotations

import numpy as np

import harness
from harness import _fmt

N_LOGISTIC, BATCH_LOGISTIC = 50_000, 500


def _logistic(minibatch: bool):
    import pymc as pm

    rng = np.random.default_rng(11)
    x = rng.normal(size=(N_LOGISTIC, 3)) * [1.0, 10.0, 0.1]  # other units per column
    y = rng.binomial(1, 1 / (1 + np.exp(-(x @ np.array([0.5, -0.05, 3.0]) - 0.3)))).astype("int32")
    with pm.Model() as model:
        if minibatch:
            x, y = pm.Minibatch(x, y, batch_size=BATCH_LOGISTIC)
        b0 = pm.Normal("b0", 0, 5)
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=b0 + pm.math.dot(x, b), observed=y,
                     total_size=N_LOGISTIC if minibatch else None)
    return model


def _regression(n: int, minibatch: bool):
    from pymc_tempering.problems.minibatch import minibatch_regression

    return minibatch_regression(n, batch_size=300 if minibatch else None)


def _sign_flip():
    import pymc as pm

    y = np.random.default_rng(5).normal(1.5**2, 1.0, size=20_000)
    with pm.Model() as model:
        batch = pm.Minibatch(y, batch_size=200)
        theta = pm.Normal("theta", 0, 3)
        pm.Normal("y", theta**2, 1.0, observed=batch, total_size=y.size)
    return model


#: name -> the full-data model's builder (for the Laplace reference; None: bimodal, no reference)
FULL = {"logistic_50000": lambda: _logistic(False),
        "regression_3000": lambda: _regression(3000, False),
        "regression_30000": lambda: _regression(30000, False),
        "sign_flip_20000": None}
harness.problem("logistic_50000", lambda: _logistic(True), description="logistic regression, 50,000 points")
harness.problem("regression_3000", lambda: _regression(3000, True), description="regression, 3,000 points")
harness.problem("regression_30000", lambda: _regression(30000, True), description="regression, 30,000 points")


def _even_split():
    """The sign flip's truth: half the mass on each sign, by symmetry."""
    from pymc_tempering.problems import Truth

    return Truth(mode_probabilities=np.array([0.5, 0.5]))


harness.problem("sign_flip_20000", _sign_flip, description="sign flip, 20,000 points",
                modes=("theta<0", "theta>0"), truth=_even_split,
                label=lambda draws: (draws["theta"] > 0).astype(int))


def laplace(build):
    """The full-data optimum and its Laplace sds, per unconstrained coordinate (in the order
    of the model's value variables), with the coordinates' names."""
    import pymc as pm

    with build() as model:
        optimum = pm.find_MAP(progressbar=False)
        cov = np.linalg.inv(pm.find_hessian(optimum, vars=model.free_RVs))
    names = [v.name for v in model.value_vars]
    mode = np.concatenate([np.ravel(optimum[n]) for n in names])
    return names, mode, np.sqrt(np.diag(cov))


def _unconstrained(idata, name):
    """The draws ``(chain, draw, k)`` of the value variable ``name``."""
    for group in ("posterior", "unconstrained_posterior"):
        if group in idata.children and name in idata[group]:
            values = idata[group][name].values
            return values.reshape(values.shape[:2] + (-1,))
    if name.endswith("_log__"):
        values = np.log(idata["posterior"][name[: -len("_log__")]].values)
        return values.reshape(values.shape[:2] + (-1,))
    raise KeyError(name)


def _run(method, problem, seed, settings):
    from arviz_stats.base import array_stats

    import pymc_tempering as pmt

    sampler, kwargs = {"tact": (pmt.sample_tact, {}),
                       "tact_scalar": (pmt.sample_tact, {"thermostat": "scalar"}),
                       "replica_exchange": (pmt.sample_replica_exchange, {})}[method]
    with problem.build():
        idata = sampler(random_seed=seed, progressbar=False, **harness._draws(settings), **kwargs)
    fields = {"divergences": int(idata["sample_stats"]["diverging"].values.sum())
              if "diverging" in idata["sample_stats"] else None,
              "kicks_undone": idata.attrs.get("warmup_kicks_undone")}
    if FULL[problem.name] is not None:
        names, mode, sd = laplace(FULL[problem.name])
        draws = np.concatenate([_unconstrained(idata, n) for n in names], -1)
        mean, spread = draws.mean((0, 1)), draws.std((0, 1))
        ratio_se = [float(np.sqrt(2 / array_stats.ess((draws[..., i] - mean[i]) ** 2, method="mean",
                                                       chain_axis=0, draw_axis=1)) / 2)
                    for i in range(draws.shape[-1])]
        fields.update({"coordinates": names, "optimum": mode.tolist(), "laplace_sd": sd.tolist(),
                       "mean_error_in_sds": ((mean - mode) / sd).tolist(),
                       "sd_ratio": (spread / sd).tolist(), "sd_ratio_se": ratio_se})
    else:
        theta = idata["posterior"]["theta"].values
        fields.update({"weight_plus": float(np.mean(theta > 0)),
                       "probabilities": [float(np.mean(theta <= 0)), float(np.mean(theta > 0))],
                       "sd_abs_theta": float(np.abs(theta).std())})
    if method == "replica_exchange":
        ex = idata["replica_exchange"]
        fields.update({"n_replicas": int(idata.attrs["n_replicas"]),
                       "max_temperature": float(idata.attrs["max_temperature"]),
                       "swaps_skipped": int(ex["swap_skipped"].sum()),
                       "swaps_attempted": int(ex["swap_attempted"].sum())})
    return None, fields


for _method, _text in (("tact", "pmt.sample_tact at its defaults (diagonal thermostats)"),
                       ("tact_scalar", "pmt.sample_tact(thermostat='scalar')"),
                       ("replica_exchange", "pmt.sample_replica_exchange at its defaults")):
    harness.method(_method, _text)(
        lambda problem, seed, settings, _m=_method: _run(_m, problem, seed, settings))


def _warm_up(settings) -> None:
    """A short TACT-HMC run on the sign flip: the compilations."""
    import pymc_tempering as pmt

    with _sign_flip():
        pmt.sample_tact(draws=20, tune=20, chains=2, random_seed=1, progressbar=False)


def report(data) -> None:
    """One row per run."""
    print("| problem | method | seed | divergences | means' largest error (Laplace sds) "
          "| sd / Laplace sd | largest MC error of the ratios | weight of + | kicks undone | s |")
    print("|" + "---|" * 10)
    for r in data["runs"]:
        if r.get("error_message"):
            print(f"| {r['problem']} | {r['method']} | {r['seed']} | FAILED: {r['error_message'][:100]} |")
            continue
        mean_err = r.get("mean_error_in_sds")
        ratios = r.get("sd_ratio")
        print(f"| {r['problem']} | {r['method']} | {r['seed']} | {r.get('divergences', '-')} "
              f"| {_fmt(max(map(abs, mean_err)) if mean_err else None, '.2f')} "
              f"| {', '.join(f'{v:.3f}' for v in ratios) if ratios else '-'} "
              f"| {_fmt(max(r['sd_ratio_se']) if r.get('sd_ratio_se') else None)} "
              f"| {_fmt(r.get('weight_plus'))} | {r.get('kicks_undone', '-')} "
              f"| {_fmt(r.get('seconds'), '.0f')} |")


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=("logistic_50000",),
                       methods=("tact", "tact_scalar", "replica_exchange"),
                       out=harness.RESULTS / "minibatch.json", seeds=1)
    p.add_argument("--in-process", action="store_true",
                   help="run the cases in one process after a warm-up (warm wall times)")
    args = harness.parse(p, argv)
    harness.run_or_report(args, "minibatch", harness.settings_from(args, quick={"draws": 100, "tune": 100}),
                          report=report, quick_problems=("regression_3000",),
                          in_process=args.in_process, warm_up=_warm_up)


if __name__ == "__main__":
    main()
