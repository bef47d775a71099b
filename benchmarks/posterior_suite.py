"""Posterior benchmark: mode probabilities of multimodal models, tempering methods against SMC and NUTS.

What it measures: how much posterior mass each method puts on each mode of seventeen multimodal
models whose mode probabilities are known exactly (quadrature, symmetry or a closed form),
side by side over seeds. Per run it records the largest error over the modes' probabilities,
that mode's standard error, every mode's probability, the evidence's ``reliable`` flag, the
evidence error where the exact log Z is known, the warnings the run gave and its wall time.

Models
------
The problems of :mod:`pymc_tempering.problems` (their records hold the builder, the labeller
of posterior draws to modes and the exact mode probabilities; ``--check`` prints them).

``quickstart``
    The sign-flip posterior of ``examples/quickstart.py``: ``y_i ~ N(theta^2, 1)``, ten
    observations, ``theta ~ N(0.5, 1.5^2)``. Modes: ``theta < 0`` / ``theta > 0``. Truth:
    1-D quadrature (P(theta > 0) about 0.647); log Z by the same quadrature.
``mixture_2d``, ``mixture_5d``, ``mixture_10d``
    ``x ~ N(0, 10^2 I)`` and a ``pm.Potential`` holding the log density of a three-component
    Gaussian mixture (weights 0.6 / 0.3 / 0.1, diagonal covariances of unequal scales, means 8
    apart). The posterior is again a Gaussian mixture (Gaussian products, closed form). A
    draw's mode is the posterior component whose mean is nearest in Mahalanobis distance;
    the exact probability of each such region is computed by Monte Carlo from the exact
    posterior mixture with 10^6 draws (standard error below 0.0005). log Z: closed form.
``shells_5d``, ``shells_20d``
    The two thin Gaussian shells of the evidence suite (radius 2, width 0.1,
    centres ``(+-3.5, 0, ...)``, uniform prior on ``[-6, 6]^d``). Modes: ``x_0 < 0`` /
    ``x_0 > 0``; truth 0.5 / 0.5 by the reflection ``x_0 -> -x_0``. log Z: radial quadrature.
``label_switching``
    A two-component normal mixture likelihood, ``y_i ~ 0.5 N(mu_1, 1) + 0.5 N(mu_2, 1)``, 60
    observations from components at -2.5 and 2.5, exchangeable priors ``mu_k ~ N(0, 5^2)``.
    Modes: ``mu_1 < mu_2`` / ``mu_1 > mu_2``; truth 0.5 / 0.5 by exchangeability. No log Z.
``kou_a``, ``kou_b``
    The 20-component bivariate mixture of Kou, Zhou and Wong (2006) (the components of
    ``pymc_tempering.problems.kou_mixture_model``). That model puts a ``pm.Flat`` prior on
    ``x``, which ``pm.sample_smc`` cannot start from, so here ``x ~ N(5, 5^2 I)`` and the
    potential is the mixture's log density minus that prior's: the posterior is exactly the
    Kou mixture and log Z = 0 (its first two moments are those of
    ``problems.kou_mixture_moments``). The package ships moments only, no mode
    probabilities: a draw's mode is the component whose mean is nearest in Mahalanobis
    distance, and the region probabilities are computed by Monte Carlo from the exact mixture
    with 10^6 draws (about 0.05 each in scenario a; in scenario b neighbouring components
    overlap, and the regions are still exact but no longer equal the weights).
``bilinear_regression``
    A regression with two well-separated solutions: ``y_i ~ N(a b x_i, 0.5^2)``, 20
    observations with ``a b = 2``, ``a ~ N(0.3, 1)``, ``b ~ N(0, 1)``. Only the product is
    identified, so the posterior lies on the two branches of a hyperbola (``a, b > 0`` or
    ``a, b < 0``). Modes: ``a < 0`` / ``a > 0``. Truth: ``b`` integrated out in closed form
    (``y | a`` is Gaussian), then 1-D quadrature over ``a``; log Z the same way.
``label_switching_3``
    A three-cluster model as a user writes it: ``w ~ Dirichlet(1, 1, 1)``, ``mu_k ~ N(0, 10^2)``
    with no ordering, one ``sigma ~ HalfNormal(2)`` and ``y_i ~ NormalMixture(w, mu, sigma)``
    for 120 observations, 40 each from ``N(-4, 1)``, ``N(0, 1)`` and ``N(4, 1)``. Modes: the
    3! = 6 orderings of ``mu`` (``mu1<mu2<mu3``, ...); truth 1/6 each by exchangeability (the
    density is unchanged when the components are permuted). No log Z.
``periodic_frequency``
    The frequency of a sinusoid: ``y_t ~ N(a cos(omega t) + b sin(omega t), 0.5^2)``,
    ``a, b ~ N(0, 1)``, ``omega ~ U(0.5, 8)``, 20 observations at the times ``1, ..., 20``
    jittered by up to 0.05 (data from ``cos(t + 0.4)``). Sampling at nearly unit intervals
    aliases the frequency: three narrow lobes (sd about 0.03) near ``omega`` = 1.02, 5.26
    (``2 pi - 1.02``) and 7.31 (``2 pi + 1.02``), which the jitter weights apart, with
    side lobes more than 16 nats lower between them. Modes: ``omega < pi`` /
    ``pi < omega < 2 pi`` / ``omega > 2 pi``. Truth: ``a`` and ``b`` integrated out in closed
    form (``y | omega`` is Gaussian), then adaptive 1-D quadrature over ``omega`` (about
    0.534 / 0.273 / 0.193); log Z the same way.
``hierarchical_bilinear``
    A hierarchical model with two well-separated solutions: ``y_ij ~ N(a b_j, 1)`` for 8
    groups of 10 observations, ``b_j ~ N(mu_b, 1)``, ``mu_b ~ N(0, 1)``, ``a ~ N(0.3, 1)``
    (data from ``a = 1.5``, ``b_j ~ N(0.5, 1)``). Flipping the signs of ``a``, ``mu_b`` and
    every ``b_j`` leaves the likelihood unchanged and the known group sd fixes ``|a|`` (near
    1.65), so the posterior has one solution for each sign of ``a``, weighted apart by its
    prior; at ``a = 0`` the log density is 218 nats below the peaks. Modes: ``a < 0`` /
    ``a > 0``. Truth: ``mu_b`` and ``b`` integrated out in closed form (``y | a`` is
    Gaussian), then 1-D quadrature over ``a`` (about 0.259 / 0.741); log Z the same way.
``one_factor``
    A one-factor model with its factors as parameters: ``y_ij ~ N(f_i lambda_j, psi_j^2)``
    for 40 rows and 5 features (data from loadings 0.9, 0.8, 0.7, 0.6, 0.5 and noise sd
    0.5), ``lambda_j, f_i ~ N(0, 1)``, ``psi_j ~ HalfNormal(1)``; 50 parameters. Flipping the
    signs of all the loadings and all the factors together leaves the density unchanged, so
    the posterior has a mode for each sign. Modes: ``lambda_0 < 0`` / ``lambda_0 > 0``; truth
    0.5 / 0.5 by that symmetry. No log Z.
``two_factor``
    A two-factor model, ``y_ij ~ N(sum_k F_ik Lambda_jk, psi_j^2)`` for 50 rows and 6
    features, lower-triangular loadings (``Lambda_01 = 0``, the other 11 ``N(0, 1)``),
    ``F_ik ~ N(0, 1)``, ``psi_j ~ HalfNormal(1)``; 117 parameters. Flipping one column of
    the loadings together with its factor leaves the density unchanged. Modes: the signs of
    ``(Lambda_00, Lambda_11)``, ``--``, ``-+``, ``+-``, ``++``; truth 1/4 each by that
    symmetry. No log Z.
``tanh_network``
    A network with two tanh hidden units, ``y_i ~ N(v_0 tanh(w_0 x_i + b_0) + v_1 tanh(w_1 x_i
    + b_1) + c, 0.15^2)`` at 30 inputs on ``[-3, 3]`` (data from ``v = (1.5, -1)``, ``w = (2,
    1)``, ``b = (1, -1)``), all seven weights ``N(0, 1)``. Flipping one unit's ``(w, b, v)``
    leaves the density unchanged (tanh is odd), and so does swapping the units: eight
    equivalent modes. Modes: the signs of ``(v_0, v_1)``, ``--``, ``-+``, ``+-``, ``++`` (two
    of the eight each); truth 1/4 each by symmetry. No log Z.
``free_variance_mixture``
    A two-component normal mixture with free sds, ``y_i ~ 0.5 N(mu_1, sigma_1^2) + 0.5 N(mu_2,
    sigma_2^2)``, 60 observations (30 from ``N(-2, 0.5^2)``, 30 from ``N(3, 1.5^2)``),
    ``mu_k ~ N(0, 5^2)`` with no ordering, ``sigma_k ~ HalfNormal(2)``. The likelihood is
    unbounded (a component collapsing on one observation), the posterior proper. Modes:
    ``mu_1 < mu_2`` / ``mu_1 > mu_2``; truth 0.5 / 0.5 by exchangeability. No log Z.

Methods
-------
``ct``, ``gibbs_ct``, ``pe``
    ``pmt.sample_ct``, ``pmt.sample_gibbs_ct``, ``pmt.sample_pe`` with
    ``random_seed=seed, progressbar=False`` and otherwise their defaults. Mode probabilities
    are weighted means of the mode indicators with their standard errors,
    ``pmt.weighted_expectation(idata, indicator)`` (stratified by the modes where the run
    is), for ``pe`` ``pymc_tempering.estimators.weighted_mean(indicator, log_weight)`` with the
    pseudo-samples pooled within each chain. ``posterior_reliable`` is the
    result's ``attrs["posterior_reliable"]`` (``pmt.posterior_check``); ``reliable`` is
    ``pmt.log_marginal_likelihood(idata).reliable`` (the evidence's verdict; None where that
    raises).
``smc``
    ``pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)``: plain means
    of the indicators, no standard error (the particles are not a Markov chain); the evidence
    is each chain's last finite ``log_marginal_likelihood``, averaged.
``nuts``
    ``pm.sample(random_seed=seed, progressbar=False)`` at PyMC's defaults: plain means,
    standard error from ArviZ's ``mcse`` (None for a mode whose indicator never changes within
    any chain, i.e. chains stuck, or where it is not finite). No evidence.

Each (model, method, seed) case runs in its own process through ``benchmarks/harness.py``
(its records, its JSON, its command line), so every method pays the same imports and
compilation. The wall time is measured inside the case: model build, compilation and sampling
(not the labelling).

Usage::

    .venv/bin/python benchmarks/posterior_suite.py --check       # print the exact probabilities
    .venv/bin/python benchmarks/posterior_suite.py               # 17 models, 5 methods, 10 seeds
    .venv/bin/python benchmarks/posterior_suite.py --problems quickstart,mixture_2d \\
        --methods ct,smc --seeds 3 --resume
    .venv/bin/python benchmarks/posterior_suite.py --report      # the tables from --out
    .venv/bin/python benchmarks/posterior_suite.py --merge a.json b.json long.json --out all.json
    .venv/bin/python benchmarks/posterior_suite.py --quick --methods ct,smc   # smoke: 1 seed,
                                                   # 2 cheap models, tiny draws
    .venv/bin/python benchmarks/posterior_suite.py --problems quickstart,mixture_2d,label_switching \\
        --methods ct,gibbs_ct --draws 16000 --out /tmp/long.json   # long runs: the bias table

Writes ``--out`` (default ``/tmp/posterior_suite.json``). The report gives the page's table
(one row per model), the harness's table per model and method, the bias table (each mode's
probability averaged over the seeds, the standard error of that mean from their spread, and its
z-score against the truth) and the long runs merged in. ``--draws N`` runs every sampler but
SMC with ``N`` draws per chain.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import harness
from harness import _fmt

MODELS = ("quickstart", "mixture_2d", "mixture_5d", "mixture_10d", "shells_5d", "shells_20d",
          "label_switching", "kou_a", "kou_b", "bilinear_regression", "label_switching_3",
          "periodic_frequency", "hierarchical_bilinear", "one_factor", "two_factor", "tanh_network",
          "free_variance_mixture")
METHODS = ("ct", "gibbs_ct", "pe", "smc", "nuts")
QUICK_MODELS = ("quickstart", "label_switching")
DEFAULT_OUT = Path("/tmp/posterior_suite.json")
#: The settings of a run at the defaults (SMC with 2000 draws, two chains).
SETTINGS = {"quick": False, "draws": "defaults (smc 2000)", "smc_chains": 2}


def check_models(names) -> None:
    """Print each model's exact mode probabilities and log Z (and Kou's moments)."""
    from pymc_tempering.problems import get

    for name in names:
        problem = get(name)
        truth = problem.truths
        shown = ", ".join(f"{m} {v:.4f}" for m, v in zip(problem.modes, truth.mode_probabilities))
        print(f"{name}: {shown}; log Z {_fmt(truth.log_z, '.4f')}")
        if truth.moments:
            print(f"  exact moments: {({k: round(float(v), 4) for k, v in truth.moments.items()})}")


def page_table(data) -> str:
    """One row per model: sample_ct's and sample_gibbs_ct's runs within 0.03, their largest
    errors, sample_ct's posterior verdicts, SMC's largest error and sample_ct's median time over
    SMC's (with and without nutpie's compilation)."""
    rows = {(r["problem"], r["method"]): r for r in harness.summarise(data)}
    lines = ["| model | CT: within 0.03 | largest error | posterior reliable | Gibbs CT: within 0.03 "
             "| largest error | SMC: largest error | CT time / SMC | without nutpie's compile |",
             "|" + "---|" * 9]
    for name in data["truths"]:
        ct, gibbs, smc = (rows.get((name, m), {}) for m in ("ct", "gibbs_ct", "smc"))
        if not ct:
            continue
        smc_t = smc.get("median_seconds")
        bare = [r["seconds"] - r["nutpie_compile_seconds"] for r in data["runs"]
                if r["problem"] == name and r["method"] == "ct" and r.get("nutpie_compile_seconds")
                and r.get("seconds") is not None]
        post = ct.get("frac_posterior_reliable")
        lines.append(
            f"| {name} | {ct['within']}/{ct['with_modes']} | {_fmt(ct['largest_error'])} "
            f"| {'-' if post is None else f'{round(post * ct['with_modes'])}/{ct['with_modes']}'} "
            f"| {gibbs.get('within', '-')}/{gibbs.get('with_modes', '-')} | {_fmt(gibbs.get('largest_error'))} "
            f"| {_fmt(smc.get('largest_error'))} "
            f"| {_fmt(ct['median_seconds'] / smc_t if smc_t else None, '.1f')} "
            f"| {_fmt(float(np.median(bare)) / smc_t if bare and smc_t else None, '.1f')} |")
    return "\n".join(lines)


def bias_table(truths, runs, draws) -> str:
    """Per model and method: the mode whose seed-averaged probability is most standard errors
    (of that average, from the spread over seeds, and of the truth where it is by Monte Carlo)
    from the truth."""
    from pymc_tempering.problems.mixtures import N_EXACT_MC

    lines = [f"Draws per chain: {draws}", "",
             "| model | method | runs | mode | mean over seeds | se of the mean | truth | z |",
             "|---|---|---|---|---|---|---|---|"]
    methods = list(dict.fromkeys(r["method"] for r in runs))
    for model, truth in truths.items():
        for method in methods:
            probs = np.array([r["probabilities"] for r in runs if r["problem"] == model
                              and r["method"] == method and r.get("probabilities") is not None])
            if len(probs) < 2:
                continue
            mean, se = probs.mean(0), probs.std(0, ddof=1) / np.sqrt(len(probs))
            p_true = np.array(truth["probabilities"])
            if model.startswith(("mixture_", "kou_")):  # truths by Monte Carlo
                se = np.hypot(se, np.sqrt(p_true * (1 - p_true) / N_EXACT_MC))
            k = int(np.argmax(np.abs(mean - p_true) / np.maximum(se, 1e-12)))
            z = (mean[k] - p_true[k]) / se[k] if se[k] > 0 else float("nan")
            lines.append(f"| {model} | {method} | {len(probs)} | {truth['modes'][k]} | {mean[k]:.4f} "
                         f"| {se[k]:.4f} | {p_true[k]:.4f} | {_fmt(float(z), '.2f')} |")
    return "\n".join(lines)


def report(data) -> None:
    """Print the page's table, the harness's table, the bias tables and the truths."""
    print(page_table(data), "\n")
    print(harness.table(data), "\n")
    print(harness.cost_table(data), "\n")
    print(bias_table(data["truths"], data["runs"], data["settings"].get("draws")))
    for long in data.get("long_runs", []):  # suites with more draws, merged in (--merge)
        print()
        print(bias_table(long["truths"], long["runs"], long["settings"].get("draws")))
    print("\nTruths: " + "; ".join(
        f"{m}: " + ", ".join(f"{v:.3f}" for v in t["probabilities"][:6])
        + (", ..." if len(t["probabilities"]) > 6 else "") for m, t in data["truths"].items()))


def merge_suites(paths) -> dict:
    """One results file from suites run apart (other models, methods or seeds): the runs at the
    defaults pooled (their settings must agree), each suite with ``--draws`` kept whole in
    ``long_runs``."""
    merged, long_runs = None, {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if isinstance(data["settings"].get("draws"), int):
            key = str(data["settings"]["draws"])
            if key in long_runs:
                long_runs[key]["runs"] += data["runs"]
                long_runs[key]["truths"].update(data["truths"])
            else:
                long_runs[key] = {k: data[k] for k in ("settings", "truths", "runs")}
            continue
        if merged is None:
            merged = {**data, "runs": list(data["runs"]), "truths": dict(data["truths"])}
        elif data["settings"] != merged["settings"]:
            raise SystemExit(f"{path} has settings {data['settings']}, not {merged['settings']}.")
        else:
            merged["runs"] += data["runs"]
            merged["truths"].update(data["truths"])
    if merged is None:
        raise SystemExit("no suite at the defaults among the files to merge.")
    merged["long_runs"] = list(long_runs.values())
    return merged


def plot(data, path) -> None:
    """Each run's largest mode-probability error, per model and method, on a log scale, with the
    0.03 goal: one row per model, one colour per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in data["runs"] if r.get("max_error") is not None]
    models = [m for m in data["truths"] if any(r["problem"] == m for r in runs)]
    methods = list(dict.fromkeys(r["method"] for r in runs))
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(models) + 1.2))
    for j, method in enumerate(methods):
        for i, model in enumerate(models):
            errs = [max(r["max_error"], 1e-4) for r in runs if r["problem"] == model and r["method"] == method]
            y = i + (j - (len(methods) - 1) / 2) * 0.22
            ax.scatter(errs, np.full(len(errs), y), s=14, color=f"C{j}", alpha=0.7,
                       label=method if i == 0 else None)
    ax.axvline(harness.TOLERANCE, color="k", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yticks(range(len(models)), models)
    ax.invert_yaxis()
    ax.set_xlabel("largest error of a mode probability in a run")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(methods), fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=MODELS, methods=METHODS, out=DEFAULT_OUT)
    p.add_argument("--check", action="store_true", help="print the models' exact probabilities")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="merge suites run apart into --out: those at the defaults pooled, "
                        "those with --draws kept as long_runs")
    args = harness.parse(p, argv)
    problems, methods, seeds = harness.selection(args, QUICK_MODELS)
    if args.check:
        check_models(problems)
    elif args.merge:
        harness.write_json(args.out, merge_suites(args.merge))
    else:
        if args.report:
            data = json.loads(args.out.read_text())
        else:
            settings = harness.settings_from(args) if args.quick or args.draws else SETTINGS
            data = harness.run_suite("posterior_suite", problems, methods, seeds, args.out,
                                     settings, resume=args.resume, timeout=args.timeout,
                                     in_process=args.in_process)
        report(data)
        if args.figure:
            plot(data, args.figure)


if __name__ == "__main__":
    main()
