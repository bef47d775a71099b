"""Plots of tempering results: the inverse temperature, the evidence estimate, the joint.

They read only the result layout. The trace plot is arviz-plots'; the others are matplotlib.
"""

from __future__ import annotations

import arviz as az
import numpy as np
from xarray import DataTree

from pymc_tempering.estimators import log_ratio_of_means
from pymc_tempering.results import INVERSE_TEMPERATURE, METHOD_VARIABLES

__all__ = ["plot_inverse_temperature", "plot_log_marginal_likelihood", "plot_joint"]


def _require_beta(idata: DataTree):
    if "posterior" not in idata.children or INVERSE_TEMPERATURE not in idata["posterior"]:
        raise ValueError("The result has no inverse_temperature to plot.")


def plot_inverse_temperature(idata: DataTree, **kwargs):
    """Trace and histogram of the inverse temperature, per chain (arviz-plots).

    Good mixing shows every chain moving between 0 and 1 many times.

    Parameters
    ----------
    idata : xarray.DataTree
    **kwargs
        Passed to :func:`arviz.plot_trace_dist`.

    Returns
    -------
    arviz_plots.PlotCollection
    """
    _require_beta(idata)
    kwargs.setdefault("kind", "hist")
    return az.plot_trace_dist(idata, var_names=[INVERSE_TEMPERATURE], **kwargs)


def plot_log_marginal_likelihood(idata: DataTree, n_points: int = 30, ax=None):
    """The log marginal likelihood estimate against the number of draws (Fig. 3b of the CT paper).

    The pooled estimate of eq. (20) from the first ``n`` draws of every chain, with a band of
    two standard errors, each chain's own estimate, and ``log_zeta``.

    Parameters
    ----------
    idata : xarray.DataTree
        A continuous tempering result (with ``log_weight`` and ``log_base_weight``).
    n_points : int
        Number of draw counts at which the estimate is computed.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    stats = idata["sample_stats"]
    if "log_base_weight" not in stats or "log_zeta" not in idata.attrs:
        raise ValueError("Needs a continuous tempering result (log_base_weight and log_zeta).")
    lw1 = stats["log_weight"].transpose("chain", "draw").values
    lw0 = stats["log_base_weight"].transpose("chain", "draw").values
    log_zeta = float(idata.attrs["log_zeta"])
    counts = np.unique(np.linspace(10, lw1.shape[1], n_points).astype(int))
    pooled = np.array([log_ratio_of_means(lw1[:, :n], lw0[:, :n]) for n in counts])
    per_chain = np.array(
        [[log_ratio_of_means(a[:n], b[:n])[0] for a, b in zip(lw1, lw0, strict=True)] for n in counts]
    )
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    est, se = log_zeta + pooled[:, 0], pooled[:, 1]
    ax.plot(counts, log_zeta + per_chain, color="0.7", lw=0.8)
    ax.fill_between(counts, est - 2 * se, est + 2 * se, alpha=0.3, label="± 2 SE")
    ax.plot(counts, est, lw=2, label="pooled estimate")
    ax.axhline(log_zeta, ls="-.", color="C3", label="log zeta")
    ax.set(xlabel="draws per chain", ylabel="log marginal likelihood")
    ax.legend(loc="best")
    return ax


def plot_joint(idata: DataTree, var_name: str | None = None, max_points: int = 2000, ax=None):
    """Draws of a scalar or 2-vector variable against the inverse temperature (Fig. 1c).

    Each point's area is proportional to its weight for the target, so large points are the
    ones that count in the weighted estimates (eq. 21).

    Parameters
    ----------
    idata : xarray.DataTree
    var_name : str, optional
        A model variable with one or two elements; default the first such variable.
    max_points : int
        At most this many draws are shown (evenly thinned).
    ax : matplotlib.axes.Axes or sequence of them, optional
        One axis per element of the variable.

    Returns
    -------
    list of matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    _require_beta(idata)
    posterior = idata["posterior"]
    if var_name is None:
        candidates = [
            name
            for name in posterior.data_vars
            if name not in METHOD_VARIABLES
            and int(np.prod([posterior[name].sizes[d] for d in posterior[name].dims[2:]])) <= 2
        ]
        if not candidates:
            raise ValueError("No variable with one or two elements to plot; pass var_name.")
        var_name = candidates[0]
    values = posterior[var_name].transpose("chain", "draw", ...).values
    values = values.reshape(-1, int(np.prod(values.shape[2:], dtype=int)))
    if values.shape[1] > 2:
        raise ValueError(f"{var_name} has {values.shape[1]} elements; plot_joint shows 1 or 2.")
    beta = posterior[INVERSE_TEMPERATURE].values.reshape(-1)
    lw = idata["sample_stats"]["log_weight"].values.reshape(-1)
    keep = np.linspace(0, len(beta) - 1, min(max_points, len(beta))).astype(int)
    size = np.exp(lw[keep] - lw[keep].max()) * 40
    if ax is None:
        _, ax = plt.subplots(1, values.shape[1], figsize=(5 * values.shape[1], 3.5), squeeze=False)
        ax = list(ax[0])
    axes = list(np.atleast_1d(ax))
    for k, axis in enumerate(axes):
        axis.scatter(values[keep, k], beta[keep], s=size, alpha=0.4, edgecolors="none")
        label = var_name if values.shape[1] == 1 else f"{var_name}[{k}]"
        axis.set(xlabel=label, ylabel="inverse temperature", ylim=(-0.02, 1.02))
    return axes
