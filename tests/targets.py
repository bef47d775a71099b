"""Analytic targets for the tests: models whose evidence and moments are known in closed form."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy import stats
from scipy.special import logsumexp


def conjugate_normal(n_obs: int = 20, seed: int = 0):
    """``mu ~ N(1, 2^2)``, ``y_i ~ N(mu, 1.5^2)``. Returns ``(model, log_evidence, post_mean, post_sd)``."""
    rng = np.random.default_rng(seed)
    m0, s0, sigma = 1.0, 2.0, 1.5
    y = rng.normal(0.3, sigma, size=n_obs)
    with pm.Model(coords={"obs": np.arange(n_obs)}) as model:
        mu = pm.Normal("mu", m0, s0)
        pm.Normal("y", mu, sigma, observed=y, dims="obs")
    cov = s0**2 * np.ones((n_obs, n_obs)) + sigma**2 * np.eye(n_obs)
    log_z = stats.multivariate_normal(np.full(n_obs, m0), cov).logpdf(y)
    post_var = 1 / (1 / s0**2 + n_obs / sigma**2)
    post_mean = post_var * (m0 / s0**2 + y.sum() / sigma**2)
    return model, float(log_z), float(post_mean), float(np.sqrt(post_var))


def conjugate_normal_vector(n_obs: int = 10, seed: int = 0):
    """``mu_k ~ N(1, 2^2)``, ``y_ik ~ N(mu_k, 1.5^2)`` for ``k`` in two coords: a free variable
    with dims, two independent conjugate problems. Returns ``(model, log_evidence, post_mean,
    post_sd)``, the last two per element of ``mu``.

    The data are fixed by ``seed`` (a fixed problem, not Monte Carlo noise: ``PMT_TEST_SEED``
    leaves it alone).
    """
    rng = np.random.default_rng(seed)
    m0, s0, sigma = 1.0, 2.0, 1.5
    y = rng.normal([0.3, -0.8], sigma, size=(n_obs, 2))
    with pm.Model(coords={"obs": np.arange(n_obs), "coef": ["a", "b"]}) as model:
        mu = pm.Normal("mu", m0, s0, dims="coef")
        pm.Normal("y", mu, sigma, observed=y, dims=("obs", "coef"))
    cov = s0**2 * np.ones((n_obs, n_obs)) + sigma**2 * np.eye(n_obs)
    log_z = sum(stats.multivariate_normal(np.full(n_obs, m0), cov).logpdf(y[:, k]) for k in range(2))
    post_var = 1 / (1 / s0**2 + n_obs / sigma**2)
    post_mean = post_var * (m0 / s0**2 + y.sum(axis=0) / sigma**2)
    return model, float(log_z), post_mean, np.full(2, np.sqrt(post_var))


def hierarchical_linear_gaussian(n_groups: int = 50, per_group: int = 4, seed: int = 0, data=None):
    """Group intercepts, two regressors, known scales: the marginal of y is Gaussian.

    ``mu_a ~ N(0, 2^2)``, ``a_j ~ N(mu_a, 0.5^2)``, ``b ~ N(0, 1)^2``,
    ``y_i ~ N(a_{g_i} + X_i b, 0.8^2)``. ``n_groups + 3`` parameters. Simulated data by default;
    ``data=(group, X, y)`` uses given data (e.g. the radon counties and regressors).
    Returns ``(model, log_evidence, posterior_mean_of_(mu_a, a, b))``.
    """
    rng = np.random.default_rng(seed)
    s_mu, tau, s_b, sigma = 2.0, 0.5, 1.0, 0.8
    if data is None:
        n = n_groups * per_group
        group = np.repeat(np.arange(n_groups), per_group)
        X = rng.normal(size=(n, 2))
        a_true = rng.normal(1.0, tau, size=n_groups)
        y = a_true[group] + X @ np.array([0.5, -0.7]) + rng.normal(0, sigma, size=n)
    else:
        group, X, y = (np.asarray(d) for d in data)
        n, n_groups = len(y), int(group.max()) + 1
    coords = {"group": np.arange(n_groups), "coef": ["x1", "x2"], "obs": np.arange(n)}
    with pm.Model(coords=coords) as model:
        mu_a = pm.Normal("mu_a", 0, s_mu)
        a = pm.Normal("a", mu_a, tau, dims="group")
        b = pm.Normal("b", 0, s_b, dims="coef")
        pm.Normal("y", a[group] + pm.math.dot(X, b), sigma, observed=y, dims="obs")
    # theta = (mu_a, a, b) is Gaussian a priori; y = A theta + eps.
    k = 1 + n_groups + 2
    prior_cov = np.zeros((k, k))
    prior_cov[0, 0] = s_mu**2
    prior_cov[0, 1 : 1 + n_groups] = prior_cov[1 : 1 + n_groups, 0] = s_mu**2
    prior_cov[1 : 1 + n_groups, 1 : 1 + n_groups] = s_mu**2 + tau**2 * np.eye(n_groups)
    prior_cov[1 + n_groups :, 1 + n_groups :] = s_b**2 * np.eye(2)
    A = np.zeros((n, k))
    A[np.arange(n), 1 + group] = 1.0
    A[:, 1 + n_groups :] = X
    cov_y = A @ prior_cov @ A.T + sigma**2 * np.eye(n)
    log_z = stats.multivariate_normal(np.zeros(n), cov_y).logpdf(y)
    gain = prior_cov @ A.T @ np.linalg.inv(cov_y)
    post_mean = gain @ y
    return model, float(log_z), post_mean


def radon_linear_gaussian():
    """The hierarchical linear-Gaussian model on the radon data: 85 counties, 919 households,
    regressors floor and log uranium, known scales (88 parameters)."""
    from pymc_tempering.datasets import load_radon

    df = load_radon()
    return hierarchical_linear_gaussian(
        data=(df["county_code"], df[["floor", "log_uppm"]].to_numpy(), df["log_radon"])
    )


def four_mode_mixture():
    """A normalised 2-D mixture of four well-separated Gaussians, weights 0.1/0.2/0.3/0.4.

    Returns ``(model, mean)``; log Z = 0.
    """
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    mus = np.array([[-4.0, -4.0], [-4.0, 4.0], [4.0, -4.0], [4.0, 4.0]])
    sd = 0.6
    with pm.Model() as model:
        comps = [pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(2)) for m in mus]
        pm.Mixture("x", w=weights, comp_dists=comps)
    return model, weights @ mus


TWO_MODES_SEP = 8.0  # two_modes: at -8 and +8, unit sd, a valley of 32 nats between them


def two_modes(weight_right: float = 0.5) -> pm.Model:
    """A normalised 1-D mixture of N(-8, 1) and N(8, 1): log Z = 0 exactly."""
    with pm.Model() as model:
        pm.Mixture(
            "x",
            w=np.array([1 - weight_right, weight_right]),
            comp_dists=[pm.Normal.dist(-TWO_MODES_SEP, 1.0), pm.Normal.dist(TWO_MODES_SEP, 1.0)],
        )
    return model


def bimodal_mixture(weights=(0.3, 0.7), mus=(-3.0, 3.0), sigma=0.5):
    """A 1-D two-component Gaussian mixture as a PyMC model with no data: ``log Z = 0``.

    Returns ``(model, weights, mean, variance)`` of the mixture.
    """
    w, m = np.asarray(weights), np.asarray(mus)
    with pm.Model() as model:
        pm.NormalMixture("x", w=w, mu=m, sigma=sigma)
    mean = float(w @ m)
    var = float(w @ (m**2 + sigma**2) - mean**2)
    return model, w, mean, var


def mixture_log_density(x, weights, mus, sigma):
    """Log density of the 1-D mixture, for references."""
    x = np.asarray(x, dtype=float)[..., None]
    return logsumexp(np.log(weights) + stats.norm.logpdf(x, mus, sigma), axis=-1)


def dirichlet_multinomial(counts=(12, 3, 7, 0), alpha=(1.0, 2.0, 1.5, 0.5)):
    """``p ~ Dirichlet(alpha)``, ``counts ~ Multinomial(n, p)``: a simplex-transformed variable
    whose unconstrained shape (K - 1) differs from its own (K). Returns ``(model, log_evidence,
    posterior_mean)``."""
    from scipy.special import gammaln

    counts, alpha = np.asarray(counts), np.asarray(alpha, dtype=float)
    n = counts.sum()
    with pm.Model(coords={"category": np.arange(len(counts))}) as model:
        p = pm.Dirichlet("p", a=alpha, dims="category")
        pm.Multinomial("counts", n=n, p=p, observed=counts, dims="category")
    log_z = (
        gammaln(n + 1)
        - gammaln(counts + 1).sum()
        + gammaln(alpha.sum())
        - gammaln(alpha).sum()
        + gammaln(alpha + counts).sum()
        - gammaln(alpha.sum() + n)
    )
    post_mean = (alpha + counts) / (alpha.sum() + n)
    return model, float(log_z), post_mean


def beta_binomial(k=7, n=20, a=2.0, b=3.0):
    """``p ~ Beta(a, b)``, ``k ~ Binomial(n, p)`` (logit-transformed p)."""
    from scipy.special import betaln, gammaln

    with pm.Model() as model:
        p = pm.Beta("p", a, b)
        pm.Binomial("k", n=n, p=p, observed=k)
    log_z = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + betaln(k + a, n - k + b) - betaln(a, b)
    return model, float(log_z), (k + a) / (n + a + b)


# ------------------------------------------------- Table 2 of the ergodic-inference paper (2-D)
def table_2_ring_u(z1, z2, lib=np):
    """Rezende & Mohamed's (2015) potential U1, a ring with two lobes (proper on R^2)."""
    r = lib.sqrt(z1**2 + z2**2)
    return 0.5 * ((r - 2) / 0.4) ** 2 - lib.logaddexp(
        -0.5 * ((z1 - 2) / 0.6) ** 2, -0.5 * ((z1 + 2) / 0.6) ** 2
    )


