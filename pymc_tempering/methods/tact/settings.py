"""The expert options of :func:`~pymc_tempering.sample_tact`: :class:`TemperingSettings`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TemperingSettings"]


@dataclass(frozen=True)
class TemperingSettings:
    """The tempering variable of TACT-HMC: its dynamics and the shape of its temperature.

    Passed to :func:`~pymc_tempering.sample_tact` as ``tempering=``; the defaults are those
    the sampler uses without it. The variants without tempering (``"sgnht"``, ``"sghmc"``)
    hold the tempering variable still and use none of these but the noise level, at which its
    (idle) thermostat stays.

    Attributes
    ----------
    step_size : "auto" or float
        ``eta_xi = dt^2 / m_xi`` of Algorithm 1. ``"auto"`` (default): 0.001, capped so that
        the tempering thermostat's excess ``eta_xi sigma_U^2 / 2`` from the minibatch energy
        noise ``sigma_U^2`` (measured at the start and, with ``step_size="auto"``, at every
        warm-up window) stays below 0.05, and so that its kicks stay within 0.4 thermal sds
        for a model of this many parameters
        (:func:`~pymc_tempering.adaptation.step_size.tempering_step_cap`: 8.7e-5 at 89
        parameters, no cap below 8). A number is used as it is.
    noise : float
        Level ``c_xi`` of the noise ``N(0, 2 c eta_xi)`` injected into the tempering
        variable; also the friction its thermostat settles at without energy noise, and its
        constant friction in the ablation without thermostats.
    thermal_inertia : float
        ``gamma_xi`` of Algorithm 1: larger is a slower, smoother thermostat.
    unit_temperature_fraction : float
        The part ``[0, a]`` of the tempering well ``[0, 1]`` where the temperature is one (the
        draws are kept there); in ``(0, 1)``.
    abf_bins : int
        Bins of the adaptive biasing force over the well.
    abf_ramp : float
        The weight, in visits, of the chain's overall mean energy in each bin's estimate of the
        biasing force.
    """

    step_size: float | str = "auto"
    noise: float = 0.05
    thermal_inertia: float = 1.0
    unit_temperature_fraction: float = 0.3
    abf_bins: int = 20
    abf_ramp: float = 100.0

    def check(self) -> bool:
        """Refuse bad values (``ValueError`` naming the field); whether ``step_size`` is
        ``"auto"``."""
        auto = isinstance(self.step_size, str)
        if auto and self.step_size != "auto":
            raise ValueError(
                f"tempering.step_size must be 'auto' or a positive number, got {self.step_size!r}."
            )
        positive = {"thermal_inertia": self.thermal_inertia, "abf_ramp": self.abf_ramp}
        if not auto:
            positive["step_size"] = self.step_size
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"tempering.{name} must be positive, got {value}.")
        if not self.noise >= 0:
            raise ValueError(f"tempering.noise must be non-negative, got {self.noise}.")
        if not 0 < self.unit_temperature_fraction < 1:
            raise ValueError("tempering.unit_temperature_fraction must lie in (0, 1).")
        if int(self.abf_bins) != self.abf_bins or self.abf_bins < 1:
            raise ValueError(
                f"tempering.abf_bins must be an integer of at least 1, got {self.abf_bins}."
            )
        return auto
