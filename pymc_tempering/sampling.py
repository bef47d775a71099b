"""The sampler contract every method shares: its arguments, its seeds, its error, its warnings.

Every sampler has the signature of ``pm.sample``::

    sample_<method>(draws=1000, tune=1000, chains=4, *, model=None, random_seed=None,
                    progressbar=True, <method options>) -> xarray.DataTree

``tune`` is the warm-up (adaptation, burn-in, pilot runs) everywhere and its draws are
discarded. This module holds what implements that contract once: the argument check, seed
splitting, the seed recorded in a result's attrs, the one exception for a numerical blow-up,
and the warnings every sampler raises from :func:`~pymc_tempering.diagnose`.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

__all__ = [
    "DivergenceError",
    "check_sampler_args",
    "split_seed",
    "seed_attrs",
    "warn_problems",
    "keep_value_variables",
]


class DivergenceError(FloatingPointError):
    """A sampler's dynamics blew up: a position, energy or gradient became non-finite.

    Raised by every driver (TACT-HMC, replica exchange, ergodic inference, ...) for a numerical
    blow-up, with the step where it happened and the setting to change. It subclasses
    :class:`FloatingPointError`, so ``except FloatingPointError`` catches it too.
    """


def _count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, got {value!r}.")
    return int(value)


def check_sampler_args(draws, tune, chains, *, min_draws: int = 1) -> tuple[int, int, int]:
    """Validate the contract's ``draws``, ``tune`` and ``chains``; return them as ints.

    Raises
    ------
    ValueError
        For a non-integer, or ``draws < min_draws``, ``tune < 0`` or ``chains < 1``.
    """
    return _count("draws", draws, min_draws), _count("tune", tune, 0), _count("chains", chains, 1)


def split_seed(random_seed, n: int) -> list[int | None]:
    """``n`` independent integer seeds from an int, a Generator or None (unseeded)."""
    if random_seed is None:
        return [None] * n
    if isinstance(random_seed, np.random.Generator):
        return [int(s) for s in random_seed.integers(2**31, size=n)]
    children = np.random.SeedSequence(random_seed).spawn(n)
    return [int(c.generate_state(1)[0]) for c in children]


def seed_attrs(random_seed) -> dict:
    """``{"random_seed": seed}`` for a result's attrs when the seed is an integer (else empty)."""
    if isinstance(random_seed, numbers.Integral) and not isinstance(random_seed, bool):
        return {"random_seed": int(random_seed)}
    return {}


def warn_problems(result, stacklevel: int = 3) -> None:
    """Run :func:`~pymc_tempering.diagnose` on a result and warn once per problem found."""
    from pymc_tempering.diagnostics import diagnose  # diagnostics reads results: import late

    for problem in diagnose(result).problems:
        warnings.warn(problem, UserWarning, stacklevel=stacklevel)


def keep_value_variables(nuts_sampler: str | None, sample_kwargs: dict) -> dict:
    """``pm.sample`` kwargs that keep variables named like value variables (``s_log__``).

    An extended model holds the user's value variables as ``pm.Flat`` under their value names;
    PyMC's converters drop such names by default (``include_transformed`` for PyMC's and
    nutpie's, ``keep_untransformed`` for the JAX samplers), and the weights need them.
    """
    kwargs = dict(sample_kwargs)
    if nuts_sampler in ("numpyro", "blackjax"):
        kwargs["nuts"] = {**kwargs.get("nuts", {}), "keep_untransformed": True}
    else:
        kwargs["idata_kwargs"] = {**(kwargs.get("idata_kwargs") or {}), "include_transformed": True}
    return kwargs
