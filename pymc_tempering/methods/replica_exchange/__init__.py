"""Replica exchange with SG thermostats and a noise-corrected swap test: ``sample_replica_exchange``."""

from pymc_tempering.methods.replica_exchange.sampler import (
    minibatch_exchange_energies,
    sample_replica_exchange,
)

__all__ = ["minibatch_exchange_energies", "sample_replica_exchange"]
