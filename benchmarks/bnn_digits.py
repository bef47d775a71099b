"""Section 5.2 and Table 1 of Luo et al. (2018), reduced: a Bayesian MLP on scikit-learn's digits.

What it measures
----------------
Test accuracy of a small Bayesian MLP (64-50-10, tanh, ``Normal(0, 1)`` priors on every weight
and bias (``--hidden``, ``--prior-sd``), ``Categorical`` likelihood on the logits) written as an
ordinary PyMC model with ``pm.Minibatch`` and ``total_size``, so every sampler sees the same noisy
minibatch gradients a user's model would give. Methods:

* TACT-HMC (``sample_tact(variant="tact")``), SGNHT (``variant="sgnht"``) and SGHMC
  (``variant="sghmc"``), all with the same settings; their accuracy is that of the Monte Carlo
  average of the predictive class probabilities over all kept networks (as in the paper);
* Adam (``pymc.variational.updates.adam`` on the same minibatch log density, i.e. a MAP point
  estimate), evaluated at its last iterate.

Budget as in the paper (every method runs the same number of epochs): TACT-HMC runs until each
chain has ``--draws`` draws at unit temperature; SGNHT and SGHMC then run for the same number of
steps (so they keep more draws) and Adam for the same number of updates.

Labels: ``--permuted 0 0.2`` are the fractions of *training* labels permuted. As in section 5.2
("random permutation to a certain percentage of the training labels at the beginning of each
epoch"), with ``--relabel epoch`` a fresh random ``p`` of the training labels is permuted among
themselves at the beginning of every epoch (``ceil(n_train / batch)`` steps), through the
``callback`` of ``sample_tact`` and ``pm.set_data``; with ``--relabel fixed`` (the usual
noisy-label setting, not the paper's) the permutation is drawn once per seed. Both by default.
Test labels are never touched.

Data: ``sklearn.datasets.load_digits`` (1797 images of 8x8 pixels, 10 classes, shipped with
scikit-learn: no download), one fixed stratified split (``--test-fraction``, split seed 0),
features standardised with the training set's mean and sd.

It is not problems x methods x seeds on ``benchmarks/harness.py``'s cases because within a seed
SGNHT, SGHMC and Adam run for the number of steps TACT-HMC took, so a seed's four methods are one
coupled measurement; it uses the harness's command line (``--seeds``, ``--first-seed``,
``--draws``: TACT-HMC's draws per chain, ``--out``, ``--quick``, ``--report``; not its
``--problems`` and ``--methods``) and writes its
records with :func:`harness.results_file` (one per label condition, seed and method, the
condition as its ``problem``: test accuracy and log loss of the averaged predictive, mean
accuracy of single sampled networks, training accuracy, steps, kept draws, mean thermostat,
wall seconds).

Settings (the defaults): the paper's MLP tuple ``[eta, eta, 0.05, 0.05, 1, 1, K=50]`` with
``eta_xi = 1e-3``; ``eta_theta = 1e-3`` was chosen by stability alone, on a pilot scored on a
validation split of the training set (``--validate --seeds 100 --draws 20
--burn-in-epochs 50``): ``1e-2`` diverged, ``3e-3`` ran; ``1e-3`` keeps a factor 10 from
divergence while the minibatch noise still matters (SGNHT's thermostat settles at 0.08-0.14
against ``c = 0.05``). Accuracies were not used to choose. Same settings for all three samplers;
Adam uses its default learning rate ``1e-3``. All start from ``N(0, 0.1^2)`` weights.

Needs scikit-learn (``pip install -e '.[bench]'``). BLAS is limited to one thread unless
``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` are set (on a busy 2-core machine
a multi-threaded OpenBLAS made the batched gradient 100x slower).

``--defaults``: the three samplers at their default step sizes (``step_size="auto"``,
``step_size_tempering="auto"``: the warm-up's diagonal preconditioner, see ``docs/tact_hmc.md``)
with the same budget (``tune`` covering ``--burn-in-epochs``), starts, noise, ``K`` and ladder;
written to ``bnn_digits_defaults.json`` unless ``--out`` is given.

Run::

    .venv/bin/python benchmarks/bnn_digits.py        # 5 seeds, 0 % and 20 % permuted labels,
                                                     # both relabel modes: about 11 minutes
    .venv/bin/python benchmarks/bnn_digits.py --defaults --seeds 2 --permuted 0 0.2 --relabel epoch
    .venv/bin/python benchmarks/bnn_digits.py --report --out benchmarks/results/bnn_digits_defaults.json
    .venv/bin/python benchmarks/bnn_digits.py --quick   # smoke: 1 seed, clean labels, tiny budget
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pymc.variational.updates import adam  # noqa: E402

try:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
except ImportError as err:  # pragma: no cover - depends on the environment
    raise SystemExit(
        "benchmarks/bnn_digits.py needs scikit-learn for its data set (digits, shipped with it): "
        "pip install -e '.[bench]'  (or: pip install scikit-learn)"
    ) from err

from pymc_tempering.methods.tact import TemperingSettings, sample_tact  # noqa: E402
from pymc_tempering.methods.tact.testing import hooks  # noqa: E402
from pymc_tempering.target import Target  # noqa: E402

import harness  # noqa: E402

OUT = Path(__file__).parent / "results"
SAMPLERS = {"tact": "TACT-HMC", "sgnht": "SGNHT", "sghmc": "SGHMC"}


def load_data(test_fraction: float, validate: bool = False):
    """Standardised digits, one fixed stratified split (seed 0). With ``validate``, the training
    set is split again (seed 1) and its second part is returned in place of the test set, for
    choosing settings without looking at the test set."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=0, stratify=y
    )
    if validate:
        x_tr, x_te, y_tr, y_te = train_test_split(
            x_tr, y_tr, test_size=test_fraction, random_state=1, stratify=y_tr
        )
    mean, sd = x_tr.mean(0), x_tr.std(0)
    sd[sd == 0] = 1.0  # constant border pixels
    return (x_tr - mean) / sd, (x_te - mean) / sd, y_tr.astype("int64"), y_te.astype("int64")


