"""Argument checks shared by the model, the samplers, the settings objects and the CLI.

One set of validators: a value of the wrong *type* raises ``TypeError`` (a bool is not
an integer or a real number), a value of the right type outside its range raises
``ValueError``.  Every message names the argument.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os

import jax
import jax.numpy as jnp
import numpy as np

from .data import RatingData
from .priors import Prior

__all__ = [
    "check_ratings",
    "check_K",
    "check_prior",
    "check_int",
    "check_positive_int",
    "check_real",
    "check_bool",
    "check_choice",
    "check_path",
    "check_dtype",
]


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    """``value`` as an int: ``TypeError`` unless an integer (bools refused),
    ``ValueError`` below ``minimum``."""
    what = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}"
    )
    if not _is_int(value):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def check_positive_int(name: str, value) -> int:
    return check_int(name, value, minimum=1)


def check_real(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the given range (``TypeError`` for
    non-numbers and bools, ``ValueError`` for NaN, inf or out of range)."""
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    what = "finite" + (" and " + " and ".join(parts) if parts else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (numbers.Real, np.floating, np.integer)
    ):
        raise TypeError(f"{name} must be a real number, {what}, got {value!r}")
    v = float(value)
    bad = not math.isfinite(v)
    bad |= low is not None and (v < low or (low_open and v == low))
    bad |= high is not None and (v > high or (high_open and v == high))
    if bad:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return v


def check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(name: str, value, choices) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {tuple(choices)} (a string), got {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_path(name: str, value):
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path, got {value!r}")
    return value


def check_ratings(ratings, name: str = "ratings") -> RatingData:
    if not isinstance(ratings, RatingData):
        raise TypeError(f"{name} must be a bmczoo.RatingData, got {type(ratings).__name__}")
    return ratings


def check_K(K, shape: tuple[int, int]) -> int:
    K = check_positive_int("K", K)
    if K > min(shape):
        raise ValueError(
            f"K={K} is too large for a {shape[0]} x {shape[1]} matrix (need K <= {min(shape)})"
        )
    return K


def check_prior(prior) -> Prior:
    if not isinstance(prior, Prior):
        from .priors import registry

        names = ", ".join(cls.__name__ for cls in registry().values())
        raise TypeError(f"prior must be one of bmczoo.priors ({names}), got {prior!r}")
    return prior


def x64_context(dtype):
    """``jax.enable_x64`` for a float64 fit (its programs and the work on its results run
    in float64 whatever the global setting), nothing for float32."""
    return jax.enable_x64(True) if jnp.dtype(dtype) == jnp.float64 else contextlib.nullcontext()


def check_dtype(dtype=None) -> np.dtype:
    """The floating dtype of a fit: float32 or float64; ``None`` is float64 when
    ``jax_enable_x64`` is on and float32 otherwise."""
    if dtype is None:
        return jnp.dtype(jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if dt not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return dt
