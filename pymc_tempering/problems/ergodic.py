"""The 2-D targets of the ergodic-inference paper (Table 2; section 3.3's Gaussian), with their
entropy term, mean and covariance by quadrature."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_tempering.problems.record import Problem, Truth

__all__ = [
    "SECTION_3_3_SIGMA",
    "problems",
    "shifted_scaled_gaussian",
    "table_2_gauss_u",
    "table_2_model",
    "table_2_mog_u",
    "table_2_quadrature",
    "table_2_ring_u",
]

#: Section 3.3's target covariance.
SECTION_3_3_SIGMA = np.array([[2.0, 1.5], [1.5, 1.6]])


def shifted_scaled_gaussian(scale):
    """Section 3.3's correlated Gaussian in units of ``scale``, its mean at ``(1, -2) scale``:
    the model, the mean and the covariance."""
    mean = np.array([1.0, -2.0]) * scale
    with pm.Model() as model:
        pm.MvNormal("x", mu=mean, cov=SECTION_3_3_SIGMA * scale**2)
    return model, mean, SECTION_3_3_SIGMA * scale**2



def table_2_gauss_u(z1, z2, lib=np):
    """Section 3.3's Gaussian ``N(0, SECTION_3_3_SIGMA)`` as a potential (normalised)."""
    prec = np.linalg.inv(SECTION_3_3_SIGMA)
    quad = prec[0, 0] * z1**2 + 2 * prec[0, 1] * z1 * z2 + prec[1, 1] * z2**2
    return 0.5 * quad + np.log(2 * np.pi) + 0.5 * np.log(np.linalg.det(SECTION_3_3_SIGMA))


def table_2_ring_u(z1, z2, lib=np):
    """Rezende & Mohamed's (2015) potential U1, a ring with two lobes (proper on R^2)."""
    r = lib.sqrt(z1**2 + z2**2)
    return 0.5 * ((r - 2) / 0.4) ** 2 - lib.logaddexp(
        -0.5 * ((z1 - 2) / 0.6) ** 2, -0.5 * ((z1 + 2) / 0.6) ** 2
    )


def table_2_mog_u(z1, z2, lib=np):
    """An equal mixture of N((+-1.5, 0), 0.7^2 I), normalised."""
    s2 = 0.7**2
    a = -0.5 * ((z1 - 1.5) ** 2 + z2**2) / s2
    b = -0.5 * ((z1 + 1.5) ** 2 + z2**2) / s2
    # log(0.5 e^a + 0.5 e^b) as logaddexp: the naive form underflows to log(0) away from the
    # modes (|z| beyond about 27), where a chain or the Stein calibration can go
    return -lib.logaddexp(a, b) + np.log(2.0) + np.log(2 * np.pi * s2)


def table_2_model(u):
    """A PyMC model of ``pi* = exp(-U)``: a flat 2-vector ``z`` and the potential ``-U``."""
    with pm.Model() as model:
        z = pm.Flat("z", shape=2)
        pm.Potential("u", -u(z[0], z[1], lib=pt))
    return model


def table_2_quadrature(u):
    """``E_pi[U]``, the mean and the covariance of ``pi ~ exp(-U)`` by quadrature on a 1201^2
    grid on [-8, 8]^2 (errors far below the tests' and the benchmark's standard errors)."""
    g = np.linspace(-8, 8, 1201)
    z = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
    uu = u(z[:, 0], z[:, 1])
    p = np.exp(-(uu - uu.min()))
    p /= p.sum()
    mean = p @ z
    centred = z - mean
    return float(p @ uu), mean, (centred * p[:, None]).T @ centred


def problems() -> list[Problem]:
    """``ergodic_ring``, ``ergodic_gauss`` and ``ergodic_mog``: Table 2's targets, with
    ``E_pi[U]`` (``"expected_u"``), mean and covariance by quadrature."""

    def problem(name, u, description):
        def truth():
            expected_u, mean, cov = table_2_quadrature(u)
            return Truth(moments={"expected_u": expected_u, "mean": mean, "cov": cov})

        return Problem(f"ergodic_{name}", "ergodic", lambda: table_2_model(u), truth, description)

    return [
        problem("ring", table_2_ring_u, "Rezende & Mohamed's ring U1 on a flat 2-vector"),
        problem("gauss", table_2_gauss_u, "section 3.3's correlated 2-D Gaussian"),
        problem("mog", table_2_mog_u, "equal mixture of N((+-1.5, 0), 0.7^2 I)"),
    ]
