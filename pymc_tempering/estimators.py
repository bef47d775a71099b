"""Weights, log normalising constants and their standard errors, on plain arrays.

Array level only: inputs are numpy arrays shaped ``(chain, draw, ...)``. Effective sample sizes
come from arviz-stats' array interface.

Standard errors
---------------
Every estimator here is a ratio of two sample means, ``mean(a) / mean(b)``. Its Monte Carlo
standard error comes from the delta method on the linearised series
``z_t = a_t / mean(a) - b_t / mean(b)`` (for a log ratio) or ``z_t = b_t (f_t - est) / mean(b)``
(for a weighted mean): ``se = sd(z) / sqrt(ess(z))``, where ``ess`` is the multi-chain effective
sample size of arviz-stats (``method="mean"``). That ESS combines the autocorrelation within
chains with the variance between chains (the split-chain, Stan-style estimator), so chains that
disagree inflate the standard error.

The log normalising constants (:func:`log_ratio_by_chain`) also take each chain's own estimate,
and report the larger of that standard error and the standard error of the mean of the
per-chain estimates, ``sd(per_chain) / sqrt(chains)`` (from three chains on: two give one degree
of freedom). The per-chain estimates are independent replicates, so their spread shows a slow
mixing that an autocorrelation estimate truncated within a chain can miss, and that would
leave the ESS standard error alone too small.
"""

from __future__ import annotations

import numpy as np
from arviz_stats.base.array import array_stats
from scipy.special import logsumexp

__all__ = [
    "ct_log_weights",
    "log_ratio_of_means",
    "log_ratio_by_chain",
    "weighted_mean",
    "weighted_mean_cov",
    "stratified_mean",
    "pooled_weights",
    "log_marginal_likelihood_ct",
    "kish_ess",
    "psis_khat",
    "log_mean_exp",
    "log_sum_of_masses",
    "combine_estimates",
    "log_marginal_likelihood_pe",
    "beyond_edge",
    "log_abs_expm1",
    "importance_khat",
    "KHAT_LIMIT",
    "AGREEMENT_Z",
]

#: Pareto k-hat above which importance sampling is not trusted (the PSIS rule).
KHAT_LIMIT = 0.7
#: Standard errors of their difference within which two independent estimates of one log Z
#: agree (a family-wise false-alarm rate of about 0.003 per run).
AGREEMENT_Z = 3.0
# Weights that all lie within this factor of their mean have no heavy tail whatever the Pareto
# fit says: near such a bound the fit is ill-conditioned (k-hat from -1.7 to 1.5 between two
# samples of the same nearly constant weights).
BOUNDED_RATIO = 20.0


