"""Table 1 and Figure 4 of the pseudo-extended paper: the 20-component bivariate mixture.

What it measures
----------------
The mixture of Kou, Zhou & Wong (2006), section 4.1 of Nemeth et al., in scenario (a) (equal
weights, component sd 0.1, well separated) and (b) (weights and variances growing with the
distance to (5, 5)); definitions and exact moments in ``pymc_tempering/data/README.md``. The
problems are this script's own (:func:`harness.problem`), ``kou_mixture_a`` and
``kou_mixture_b``: :func:`pymc_tempering.problems.mixtures.kou_mixture_model`, the mixture as the
density of ``x`` with no prior (the ``kou_a`` / ``kou_b`` problems of
:mod:`pymc_tempering.problems` put it over a Normal prior instead). For each scenario, method and
seed the record holds the estimates of ``E x1, E x2, E x1^2, E x2^2`` (``moments``); the report
gives, over the seeds, the mean and the standard deviation of each estimate (Table 1, with the
paper's PE rows, **bold** where our sd is larger), and the mean squared error averaged over the
four moments times the mean wall time of a run (Figure 4, ``MSE x time``). Truth is the exact
value from :func:`pymc_tempering.problems.mixtures.kou_mixture_moments` (the paper's Table 1
"Truth" row for scenario (b) differs from it in the second moments by 0.11: we use the exact
ones).

Methods
-------
``nuts``
    ``pm.sample`` on the mixture itself (PyMC 6's default NUTS, nutpie here).
``pe2, pe5, pe10, pe20``
    :func:`pymc_tempering.sample_pe` with ``N = 2, 5, 10, 20`` pseudo-samples and the tempered
    proposal (defaults: ``beta_min = 1e-3``, ``target_accept = 0.9``).
``ct``
    :func:`pymc_tempering.sample_ct` with a wide Gaussian base ``N((5, 5), 3.5^2 I)`` (covering
    the box [0, 10]^2 that holds the modes; the model has no prior to fit a base from) and the
    default importance-sampling ``log_zeta``.

(These names shadow the harness's ``nuts``, ``ct`` and ``pe`` in this script.) Every run:
``--chains`` chains (default 4), ``--tune`` tuning and ``--draws`` kept draws per chain (default
2500), initial point (0.5, 0.5) plus PyMC's jitter (the paper draws it from [0, 1]^2);
``--target-accept`` and ``--nuts-sampler`` go to ``pm.sample``. Seeds start at 1000. The paper
runs 20 seeds of one chain of 50,000 draws. Wall time includes compilation and tuning, one fresh
process per run (``benchmarks/harness.py``), on whatever machine runs it: compare methods within
one run only.

Rerun
-----
::

    .venv/bin/python benchmarks/kou_mixture.py --seeds 20 --draws 12500 \\
        --out benchmarks/results/kou_mixture_20seeds.json --figure benchmarks/results/kou_mixture_20seeds.png
    .venv/bin/python benchmarks/kou_mixture.py --report --out benchmarks/results/kou_mixture_20seeds.json
    .venv/bin/python benchmarks/kou_mixture.py --quick       # smoke: scenario (a), nuts and pe2
"""

from __future__ import annotations

import numpy as np

import harness

METHODS = ("nuts", "pe2", "pe5", "pe10", "pe20", "ct")
SCENARIOS = {"kou_mixture_a": "a", "kou_mixture_b": "b"}
LABELS = {"nuts": "NUTS", "pe2": "PE N=2", "pe5": "PE N=5", "pe10": "PE N=10", "pe20": "PE N=20",
          "ct": "CT (wide base)"}
