"""What every method that runs ``pm.sample`` on an extended model needs: seeds and kwargs."""

from __future__ import annotations

import numpy as np

__all__ = ["split_seed", "keep_value_variables"]


def split_seed(random_seed, n: int) -> list[int | None]:
    """``n`` independent integer seeds from an int, a Generator or None (unseeded)."""
    if random_seed is None:
        return [None] * n
    if isinstance(random_seed, np.random.Generator):
        return [int(s) for s in random_seed.integers(2**31, size=n)]
    children = np.random.SeedSequence(random_seed).spawn(n)
    return [int(c.generate_state(1)[0]) for c in children]


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
