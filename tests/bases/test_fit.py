"""Fitting the bases: ADVI on a conjugate model, the prior, the mixture and Laplace defaults."""

import numpy as np
import pymc as pm
import pytest
from scipy import integrate, stats
from checks import K, seed
from conftest import model_fingerprint
from pymc_tempering.problems.conjugate import conjugate_normal
from pymc_tempering.problems.mixtures import TWO_MODES_SEP as SEP
from pymc_tempering.problems.mixtures import four_mode_mixture, two_modes

import pymc_tempering as pmt


@pytest.mark.parametrize("method", ["advi", "fullrank_advi"])
def test_fit_base_on_conjugate_model(method):
    # The posterior is Gaussian, so ADVI is exact: its ELBO is log Z up to optimisation noise.
    model, log_z, post_mean, post_sd = conjugate_normal()
    before = model_fingerprint(model)
    base = pmt.fit_base(model, method=method, n=20_000, random_seed=seed(0), progressbar=False)
    assert model_fingerprint(model) == before
    assert base.method == method and base.ndim == 1
    # Stochastic optimisation (Adam, step 0.01, stopped at a plateau) may leave the scale ~10%
    # off; the ELBO is insensitive to that (a 10% scale error costs 0.005 nats of KL).
    assert base.mean[0] == pytest.approx(post_mean, abs=0.25 * post_sd)
    assert base.std[0] == pytest.approx(post_sd, rel=0.25)
    assert base.log_zeta == pytest.approx(log_z, abs=0.1)
    assert base.log_zeta < log_z + 0.02  # a lower bound, up to the noise of its average


def test_fit_base_orders_like_target(normal_model):
    model, _ = normal_model
    assert pmt.fit_base(model, n=500, random_seed=seed(0), progressbar=False).diagonal
    base = pmt.fit_base(model, method="fullrank_advi", n=3000, random_seed=seed(0), progressbar=False)
    target = pmt.Target(model)
    assert base.ndim == target.ndim
    assert not base.diagonal and base.cov[0, 1] != 0
    # mu's posterior mean is near the data mean; log s near log(sd(y)) ~ -0.9
    point = target.unravel(base.mean)
    assert abs(point["mu"] - 0.5) < 0.5
    assert point["s_log__"] < 0.5


def test_fit_base_prior(normal_model):
    model, _ = normal_model
    base = pmt.fit_base(model, method="prior", n=4000, random_seed=seed(0))
    assert base.log_zeta is None
    # mu ~ N(0, 2): mean 0, sd 2; log s for HalfNormal(1.5) has sd pi / (2 sqrt 2) ~ 1.11
    assert abs(base.mean[0]) < 5 * 2 / np.sqrt(4000)
    assert base.std[0] == pytest.approx(2.0, rel=0.1)
    assert base.std[1] == pytest.approx(np.pi / np.sqrt(8), rel=0.1)


def test_fit_base_bad_input(discrete_model, no_free_model, nan_model, normal_model):
    with pytest.raises(ValueError, match="discrete"):
        pmt.fit_base(discrete_model, progressbar=False)
    with pytest.raises(ValueError, match="no free variables"):
        pmt.fit_base(no_free_model, progressbar=False)
    with pytest.raises(ValueError, match="Unknown base method"):
        pmt.fit_base(normal_model[0], method="svgd", progressbar=False)
    before = model_fingerprint(nan_model)
    with pytest.raises(ValueError, match="diverged to NaN"):
        pmt.fit_base(nan_model, n=2000, random_seed=seed(0), progressbar=False)
    assert model_fingerprint(nan_model) == before


def test_estimate_log_zeta_on_conjugate_model():
    model, log_z, post_mean, post_sd = conjugate_normal()
    target = pmt.Target(model)
    base = pmt.Base.from_moments([post_mean], [post_sd**2])  # the exact posterior
    assert pmt.estimate_log_zeta(target, base, n=100, random_seed=seed(0)) == pytest.approx(log_z)


def test_default_base_starts_a_fit_on_each_mode():
    with two_modes():
        base = pmt.fit_base(method="mixture", random_seed=seed(82), progressbar=False)
    assert len(base.components) == 2 and len(base.modes) == 2
    np.testing.assert_allclose(np.sort([c.mean[0] for c in base.components]), [-SEP, SEP], atol=0.1)


