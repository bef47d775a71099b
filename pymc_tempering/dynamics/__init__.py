"""Drivers with their own dynamics (AIS, simulated tempering) and the HMC numerics they share."""
