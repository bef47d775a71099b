"""The sampler contract every method shares: its arguments, its seeds, its error, its warnings.

Every sampler has the signature of ``pm.sample``::

    sample_<method>(draws=1000, tune=1000, chains=4, *, model=None, random_seed=None,
                    progressbar=True, <method options>) -> xarray.DataTree

``tune`` is the warm-up (adaptation, burn-in, pilot runs) everywhere and its draws are
discarded. This module holds what implements that contract once: the argument check, seed
splitting, the seed recorded in a result's attrs, the one exception for a numerical blow-up,
the warnings every sampler raises from :func:`~pymc_tempering.diagnose`, and reproducible
arithmetic (:func:`reproducible`).
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings

import numpy as np
import pytensor
from threadpoolctl import threadpool_limits

__all__ = [
    "check_bootstrap",
    "check_extension_args",
    "DivergenceError",
    "NonFiniteGradientError",
    "check_sampler_args",
    "split_seed",
    "seed_attrs",
    "warn",
    "TemperingWarning",
    "pm_sample_kwargs",
    "reproducible",
]


class DivergenceError(FloatingPointError):
    """A sampler's dynamics blew up: a position, energy or gradient became non-finite.

    Raised by every driver (TACT-HMC, replica exchange, ergodic inference, ...) for a numerical
    blow-up, with the step where it happened and the setting to change. It subclasses
    :class:`FloatingPointError`, so ``except FloatingPointError`` catches it too.
    """


class NonFiniteGradientError(DivergenceError):
    """The model's gradient is not finite at a point where its log density is.

    No step size cures it: the point lies in a region where the model's arithmetic breaks down
    (an underflow such as ``1 - w == 0`` in a mixture weight), which a hot chain or replica can
    reach far into the tails. The message names the coordinate and its value.
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


# Warnings point at the user's line: the first frame outside this directory.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class TemperingWarning(UserWarning):
    """What every method of the package warns with: a problem found in a run (a failed check,
    an unreliable posterior, a stopped extension) or a setting it changed. A ``UserWarning``, so
    filters on ``UserWarning`` see it; filter on this class to single out the package's own
    warnings (``warnings.simplefilter("error", pmt.TemperingWarning)``)."""


def warn(message: str, category: type[Warning] = TemperingWarning) -> None:
    """Warn at the first frame outside the package (the user's call), however deep the caller."""
    warnings.warn(message, category, skip_file_prefixes=(_PACKAGE_DIR,))


def reproducible(method):
    """Run ``method`` in arithmetic that gives the same bits for the same seed.

    Two settings that would otherwise change the bits, and through a base fit or an
    extension the answer:

    - **One BLAS thread** (OpenBLAS, MKL). A sum split over threads adds in another order, so
      the same seed gave other draws with one BLAS thread than with two (a long dot product in
      the log density, a large matrix product in a base fit); the thread count is the
      machine's unless someone sets it. The methods' chains run in parallel already, so a
      second BLAS thread per chain mostly competed with them.
    - **Strict IEEE arithmetic in PyTensor's numba backend** (``numba__fastmath=False`` while
      ``method`` compiles). PyTensor compiles with LLVM's fast-math flags by default
      (reassociation, contraction to fused multiply-adds), whose effect depends on what LLVM
      inlines, and that depends on which parts of a graph came from PyTensor's on-disk cache
      and which were compiled afresh. The same seed then gave other bits on a first run (cold
      cache) than on later runs: on a 200-observation sign-flip model, a log Z of -279.92 and
      reliable on the first run and -280.66 and flagged on every later one. Without the flags
      the bits do not depend on the cache. The flag is PyTensor's own and is restored
      afterwards; models you compile yourself keep your setting.
    """

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with (
            threadpool_limits(limits=1, user_api="blas"),
            pytensor.config.change_flags(numba__fastmath=False),
        ):
            return method(*args, **kwargs)

    return wrapper


BLACKJAX_REFUSAL = (
    "nuts_sampler='blackjax' fails inside pm.sample with PyMC 6.4 and BlackJAX 1.7.1, the newest "
    "releases (\"kernel() got an unexpected keyword argument 'progress_bar'\": PyMC calls "
    "BlackJAX's window adaptation with an argument it no longer takes). Use nuts_sampler="
    "'nutpie' (the default), 'numpyro' or 'pymc'."
)


