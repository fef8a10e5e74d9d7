"""NumPyro models of the zoo."""

from .matrix_completion import matrix_completion
from .tensor_completion import tensor_completion

__all__ = ["matrix_completion", "tensor_completion"]
