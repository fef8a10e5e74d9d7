"""Datasets: the paper's simulator and MovieLens loaders.

- :func:`simulate_paper` draws the paper's synthetic low-rank design and returns a
  :class:`Simulation` (observed entries, true matrix, full-matrix RMSE helper).
- :func:`load_movielens` reads a MovieLens release from a local file or folder, or from a
  user cache filled by a checksum-verified download, with the side files found beside the
  ratings as ``row_features`` / ``col_features``; :data:`DATASETS` holds the metadata
  of the supported releases.
- :func:`load_movielens_side` gives the raw user and movie tables for other encodings;
  :func:`movielens_features` encodes them as the loader does (:data:`SIDE_FEATURES`).
- :func:`read_ratings` reads any delimited ratings file (``user item rating`` lines), the
  reader behind :func:`load_movielens` and ``bmczoo fit --data FILE``; a failed download
  raises :class:`DownloadError`, whose message says how to pass a local copy.

Nothing here touches the network at import time.
"""

from ._download import DownloadError
from ._reader import read_ratings
from .movielens import (
    DATASETS,
    SIDE_FEATURES,
    MovieLensInfo,
    cache_root,
    load_movielens,
    load_movielens_side,
    movielens_features,
)
from .simulate import Simulation, simulate_paper

__all__ = [
    "DATASETS",
    "SIDE_FEATURES",
    "DownloadError",
    "MovieLensInfo",
    "Simulation",
    "cache_root",
    "load_movielens",
    "load_movielens_side",
    "movielens_features",
    "read_ratings",
    "simulate_paper",
]
