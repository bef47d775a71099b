"""PyMC step methods: Gibbs draws of the inverse temperature given the target state."""
