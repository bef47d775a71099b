"""Testing aids of :func:`~pymc_tempering.sample_tact`, out of its signature.

:func:`hooks` is a context manager: the ``sample_tact`` runs inside it add Gaussian
noise, unknown to the dynamics, to the potential and the gradient (section 5.1 of Luo et al.
2018), and call a function before every kernel step (to set a ``pm.Data`` minibatch by hand,
say). The noise's standard deviations go into the result's attrs (``energy_noise_sd``,
``gradient_noise_sd``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import NamedTuple

import numpy as np

__all__ = ["Aids", "AIDS", "hooks", "noisy"]


class Aids(NamedTuple):
    """What :func:`hooks` sets: the noise's standard deviations (of the potential and of
    each gradient component) and the function called before every step."""

    energy_sd: float = 0.0
    gradient_sd: float = 0.0
    callback: Callable[[int], None] | None = None


#: The aids of the ``sample_tact`` runs in the current context (none outside
#: :func:`hooks`).
AIDS: ContextVar[Aids] = ContextVar("tact_hooks", default=Aids())


@contextlib.contextmanager
def hooks(
    gradient_noise: float | tuple[float, float] = 0.0,
    callback: Callable[[int], None] | None = None,
) -> Iterator[Aids]:
    """Run :func:`~pymc_tempering.sample_tact` with testing aids inside the ``with`` block.

    Parameters
    ----------
    gradient_noise : float or (float, float)
        Standard deviations of Gaussian noise added to the potential and to each gradient
        component, unknown to the dynamics (section 5.1); one number is used for both.
    callback : callable, optional
        ``callback(step)`` before each kernel step (each gradient evaluation), ``step``
        counting from 0, warm-up included.
    """
    energy_sd, gradient_sd = (
        (float(gradient_noise),) * 2 if np.isscalar(gradient_noise)
        else tuple(map(float, gradient_noise))
    )
    token = AIDS.set(Aids(energy_sd, gradient_sd, callback))
    try:
        yield AIDS.get()
    finally:
        AIDS.reset(token)


def noisy(logp_and_grad, aids: Aids, rng: np.random.Generator):
    """``logp_and_grad`` with the aids' Gaussian noise (itself when there is none)."""
    if not aids.energy_sd and not aids.gradient_sd:
        return logp_and_grad

    def with_noise(theta):
        lp, g = logp_and_grad(theta)
        return (
            lp - aids.energy_sd * rng.standard_normal(lp.shape),  # U = -lp gets +sd * noise
            g + aids.gradient_sd * rng.standard_normal(g.shape),
        )

    return with_noise