def table_2_mog_u(z1, z2, lib=np):
    """An equal mixture of N((+-1.5, 0), 0.7^2 I), normalised."""
    s2 = 0.7**2
    a = -0.5 * ((z1 - 1.5) ** 2 + z2**2) / s2
    b = -0.5 * ((z1 + 1.5) ** 2 + z2**2) / s2
    # log(0.5 e^a + 0.5 e^b) as logaddexp: the naive form underflows to log(0) away from the
    # modes (|z| beyond about 27), where a chain or the Stein calibration can go
    return -lib.logaddexp(a, b) + np.log(2.0) + np.log(2 * np.pi * s2)


def table_2_model(u):
    """A PyMC model of ``pi* = exp(-U)``: a flat 2-vector ``z`` and the potential ``-U``."""
    import pytensor.tensor as pt

    with pm.Model() as model:
        z = pm.Flat("z", shape=2)
        pm.Potential("u", -u(z[0], z[1], lib=pt))
    return model


def table_2_quadrature(u):
    """``E_pi[U]``, the mean and the covariance of ``pi ~ exp(-U)`` by quadrature on a 1201^2
    grid on [-8, 8]^2 (errors far below the tests' and the benchmark's standard errors)."""
    g = np.linspace(-8, 8, 1201)
    z = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
    uu = u(z[:, 0], z[:, 1])
    p = np.exp(-(uu - uu.min()))
    p /= p.sum()
    mean = p @ z
    centred = z - mean
    return float(p @ uu), mean, (centred * p[:, None]).T @ centred


