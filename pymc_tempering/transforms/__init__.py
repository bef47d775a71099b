"""Model transformations: a PyMC model in, an extended PyMC model out."""
