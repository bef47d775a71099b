"""Thermostat-assisted continuously tempered HMC for minibatched models: ``sample_tact``, its
expert options (:class:`TemperingSettings`) and its testing aids (:mod:`.testing`)."""

from pymc_tempering.methods.tact.sampler import VARIANTS, sample_tact
from pymc_tempering.methods.tact.settings import TemperingSettings

__all__ = ["VARIANTS", "TemperingSettings", "sample_tact"]