# ------------------------------------------------- section 3.3 of the ergodic-inference paper
#: Section 3.3's target covariance.
SECTION_3_3_SIGMA = np.array([[2.0, 1.5], [1.5, 1.6]])


def shifted_scaled_gaussian(scale):
    """Section 3.3's correlated Gaussian in units of ``scale``, its mean at ``(1, -2) scale``:
    the model, the mean and the covariance."""
    mean = np.array([1.0, -2.0]) * scale
    with pm.Model() as model:
        pm.MvNormal("x", mu=mean, cov=SECTION_3_3_SIGMA * scale**2)
    return model, mean, SECTION_3_3_SIGMA * scale**2


def minibatch_regression(n: int, batch_size: int | None = None, seed: int = 3):
    """``y ~ N(a + b x, s)`` on ``n`` simulated points: ``a ~ N(0, 10)``, ``b ~ N(0, 1)``,
    ``s ~ HalfNormal(2)``, the covariate of mean 50 and sd 10 (``a`` and ``b`` correlated about
    -0.99 in the posterior); ``pm.Minibatch`` batches of ``batch_size`` (with ``total_size``)
    when given. Returns the model."""
    rng = np.random.default_rng(seed)
    x = rng.normal(50, 10, n)
    y = 3.0 + 0.02 * x + rng.normal(0, 0.5, n)
    with pm.Model() as model:
        if batch_size:
            x, y = pm.Minibatch(x, y, batch_size=batch_size)
        a = pm.Normal("a", 0, 10)
        b = pm.Normal("b", 0, 1)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + b * x, s, observed=y, total_size=n if batch_size else None)
    return model


