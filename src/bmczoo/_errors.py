"""The package's exception types (a module of its own: imported by every layer)."""

__all__ = ["ArgumentTypeError"]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a ``TypeError``, and also a ``ValueError`` for code
    written against earlier versions, which raised ``ValueError`` for every bad argument."""
