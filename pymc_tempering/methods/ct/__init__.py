"""Joint continuous tempering: ``sample_ct`` and the model it samples."""

from pymc_tempering.methods.ct.sampler import continuously_tempered_model, sample_ct

__all__ = ["continuously_tempered_model", "sample_ct"]
