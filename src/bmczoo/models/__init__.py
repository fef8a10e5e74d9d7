"""NumPyro models of the zoo."""

from .matrix_completion import matrix_completion

__all__ = ["matrix_completion"]