def test_default_base_is_laplace_where_importance_sampling_confirms_it():
    """Each mode of the two-mode mixture is a Gaussian, so its Laplace approximation is exact:
    the default base needs no ADVI, and its importance-sampling log_zeta is log Z = 0 (the
    base is the target up to the finite-difference Hessian and the exp(-32) overlap)."""
    with two_modes():
        base = pmt.fit_base(method="laplace", random_seed=seed(88), progressbar=False)
    assert base.method == "Laplace mixture of 2"
    assert all(c.method == "laplace" for c in base.components)
    assert abs(base.log_zeta) < 1e-4


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
def test_default_base_on_a_shell_gives_the_shells_evidence():
    """A thin 3-D Gaussian shell (radius 2, width 0.1, off the centre of its box, as in the
    evidence suite). A Gaussian at a point of the shell is no description of its shape, but its
    Laplace mass, floored at the prior's width along the shell, is within half a nat of the
    shell's, so the importance-sampling check accepts it at some seeds and sends the base to the
    ADVI mixture at others. What holds at every seed is what the check is for: the base it
    picks leads to the exact log Z: a Laplace mixture's log_zeta is within a nat of it, and the
    run's evidence is within K standard errors of it or marked unreliable (a base passed in
    gets a bootstrap round by default)."""
    centre = np.array([3.5, 0.0, 0.0])
    with pm.Model():
        x = pm.Uniform("x", -6.0, 6.0, shape=3)
        radius = pm.math.sqrt(pm.math.sum((x - centre) ** 2))
        pm.Potential("shell", pm.logp(pm.Normal.dist(2.0, 0.1), radius))
        base = pmt.fit_base(method="laplace", random_seed=seed(89), progressbar=False)
        idata = pmt.sample_ct(
            500, tune=500, chains=2, max_extensions=0, base=base, random_seed=seed(89),
            progressbar=False,
        )
    # the shell lies inside the box: Z = 4 pi int rho^2 N(rho; 2, 0.1) d rho / 12^3
    radial = integrate.quad(lambda r: r**2 * stats.norm.pdf(r, 2.0, 0.1), 0.0, 4.0)[0]
    exact = np.log(4 * np.pi * radial) - 3 * np.log(12.0)
    if base.method.startswith("Laplace"):  # accepted: its importance-sampled log_zeta is right
        assert abs(base.log_zeta - exact) < 1.0
    else:
        assert base.method.startswith("mixture of")
    assert idata.attrs["bootstrap"] == 1
    lml = pmt.log_marginal_likelihood(idata)
    assert abs(lml.estimate - exact) < K * lml.standard_error or not lml.reliable


def test_mixture_base_is_eq_25():
    """Six fits from dispersed prior draws find the four modes; eq. (25) weights them by ELBO.

    Each fit is exact for its mode (an isotropic Gaussian), so its ELBO is log w_i and eq. (25)'s
    log zeta is log sum w_i = 0, and the moment-matched mean is the mixture's, up to the
    optimiser's noise (ELBOs within ~0.1 nats of the optimum, as in test_base).
    """
    model, mean = four_mode_mixture()
    base = pmt.fit_base(model, method="mixture", n_fits=6, random_seed=seed(0), progressbar=False)
    assert base.method == "mixture of 4" and len(base.components) == 4
    assert base.log_zeta == pytest.approx(0.0, abs=0.1)
    np.testing.assert_allclose(base.mean, mean, atol=0.3)
    # the covariance of the mixture: modes at +-4, weights 0.1/0.2/0.3/0.4, sd 0.6
    assert np.all(base.std > 3.5)
    with pytest.raises(ValueError, match="n_fits"):
        pmt.fit_base(model, method="mixture", n_fits=0, progressbar=False)


def test_an_optimum_whose_laplace_mass_is_too_low_takes_its_fits_elbo():
    """The two equal modes of ``two_modes(0.5)``, one optimum's Laplace mass set 12 nats low
    (as a mode search in many dimensions found it): an ADVI fit on that mode raises it to the
    fit's ELBO, so that the strata keep it; a fit below an optimum's Laplace mass changes
    nothing; and the run's discovered optima keep the raised mass."""
    from dataclasses import replace

    from pymc_tempering.bases.fit import _masses_from_fits
    from pymc_tempering.bases.modes import discover_optima, find_modes
    from pymc_tempering.stratification import MIN_STRATUM_SHARE
    from pymc_tempering.target import Target

    target = Target(two_modes(0.5))
    modes = find_modes(target, random_seed=seed(84))
    low = replace(modes, log_mass=modes.log_mass - np.array([0.0, 12.0]))
    assert low.probabilities[1] < MIN_STRATUM_SHARE
    fits = [
        pmt.Base(mean=modes.points[1] + 0.1, cov=np.eye(1), log_zeta=np.log(0.5) - 0.01),
        pmt.Base(mean=modes.points[0] - 0.1, cov=np.eye(1), log_zeta=np.log(0.5) - 5.0),
    ]
    raised = _masses_from_fits(target, low, fits)
    assert raised.log_mass[1] == np.log(0.5) - 0.01
    assert raised.log_mass[0] == low.log_mass[0]
    np.testing.assert_allclose(raised.probabilities, [0.5, 0.5], atol=0.01)
    # draws at both optima add nothing, and the masses stay
    draws = np.concatenate([p + np.random.default_rng(seed(85)).normal(0, 1, (200, 1))
                            for p in modes.points])[None]
    assert discover_optima(target, draws, raised, random_seed=seed(86)) is raised
