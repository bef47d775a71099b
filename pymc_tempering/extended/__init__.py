"""The one path of the model-transformation methods (continuous tempering, joint and Gibbs, and
pseudo-extended MCMC): :mod:`~pymc_tempering.extended.runner` builds, samples and weighs one run;
:mod:`~pymc_tempering.extended.tempered` is the continuously tempered model and its weights,
:mod:`~pymc_tempering.extended.funnel` their funnel-neck correction, and
:mod:`~pymc_tempering.extended.rounds` the bootstrap rounds and self-extension of continuous
tempering."""
