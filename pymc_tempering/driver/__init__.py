"""The driver methods' loop (:mod:`~pymc_tempering.driver.loop`): warm-up, recording, progress
bar and result, for every method with dynamics of its own."""

from pymc_tempering.driver.loop import Trace, driver_result, run_kernel

__all__ = ["Trace", "driver_result", "run_kernel"]