#: Nemeth et al.'s Table 1, the PE rows: (mean, sd) of E x1, E x2, E x1^2, E x2^2.
PAPER = {
    "a": {"pe2": [(4.383, 0.042), (4.913, 0.101), (24.585, 0.434), (34.038, 1.000)],
          "pe5": [(4.469, 0.039), (4.893, 0.049), (25.553, 0.374), (33.834, 0.437)],
          "pe10": [(4.467, 0.027), (4.903, 0.027), (25.479, 0.251), (33.907, 0.234)],
          "pe20": [(4.477, 0.017), (4.910, 0.020), (25.576, 0.145), (33.945, 0.213)]},
    "b": {"pe2": [(4.666, 0.050), (5.054, 0.077), (25.572, 0.461), (31.922, 0.669)],
          "pe5": [(4.675, 0.015), (5.033, 0.021), (25.629, 0.167), (31.663, 0.220)],
          "pe10": [(4.670, 0.010), (5.026, 0.016), (25.598, 0.087), (31.646, 0.169)],
          "pe20": [(4.674, 0.013), (5.023, 0.013), (25.628, 0.134), (31.577, 0.121)]},
}


def _build(scenario):
    def build():
        from pymc_tempering.problems.mixtures import kou_mixture_model

        return kou_mixture_model(scenario)

    return build


for _name, _scenario in SCENARIOS.items():
    harness.problem(_name, _build(_scenario),
                    description=f"Kou et al.'s 20-component mixture, scenario ({_scenario}), no prior")


def _moments(values: np.ndarray, log_weight: np.ndarray | None) -> np.ndarray:
    """Weighted moments from draws ``(chain, draw[, pseudo], 2)`` and log weights."""
    feats = np.concatenate([values, values**2], axis=-1)
    if log_weight is None:
        return feats.reshape(-1, 4).mean(axis=0)
    w = np.exp(log_weight - log_weight.max()).ravel()
    return (w[:, None] * feats.reshape(-1, 4)).sum(axis=0) / w.sum()


def _run(method, problem, seed, settings):
    import pymc as pm

    import pymc_tempering as pmt

    kwargs = dict(draws=settings.get("draws") or 2500, tune=settings["tune"],
                  chains=settings["chains"], random_seed=seed, progressbar=False,
                  **{k: settings[k] for k in ("target_accept", "nuts_sampler")
                     if settings.get(k) is not None})
    model = problem.build()
    if method == "nuts":
        idata = pm.sample(model=model, **kwargs)
        est = _moments(idata["posterior"]["x"].transpose("chain", "draw", ...).values, None)
    elif method.startswith("pe"):
        idata = pmt.sample_pe(n_pseudo=int(method[2:]), model=model, **kwargs)
        x = idata["posterior"]["x"].transpose("chain", "draw", "pseudo_sample", ...).values
        est = _moments(x, idata["sample_stats"]["log_weight"].values)
    else:
        base = pmt.Base.from_moments([5.0, 5.0], [3.5**2, 3.5**2])
        idata = pmt.sample_ct(model=model, base=base, **kwargs)
        x = idata["posterior"]["x"].transpose("chain", "draw", ...).values
        est = _moments(x, idata["sample_stats"]["log_weight"].values)
    return None, {"moments": est.tolist()}


for _method in METHODS:
    harness.method(_method, f"{LABELS[_method]} (kou_mixture.py)")(
        lambda problem, seed, settings, _m=_method: _run(_m, problem, seed, settings))


# ----------------------------------------------------------------------------------- report
def summary(data: dict) -> dict:
    """``{scenario: {"truth": [...], "methods": {method: row}}}``: per method the mean and sd
    over seeds of each moment, the MSE over the four moments, the mean time and their product
    (from the records, or from the file's ``summaries`` for a row that has no records)."""
    from pymc_tempering.problems.mixtures import kou_mixture_moments

    out = {}
    for name in data["truths"]:
        scenario = SCENARIOS.get(name, name)
        truth = kou_mixture_moments(scenario)
        rows = {}
        for method in dict.fromkeys([*METHODS, *(r["method"] for r in data["runs"])]):
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method
                    and r.get("moments") is not None]
            if not runs:
                stored = data.get("summaries", {}).get(name, {}).get(method)
                if stored:  # a row kept only as its summary (the file's "converted" says why)
                    rows[method] = {"runs": stored["runs"], **{k: stored[k] for k in
                                    ("mean", "sd", "mse", "time_s", "mse_x_time")}}
                continue
            ests = np.array([r["moments"] for r in runs])
            mse = float(np.mean((ests - truth) ** 2))
            seconds = float(np.mean([r["seconds"] for r in runs]))
            rows[method] = {"runs": len(runs), "mean": ests.mean(axis=0).tolist(),
                            "sd": (ests.std(axis=0, ddof=1) if len(ests) > 1 else np.full(4, np.nan)).tolist(),
                            "mse": mse, "time_s": seconds, "mse_x_time": mse * seconds}
        out[scenario] = {"truth": truth.tolist(), "methods": rows}
    return out


