"""Ergodic inference: ``fit_ergodic`` tunes a finite HMC chain used as an approximation."""

from pymc_tempering.methods.ergodic.approximation import (
    ErgodicApproximation,
    fit_ergodic,
    gaussian_entropy,
)

__all__ = ["ErgodicApproximation", "fit_ergodic", "gaussian_entropy"]
