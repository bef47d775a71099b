"""Same seed, same bits, whatever the BLAS thread count or the compile cache.

Each run is a fresh process (the thread count of OpenBLAS is fixed when NumPy loads) with the
thread-count variables of OpenBLAS, MKL and OpenMP set to 1 or 2; the whole default path of
``sample_ct`` (mode search, base, log_zeta estimate, final run) must give bit-identical draws and
evidence. The model's log density is a dot product of 200,000 residuals, which OpenBLAS splits
over its threads, so without BLAS pinned to one thread (``reproducible``) the draws of the two
processes would differ. The script also reports that dot product computed outside the
library, so the test shows the thread count does change the arithmetic here.
"""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pymc_tempering as pmt
y = np.random.default_rng(0).normal(1.0, 1.0, size=200_000)
with pm.Model() as model:
    mu = pm.Normal("mu", 0.0, 10.0)
    resid = y - mu
    pm.Potential("likelihood", -0.5 * pt.dot(resid, resid))
idata = pmt.sample_ct(200, 200, 2, model=model, random_seed=int(sys.argv[2]), progressbar=False)
print(json.dumps({
    "plain_dot": float(np.dot(y - 1.0, y - 1.0)).hex(),
    "log_z": float(idata.attrs["log_marginal_likelihood"]).hex(),
    "draws": [float(v).hex() for v in idata["posterior"]["mu"].values.ravel()],
}))
"""


def _run(threads: int, random_seed: int) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, os.path.dirname(__file__), str(random_seed)],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh processes
def test_same_seed_same_bits_with_one_and_two_blas_threads():
    from checks import seed

    one, two = _run(1, seed(90)), _run(2, seed(90))
    if one["plain_dot"] == two["plain_dot"]:
        pytest.skip("this BLAS gives the same dot product with one and two threads: nothing to test")
    differ = [i for i, (a, b) in enumerate(zip(one["draws"], two["draws"])) if a != b]
    assert one["log_z"] == two["log_z"] and not differ, (
        f"log Z {float.fromhex(one['log_z'])!r} vs {float.fromhex(two['log_z'])!r}; "
        f"{len(differ)} of {len(one['draws'])} draws differ, the first at {differ[:1]}"
    )


CACHE_SCRIPT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import pymc as pm
import pymc_tempering as pmt
y = np.random.default_rng(5).normal(1.5**2, 1.0, size=200)
with pm.Model() as model:
    theta = pm.Normal("theta", 0.0, 3.0)
    pm.Normal("y", theta**2, 1.0, observed=y)
idata = pmt.sample_ct(model=model, random_seed=int(sys.argv[1]), progressbar=False)
print(json.dumps({
    "log_z": float(idata.attrs["log_marginal_likelihood"]).hex(),
    "draws": [float(v).hex() for v in idata["posterior"]["theta"].values.ravel()],
}))
"""


@pytest.mark.slow  # a cold compile cache
def test_same_seed_same_bits_with_a_cold_and_a_warm_compile_cache(tmp_path):
    """A sign-flip model (200 observations, two separated modes) at the defaults, first with an
    empty PyTensor compile cache and then with the cache that run filled. With PyTensor's
    fast-math flags (its default), the two runs can differ from the mode search on;
    :func:`pymc_tempering.contract.reproducible` compiles without them."""
    from checks import seed

    env = dict(os.environ)
    flags = [f for f in env.get("PYTENSOR_FLAGS", "").split(",") if f and "compiledir" not in f]
    env["PYTENSOR_FLAGS"] = ",".join([*flags, f"base_compiledir={tmp_path}"])
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", CACHE_SCRIPT, str(seed(5))],
            env=env, capture_output=True, text=True, check=True, timeout=900,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    differ = [i for i, (a, b) in enumerate(zip(cold["draws"], warm["draws"])) if a != b]
    assert cold["log_z"] == warm["log_z"] and not differ, (
        f"log Z {float.fromhex(cold['log_z'])!r} (cold cache) vs "
        f"{float.fromhex(warm['log_z'])!r} (warm); {len(differ)} of {len(cold['draws'])} draws "
        f"differ, the first at {differ[:1]}"
    )
