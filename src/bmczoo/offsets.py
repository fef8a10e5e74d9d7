"""Offset components: what is added to ``theta = M N^T`` to predict a rating.

Today one component, :class:`GlobalMean`: the model is fitted to the ratings minus their
mean, which is added back to every prediction, and predictions may be clipped to the
observed range (star ratings).  :class:`Shift` is the resulting map from ``theta`` to a
prediction; its :meth:`Shift.apply` is the one place where the offset and the clipping
are applied (results, VB's RMSE trace, and the Gibbs kernel's jitted RMSE all call it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .data import RatingData

__all__ = ["GlobalMean", "Shift", "looks_like_ratings"]


def looks_like_ratings(values: np.ndarray) -> bool:
    """True when every value is a multiple of 0.5 in a small range (star ratings)."""
    v = np.asarray(values)
    lo, hi = float(v.min()), float(v.max())
    return bool(hi - lo <= 10 and np.all(np.round(2 * v) == 2 * v))


@dataclasses.dataclass(frozen=True)
class Shift:
    """Prediction = ``clip(theta + offset, lo, hi)`` (``lo, hi = -inf, inf``: no clipping)."""

    offset: float = 0.0
    lo: float = -math.inf
    hi: float = math.inf

    @property
    def clip(self) -> tuple[float, float] | None:
        return None if (self.lo, self.hi) == (-math.inf, math.inf) else (self.lo, self.hi)

    def apply(self, theta):
        """Works on numpy and JAX arrays (both have ``.clip``)."""
        return shift_clip(theta, self.offset, self.lo, self.hi)


def shift_clip(theta, offset, lo, hi):
    """``clip(theta + offset, lo, hi)`` for numpy or JAX arrays (also traced values)."""
    return (theta + offset).clip(lo, hi)


@dataclasses.dataclass(frozen=True)
class GlobalMean:
    """The global centring: fit ``Y - mean(Y)`` and add the mean back.

    Parameters
    ----------
    center : bool
        Subtract the training mean (False: fit the raw values, offset 0).
    clip : "auto", bool or (lo, hi)
        Clip predictions: ``"auto"`` to the observed range when the values look like star
        ratings (multiples of 0.5 within a span of 10), ``True`` to the observed range,
        ``False``/``None`` never, or to a given range.
    """

    center: bool = True
    clip: object = "auto"
    name = "global-mean"

    def __post_init__(self):
        from ._checks import ArgumentTypeError, check_bool

        check_bool("center", self.center)
        c = self.clip
        if isinstance(c, str):
            if c != "auto":
                raise ValueError(f"clip must be 'auto', a bool or (lo, hi), got {c!r}")
        elif not (c is None or isinstance(c, (bool, np.bool_))):
            if not (isinstance(c, (tuple, list)) and len(c) == 2):
                raise ArgumentTypeError(f"clip must be 'auto', a bool or a pair (lo, hi), got {c!r}")
            lo, hi = (float(x) for x in c)
            if not lo < hi:
                raise ValueError(f"clip range must have lo < hi, got {c!r}")
            object.__setattr__(self, "clip", (lo, hi))

    def prepare(self, train: RatingData) -> tuple[RatingData, Shift]:
        """The data the model is fitted to and the map from ``theta`` to predictions."""
        fit_data, offset = train.centered() if self.center else (train, 0.0)
        c = self.clip
        if c == "auto":
            c = looks_like_ratings(train.values)
        if c is True or c is np.True_:
            lo, hi = train.value_range()
        elif c is None or c is False or c is np.False_:
            lo, hi = -math.inf, math.inf
        else:
            lo, hi = c
        return fit_data, Shift(float(offset), float(lo), float(hi))
