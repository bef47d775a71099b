"""Every example script runs end to end (slow: minutes each; run with -m slow)."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(script, *args, cwd):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args",
    [
        ("quickstart.py", []),
        ("radon_evidence.py", ["--draws", "300", "--smc-draws", "500"]),
        ("bayes_factor.py", ["--draws", "300"]),
        ("multimodal.py", ["{tmp}/multimodal.png", "--draws", "500"]),
        ("pe_banana.py", ["{tmp}/banana.png"]),
        ("pe_flower.py", ["{tmp}/flower.png"]),
        ("gibbs_ct.py", ["{tmp}/gibbs_ct.png", "--draws", "300"]),
        ("tact_hmc.py", ["{tmp}/tact_hmc.png", "--draws", "300"]),
        ("replica_exchange.py", ["{tmp}/replica_exchange.png", "--draws", "300"]),
        ("ergodic.py", ["{tmp}/ergodic.png", "--iterations", "20", "--draws", "1000"]),
    ],
)
def test_example_runs(script, args, tmp_path):
    out = run(script, *[a.format(tmp=tmp_path) for a in args], cwd=tmp_path)
    assert out.strip()
    # nothing is written into the working directory unless a path was given
    assert {p.name for p in tmp_path.iterdir()} <= {
        "multimodal.png", "banana.png", "flower.png", "multimodal_inverse_temperature.png",
        "gibbs_ct.png", "tact_hmc.png", "replica_exchange.png", "ergodic.png",
    }
