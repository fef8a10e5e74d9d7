"""Argument checks shared by the model, the samplers and the CLI."""

from __future__ import annotations

import math
import numbers

from .data import RatingData
from .priors import Prior

__all__ = ["check_ratings", "check_K", "check_prior", "likelihood_precision", "check_positive_int"]


def check_ratings(ratings, name: str = "ratings") -> RatingData:
    if not isinstance(ratings, RatingData):
        raise ValueError(f"{name} must be a bmczoo.RatingData, got {type(ratings).__name__}")
    return ratings


def check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_K(K, shape: tuple[int, int]) -> int:
    K = check_positive_int("K", K)
    if K > min(shape):
        raise ValueError(f"K={K} is too large for a {shape[0]} x {shape[1]} matrix (need K <= {min(shape)})")
    return K


def check_prior(prior) -> Prior:
    if not isinstance(prior, Prior):
        raise ValueError(
            f"prior must be one of bmczoo.priors (Fixed, InverseGamma, Gamma, Discrete), got {prior!r}"
        )
    return prior


def likelihood_precision(n: int, lam: float | None, noise_sd: float) -> float:
    """``tau = 2 lam / n``; with ``lam=None`` the ordinary posterior ``tau = 1 / noise_sd^2``."""
    if lam is None:
        s = float(noise_sd)
        if not math.isfinite(s) or s <= 0:
            raise ValueError(f"noise_sd must be finite and > 0, got {noise_sd!r}")
        return 1.0 / s**2
    lam_f = float(lam)
    if not math.isfinite(lam_f) or lam_f <= 0:
        raise ValueError(f"lam must be finite and > 0, got {lam!r}")
    return 2.0 * lam_f / n