def bnn_model(x_train, y_train, hidden: int, batch_size: int, prior_sd: float) -> pm.Model:
    """The user's minibatch model: nothing in it knows about the sampler."""
    n, d = x_train.shape
    with pm.Model() as model:
        x_data = pm.Data("x", x_train)
        y_data = pm.Data("y", y_train)
        x_batch, y_batch = pm.Minibatch(x_data, y_data, batch_size=batch_size)
        w1 = pm.Normal("w1", 0.0, prior_sd, shape=(d, hidden))
        b1 = pm.Normal("b1", 0.0, prior_sd, shape=hidden)
        w2 = pm.Normal("w2", 0.0, prior_sd, shape=(hidden, 10))
        b2 = pm.Normal("b2", 0.0, prior_sd, shape=10)
        logits = pt.tanh(x_batch @ w1 + b1) @ w2 + b2
        pm.Categorical("label", logit_p=logits, observed=y_batch, total_size=n)
    return model


class Relabel:
    """``callback(step)``: permute a fraction of the training labels among themselves, anew at
    the beginning of every epoch (``mode="epoch"``, section 5.2) or once (``mode="fixed"``)."""

    def __init__(self, model, y_clean, fraction, steps_per_epoch, mode, seed):
        self.model, self.y_clean, self.fraction = model, y_clean, fraction
        self.steps_per_epoch, self.mode = steps_per_epoch, mode
        self.rng = np.random.default_rng(seed)
        self.set(self.draw())

    def draw(self):
        y = self.y_clean.copy()
        if self.fraction > 0:
            idx = self.rng.choice(y.size, int(round(self.fraction * y.size)), replace=False)
            y[idx] = y[self.rng.permutation(idx)]
        return y

    def set(self, y):
        self.current = y
        pm.set_data({"y": y}, model=self.model)

    def __call__(self, step):
        if self.mode == "epoch" and step > 0 and step % self.steps_per_epoch == 0:
            self.set(self.draw())


def predictive(params, x, chunk=100):
    """Class probabilities ``(S, n, 10)`` of ``S`` networks (numpy, chunked over networks)."""
    out = []
    for s in range(0, params["w1"].shape[0], chunk):
        w1, b1, w2, b2 = (params[k][s : s + chunk] for k in ("w1", "b1", "w2", "b2"))
        h = np.tanh(np.einsum("nd,sdh->snh", x, w1) + b1[:, None, :])
        logits = np.einsum("snh,shk->snk", h, w2) + b2[:, None, :]
        logits -= logits.max(-1, keepdims=True)
        p = np.exp(logits)
        out.append(p / p.sum(-1, keepdims=True))
    return np.concatenate(out)


def scores(params, x_te, y_te, x_tr, y_tr):
    """Accuracy and log loss of the Monte Carlo average of the networks, and of single ones."""
    p = predictive(params, x_te)
    p_mean = p.mean(0)
    single = (p.argmax(-1) == y_te).mean(1)
    p_train = predictive(params, x_tr).mean(0)
    return {
        "test_accuracy": float((p_mean.argmax(-1) == y_te).mean()),
        "test_log_loss": float(-np.mean(np.log(p_mean[np.arange(y_te.size), y_te] + 1e-300))),
        "single_network_accuracy": float(single.mean()),
        "train_accuracy_clean_labels": float((p_train.argmax(-1) == y_tr).mean()),
        "networks": int(p.shape[0]),
    }