def log_abs_expm1(x: np.ndarray) -> np.ndarray:
    """``log|exp(x) - 1|``, stable for any sign and size of ``x`` (``-inf`` at 0)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        pos = x + np.log(-np.expm1(-np.abs(x)))  # x > 0: x + log(1 - exp(-x))
        neg = np.log(-np.expm1(-np.abs(x)))  # x < 0: log(1 - exp(x))
    return np.where(x > 0, pos, neg)


def ct_log_weights(delta) -> tuple[np.ndarray, np.ndarray]:
    """Log of the Rao-Blackwellised weights ``w0`` and ``w1`` of eq. (20) of the CT paper.

    ``w0(x) = D / (1 - exp(-D))`` and ``w1(x) = D / (exp(D) - 1)`` with ``D = Delta(x)``,
    i.e. ``w1 = p(beta = 1 | x)`` and ``w0 = p(beta = 0 | x)`` under eq. (17). Both are 1 at
    ``D = 0``; the computation is stable for any finite ``D``.

    Parameters
    ----------
    delta : array_like
        ``Delta(x) = phi(x) + log zeta - psi(x) = log zeta + log q(x) - log p(x)``.

    Returns
    -------
    log_w0 : ndarray
        ``log w0 = log p(beta = 0 | x)``.
    log_w1 : ndarray
        ``log w1 = log p(beta = 1 | x)``.
    """
    d = np.asarray(delta, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        general = np.log(np.abs(d)) - log_abs_expm1(d)
    # Near 0, log(D / expm1(D)) = -D/2 - D^2/24 + O(D^4): the series keeps relative accuracy.
    series = -d / 2 - d**2 / 24
    log_w1 = np.where(np.abs(d) < 1e-3, series, general)
    log_w0 = log_w1 + d  # w0 = w1 * exp(D)
    return log_w0, log_w1


def _as_chain_draw(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"Expected an array shaped (chain, draw), got shape {x.shape}.")
    return x


def _mcse_of_mean(z: np.ndarray) -> float:
    """Standard error of the mean of a (chain, draw) series, from its multi-chain ESS."""
    if z.shape[1] < 4:
        return float("nan")
    sd = np.std(z, ddof=1)
    if sd == 0:
        return 0.0
    ess = float(array_stats.ess(z, chain_axis=0, draw_axis=1, method="mean"))
    return float(sd / np.sqrt(max(ess, 1.0)))


def log_ratio_of_means(log_a, log_b) -> tuple[float, float]:
    """``log(mean(a) / mean(b))`` from log values, and its standard error.

    Parameters
    ----------
    log_a, log_b : array_like, shape (chain, draw) or (draw,)

    Returns
    -------
    estimate : float
        ``log(mean(a) / mean(b))``.
    standard_error : float
        The standard error of the log ratio (delta method, see the module docstring).
    """
    log_a, log_b = _as_chain_draw(log_a), _as_chain_draw(log_b)
    n = log_a.size
    log_mean_a = logsumexp(log_a) - np.log(n)
    log_mean_b = logsumexp(log_b) - np.log(n)
    z = np.exp(log_a - log_mean_a) - np.exp(log_b - log_mean_b)
    return float(log_mean_a - log_mean_b), _mcse_of_mean(z)


def log_ratio_by_chain(log_a, log_b) -> tuple[float, float, np.ndarray]:
    """:func:`log_ratio_of_means` pooled over the chains and for each chain alone.

    Parameters
    ----------
    log_a, log_b : array_like, shape (chain, draw)

    Returns
    -------
    estimate : float
        ``log(mean(a) / mean(b))`` over all draws.
    standard_error : float
        The larger of :func:`log_ratio_of_means`' standard error and, from three chains on,
        ``sd(per_chain, ddof=1) / sqrt(chains)`` (module docstring), unless the per-chain
        estimates agree to rounding.
    per_chain : ndarray, shape (chain,)
        ``log(mean(a) / mean(b))`` of each chain alone.
    """
    log_a, log_b = _as_chain_draw(log_a), _as_chain_draw(log_b)
    estimate, se = log_ratio_of_means(log_a, log_b)
    per_chain = logsumexp(log_a, axis=1) - logsumexp(log_b, axis=1)
    chains = per_chain.size
    rounding = np.ptp(per_chain) <= 1e-12 * (1.0 + np.max(np.abs(per_chain)))  # an exact base
    if chains >= 3 and np.all(np.isfinite(per_chain)) and not rounding:
        se = max(se, float(np.std(per_chain, ddof=1) / np.sqrt(chains)))
    return estimate, se, per_chain


def log_marginal_likelihood_ct(
    delta, log_zeta: float, log_factor=None, factor_error: float = 0.0
) -> tuple[float, float, np.ndarray]:
    """The continuous tempering estimate of log Z (eq. 20).

    ``log Z = log zeta + log(sum w1 / sum w0)``, or with a per-draw factor ``f`` on the
    target's weights, ``log zeta + log(sum w1 f / sum w0)``
    (:func:`~pymc_tempering.extended.funnel.funnel_correction`).

    Parameters
    ----------
    delta : array_like, shape (chain, draw)
    log_zeta : float
    log_factor : array_like, shape (chain, draw), optional
        ``log f``; none by default.
    factor_error : float
        An error of the factor's own, added in quadrature to the standard error.

    Returns
    -------
    estimate : float
        Pooled over all chains.
    standard_error : float
        The larger of the delta-method standard error with the multi-chain ESS and the spread
        of the per-chain estimates (:func:`log_ratio_by_chain`).
    per_chain : ndarray, shape (chain,)
        The estimate from each chain alone.
    """
    delta = _as_chain_draw(delta)
    log_w0, log_w1 = ct_log_weights(delta)
    if log_factor is not None:
        log_w1 = log_w1 + _as_chain_draw(log_factor)
    estimate, se, per_chain = log_ratio_by_chain(log_w1, log_w0)
    return float(log_zeta + estimate), float(np.hypot(se, factor_error)), log_zeta + per_chain


def weighted_mean(values, log_weight) -> tuple[np.ndarray, np.ndarray]:
    """Self-normalised weighted mean of ``values`` (eqs. 21-22) and its standard error.

    Parameters
    ----------
    values : array_like, shape (chain, draw, ...)
    log_weight : array_like, shape (chain, draw)
        Unnormalised log weights.

    Returns
    -------
    mean : ndarray
        Shape ``values.shape[2:]``.
    standard_error : ndarray
        Same shape.
    """
    log_weight = _as_chain_draw(log_weight)
    values = np.asarray(values, dtype=float)
    if values.shape[:2] != log_weight.shape:
        if log_weight.shape[0] == 1 and values.shape[:1] == log_weight.shape[1:]:
            values = values[None]  # one chain given without its chain axis
        else:
            raise ValueError(
                f"values of shape {values.shape} do not start with the weights' shape "
                f"{log_weight.shape}."
            )
    w = np.exp(log_weight - np.max(log_weight))
    w = w / np.mean(w)
    extra = values.shape[2:]
    flat = values.reshape(values.shape[:2] + (-1,))
    mean = np.einsum("cd,cdk->k", w, flat) / w.size
    se = np.array([_mcse_of_mean(w * (flat[..., k] - mean[k])) for k in range(flat.shape[-1])])
    return mean.reshape(extra), se.reshape(extra)


def weighted_mean_cov(values, log_weight) -> tuple[np.ndarray, np.ndarray]:
    """:func:`weighted_mean` of a vector per draw and the covariance of its entries' errors.

    The diagonal is :func:`weighted_mean`'s squared standard errors; the correlations are
    those of the terms ``w (values_k - mean_k)`` over the draws (whose averages the errors are).
    For shares that sum to one (indicators of a partition) the covariance says so: its rows
    sum to about zero.

    Parameters
    ----------
    values : array_like, shape (chain, draw, k)
    log_weight : array_like, shape (chain, draw)

    Returns
    -------
    mean : ndarray, shape (k,)
    covariance : ndarray, shape (k, k)
    """
    mean, se = weighted_mean(values, log_weight)
    lw = _as_chain_draw(log_weight)
    w = np.exp(lw - np.max(lw)).ravel()
    terms = w[:, None] * (np.asarray(values, dtype=float).reshape(w.size, -1) - mean)
    sd = terms.std(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = (terms.T @ terms / w.size - np.outer(terms.mean(0), terms.mean(0))) / np.outer(sd, sd)
    corr = np.where(np.isfinite(corr), corr, 0.0)
    np.fill_diagonal(corr, 1.0)
    return mean, corr * np.outer(se, se)


MIN_REGION_DRAWS = 10  # Kish's count below which a region's own spread is not trusted


def stratified_mean(
    values, log_weight, region, probability, probability_cov, substitute=None
) -> tuple[np.ndarray, np.ndarray]:
    """A post-stratified weighted mean and its standard error.

    ``sum_r P_r m_r``, where ``m_r`` is the weighted mean of the draws in region ``r`` and
    ``P_r`` the region's probability, known apart from the draws with covariance ``C``
    (:func:`~pymc_tempering.stratification.stratify`: the probabilities sum to one, so their
    errors are correlated). By the delta method the variance is
    ``sum_r P_r^2 se(m_r)^2 + (m - mean)' C (m - mean)``, with ``se(m_r)`` from
    :func:`weighted_mean` with the weights of the other regions set to zero: the chains'
    moves between regions, which decide the unstratified mean's error, do not enter.
    ``se(m_r)^2`` is at least the region's weighted variance over its Kish count of draws,
    and a region of fewer than ``MIN_REGION_DRAWS`` such draws cannot vouch for its own
    spread: its variance is then at least the whole run's (a region seen by one draw has an
    error as wide as the posterior, not zero). Regions without draws are left out (their
    probability is shared out over the others).

    Parameters
    ----------
    values : array_like, shape (chain, draw, ...)
    log_weight : array_like, shape (chain, draw)
    region : array_like of int, shape (chain, draw)
    probability : array_like, shape (region,)
    probability_cov : array_like, shape (region, region)
        The covariance of the probabilities' errors.
    substitute : tuple of (values, log_weight, region), optional
        Independent weighted draws of the regions (their importance sampling), shaped
        ``(1, n, ...)``, ``(1, n)`` and ``(1, n)``: a region's mean from them and its mean
        from the chains' draws are combined by inverse variance (a region the chains did not
        reach has theirs alone).

    Returns
    -------
    mean, standard_error : ndarray
        Shape ``values.shape[2:]``.
    """
    shape = np.shape(values)[2:]
    lw, region = _as_chain_draw(log_weight), np.asarray(region)
    flat = np.asarray(values, dtype=float).reshape(np.shape(values)[:2] + (-1,))
    sub_lw, sub_region, sub_flat = np.zeros((1, 0)), np.zeros((1, 0), dtype=int), None
    if substitute is not None:
        sub_values, sub_lw, sub_region = substitute
        sub_lw, sub_region = _as_chain_draw(sub_lw), np.asarray(sub_region)
        sub_values = np.asarray(sub_values, dtype=float)
        sub_flat = sub_values.reshape(sub_values.shape[:2] + (-1,))
    reached = np.isfinite(lw)
    seen = [r for r in range(len(probability))
            if np.any((region == r) & reached) or np.any(sub_region == r)]
    p = np.asarray(probability, dtype=float)[seen]
    p = p / p.sum()
    cov = np.asarray(probability_cov, dtype=float)[np.ix_(seen, seen)]
    w_all = np.exp(lw - np.max(lw))
    pooled_var = np.einsum("cd,cdk->k", w_all, (flat - np.einsum(
        "cd,cdk->k", w_all, flat) / w_all.sum()) ** 2) / w_all.sum()
    means, variances = [], []
    for r in seen:
        # the region's mean from the chains' draws (their series, with the other regions'
        # weights zero) and from its independent draws (those alone), combined by inverse
        # variance where both hold it
        estimates = []
        # the chains' draws in it that weigh anything (a draw at beta near 0 can weigh
        # nothing towards the target: a region of such draws alone is not reached by them)
        if np.any((region == r) & reached):
            estimates.append(_region_mean(flat, np.where(region == r, lw, -np.inf), pooled_var))
        inside = sub_region[0] == r
        if inside.any():
            estimates.append(_region_mean(sub_flat[:, inside], sub_lw[:, inside], pooled_var))
        precision = sum(1.0 / v for _, v in estimates)
        means.append(sum(m / v for m, v in estimates) / precision)
        variances.append(1.0 / precision)
    means, variances = np.array(means), np.array(variances)
    mean = np.tensordot(p, means, axes=1)
    centred = means - mean
    var = np.tensordot(p**2, variances, axes=1) + np.einsum("rk,rs,sk->k", centred, cov, centred)
    return mean.reshape(shape), np.sqrt(np.maximum(var, 0.0)).reshape(shape)


def _region_mean(flat, lw_r, pooled_var):
    """A region's weighted mean of ``flat (chain, draw, k)`` (``lw_r`` is ``-inf`` outside
    it) and its variance, at least the region's weighted variance over its Kish count (the
    run's variance for fewer than ``MIN_REGION_DRAWS`` such draws): see
    :func:`stratified_mean`."""
    m, e = weighted_mean(flat, lw_r)
    w = np.exp(lw_r - np.max(lw_r))
    var_r = np.einsum("cd,cdk->k", w, (flat - m) ** 2) / w.sum()
    n_r = kish_ess(lw_r[np.isfinite(lw_r)])
    if n_r < MIN_REGION_DRAWS:
        var_r = np.maximum(var_r, pooled_var)
    return m, np.maximum(np.maximum(e**2, var_r / n_r), 1e-300)


def pooled_weights(log_weight, region, probability, sub_log_weight, sub_region):
    """The normalised weights of a stratified run's draws and of its mode draws: each region
    holds its probability, shared between its chains' draws and its mode draws in proportion
    to their Kish counts (its mode draws alone where the chains' are fewer than
    ``MIN_REGION_DRAWS``).

    Parameters
    ----------
    log_weight, region : array_like, same shape
        The chains' draws' log weights and regions.
    probability : array_like, shape (region,)
    sub_log_weight, sub_region : array_like, same shape
        The mode draws' log importance weights and regions.

    Returns
    -------
    weights, sub_weights : ndarray
        Shaped as the inputs, summing to one together.
    """
    lw, sub_lw = np.asarray(log_weight, dtype=float), np.asarray(sub_log_weight, dtype=float)
    region, sub_region = np.asarray(region), np.asarray(sub_region)
    w, sub_w = np.exp(lw - lw.max()), np.exp(sub_lw - sub_lw.max())
    for r, p_r in enumerate(np.asarray(probability, dtype=float)):
        # draws that weigh nothing hold no share (a region of such chain draws alone is
        # described by its mode draws)
        held, sub_held = (region == r) & (w > 0), (sub_region == r) & (sub_w > 0)
        n = kish_ess(lw[held]) if held.any() else 0.0
        n = 0.0 if n < MIN_REGION_DRAWS else n
        sub_n = kish_ess(sub_lw[sub_held]) if sub_held.any() else 0.0
        share = n / (n + sub_n) if n + sub_n > 0 else 0.0
        for weights, inside, part in ((w, held, share), (sub_w, sub_held, 1.0 - share)):
            total = weights[inside].sum()
            weights[inside] = p_r * part * weights[inside] / total if total > 0 else 0.0
    total = w.sum() + sub_w.sum()
    return w / total, sub_w / total


def beyond_edge(u, edge: float, inner: float) -> np.ndarray:
    """Whether each value of ``u`` lies beyond ``edge`` on the side away from ``inner``: in a
    funnel's neck, past the draws' quartile (``edge``) towards the spike, ``inner`` being their
    other quartile (:func:`~pymc_tempering.extended.funnel.funnel_mass`)."""
    return np.sign(edge - inner) * (np.asarray(u, dtype=float) - edge) > 0


def unseen_share(hits) -> float:
    """Good-Turing estimate of the chance that one more run of a search ends somewhere no run
    has ended yet: the share of runs whose end no other run reached (``hits`` counts the runs
    per distinct end)."""
    hits = np.asarray(hits)
    return float(np.sum(hits == 1) / hits.sum())


def psis_khat(log_weight) -> float:
    """The Pareto k-hat of arviz-stats' PSIS for weights given as logs (all finite); NaN for a
    flat tail.

    ``psislw`` follows the PSIS-LOO convention and smooths ``exp(-input)`` (it takes
    log-likelihood values), so it is given ``-log_weight`` (given the log weights themselves,
    or through ``pareto_khat``, it diagnoses the wrong tail: k = 1 for uniform weights).
    """
    try:
        # its smoothing of a tail with a very large k-hat overflows (inf), which the k-hat
        # itself does not use, and its fit of a tail of (nearly) equal weights divides by zero
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return float(array_stats.psislw(-np.asarray(log_weight, dtype=float).ravel())[1])
    except ValueError:  # "All tail values are the same": nothing heavy there
        return float("nan")


def importance_khat(log_weight) -> float:
    """Pareto k-hat of importance weights given as logs (:func:`psis_khat`).

    ``-inf`` entries (zero weights) are left out; NaN for a flat tail or fewer than 10 positive
    weights. When every weight is within ``BOUNDED_RATIO`` times their mean the tail is bounded,
    and the k-hat is reported at most at :data:`KHAT_LIMIT`.
    """
    lw = np.asarray(log_weight, dtype=float).ravel()
    finite = lw[np.isfinite(lw)]
    if finite.size < 10:
        return float("nan")
    khat = psis_khat(finite)
    if np.exp(finite.max() - (logsumexp(finite) - np.log(lw.size))) <= BOUNDED_RATIO:
        khat = min(khat, KHAT_LIMIT)
    return khat


def kish_ess(log_weight) -> float:
    """Kish's effective sample size of importance weights, ``(sum w)^2 / sum w^2``.

    It ignores autocorrelation: it says how many equally weighted draws the weights are worth.
    """
    lw = np.asarray(log_weight, dtype=float).ravel()
    return float(np.exp(2 * logsumexp(lw) - logsumexp(2 * lw)))


def log_marginal_likelihood_pe(log_r) -> tuple[float, float, np.ndarray]:
    """The pseudo-extended estimate of log Z with a normalised proposal (eq. 4 of Nemeth et al.).

    Under eq. (4), ``E[1 / R] = 1 / Z`` with ``R = (1/N) sum_i gamma(x_i) / q(x_i)``, so
    ``log Z = -log mean(1 / R)``. It is finite-variance only when ``E[1 / R^2]`` is finite,
    which needs a proposal ``q`` with lighter tails than the target.

    Parameters
    ----------
    log_r : array_like, shape (chain, draw)
        ``log R`` at each draw of the extended target.

    Returns
    -------
    estimate : float
        Pooled over all chains.
    standard_error : float
        As for :func:`log_ratio_by_chain`.
    per_chain : ndarray, shape (chain,)
        The estimate from each chain alone.
    """
    log_r = _as_chain_draw(log_r)
    estimate, se, per_chain = log_ratio_by_chain(-log_r, np.zeros_like(log_r))
    return float(-estimate), se, -per_chain


def log_mean_exp(log_w) -> tuple[float, float]:
    """``log(mean(w))`` of independent weights given as logs, and its standard error.

    For independent draws (AIS runs, importance sampling) the standard error of the log mean is,
    by the delta method, ``sd(w) / (mean(w) sqrt(n))``. It is a stochastic lower bound on the log
    of ``E[w]`` (Jensen), with a bias of about ``-se^2 / 2``.

    Parameters
    ----------
    log_w : array_like
        Log weights, any shape (all entries are pooled).

    Returns
    -------
    estimate : float
        ``log(mean(w))``.
    standard_error : float
        Its standard error.
    """
    lw = np.asarray(log_w, dtype=float).ravel()
    if lw.size == 0:
        raise ValueError("No weights.")
    n = lw.size
    est = logsumexp(lw) - np.log(n)
    if not np.isfinite(est):
        return float(est), float("nan")
    w = np.exp(lw - est)  # mean 1
    se = np.std(w, ddof=1) / np.sqrt(n) if n > 1 else float("nan")
    return float(est), float(se)


def log_sum_of_masses(log_mass, log_mass_se) -> tuple[float, float]:
    """``log sum_r Z_r`` of independent estimates ``log Z_r`` with standard errors, and its
    standard error.

    By the delta method each ``Z_r`` has a relative error ``se_r``; the sum's relative error is
    ``sqrt(sum_r p_r^2 se_r^2)`` with ``p_r = Z_r / sum Z``. The masses of regions that
    partition the space (a stratification) sum to the normalising constant.

    Parameters
    ----------
    log_mass, log_mass_se : array_like, shape (region,)

    Returns
    -------
    estimate, standard_error : float
        NaN where any input is not finite.
    """
    log_mass = np.asarray(log_mass, dtype=float)
    se = np.asarray(log_mass_se, dtype=float)
    if log_mass.size == 0 or not (np.all(np.isfinite(log_mass)) and np.all(np.isfinite(se))):
        return float("nan"), float("nan")
    total = float(logsumexp(log_mass))
    p = np.exp(log_mass - total)
    return total, float(np.sqrt(np.sum(p**2 * se**2)))


def combine_estimates(a: float, se_a: float, b: float, se_b: float) -> tuple[float, float]:
    """The inverse-variance combination of two independent estimates of one quantity, and its
    standard error (the better one alone where the other's error is not finite or zero)."""
    if not se_b > 0 or not np.isfinite(se_b):
        return (float(b), float(se_b)) if se_b == 0 else (float(a), float(se_a))
    if not se_a > 0 or not np.isfinite(se_a):
        return (float(a), float(se_a)) if se_a == 0 else (float(b), float(se_b))
    wa, wb = 1.0 / se_a**2, 1.0 / se_b**2
    return float((wa * a + wb * b) / (wa + wb)), float(np.sqrt(1.0 / (wa + wb)))
