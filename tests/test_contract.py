"""contract.py: the argument check, seeds and reproducible arithmetic (no sampling)."""

import numpy as np
import pytensor
import pytest

from pymc_tempering.contract import (
    DivergenceError,
    check_sampler_args,
    reproducible,
    pm_sample_kwargs,
    seed_attrs,
    split_seed,
)


def test_check_sampler_args_accepts_and_converts():
    assert check_sampler_args(10, 0, 1) == (10, 0, 1)
    out = check_sampler_args(np.int64(5), np.int32(2), np.int8(3))
    assert out == (5, 2, 3) and all(type(v) is int for v in out)


@pytest.mark.parametrize(
    "args, name",
    [
        ((0, 10, 2), "draws"),
        ((-5, 10, 2), "draws"),
        ((1.5, 10, 2), "draws"),
        (("10", 10, 2), "draws"),
        ((True, 10, 2), "draws"),
        ((10, -1, 2), "tune"),
        ((10, 0.5, 2), "tune"),
        ((10, 10, 0), "chains"),
        ((10, 10, None), "chains"),
    ],
)
def test_check_sampler_args_errors_name_the_argument(args, name):
    with pytest.raises(ValueError, match=f"{name} must be an integer of at least"):
        check_sampler_args(*args)


def test_check_sampler_args_min_draws():
    with pytest.raises(ValueError, match="at least 2"):
        check_sampler_args(1, 0, 1, min_draws=2)


def test_split_seed_reproducible_and_independent():
    a, b = split_seed(42, 3), split_seed(42, 3)
    assert a == b and len(set(a)) == 3 and all(isinstance(s, int) for s in a)
    assert split_seed(43, 3) != a
    assert split_seed(None, 2) == [None, None]
    g1, g2 = split_seed(np.random.default_rng(1), 2), split_seed(np.random.default_rng(1), 2)
    assert g1 == g2
    # a prefix of a longer split is the shorter split (SeedSequence.spawn)
    assert split_seed(42, 5)[:3] == a


def test_seed_attrs():
    assert seed_attrs(7) == {"random_seed": 7}
    assert type(seed_attrs(np.int64(7))["random_seed"]) is int
    assert seed_attrs(None) == {}
    assert seed_attrs(np.random.default_rng(0)) == {}
    assert seed_attrs(True) == {}


def test_divergence_error_is_a_floating_point_error():
    assert issubclass(DivergenceError, FloatingPointError)


def test_pm_sample_kwargs():
    pymc_kwargs = pm_sample_kwargs("pymc", {"target_accept": 0.9})
    assert pymc_kwargs == {
        "target_accept": 0.9, "idata_kwargs": {"include_transformed": True}, "blas_cores": "auto"
    }
    jax_kwargs = pm_sample_kwargs("numpyro", {"nuts": {"chain_method": "vectorized"}})
    assert jax_kwargs["nuts"] == {"chain_method": "vectorized", "keep_untransformed": True}
    # around an external sampler PyMC's limiter stays out, so reproducible's limit holds
    assert pm_sample_kwargs(None, {})["blas_cores"] is None
    assert pm_sample_kwargs("nutpie", {"blas_cores": 2})["blas_cores"] == 2


def test_reproducible_limits_and_restores():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    before = blas_threads()
    fastmath = pytensor.config.numba__fastmath

    @reproducible
    def inside():
        """Doc."""
        return blas_threads(), pytensor.config.numba__fastmath

    threads, inside_fastmath = inside()
    assert set(threads.values()) == {1} and inside_fastmath is False
    assert blas_threads() == before and pytensor.config.numba__fastmath == fastmath
    assert inside.__doc__ == "Doc."
