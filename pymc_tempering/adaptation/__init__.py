"""The ``step_size="auto"`` warm-up of the thermostat methods (TACT-HMC, replica exchange).

The warm-up is a set of state machines in the BlackJAX style: each keeps an immutable record
(a ``NamedTuple``) that travels in the driver's loop state, started by ``init``, advanced by
``update`` and closed by ``final``, each returning a new record; nothing is shared or
mutated between the sampler's closures. Modules, one concern each:

- :mod:`~pymc_tempering.adaptation.coordinates`: the preconditioned coordinates ``u`` the
  dynamics run in (``theta = (u * scale) @ B.T``) and moving chains between them.
- :mod:`~pymc_tempering.adaptation.noise`: the minibatch gradient noise measured where the
  chains are, and the turn that makes it uncorrelated between coordinates.
- :mod:`~pymc_tempering.adaptation.step_size`: the step sizes and the stability limits on the
  preconditioner's widths (curvature and gradient noise, every replica's too) and on the
  tempering step.
- :mod:`~pymc_tempering.adaptation.windows`: the warm-up's windows (state machine
  :class:`~pymc_tempering.adaptation.windows.Windows`): the positions' sums over each, and the
  dense preconditioner's change of coordinates at a window's end.
- :mod:`~pymc_tempering.adaptation.blowup`: blow-ups undone during the warm-up and dropped
  after it, and the kick bound (state machine
  :class:`~pymc_tempering.adaptation.blowup.Recovery`).
- :mod:`~pymc_tempering.adaptation.exchange_batches`: the minibatches replica exchange's
  corrected swap test averages per pair (state machine
  :class:`~pymc_tempering.adaptation.exchange_batches.ExchangeNoise`).

Hand-written rather than PyMC's or BlackJAX's window adaptation: those tune a NUTS/HMC step
to a Metropolis acceptance rate, and these dynamics have no Metropolis test; here the step is
fixed and the preconditioner is bounded by the curvature and the minibatch gradient noise
(Theorem 1 of Luo et al. 2018), which those do not measure.

This package re-exports each module's helpers; the state machines' ``init``, ``update`` and
``final`` are called through their modules (``windows.update``, ``blowup.final``).
"""

from pymc_tempering.adaptation.blowup import (
    MAX_KICK,
    MAX_WARMUP_BLOWUPS,
    Recovery,
    dropped_info,
    start_bounds,
    warmup_kick_bound,
    warn_blowups,
)
from pymc_tempering.adaptation.coordinates import (
    Basis,
    compose,
    in_dynamics_units,
    in_model_units,
    rescale,
    whitened,
)
from pymc_tempering.adaptation.exchange_batches import (
    FULL_PASS_FRACTION,
    MAX_BATCH_PASSES,
    ExchangeNoise,
    exact_from,
    max_batches,
)
from pymc_tempering.adaptation.noise import NOISE_PAIRS_PER_DIM, gradient_noise, noise_rotation
from pymc_tempering.adaptation.step_size import (
    AUTO_STEP_SIZE,
    AUTO_STEP_SIZE_TEMPERING,
    LOCAL_WIDTHS,
    THETA_NOISE_BUDGET,
    XI_KICK_BUDGET,
    XI_NOISE_BUDGET,
    adapted_scale,
    curvature_at,
    curvature_scale,
    replica_scales,
    stability_cap,
    start_preconditioner,
    tempering_step_cap,
    tempering_step_size,
)
from pymc_tempering.adaptation.windows import (
    DENSE_MAX_DIM,
    DENSE_SHRINKAGE,
    WINDOW_ENDS,
    Spread,
    Windows,
    decorrelating_basis,
    in_new_coordinates,
    spread_add,
    spread_cov,
    spread_empty,
    spread_sd,
    window_basis,
    window_ends,
)

__all__ = [
    "MAX_KICK",
    "MAX_WARMUP_BLOWUPS",
    "Recovery",
    "dropped_info",
    "start_bounds",
    "warmup_kick_bound",
    "warn_blowups",
    "Basis",
    "compose",
    "in_dynamics_units",
    "in_model_units",
    "rescale",
    "whitened",
    "FULL_PASS_FRACTION",
    "MAX_BATCH_PASSES",
    "ExchangeNoise",
    "exact_from",
    "max_batches",
    "NOISE_PAIRS_PER_DIM",
    "gradient_noise",
    "noise_rotation",
    "AUTO_STEP_SIZE",
    "AUTO_STEP_SIZE_TEMPERING",
    "LOCAL_WIDTHS",
    "THETA_NOISE_BUDGET",
    "XI_KICK_BUDGET",
    "XI_NOISE_BUDGET",
    "adapted_scale",
    "curvature_at",
    "curvature_scale",
    "replica_scales",
    "stability_cap",
    "start_preconditioner",
    "tempering_step_cap",
    "tempering_step_size",
    "DENSE_MAX_DIM",
    "DENSE_SHRINKAGE",
    "WINDOW_ENDS",
    "Spread",
    "Windows",
    "decorrelating_basis",
    "in_new_coordinates",
    "spread_add",
    "spread_cov",
    "spread_empty",
    "spread_sd",
    "window_basis",
    "window_ends",
]