def initial_points(target, chains, scale, seed):
    """Small random weights (the usual initialisation scale for a 64-input tanh layer)."""
    return np.random.default_rng(seed).normal(0.0, scale, (chains, target.ndim))


def run_sampler(model, variant, draws, relabel, settings, init, seed):
    t0 = time.perf_counter()
    tempering = TemperingSettings(step_size=settings["step_size_tempering"],
                                  noise=settings["noise_tempering"])
    with hooks(callback=relabel):
        idata = sample_tact(
            draws,
            model=model,
            chains=init.shape[0],
            variant=variant,
            initial_points=init,
            random_seed=seed,
            progressbar=False,
            tempering=tempering,
            **{k: v for k, v in settings.items() if not k.endswith("_tempering")},
        )
    wall = time.perf_counter() - t0
    post = idata.posterior
    params = {k: post[k].values.reshape(-1, *post[k].shape[2:]) for k in ("w1", "b1", "w2", "b2")}
    stats = idata.sample_stats
    return params, {
        "step_size": float(idata.attrs["step_size"]),
        "step_size_tempering": float(idata.attrs["step_size_tempering"]),
        "warmup_blowups": int(idata.attrs.get("warmup_blowups", 0)),
        **({"preconditioner_scale_median": float(np.median(idata["warmup"]["preconditioner_scale"]))}
           if "warmup" in idata.children else {}),
        "steps": int(idata.attrs["n_steps"]),
        "draws_per_chain": int(draws),
        "mean_thermostat_theta": float(stats["thermostat_theta"].mean()),
        "fraction_of_candidates_at_unit_temperature": float(
            idata["tact_trajectory"]["kept"].mean()
        ),
        "wall_s": wall,
    }


def run_adam(model, target, steps, relabel, learning_rate, init, seed):
    """Minibatch Adam on ``-log p`` (the MAP objective of the same model), one chain's start."""
    t0 = time.perf_counter()
    flat = pytensor.shared(init.copy(), name="flat")
    loss = -target.logp_graph(target.unravel_graph(flat))
    step_fn = pm.compile(
        [], loss, updates=adam(loss, [flat], learning_rate=learning_rate), random_seed=seed
    )
    for step in range(steps):
        relabel(step)
        step_fn()
    x = flat.get_value()
    point = target.unravel(x)
    params = {k: np.asarray(point[k])[None] for k in ("w1", "b1", "w2", "b2")}
    return params, {"steps": steps, "wall_s": time.perf_counter() - t0}


LABELS = {"0": "clean", "0.2/epoch": "20% permuted per epoch", "0.2/fixed": "20% permuted once"}


def report(data: dict) -> None:
    """Test accuracy per label condition and method, one value per seed."""
    methods = [*SAMPLERS, "adam"]
    names = {**SAMPLERS, "adam": "Adam"}
    print("| labels | " + " | ".join(names[m] for m in methods) + " |")
    print("|---|" + "---|" * len(methods))
    for condition in dict.fromkeys(r["problem"] for r in data["runs"]):
        cells = []
        for method in methods:
            runs = sorted((r for r in data["runs"] if r["problem"] == condition and r["method"] == method),
                          key=lambda r: r["seed"])
            cells.append(", ".join(f"{r['test_accuracy']:.3f}" for r in runs) or "-")
        label = LABELS.get(condition, condition)
        print(f"| {label} | " + " | ".join(cells) + " |")


