"""Kernels: each method's numerics as ``init`` / ``step`` over small immutable records."""