def _g(value):
    return format(value, ".3g")


def report(data: dict) -> None:
    """Table 1 per scenario: our rows beside the paper's PE rows (bold: our sd larger)."""
    for scenario, res in summary(data).items():
        runs = max((r["runs"] for r in res["methods"].values()), default=0)
        print(f"\n| ({scenario}), {runs} seeds | E x1 | E x2 | E x1² | E x2² | MSE | time (s) | MSE × time |")
        print("|---|---|---|---|---|---|---|---|")
        print("| truth | " + " | ".join(f"{v:.3f}" for v in res["truth"]) + " | | | |")
        for method, row in res["methods"].items():
            paper = PAPER.get(scenario, {}).get(method)
            cells = []
            for k, (m, s) in enumerate(zip(row["mean"], row["sd"], strict=True)):
                sd = f"{s:.3f}"
                cells.append(f"{m:.3f} ({f'**{sd}**' if paper and s > paper[k][1] else sd})")
            print(f"| {LABELS.get(method, method)} | {' | '.join(cells)} | {_g(row['mse'])} "
                  f"| {row['time_s']:.1f} | {_g(row['mse_x_time'])} |")
            if paper:
                print(f"| paper {LABELS[method]} | "
                      + " | ".join(f"{m:.3f} ({s:.3f})" for m, s in paper) + " | | | |")


def plot(data: dict, path) -> None:
    """MSE x time against the number of pseudo-samples, NUTS and CT as lines (Figure 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = summary(data)
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 3.5), squeeze=False)
    for ax, (scenario, res) in zip(axes[0], scenarios.items(), strict=True):
        pe = [(int(m[2:]), r["mse_x_time"]) for m, r in res["methods"].items() if m.startswith("pe")]
        if pe:
            n, v = zip(*sorted(pe), strict=True)
            ax.plot(n, v, "o-", label="sample_pe")
        for m, style in (("nuts", "k--"), ("ct", "r:")):
            if m in res["methods"]:
                ax.axhline(res["methods"][m]["mse_x_time"], ls=style[1:], color=style[0], label=m)
        ax.set_yscale("log")
        ax.set_xlabel("pseudo-samples N")
        ax.set_ylabel("MSE x time (s)")
        ax.set_title(f"scenario ({scenario})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=tuple(SCENARIOS), methods=METHODS,
                       out=harness.RESULTS / "kou_mixture.json", seeds=20)
    p.set_defaults(first_seed=1000)
    p.add_argument("--tune", type=int, default=1000, help="tuning steps per chain")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--target-accept", type=float, default=None,
                   help="passed to pm.sample (default: each method's own)")
    p.add_argument("--nuts-sampler", default=None, help="passed to pm.sample")
    args = harness.parse(p, argv)
    if args.quick and not args.methods_given:
        args.methods = "nuts,pe2"
    settings = harness.settings_from(
        args, quick={"draws": 100}, tune=100 if args.quick else args.tune, chains=args.chains,
        target_accept=args.target_accept, nuts_sampler=args.nuts_sampler)
    harness.run_or_report(args, "kou_mixture", settings, report=report, plot=plot,
                          quick_problems=("kou_mixture_a",))


if __name__ == "__main__":
    main()
