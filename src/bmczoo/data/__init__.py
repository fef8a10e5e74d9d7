"""Rating data: the validated container and its index views."""

from .ratings import RatingData, SortedView

__all__ = ["RatingData", "SortedView"]