def pm_sample_kwargs(nuts_sampler: str | None, sample_kwargs: dict) -> dict:
    """The ``pm.sample`` kwargs every method that samples an extended model passes.

    - Variables named like value variables (``s_log__``) are kept: an extended model holds the
      user's value variables as ``pm.Flat`` under their value names; PyMC's converters drop
      such names by default (``include_transformed`` for PyMC's and nutpie's,
      ``keep_untransformed`` for the JAX samplers), and the weights need them.
    - ``nuts``, when given, is copied: ``pm.sample`` writes ``target_accept`` into it.
    - ``nuts_sampler_kwargs`` (PyMC's deprecated spelling) is merged into ``nuts``, with PyMC's
      ``FutureWarning``: the methods pass ``nuts`` themselves, and ``pm.sample`` refuses both.
    - ``nuts_sampler="blackjax"`` is refused (:data:`BLACKJAX_REFUSAL`): it fails upstream.
    - ``blas_cores``, unless given: PyMC raises BLAS to ``cores`` threads around an external
      sampler, which would undo :func:`reproducible`, so it is left alone there (``None``);
      PyMC's own sampler keeps ``"auto"``, which gives each parallel chain one thread.
    """
    kwargs = dict(sample_kwargs)
    if nuts_sampler == "blackjax":
        raise ValueError(BLACKJAX_REFUSAL)
    if kwargs.get("nuts_sampler_kwargs") is not None:
        # PyMC's deprecated spelling: merged into nuts={...}, with PyMC's own warning, since the
        # methods pass nuts= themselves and pm.sample refuses both at once
        legacy = kwargs.pop("nuts_sampler_kwargs")
        warnings.warn(
            "`nuts_sampler_kwargs` is deprecated. Pass NUTS keyword arguments via the "
            "`nuts={...}` argument to `pm.sample`.",
            FutureWarning,
            stacklevel=3,
        )
        both = sorted(set(legacy) & set(kwargs.get("nuts") or {}))
        if both:
            raise ValueError(f"{both} given both in nuts_sampler_kwargs and in nuts={{...}}.")
        kwargs["nuts"] = {**legacy, **(kwargs.get("nuts") or {})}
    kwargs.pop("nuts_sampler_kwargs", None)
    if "var_names" in kwargs:
        raise ValueError(
            "var_names is not taken: the method stores the variables its weights need and "
            "returns all of the model's; select from the result instead."
        )
    # pm.sample writes target_accept into the ``nuts`` dict it is given: a copy keeps the
    # caller's dict as it was, and a method's second run (an extension) from raising
    # "target_accept was defined twice"
    nuts = dict(kwargs.get("nuts") or {})
    if "target_accept" in nuts and "target_accept" in kwargs:
        raise ValueError(
            "target_accept was given twice: as an argument and in nuts={...}. Give it once, "
            "as the method's target_accept argument."
        )
    if "nuts" in kwargs:
        kwargs["nuts"] = nuts
    if nuts_sampler in ("numpyro", "blackjax"):
        kwargs["nuts"] = {**nuts, "keep_untransformed": True}
    else:
        kwargs["idata_kwargs"] = {**(kwargs.get("idata_kwargs") or {}), "include_transformed": True}
    kwargs.setdefault("blas_cores", "auto" if nuts_sampler == "pymc" else None)
    return kwargs


def check_bootstrap(bootstrap) -> None:
    """Refuse a number of bootstrap rounds that is not an integer >= 0 (``ValueError``)."""
    if not isinstance(bootstrap, int | np.integer) or bootstrap < 0:
        raise ValueError(f"bootstrap must be a number of rounds >= 0, got {bootstrap!r}.")


def check_extension_args(target_accept, max_extensions, target_se=None, max_time=None) -> None:
    """Refuse settings of continuous tempering's extensions out of range (``ValueError``)."""
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must be in (0, 1), got {target_accept!r}.")
    if not isinstance(max_extensions, int | np.integer) or max_extensions < 0:
        raise ValueError(f"max_extensions must be a number of runs >= 0, got {max_extensions!r}.")
    if target_se is not None and not _positive(target_se):
        raise ValueError(f"target_se must be a positive number or None, got {target_se!r}.")
    if max_time is not None and not _positive(max_time):
        raise ValueError(
            f"max_time must be a positive number of seconds or None, got {max_time!r}."
        )


def _positive(value) -> bool:
    """Whether ``value`` is a real number above 0 (not a bool, a string or NaN)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0
