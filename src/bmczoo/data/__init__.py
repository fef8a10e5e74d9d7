"""Rating data: the validated container, its index views, and side-information features."""

from ._implicit import implicit_features
from ._table import features_from_table
from ._time import TIME_GROUPS, TimeEncoder, time_bins, time_features
from .features import Features, hstack_features
from .ratings import OFFICIAL_FOLDS, RatingData, SortedView
from .tensor import TensorData

__all__ = [
    "OFFICIAL_FOLDS",
    "TIME_GROUPS",
    "TimeEncoder",
    "Features",
    "RatingData",
    "SortedView",
    "TensorData",
    "features_from_table",
    "hstack_features",
    "implicit_features",
    "time_bins",
    "time_features",
]
