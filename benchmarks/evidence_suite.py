"""Evidence benchmark: twenty-one problems with known log Z, five methods, side by side over seeds.

Every problem is written as a PyMC user would write it (``pm.Potential`` with PyTensor math, or
observed distributions) and, on the same parameters in constrained space, as a NumPy
log-likelihood and prior transform for dynesty (the problem's ``nested`` form). The problems and
their true log marginal likelihoods (closed form or accurate quadrature) are in
:mod:`pymc_tempering.problems`; ``--check`` verifies each problem (below).

Problems
--------
``peaks_2d``
    18 equal, separated isotropic Gaussian peaks (sd 0.3) on a 3 x 6 grid inside a uniform box
    ``[-10, 10]^2``; the likelihood is their normalised equal-weight mixture. Truth: closed form,
    ``Z = (1/400) (1/18) sum_k P(peak k inside the box)`` with ``norm.cdf`` (a multi-modal
    test in the spirit of the egg-box of Feroz, Hobson & Bridges 2009, with an exact Z).
``shells_2d``, ``shells_5d``, ``shells_20d``
    The two Gaussian shells of Feroz & Hobson (2008, MNRAS 384, 449), also used by Feroz,
    Hobson & Bridges (2009, MNRAS 398, 1601, the MultiNest paper): uniform prior ``[-6, 6]^d``,
    ``L = sum_i N(|x - c_i|; r, w)`` with ``r = 2``, ``w = 0.1``, ``c = (+-3.5, 0, ..., 0)``.
    Truth: 1-D radial quadrature (area of the unit (d-1)-sphere times the integral of
    ``rho^(d-1) N(rho; r, w)``); the shells lie inside the box (``--check``: none of 10^6 draws
    from the shells falls outside). Asserted to agree with the published analytic values
    -1.75, -5.67, -36.09 to their rounding.
``gauss_corr_10d``
    ``theta ~ N(0, 5^2 I_10)``, one observation ``y ~ MvNormal(theta, Sigma)`` with unit variances
    and correlation 0.9 between every pair. Truth: closed form, ``log N(y; 0, Sigma + 25 I)``.
``gauss_in_box``
    ``x ~ U(0, 10)^3``, ``y_k ~ N(x_k, 0.2)`` observed at ``y = (5, 0, 9.9)``: a narrow Gaussian
    cut in half by one face of the box and by 31 % at another. Truth: closed form with
    ``norm.cdf``.
``rosenbrock_2d``
    ``x, y ~ U(-5, 5)``, ``log L = -[(1 - x)^2 + 100 (y - x^2)^2]``: the curved Rosenbrock
    degeneracy used in nested-sampling test suites (MultiNest, PolyChord, dynesty), here
    truncated by the box where ``x^2 > 5``. Truth: the ``y`` integral in closed form
    (``norm.cdf``), then adaptive 1-D quadrature over ``x`` (cross-checked on a dense grid).
``cauchy_2d``
    Heavy-tailed likelihood: ``mu ~ N(0, 10)``, ``sigma ~ HalfNormal(3)``, eight observations
    ``~ Cauchy(mu, sigma)`` in two clusters near -4 and +4 (a bimodal posterior in ``mu``).
    Truth: nested adaptive 2-D quadrature (cross-checked on a dense grid).
``eight_schools``
    Rubin (1981) / Gelman et al. (BDA, sec. 5.5), non-centred: ``mu ~ N(0, 5)``,
    ``tau ~ HalfCauchy(5)``, ``theta = mu + tau theta_tilde``, ``theta_tilde ~ N(0, 1)^8``,
    ``y_j ~ N(theta_j, sigma_j)``; 10 parameters, a funnel. Truth: ``theta`` and ``mu``
    integrated analytically (``y | tau ~ N(0, diag(sigma^2 + tau^2) + 25)``), then adaptive
    1-D quadrature over ``tau`` (cross-checked by 2-D quadrature over ``mu, tau``).
``hier_gauss_11d``
    The project's hierarchical linear-Gaussian target
    (``pymc_tempering.problems.gaussian.hierarchical_linear_gaussian``) on 8 groups x 4 observations, two regressors: 11
    parameters with known scales. Truth: the helper's closed form (``y`` is Gaussian).
``spike_slab_{5,10,20}d_{spike,even,slab}``
    A phase change (Skilling 2006, "Nested sampling for general Bayesian computation", on
    phase changes; the BlackJAX sampling book's tempered-SMC example): ``x ~ U(-0.5, 0.5)^d``
    and a likelihood that is the normalised mixture ``s N(0, 0.01^2 I) + (1 - s) N(0, 0.1^2 I)``, a
    narrow spike on a broad slab about the same point, with spike share ``s`` 0.99 (``spike``),
    0.5 (``even``) or 0.01 (``slab``). Truth: closed form, the box's share of each Gaussian
    (``norm.cdf``; log Z within 1e-5 of 0). A method that finds one phase only is off by about
    ``log s`` or ``log(1 - s)``.
``sign_flip_2000``, ``sign_flip_narrow``
    The quickstart's sign flip with many observations: ``theta ~ N(0.5, 1.5^2)`` and 2000
    observations ``y_i ~ N(theta^2, 1)``, or 1000 observations ``y_i ~ N(100 theta^2, 100^2)``
    (the same kind of posterior with the data in other units), both drawn with
    ``theta = 1.1``. Two narrow modes near ``+-1.1`` (sd 0.010 and 0.015), weighted apart by
    the prior (about 0.38 / 0.62), the density at ``theta = 0`` hundreds of nats below them.
    Truth: adaptive 1-D quadrature of each half line with a breakpoint at its mode, the
    likelihood from the sufficient statistics (cross-checked by Laplace's approximation, within
    3e-4 nats).

Methods
-------
``ct``
    ``pmt.sample_ct(random_seed=seed, progressbar=False)`` at its defaults; evidence, standard
    error, ``reliable`` and ``problems`` from ``pmt.log_marginal_likelihood(idata)`` (a
    ``ValueError`` from it is recorded as the run's error message).
``pe``
    ``pmt.sample_pe(random_seed=seed, progressbar=False)`` at its defaults, read the same way
    (it may carry no evidence by default: then the message is recorded and the suite goes on).
``pe_base``
    ``pmt.sample_pe(proposal=pmt.fit_base(method="laplace", random_seed=seed), ...)``: the
    pseudo-samples proposed from the covering base that ``sample_ct`` fits (the mode search's
    mixture), which makes the evidence of eq. (4) available. Wall time includes the base fit.
``smc``
    ``pm.sample_smc(draws=2000, chains=2, random_seed=seed, progressbar=False)``: each chain's
    last finite ``log_marginal_likelihood`` in ``sample_stats``, averaged over the chains (as in
    ``benchmarks/evidence_vs_smc.py``). SMC reports no standard error: the one recorded here is
    the spread of the two chains, ``sd(chains, ddof=1) / sqrt(2)`` (one degree of freedom, so its
    z-scores are heavy-tailed), and ``reliable`` is None. ``--smc-cores`` sets its ``cores``
    (default: PyMC's, i.e. the chains in parallel processes).
``dynesty``
    Static nested sampling, ``dynesty.NestedSampler(loglike, prior_transform, ndim, nlive=500,
    rstate=np.random.default_rng(seed))``, ``run_nested(dlogz=0.1, print_progress=False)``;
    estimate ``results.logz[-1]``, standard error ``results.logzerr[-1]``; ``reliable`` is None.

Each (problem, method, seed) case runs in its own process through ``benchmarks/harness.py``
(its records, its JSON, its command line), seed-major, so that machine load affects the methods
alike. The wall time is measured inside the case (model build, compilation, sampling, evidence).

Summary columns (per problem and method, over runs that returned an estimate; ``failed`` counts
the others: exceptions, timeouts, no evidence): median |error|, RMSE, median se, sd of z, max
|z|, fraction |z| < 3, fraction marked reliable (ct/pe only), fraction "ok or flagged" (runs
with ``|z| < 3 and se <= 0.3``, or marked unreliable: the runs that do not mislead), median wall
seconds. The figure shows each run's error +- its standard error, one panel per problem.

Usage::

    .venv/bin/python benchmarks/evidence_suite.py --check       # verify the truths (~1 min)
    .venv/bin/python benchmarks/evidence_suite.py --methods ct,smc   # the suite, 10 seeds
    .venv/bin/python benchmarks/evidence_suite.py --seeds 3 --problems peaks_2d,shells_5d \\
        --methods ct,dynesty --resume
    .venv/bin/python benchmarks/evidence_suite.py --report      # table + figure from the JSON
    .venv/bin/python benchmarks/evidence_suite.py --quick       # smoke: 1 seed, 2 cheap
                                                                # problems, tiny runs

Writes ``benchmarks/results/evidence_suite.json`` (``--out``) and
``docs/figures/evidence_suite.png`` (``--figure``). Per case roughly: ct and pe 0.5-2 min, SMC
(2000 draws) 10-60 s, dynesty (nlive 500) seconds on the 2-D problems to minutes on
``shells_20d`` and the 10-11-D ones, plus about 5 s of imports (``--resume`` runs the suite in
pieces). The report ends with one row per problem (the table of ``docs/benchmarks.md``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import harness
from harness import _fmt

PROBLEMS = (
    "peaks_2d", "shells_2d", "shells_5d", "shells_20d", "gauss_corr_10d", "gauss_in_box",
    "rosenbrock_2d", "cauchy_2d", "eight_schools", "hier_gauss_11d",
    *(f"spike_slab_{d}d_{kind}" for kind in ("spike", "even", "slab") for d in (5, 10, 20)),
    "sign_flip_2000", "sign_flip_narrow",
)
METHODS = ("ct", "pe", "pe_base", "smc", "dynesty")
QUICK_PROBLEMS = ("gauss_in_box", "rosenbrock_2d")
DEFAULT_OUT = harness.RESULTS / "evidence_suite.json"
DEFAULT_FIGURE = harness.ROOT / "docs" / "figures" / "evidence_suite.png"


# ---------------------------------------------------------------------------------------------
# Verification of the truths
# ---------------------------------------------------------------------------------------------


def check_problems(names, n_mc: int = 1_000_000) -> bool:
    """PyMC logp = log prior + loglike at prior draws, prior_transform draws match the PyMC
    prior (two-sample KS per coordinate), the truth against its Monte Carlo check and cross
    checks. Returns True when every check passes."""
    import pymc as pm
    from pymc.model.transform.conditioning import remove_value_transforms
    from scipy import stats

    from pymc_tempering.problems import get

    all_ok = True
    for name in names:
        problem = get(name)
        nested = problem.nested
        rng = np.random.default_rng(2024)
        start = time.perf_counter()
        log_z = problem.log_z
        print(f"## {name} (ndim {nested.ndim}): log Z = {log_z:.6f}   [{problem.description}]")
        model = problem.build()
        logp = remove_value_transforms(model).compile_logp(jacobian=False)
        theta = nested.prior_transform(rng.uniform(size=(5, nested.ndim)))
        diffs = [float(logp(nested.point(t))) - float(nested.log_prior(t) + nested.loglike(t)) for t in theta]
        scale = max(1.0, *(abs(float(nested.loglike(t))) for t in theta))
        logp_ok = max(abs(d) for d in diffs) < 1e-9 * scale + 1e-6
        print(f"   PyMC logp - (log prior + loglike) at 5 prior draws: max |diff| = {max(map(abs, diffs)):.2e}"
              f" (|loglike| up to {scale:.3g})"
              f" {'ok' if logp_ok else 'MISMATCH'}")
        names_shapes = nested.params
        pymc_draws = pm.draw([model[n] for n, _ in names_shapes], draws=20_000, random_seed=rng)
        pymc_flat = np.concatenate([np.asarray(d).reshape(20_000, -1) for d in pymc_draws], axis=1)
        ours = nested.prior_transform(rng.uniform(size=(20_000, nested.ndim)))
        pvals = [stats.ks_2samp(pymc_flat[:, i], ours[:, i]).pvalue for i in range(nested.ndim)]
        prior_ok = min(pvals) * nested.ndim > 1e-3
        print(f"   prior_transform vs pm.draw, KS per coordinate: min p = {min(pvals):.3g}"
              f" {'ok' if prior_ok else 'MISMATCH'}")
        mc_ok = True
        if nested.mc_check is not None:
            est, se, how = nested.mc_check(rng, n_mc)
            # every draw counted alike (a box holding all of them): the error is below 1 / n
            z = (est - log_z) / se if se > 0 else (0.0 if abs(est - log_z) < 1.0 / n_mc else math.inf)
            mc_ok = abs(z) < 4
            print(f"   Monte Carlo ({how}, n = {n_mc}): {est:.4f} +- {se:.4f}, z = {z:+.2f}"
                  f" {'ok' if mc_ok else 'DISAGREES'}")
        else:
            print("   Monte Carlo: not feasible here (closed form)")
        for line in nested.cross_check() if nested.cross_check else []:
            print(f"   {line}")
        print(f"   ({time.perf_counter() - start:.1f} s)")
        all_ok &= logp_ok and prior_ok and mc_ok
    return all_ok


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def report(data, figure: Path | None):
    rows = harness.summarise(data, [m for m in METHODS if any(r["method"] == m for r in data["runs"])])
    settings = data.get("settings", {})
    print(f"\nEvidence suite ({'QUICK settings, ' if settings.get('quick') else ''}"
          f"{len(data['runs'])} runs). error = estimate - true log Z; z = error / se; statistics "
          f"over runs with an estimate; 'ok|flag' = fraction with (|z| < 3 and se <= 0.3) or "
          f"reliable == False.\n")
    header = ("| problem | log Z | method | runs | failed | med abs err | RMSE | med se | sd z | max abs z "
              "| frac abs z<3 | frac reliable | ok/flag | med s |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print(f"| {r['problem']} | {data['truths'][r['problem']]['log_z']:.3f} | {r['method']} | {r['runs']} | {r['failed']} "
              f"| {_fmt(r['median_abs_error'])} | {_fmt(r['rmse'])} | {_fmt(r['median_se'])} | {_fmt(r['sd_z'], '.2f')} "
              f"| {_fmt(r['max_abs_z'], '.2f')} | {_fmt(r['frac_abs_z_below_3'], '.2f')} "
              f"| {_fmt(r['frac_reliable'], '.2f')} | {_fmt(r['frac_ok_or_flagged'], '.2f')} "
              f"| {_fmt(r['median_seconds'], '.1f')} |")
    print("\nPer problem (the page's table):\n")
    print(compact_table(rows, data["truths"]))
    print("\nWall time against SMC (the ratio of median seconds; phases of ct's later calls):\n")
    print(harness.cost_table(data))
    failures = [r for r in data["runs"] if r.get("error_message")]
    if failures:
        print("\nMessages (first of each problem/method):")
        seen = set()
        for r in failures:
            if (r["problem"], r["method"]) not in seen:
                seen.add((r["problem"], r["method"]))
                print(f"- {r['problem']} / {r['method']} (seed {r['seed']}): {str(r['error_message'])[:300]}")
    if figure is not None:
        plot(data, figure)
        print(f"\nFigure: {figure}")
    return rows


def compact_table(rows, truths) -> str:
    """One Markdown row per problem: sample_ct's runs that do not mislead and its errors, beside
    SMC's and dynesty's errors, and sample_ct's median time over SMC's."""
    by = {(r["problem"], r["method"]): r for r in rows}
    lines = ["| problem | log Z | CT: ok/flag | reliable | med abs err | med se | SMC: med abs err "
             "| max abs z | dynesty: med abs err | med se | CT time / SMC |", "|" + "---|" * 11]
    for name in dict.fromkeys(r["problem"] for r in rows):
        ct, smc, dyn = (by.get((name, m), {}) for m in ("ct", "smc", "dynesty"))
        ratio = (ct["median_seconds"] / smc["median_seconds"]
                 if ct.get("median_seconds") and smc.get("median_seconds") else None)
        ok = (f"{round(ct['frac_ok_or_flagged'] * ct['runs'])}/{ct['runs']}"
              if ct.get("frac_ok_or_flagged") is not None else "-")
        lines.append(
            f"| {name} | {truths[name]['log_z']:.3f} | {ok} | {_fmt(ct.get('frac_reliable'), '.1f')} "
            f"| {_fmt(ct.get('median_abs_error'))} | {_fmt(ct.get('median_se'))} "
            f"| {_fmt(smc.get('median_abs_error'))} | {_fmt(smc.get('max_abs_z'), '.1f')} "
            f"| {_fmt(dyn.get('median_abs_error'))} | {_fmt(dyn.get('median_se'))} | {_fmt(ratio, '.1f')} |"
        )
    return "\n".join(lines)


def plot(data, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    names = list(data["truths"])
    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    colours = dict(zip(METHODS, ("C0", "C1", "C4", "C2", "C3"), strict=True))
    offsets = dict(zip(METHODS, (-0.3, -0.15, 0.0, 0.15, 0.3), strict=True))
    for ax, name in zip(axes.flat, names, strict=False):
        for method in METHODS:
            runs = [r for r in data["runs"] if r["problem"] == name and r["method"] == method]
            ok = [r for r in runs if r.get("log_z_error") is not None]
            if ok:
                x = np.array([r["seed"] for r in ok]) + offsets[method]
                err = np.array([r["log_z_error"] for r in ok])
                se = np.array([r["log_z_se"] if r["log_z_se"] is not None else 0.0 for r in ok])
                ax.errorbar(x, err, yerr=se, fmt="o", ms=3, color=colours[method], label=method)
                flagged = [r["reliable"] is False for r in ok]
                if any(flagged):
                    ax.scatter(x[flagged], err[flagged], s=40, facecolors="none", edgecolors="k", lw=0.8)
            failed = [r for r in runs if r.get("log_z_error") is None]
            if failed:
                ax.scatter(np.array([r["seed"] for r in failed]) + offsets[method], np.zeros(len(failed)),
                           marker="x", color=colours[method])
        ax.axhline(0, color="k", lw=0.6)
        errors = [abs(r["log_z_error"]) for r in data["runs"]
                  if r["problem"] == name and r.get("log_z_error") is not None]
        if errors and max(errors) > 3:  # a missed mode can be off by tens of nats
            ax.set_yscale("symlog", linthresh=1.0)
            low, high = ax.get_ylim()
            ax.set_yticks([v for v in (-20, -10, -5, -2, -1, -0.5, 0, 0.5, 1, 2, 5, 10, 20)
                           if low <= v <= high])
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        seeds = sorted({r["seed"] for r in data["runs"]})
        ax.set_xticks(seeds)
        ax.set_xlim(min(seeds) - 0.5, max(seeds) + 0.5)
        ax.set_title(f"{name} (log Z = {data['truths'][name]['log_z']:.2f})", fontsize=9)
        ax.set_xlabel("seed", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("estimate - log Z  (+- se)", fontsize=8)
    present = [m for m in METHODS if any(r["method"] == m for r in data["runs"])]
    handles = [Line2D([], [], color=colours[m], marker="o", ls="", label=m) for m in present]
    fig.legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle("Evidence suite: error +- standard error per run (x: failed; ring: marked unreliable; "
                 "symlog scale beyond 1 nat where errors exceed 3)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.95, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def settings(args) -> dict:
    """SMC's draws and cores and dynesty's live points (smaller with ``--quick``)."""
    quick = harness.settings_from(args) if args.quick else {"quick": False}
    return {"quick": bool(args.quick), "smc_draws": quick.get("smc_draws", 2000), "smc_chains": 2,
            "smc_cores": args.smc_cores, "dynesty_nlive": quick.get("dynesty_nlive", 500),
            "dynesty_dlogz": 0.1, **{k: quick[k] for k in ("draws", "tune") if k in quick}}


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=PROBLEMS, methods=METHODS,
                       out=DEFAULT_OUT, figure=DEFAULT_FIGURE)
    p.add_argument("--smc-cores", type=int, default=None, help="pm.sample_smc's cores (default PyMC's)")
    p.add_argument("--check", action="store_true", help="verify the problems' truths and exit")
    args = harness.parse(p, argv)
    problems, methods, seeds = harness.selection(args, QUICK_PROBLEMS)
    figure = Path(args.figure) if args.figure else None
    if args.check:
        sys.exit(0 if check_problems(problems) else 1)
    if args.report:
        data = json.loads(args.out.read_text())
    else:
        data = harness.run_suite("evidence_suite", problems, methods, seeds, args.out,
                                 settings(args), resume=args.resume, timeout=args.timeout,
                                     in_process=args.in_process)
    report(data, figure)


if __name__ == "__main__":
    main()
