"""The methods, one package each; each package's ``__init__`` names its entry point.

- model transformations on the extended-model runner (:mod:`pymc_tempering.extended`):
  :mod:`~pymc_tempering.methods.ct` (``sample_ct``), :mod:`~pymc_tempering.methods.gibbs_ct`
  (``sample_gibbs_ct``), :mod:`~pymc_tempering.methods.pseudo_extended` (``sample_pe``);
- drivers with their own dynamics on the driver loop (:mod:`pymc_tempering.driver`):
  :mod:`~pymc_tempering.methods.ais` (``sample_ais``),
  :mod:`~pymc_tempering.methods.simulated_tempering` (``sample_simulated_tempering``),
  :mod:`~pymc_tempering.methods.tact` (``sample_tact``),
  :mod:`~pymc_tempering.methods.replica_exchange` (``sample_replica_exchange``),
  :mod:`~pymc_tempering.methods.ergodic` (``fit_ergodic``).

A method imports the layers below it, never another method; ``pymc_tempering`` re-exports the
entry points.
"""
