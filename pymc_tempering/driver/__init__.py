"""The driver methods' loop (:mod:`~pymc_tempering.driver.loop`): warm-up, recording, progress
bar and result, for every method with dynamics of its own; and the thermostat driver
(:mod:`~pymc_tempering.driver.thermostat`) that TACT-HMC and replica exchange share."""

from pymc_tempering.driver.loop import Trace, driver_result, run_kernel
from pymc_tempering.driver.thermostat import (
    Replicas,
    ThermostatInfo,
    ThermostatLoop,
    run_thermostats,
    starting_points,
)

__all__ = [
    "Trace",
    "driver_result",
    "run_kernel",
    "Replicas",
    "ThermostatInfo",
    "ThermostatLoop",
    "run_thermostats",
    "starting_points",
]
