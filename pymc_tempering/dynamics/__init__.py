"""Samplers that run their own dynamics: one module per method, each holding its public entry point.

- :mod:`~pymc_tempering.dynamics.ais`: ``sample_ais``, annealed importance sampling with HMC;
- :mod:`~pymc_tempering.dynamics.simulated_tempering`: ``sample_simulated_tempering``, HMC on a
  discrete temperature ladder;
- :mod:`~pymc_tempering.dynamics.tact`: ``sample_tact``, TACT-HMC (thermostat-assisted
  continuously-tempered dynamics for minibatched models) and its ablations;
- :mod:`~pymc_tempering.dynamics.replica_exchange`: ``sample_replica_exchange``, replicas with
  thermostats and a noise-corrected swap test;
- :mod:`~pymc_tempering.dynamics.ergodic`: ``fit_ergodic``, a tuned finite HMC chain as an
  approximation.

Each runs the one driver loop (:func:`pymc_tempering.driver.run_kernel`; for the samplers its
``tune`` warm-up iterations are discarded) and builds its result with
:func:`pymc_tempering.driver.driver_result`; the numerics (HMC, ladder moves, thermostats,
exchanges) are the pure ``init``/``step`` kernels of :mod:`pymc_tempering.kernels`. The package
``pymc_tempering`` re-exports the entry points.
"""
