"""Multimodal check (slow): Gibbs CT, simulated tempering and AIS on the 1-D bimodal mixture."""

import numpy as np
import pytest
from arviz_stats.base.array import array_stats
from checks import assert_within_se, seed
from pymc_tempering.problems.mixtures import bimodal_mixture

import pymc_tempering as pmt
from pymc_tempering.estimators import weighted_mean


@pytest.mark.filterwarnings("ignore::pymc_tempering.TemperingWarning")  # a short run's verdicts
@pytest.mark.slow
@pytest.mark.parametrize("method", ["gibbs_ct", "simulated_tempering", "ais"])
def test_recovers_mode_weights(method):
    """0.3 N(-3, 0.5^2) + 0.7 N(3, 0.5^2), log Z = 0; moment-matched base (section 7.1)."""
    model, weights, mean, var = bimodal_mixture()
    base = pmt.Base.from_moments([mean], [var], log_zeta=0.0)
    kwargs = dict(base=base, model=model, random_seed=seed(2), progressbar=False)
    if method == "gibbs_ct":
        idata = pmt.sample_gibbs_ct(3000, **kwargs)
    elif method == "simulated_tempering":
        idata = pmt.sample_simulated_tempering(3000, **kwargs)
    else:
        idata = pmt.sample_ais(1000, 64, 4, n_temperatures=200, **kwargs)
    x = idata["posterior"]["x"].values
    lw = idata["sample_stats"]["log_weight"].values
    frac, se = weighted_mean((x > 0).astype(float)[..., None], lw)
    w = np.exp(lw - lw.max())
    ess = array_stats.ess(w * ((x > 0) - frac[0]), chain_axis=0, draw_axis=1, method="mean")
    assert ess > 100
    assert 0 < se[0] < 0.05
    assert_within_se(frac[0], weights[1], se[0], what="weight of the mode at +3")
    lml = pmt.log_marginal_likelihood(idata)
    assert_within_se(lml.estimate, 0.0, lml.standard_error, what="log Z")
