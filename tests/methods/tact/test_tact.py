"""TACT-HMC (Luo et al. 2018; :func:`~pymc_tempering.sample_tact`): exactness without noise,
Theorem 1's thermostat values, the synthetic multimodal experiments of section 5.1 and their
ablations, and the user's model. The kernel alone is tested in
``tests/kernels/test_thermostats.py``.

Every statistical check is ``|estimate - truth| < K * MCSE`` (``tests/checks.py``, ``K = 4``) with
the MCSE from arviz-stats, after checking that the ESS is large enough for the MCSE to be
trusted. Seeds come from ``checks.seed`` (shifted by ``PMT_TEST_SEED``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from arviz_stats.base.array import array_stats
from checks import K, assert_within_mcse, assert_within_se, mcse_of_mean, seed

import pymc_tempering as pmt
from pymc_tempering.methods.tact import TemperingSettings
from pymc_tempering.methods.tact import sample_tact as plain_sample_tact
from pymc_tempering.methods.tact.testing import hooks
from pymc_tempering.target import Target


def sample_tact(*args, gradient_noise=0.0, **kwargs):
    """``sample_tact`` with Gaussian noise unknown to the dynamics (the testing aid of
    section 5.1, :func:`~pymc_tempering.methods.tact.testing.hooks`)."""
    with hooks(gradient_noise=gradient_noise):
        return plain_sample_tact(*args, **kwargs)


def mean_and_mcse(series: np.ndarray) -> tuple[float, float, float]:
    """Mean, MCSE (``checks.mcse_of_mean``) and bulk ESS of a (chain, draw) series."""
    series = np.asarray(series, dtype=float)
    ess = float(array_stats.ess(series, method="bulk"))
    return float(series.mean()), float(mcse_of_mean(series)), ess


def assert_close(series, truth, min_ess=200, what=""):
    return assert_within_mcse(series, truth, min_ess=min_ess, what=what)


EULER_SLACK = 0.005  # relative discretisation bias of second moments under the thermostat


def assert_within_mcse_up_to(values, truth, slack, min_ess, what):
    """``|mean - truth| < K * MCSE + slack``, after the ESS check of ``assert_within_mcse``."""
    mean, se = assert_within_mcse(values, truth, k=np.inf, min_ess=min_ess, what=what)
    assert abs(mean - truth) < K * se + slack, f"{what}: {mean} vs {truth}, MCSE {se}, slack {slack}"


# ---------------------------------------------------------------------------------------------
# exact, no sampling
# ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_discrete_model_refused(discrete_model):
    with pytest.raises(ValueError, match="discrete"):
        sample_tact(10, model=discrete_model, progressbar=False)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_unknown_variant_refused(normal_model):
    with pytest.raises(ValueError, match="variant"):
        sample_tact(10, model=normal_model[0], variant="nuts", progressbar=False)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_tempering_settings_are_checked_and_recorded(normal_model):
    """The expert options travel in one frozen record: bad values are refused naming the
    field, and the values used are the result's attrs."""
    import dataclasses

    model = normal_model[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        TemperingSettings().abf_bins = 3
    for bad, field in [(dict(step_size="big"), "tempering.step_size"),
                       (dict(step_size=-1.0), "tempering.step_size"),
                       (dict(unit_temperature_fraction=1.0), "unit_temperature_fraction"),
                       (dict(abf_bins=0), "tempering.abf_bins")]:
        with pytest.raises(ValueError, match=field):
            sample_tact(5, model=model, tempering=TemperingSettings(**bad), progressbar=False)
    with pytest.raises(ValueError, match="TemperingSettings"):
        sample_tact(5, model=model, tempering={"abf_bins": 3}, progressbar=False)
    tempering = TemperingSettings(step_size=0.002, noise=0.1, thermal_inertia=2.0,
                                  unit_temperature_fraction=0.4, abf_bins=7, abf_ramp=50.0)
    idata = sample_tact(5, tune=0, chains=1, model=model, step_size=0.01, steps_per_sample=5,
                        tempering=tempering, random_seed=seed(8), progressbar=False)
    attrs = idata.attrs
    assert (attrs["step_size_tempering"], attrs["noise_tempering"]) == (0.002, 0.1)
    assert (attrs["thermal_inertia_tempering"], attrs["unit_temperature_fraction"]) == (2.0, 0.4)
    assert (attrs["abf_bins"], attrs["abf_ramp"]) == (7, 50.0)
    assert idata["abf"].sizes["abf_bin"] == 7


# ---------------------------------------------------------------------------------------------
# a 2-D Gaussian: exactness and Theorem 1
# ---------------------------------------------------------------------------------------------

MU = np.array([1.0, -0.5])
COV = np.array([[1.0, 0.6], [0.6, 2.0]])
GAUSS_SETTINGS = dict(
    step_size=0.01, noise=0.05, thermal_inertia=1.0, steps_per_sample=20, tune=20
)


@pytest.fixture(scope="module")
def gaussian_model():
    with pm.Model() as model:
        pm.MvNormal("x", MU, COV)
    return model


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_sgnht_keeps_gaussian_and_thermostat_reaches_theorem_1(gaussian_model):
    """No tempering, without and with gradient noise (sd 2): the draws keep N(MU, COV), and the
    noise raises z_theta's mean by Theorem 1's ``eta sigma^2 / 2``. The mean itself and the
    variance are Theorem 1's for a slow thermostat (the kernel test above); at this ``gamma =
    1`` the thermostat's fluctuations (sd 0.07 about 0.05, often below zero) bend both alike with
    and without noise: means 0.041 against 0.050 and 0.061-0.063 against 0.070, sds 0.068-0.069
    against 0.071 (seeds 11 and 111), while the positions stay right."""
    means = {}
    for gradient_noise in (0.0, 2.0):
        idata = sample_tact(
            1000,
            model=gaussian_model,
            variant="sgnht",
            gradient_noise=(0.0, gradient_noise),
            random_seed=seed(11),
            progressbar=False,
            **GAUSS_SETTINGS,
        )
        x = idata.posterior["x"].values
        for i in range(2):
            assert_close(x[..., i], MU[i], what=f"mean {i}")
        # The thermostat settles where the Euler friction leaves the positions right (it
        # reads the kinetic energy as that friction leaves it): at a fixed z = D the stationary
        # covariance of the linear recursion r' = (1 - z) r - eta f + noise, q' = q + r'
        # (discrete Lyapunov equation) is 0.1 % and 0.4 % wide along the eigenvectors of COV.
        # Before, the thermostat held E r^2 = eta, which made it 2.6 % low (seen on seeds 11,
        # 111, 211: 1.3-2.2 MCSE low, with a slack of 3 %).
        for i, j in [(0, 0), (0, 1), (1, 1)]:
            cov = (x[..., i] - MU[i]) * (x[..., j] - MU[j])
            slack = EULER_SLACK * np.sqrt(COV[i, i] * COV[j, j])
            assert_within_mcse_up_to(cov, COV[i, j], slack, 200, f"cov {i}{j}")
        means[gradient_noise] = mean_and_mcse(idata.sample_stats["thermostat_theta"].values)
    (z0, se0, _), (z2, se2, _) = means[0.0], means[2.0]
    assert_within_se(z2 - z0, 0.01 * 2.0**2 / 2, np.hypot(se0, se2), what="the noise's rise of z")


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_constant_friction_without_noise_keeps_gaussian(gaussian_model):
    """SGHMC without gradient noise is exact (up to discretisation) too; its friction is fixed."""
    idata = sample_tact(
        1000, model=gaussian_model, variant="sghmc", random_seed=seed(12), progressbar=False, **GAUSS_SETTINGS
    )
    x = idata.posterior["x"].values
    for i in range(2):
        assert_close(x[..., i], MU[i], what=f"mean {i}")
        assert_close((x[..., i] - MU[i]) ** 2, COV[i, i], what=f"var {i}")
    assert np.all(idata.sample_stats["thermostat_theta"].values == 0.05)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_sghmc_with_unknown_noise_overheats(gaussian_model):
    """The baseline's failure: constant friction does not absorb unknown gradient noise.

    Expected variance under noise sigma: COV * (c + eta sigma^2 / 2) / c = 1.9 COV.
    """
    idata = sample_tact(
        1000,
        model=gaussian_model,
        variant="sghmc",
        gradient_noise=(0.0, 3.0),
        random_seed=seed(13),
        progressbar=False,
        **GAUSS_SETTINGS,
    )
    x = idata.posterior["x"].values
    est, se, ess = mean_and_mcse((x[..., 0] - MU[0]) ** 2)
    assert ess > 200
    assert est - COV[0, 0] > K * se


# ---------------------------------------------------------------------------------------------
# section 5.1: a 1-D mixture of three Gaussians with noise the sampler does not know about
# ---------------------------------------------------------------------------------------------

W1 = np.array([0.2, 0.3, 0.5])
M1 = np.array([-5.0, 0.0, 5.0])
SD1 = 0.6
NOISE = 3.0  # sd of the noise added to the energy and to the gradient
MIX_SETTINGS = dict(
    step_size=0.01,
    noise=0.05,
    tempering=TemperingSettings(step_size=0.001, noise=0.05),
    steps_per_sample=20,
    tune=20,
    gradient_noise=NOISE,
)


@pytest.fixture(scope="module")
def mixture_1d():
    with pm.Model() as model:
        pm.NormalMixture("x", w=W1, mu=M1, sigma=SD1)
    return model


def _run_1d(model, variant, draws, seed):
    # all chains start in the heaviest mode: the ablation without tempering stays there
    return sample_tact(
        draws,
        model=model,
        variant=variant,
        initial_points=np.full((4, 1), 5.0),
        random_seed=seed,
        progressbar=False,
        **MIX_SETTINGS,
    )


def _labels(x, means):
    return np.argmin(np.abs(x[..., None] - means), axis=-1)


@pytest.fixture(scope="module")
def tact_1d(mixture_1d):
    return _run_1d(mixture_1d, "tact", 1500, seed(21))


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_tact_recovers_mode_weights_1d(tact_1d):
    x = tact_1d.posterior["x"].values
    lab = _labels(x, M1)
    for k in range(3):
        assert_close((lab == k).astype(float), W1[k], min_ess=50, what=f"weight {k}")
    # within the heaviest mode the shape is right too: the noise is neutralised
    inside = np.where(lab == 2, (x - M1[2]) ** 2, np.nan)
    var = np.nanmean(inside)
    assert abs(var - SD1**2) < 0.1 * SD1**2 + K * np.nanstd(inside) / np.sqrt(np.sum(lab == 2) / 20)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_tact_thermostats_reach_theorem_1_under_noise(mixture_1d, tact_1d):
    """The noise raises ``z_theta`` by Theorem 1's ``eta sigma^2 / 2`` over the same run without
    it (the level without noise is bent below ``c`` by the fast thermostat's fluctuations, as
    in the Gaussian test above)."""
    quiet = sample_tact(
        1500, model=mixture_1d, initial_points=np.full((4, 1), 5.0), random_seed=seed(21),
        progressbar=False, **{**MIX_SETTINGS, "gradient_noise": 0.0},
    )
    z, se, ess = mean_and_mcse(tact_1d.sample_stats["thermostat_theta"].values)
    z0, se0, ess0 = mean_and_mcse(quiet.sample_stats["thermostat_theta"].values)
    assert min(ess, ess0) > 100
    assert_within_se(z - z0, 0.01 * NOISE**2 / 2, np.hypot(se, se0), what="the noise's rise of z")
    # the result carries the layout: effective temperature one at every kept draw
    assert np.all(tact_1d.sample_stats["effective_temperature"].values == 1.0)
    traj = tact_1d["tact_trajectory"]
    assert traj["effective_temperature"].values.max() > 5  # it did heat up
    assert set(tact_1d.children) >= {"posterior", "sample_stats", "tact_trajectory", "abf"}


def _switch_rate(lab):
    return float(np.mean(lab[:, 1:] != lab[:, :-1]))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_ablation_without_tempering_gets_stuck(mixture_1d, tact_1d):
    """Same steps per draw, same start: without tempering the chains (almost) never change mode."""
    idata = _run_1d(mixture_1d, "sgnht", 500, seed(22))
    lab = _labels(idata.posterior["x"].values, M1)
    tact_rate = _switch_rate(_labels(tact_1d.posterior["x"].values, M1))
    assert tact_rate > 0.02
    assert _switch_rate(lab) < 0.1 * tact_rate
    # Not asserted: the start mode's share of the draws. It was > 0.75 for the seed this test
    # was written with and 0.73 for PMT_TEST_SEED=1 (a chain that left the start mode once,
    # early): a property of the seed, where the switch rate above is the property of the method.


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_ablation_without_thermostats_spreads(mixture_1d):
    """Unabsorbed noise heats the draws (about (c + eta s^2 / 2) / c = 1.9 times): too much mass
    lies more than 2.5 sd from every mode."""
    from scipy.stats import norm

    idata = _run_1d(mixture_1d, "tempering_only", 1000, seed(23))
    x = idata.posterior["x"].values
    far = (np.min(np.abs(x[..., None] - M1), axis=-1) > 2.5 * SD1).astype(float)
    truth = 2 * norm.sf(2.5)  # the modes are 5 apart: their overlap is negligible
    est, se, ess = mean_and_mcse(far)
    assert ess > 100
    assert est - truth > K * se, (est, truth, se)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_tact_keeps_mass_near_modes(tact_1d):
    """The same statistic under TACT-HMC matches the truth: the thermostats absorb the noise."""
    from scipy.stats import norm

    x = tact_1d.posterior["x"].values
    far = (np.min(np.abs(x[..., None] - M1), axis=-1) > 2.5 * SD1).astype(float)
    assert_close(far, 2 * norm.sf(2.5), min_ess=100, what="mass far from the modes")


# ---------------------------------------------------------------------------------------------
# two 2-D multimodal mixtures
# ---------------------------------------------------------------------------------------------

MIX2D = {
    "four_corners": (
        np.array([0.1, 0.2, 0.3, 0.4]),
        np.array([[-3.0, -3.0], [-3.0, 3.0], [3.0, -3.0], [3.0, 3.0]]),
        0.5,
    ),
    "ring_of_five": (
        np.full(5, 0.2),
        4.0 * np.stack([np.cos(2 * np.pi * np.arange(5) / 5), np.sin(2 * np.pi * np.arange(5) / 5)], 1),
        0.5,
    ),
}


def mixture_2d_model(name):
    w, mus, sd = MIX2D[name]
    with pm.Model() as model:
        comps = [pm.MvNormal.dist(mu=m, cov=sd**2 * np.eye(2)) for m in mus]
        pm.Mixture("x", w=w, comp_dists=comps)
    return model


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
@pytest.mark.parametrize("name", ["four_corners", "ring_of_five"])
def test_tact_recovers_mode_weights_2d(name):
    w, mus, _ = MIX2D[name]
    model = mixture_2d_model(name)
    idata = sample_tact(
        6000,
        model=model,
        initial_points=np.tile(mus[-1], (4, 1)),
        random_seed=seed(31),
        progressbar=False,
        **MIX_SETTINGS,
    )
    x = idata.posterior["x"].values
    lab = np.argmin(np.sum((x[..., None, :] - mus) ** 2, -1), -1)
    for k in range(len(w)):
        assert_close((lab == k).astype(float), w[k], min_ess=50, what=f"weight {k}")


# ---------------------------------------------------------------------------------------------
# the user's model: minibatches, no mutation, reproducibility
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minibatch_model():
    rng = np.random.default_rng(5)
    y = rng.normal(0.7, 1.0, size=200)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        batch = pm.Minibatch(y, batch_size=100)
        pm.Normal("y", mu, 1.0, observed=batch, total_size=len(y))
    post_var = 1 / (1 / 100 + len(y))
    return model, post_var * y.sum(), np.sqrt(post_var)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_minibatch_model_without_gradient_code(minibatch_model):
    from conftest import model_fingerprint

    model, post_mean, post_sd = minibatch_model
    # the fingerprint's own logp draws a minibatch: compare the rest
    before = {k: v for k, v in model_fingerprint(model).items() if k != "logp"}
    idata = sample_tact(
        500,
        model=model,
        variant="sgnht",
        step_size=1e-3,
        steps_per_sample=20,
        tune=20,
        random_seed=seed(3),
        progressbar=False,
    )
    assert {k: v for k, v in model_fingerprint(model).items() if k != "logp"} == before
    mu = idata.posterior["mu"].values
    assert_close(mu, post_mean, min_ess=100, what="posterior mean")
    # the minibatch noise is absorbed by the thermostat: it settles above c
    assert idata.sample_stats["thermostat_theta"].values.mean() > 0.05 + 0.02


def test_minibatch_changes_every_call(minibatch_model):
    model = minibatch_model[0]
    evaluate = Target(model).batched_logp_and_grad(random_seed=1)
    theta = np.zeros((1, 1))
    energies = [-float(evaluate(theta)[0][0]) for _ in range(5)]
    assert len(set(energies)) > 1
    # the same seed draws the same minibatches (PyMC must not reseed them at compile time)
    again = Target(model).batched_logp_and_grad(random_seed=1)
    assert [-float(again(theta)[0][0]) for _ in range(5)] == energies
    other = Target(model).batched_logp_and_grad(random_seed=2)
    assert [-float(other(theta)[0][0]) for _ in range(5)] != energies


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_minibatch_run_reproducible(minibatch_model):
    kwargs = dict(model=minibatch_model[0], tune=20, chains=1, steps_per_sample=5,
                  random_seed=seed(7),
                  step_size=1e-3,
                  progressbar=False)
    a, b = pmt.sample_tact(20, **kwargs), pmt.sample_tact(20, **kwargs)
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_reproducible_and_public(normal_model):
    model = normal_model[0]
    kwargs = dict(model=model, tune=20, chains=2, steps_per_sample=5, random_seed=seed(7),
                  progressbar=False)
    a = pmt.sample_tact(20, **kwargs)
    b = pmt.sample_tact(20, **kwargs)
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)
    assert a.posterior["s"].min() > 0 and "mu_twice" in a.posterior
    assert "s_log__" in a["unconstrained_posterior"]
    assert a.attrs["method"] == "tact_hmc" and a.attrs["variant"] == "tact"
    assert "y" in a["observed_data"]


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
def test_tempering_keeps_the_scale_of_a_hierarchical_posterior():
    """The non-centred radon intercepts (89 parameters, full batch): the sd of ``sigma_alpha``
    at the defaults against NUTS's, within 10% plus ``K`` Monte Carlo standard errors of the
    ratio (both runs'). With the tempering variable's step at 0.001 regardless of the model's
    size it was 1.30 to 1.32 times NUTS's (1.01 without tempering): its Euler kicks were 1.4
    thermal sds; ``adaptation.tempering_step_cap`` now holds them to 0.4."""
    from pymc_tempering.problems import radon as datasets

    data = datasets.load_radon()
    county = data["county_code"].to_numpy()
    floor = data["floor"].to_numpy(dtype=float)
    with pm.Model(coords={"county": np.arange(int(county.max()) + 1)}):
        mu_alpha = pm.Normal("mu_alpha", 0.0, 10.0)
        sigma_alpha = pm.HalfNormal("sigma_alpha", 5.0)
        z = pm.Normal("z", 0, 1, dims="county")
        beta = pm.Normal("beta", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("log_radon", mu_alpha + sigma_alpha * z[county] + beta * floor, sigma,
                  observed=data["log_radon"].to_numpy())
        reference = pm.sample(2000, random_seed=seed(70), progressbar=False)
        idata = sample_tact(2000, random_seed=seed(71), progressbar=False)

    def sd_and_se(values):
        squared = (values - values.mean()) ** 2
        ess = float(array_stats.ess(squared, method="mean", chain_axis=0, draw_axis=1))
        return values.std(), np.sqrt(2 / ess) / 2  # the sd's relative MCSE

    sd, se = sd_and_se(idata["posterior"]["sigma_alpha"].values)
    ref_sd, ref_se = sd_and_se(reference["posterior"]["sigma_alpha"].values)
    ratio = sd / ref_sd
    assert abs(ratio - 1) < 0.1 + K * np.hypot(se, ref_se), f"sd ratio {ratio:.3f}"
