"""The base densities that the tempering methods bridge to, and how they are fitted.

- :mod:`~pymc_tempering.bases.densities`: the normalised densities on the flat unconstrained
  space, :class:`Base` (Gaussian), :class:`PriorDensity` (the model's prior) and
  :class:`MixtureBase`, and :func:`check_base`;
- :mod:`~pymc_tempering.bases.modes`: the mode search (:func:`find_modes`, :class:`Modes`), its
  spikes, the Hessian and Laplace helpers and the prior draws;
- :mod:`~pymc_tempering.bases.census`: the regions of a target whose mode search finds no
  optimum, by short NUTS runs from prior draws (:func:`census_regions`);
- :mod:`~pymc_tempering.bases.advi`: the ADVI engine (PyMC's ADVI with Adam, a plateau stop and
  one compiled step per base; why it is not :func:`pymc.fit` is in its docstring);
- :mod:`~pymc_tempering.bases.fit`: :func:`fit_base` and its methods, the bootstrap refit
  :func:`base_from_result`, :func:`widen_base`, :func:`estimate_log_zeta` and
  :func:`prepare_base`.

The modules import one another in that order (modes, census, densities, advi, fit). This package
re-exports the names other packages use.
"""

from pymc_tempering.bases.densities import (
    Base,
    MixtureBase,
    PriorDensity,
    check_base,
    gaussian_logp_graph,
)
from pymc_tempering.bases.fit import (
    base_from_result,
    estimate_log_zeta,
    fit_base,
    fit_base_to_target,
    prepare_base,
    widen_base,
)
from pymc_tempering.bases.modes import (
    MODE_MAX_ITER,
    N_MODE_STARTS,
    Modes,
    discover_optima,
    find_modes,
    hessian,
    laplace_cov,
    modes_from_result,
    search_modes,
)

__all__ = [
    "MODE_MAX_ITER",
    "N_MODE_STARTS",
    "Base",
    "MixtureBase",
    "Modes",
    "PriorDensity",
    "base_from_result",
    "check_base",
    "discover_optima",
    "estimate_log_zeta",
    "find_modes",
    "fit_base",
    "fit_base_to_target",
    "gaussian_logp_graph",
    "hessian",
    "laplace_cov",
    "modes_from_result",
    "prepare_base",
    "search_modes",
    "widen_base",
]
