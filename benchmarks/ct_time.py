"""Where `sample_ct`'s wall time goes, beside `pm.sample_smc`'s, on problems with an exact log Z.

For each problem of :mod:`pymc_tempering.problems` (default: the three radon models with exact
evidence, ``radon_alpha``, ``radon_intercepts`` and ``radon_pooled``; the evidence suite's
problems work too) and seed, on ``benchmarks/harness.py`` with its command line, in ONE
process (``run_suite(in_process=True)``) after a warm-up ``sample_ct`` run on ``gauss_in_box``
that pays the one-off imports and numba compilation (a fresh process per case would time
those instead): the method ``ct_phases``, ``pmt.sample_ct()`` at its defaults with its phases
timed by wrapping the functions that do them (:func:`harness.timed_phases`, the record's
``phase_seconds``), and the harness's ``smc``, ``pm.sample_smc(draws=2000, chains=2)``, on the
same model. Phases:

- ``mode search``: the L-BFGS runs of :func:`pymc_tempering.find_modes` (with the compilation
  of the model's log density and of its prior draws);
- ``ADVI``: the ADVI fits of the mixture base (compilation included);
- ``log_zeta``: the importance-sampling estimates of log zeta;
- ``NUTS compile``: ``nutpie.compile_pymc_model``, once per run (bootstrap round, final run,
  extensions);
- ``NUTS sampling``: ``nutpie.sample``;
- ``other``: the rest (building the tempered models, the result trees, ``diagnose``).

Run::

    .venv/bin/python benchmarks/ct_time.py --seeds 2          # the radon models, seeds 0 and 1
    .venv/bin/python benchmarks/ct_time.py --problems peaks_2d,eight_schools --draws 4000
    .venv/bin/python benchmarks/ct_time.py --report           # the table from --out
    .venv/bin/python benchmarks/ct_time.py --quick            # smoke: radon_pooled, tiny runs

(``--draws``: ``sample_ct``'s draws per chain instead of its default.) Writes
``benchmarks/results/ct_time.json`` (or ``--out``) and prints a Markdown table. Timings are of
one run each on a shared machine: compare the ratios within a row, not absolute times across
runs.
"""

from __future__ import annotations

import harness
from harness import _fmt

RADON = ("radon_alpha", "radon_intercepts", "radon_pooled")
PHASES = ("mode search", "ADVI", "log_zeta", "NUTS compile", "NUTS sampling")
DEFAULT_OUT = harness.RESULTS / "ct_time.json"


def _phase_targets():
    """The functions whose time is each phase's, as :func:`harness.timed_phases` takes them."""
    import nutpie

    from pymc_tempering.bases import fit as fit_module
    from pymc_tempering.bases import modes as modes_module

    return [(modes_module, "search_modes", "mode search"),  # through find_modes
            (fit_module, "search_modes", "mode search"),  # the bases' own searches
            (fit_module, "fit_advi", "ADVI"),
            (fit_module, "estimate_log_zeta", "log_zeta"),
            (nutpie, "compile_pymc_model", "NUTS compile"),
            (nutpie, "sample", "NUTS sampling")]


@harness.method("ct_phases", "pmt.sample_ct at its defaults, its phases timed")
def _ct_phases(problem, seed, settings):
    import time

    import pymc_tempering as pmt

    with harness.timed_phases(_phase_targets()) as spent, problem.build():
        start = time.perf_counter()
        idata = pmt.sample_ct(random_seed=seed, progressbar=False, **harness._draws(settings))
        total = time.perf_counter() - start
    phases = {p: spent.get(p, 0.0) for p in PHASES}
    phases["other"] = total - sum(phases.values())
    nuts_runs = 1 + int(idata.attrs["bootstrap"]) + int(idata.attrs["extensions"])
    return idata, {"phase_seconds": phases, "nuts_runs": nuts_runs}


def _warm_up(settings) -> None:
    """One ``sample_ct`` run on ``gauss_in_box``, not recorded."""
    _ct_phases(harness.get_problem("gauss_in_box"), 1000, settings)


def table(data) -> str:
    """One row per problem and seed: sample_ct's total and phases, SMC's time, their ratio and
    both errors."""
    head = ("| problem | seed | ct total s | " + " | ".join(PHASES)
            + " | other | NUTS runs | SMC s | ct / SMC | ct error | ct SE | reliable | SMC error |")
    lines = [head, "|" + "---|" * (len(PHASES) + 11)]
    runs = data["runs"]
    for r in (r for r in runs if r["method"] == "ct_phases"):
        smc = next((s for s in runs if s["method"] == "smc" and s["problem"] == r["problem"]
                    and s["seed"] == r["seed"]), {})
        phases = r.get("phase_seconds") or {}
        ratio = r["seconds"] / smc["seconds"] if smc.get("seconds") and r.get("seconds") else None
        lines.append(
            f"| {r['problem']} | {r['seed']} | {_fmt(r.get('seconds'), '.1f')} | "
            + " | ".join(_fmt(phases.get(p), ".1f") for p in PHASES)
            + f" | {_fmt(phases.get('other'), '.1f')} | {r.get('nuts_runs', '-')} "
            f"| {_fmt(smc.get('seconds'), '.1f')} | {_fmt(ratio, '.1f')} "
            f"| {_fmt(r.get('log_z_error'), '+.3f')} | {_fmt(r.get('log_z_se'))} "
            f"| {r.get('reliable')} | {_fmt(smc.get('log_z_error'), '+.3f')} |")
    return "\n".join(lines)


def main(argv=None):
    p = harness.parser(__doc__.splitlines()[0], problems=RADON, methods=("ct_phases", "smc"),
                       out=DEFAULT_OUT, seeds=1)
    args = harness.parse(p, argv)
    harness.run_or_report(args, "ct_time", harness.settings_from(args),
                          report=lambda data: print(table(data)), quick_problems=("radon_pooled",),
                          in_process=True, warm_up=_warm_up)


if __name__ == "__main__":
    main()