def main(argv=None):
    parser = harness.parser(__doc__.splitlines()[0], out=None, seeds=5)
    parser.add_argument("--permuted", type=float, nargs="+", default=[0.0, 0.2])
    parser.add_argument(
        "--relabel", choices=["epoch", "fixed"], nargs="+", default=["epoch", "fixed"]
    )
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--prior-sd", type=float, default=1.0)
    parser.add_argument("--test-fraction", type=float, default=0.3)
    parser.add_argument("--step-size-theta", type=float, default=1e-3)
    parser.add_argument("--step-size-xi", type=float, default=1e-3)
    parser.add_argument("--noise-theta", type=float, default=0.05)
    parser.add_argument("--noise-xi", type=float, default=0.05)
    parser.add_argument("--steps-per-sample", type=int, default=50)
    parser.add_argument("--burn-in-epochs", type=int, default=200)
    parser.add_argument("--max-temperature", type=float, default=10.0)
    parser.add_argument("--init-sd", type=float, default=0.1)
    parser.add_argument("--adam-learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--validate",
        action="store_true",
        help="score on a validation split of the training set instead of the test set",
    )
    parser.add_argument("--defaults", action="store_true",
                        help="the samplers' default (auto) step sizes instead of the tuned ones")
    args = harness.parse(parser, argv)
    if args.out is None:
        args.out = OUT / ("bnn_digits_defaults.json" if args.defaults else "bnn_digits.json")
    if args.report:
        report(harness.load(args.out))
        return
    seeds = list(range(args.first_seed, args.first_seed + (args.seeds or (1 if args.quick else 5))))
    args.draws = args.draws or (2 if args.quick else 60)
    if args.quick:  # one seed, clean labels, a tiny budget
        args.permuted, args.burn_in_epochs = [0.0], 2

    x_tr, x_te, y_tr, y_te = load_data(args.test_fraction, args.validate)
    steps_per_epoch = math.ceil(y_tr.size / args.batch_size)
    # warm-up in iterations of steps_per_sample steps, covering at least burn_in_epochs
    tune = math.ceil(args.burn_in_epochs * steps_per_epoch / args.steps_per_sample)
    burn_in = tune * args.steps_per_sample  # in steps
    settings = dict(
        step_size="auto" if args.defaults else args.step_size_theta,
        step_size_tempering="auto" if args.defaults else args.step_size_xi,
        noise=args.noise_theta,
        noise_tempering=args.noise_xi,
        steps_per_sample=args.steps_per_sample,
        max_temperature=args.max_temperature,
        tune=tune,
    )
    model = bnn_model(x_tr, y_tr, args.hidden, args.batch_size, args.prior_sd)
    target = Target(model)
    t_start = time.perf_counter()
    records = []
    conditions = [
        (permuted, mode)
        for permuted in args.permuted
        for mode in (["none"] if permuted == 0 else args.relabel)
    ]
    for permuted, mode in conditions:
        key = f"{permuted:g}" if permuted == 0 else f"{permuted:g}/{mode}"
        for seed in seeds:
            init = initial_points(target, args.chains, args.init_sd, seed)
            n_steps = None
            for variant in SAMPLERS:
                if variant == "tact":
                    draws = args.draws
                else:  # the same number of steps (epochs) as TACT-HMC took
                    draws = (n_steps - burn_in) // args.steps_per_sample
                relabel = Relabel(model, y_tr, permuted, steps_per_epoch, mode, seed)
                params, info = run_sampler(model, variant, draws, relabel, settings, init, seed)
                n_steps = info["steps"] if variant == "tact" else n_steps
                row = {**harness.empty_record(key, variant, seed), "seconds": info.pop("wall_s"),
                       **scores(params, x_te, y_te, x_tr, y_tr), **info}
                row["epochs"] = row["steps"] / steps_per_epoch
                records.append(row)
                print(f"{key} seed={seed} {variant}: {json.dumps(row)}", flush=True)
            relabel = Relabel(model, y_tr, permuted, steps_per_epoch, mode, seed)
            params, info = run_adam(
                model, target, n_steps, relabel, args.adam_learning_rate, init[0], seed
            )
            row = {**harness.empty_record(key, "adam", seed), "seconds": info.pop("wall_s"),
                   **scores(params, x_te, y_te, x_tr, y_tr), **info}
            row["epochs"] = row["steps"] / steps_per_epoch
            records.append(row)
            print(f"{key} seed={seed} adam: {json.dumps(row)}", flush=True)
        pm.set_data({"y": y_tr}, model=model)
    total = time.perf_counter() - t_start
    settings = {**settings, "quick": bool(args.quick), "chains": args.chains,
                "tact_draws_per_chain": args.draws, "steps_per_epoch": steps_per_epoch,
                "relabel": args.relabel, "init_sd": args.init_sd,
                "adam_learning_rate": args.adam_learning_rate}
    out = harness.results_file("bnn_digits", settings, records, total_wall_s=total, data={
            "n_train": int(y_tr.size),
            "n_test": int(y_te.size),
            "features": int(x_tr.shape[1]),
            "split_seed": 0,
            "scored_on": "validation split of the training set" if args.validate else "test set",
        },
        model={"hidden": args.hidden, "activation": "tanh", "prior_sd": args.prior_sd,
               "parameters": target.ndim, "batch_size": args.batch_size})
    harness.write_json(args.out, out)
    report(out)
    print(f"wrote {args.out} ({total:.0f} s)")


if __name__ == "__main__":
    main()