def reference_logp(x, y):
    """Hand-written log density of the normal_model fixture on (mu, log s), with the Jacobian."""
    mu, log_s = x
    s = np.exp(log_s)
    return (
        stats.norm.logpdf(mu, 0, 2)
        + stats.halfnorm.logpdf(s, scale=1.5)
        + log_s
        + stats.norm.logpdf(y, mu, s).sum()
    )


def numeric_grad(f, x, h=1e-6):
    x = np.asarray(x, dtype=float)
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)])


def eight_schools_posterior_means() -> dict:
    """``E[mu | y]`` and ``E[tau | y]`` of the eight schools by quadrature over ``tau``, with
    ``mu`` and the school effects integrated out in closed form (``mu | tau, y`` is normal:
    prior ``N(0, 25)``, ``y_j ~ N(mu, sigma_j^2 + tau^2)``)."""
    from scipy import integrate

    from pymc_tempering.datasets import (
        EIGHT_SCHOOLS_SIGMA,
        EIGHT_SCHOOLS_Y,
        _eight_schools_log_given_tau,
    )

    def mu_given_tau(tau):
        w = 1 / (EIGHT_SCHOOLS_SIGMA**2 + tau**2)
        return np.sum(w * EIGHT_SCHOOLS_Y) / (1 / 25 + np.sum(w))

    shift = -_eight_schools_log_given_tau(5.0)

    def integral(f):  # over v uniform on (0, 1), tau = 5 tan(pi v / 2), the prior's quantile
        def g(v):
            tau = 5 * np.tan(0.5 * np.pi * v)
            return f(tau) * np.exp(_eight_schools_log_given_tau(tau) + shift)

        return integrate.quad(g, 0, 1, epsabs=0, epsrel=1e-10, limit=200)[0]

    z = integral(lambda tau: 1.0)
    return {"mu": integral(mu_given_tau) / z, "tau": integral(lambda tau: tau) / z}


def sign_flip(n: int, s: float, batch_size: int = 200):
    """The sign-flip posterior: ``theta ~ N(0, 3 s)``, ``y_i ~ N((theta / s)^2, 1)`` for ``n``
    data drawn with mean ``1.5^2``, in minibatches of ``batch_size`` when ``n`` exceeds it; the
    parameter in units of ``s``. Two modes at ``theta = +-s u0`` with a barrier of
    ``n ybar^2 / 2`` nats between them (:func:`sign_flip_laplace`). Returns ``(model, y)``."""
    y = np.random.default_rng(5).normal(1.5**2, 1.0, size=n)
    with pm.Model() as model:
        data = pm.Minibatch(y, batch_size=batch_size) if n > batch_size else y
        theta = pm.Normal("theta", 0, 3 * s)
        pm.Normal("y", (theta / s) ** 2, 1.0, observed=data, total_size=n)
    return model, y


def sign_flip_laplace(y, s: float) -> tuple[float, float]:
    """The sign-flip modes' position ``s u0`` (``u0^2 = ybar - 1 / (18 n)``) and Laplace standard
    deviation ``s / sqrt(4 n u0^2 + 1/9)`` in ``theta``."""
    n = y.size
    u0 = np.sqrt(y.mean() - 1.0 / (18 * n))
    return s * u0, s / np.sqrt(4 * n * u0**2 + 1.0 / 9.0)


def shared_noise_model(n: int = 10_000, batch_size: int | None = None) -> pm.Model:
    """``y_i ~ N(t_1 + t_2, 1)``, ``t ~ N(0, I)``: both coordinates' gradients are the same sum
    of residuals, so a minibatch's gradient noise lies along ``t_1 + t_2`` only."""
    y = np.random.default_rng(0).normal(1.0, 1.0, n)
    data = y if batch_size is None else pm.Minibatch(y, batch_size=batch_size)
    with pm.Model() as model:
        t = pm.Normal("t", 0, 1, shape=2)
        pm.Normal("y", t[0] + t[1], 1.0, observed=data, total_size=n)
    return model
