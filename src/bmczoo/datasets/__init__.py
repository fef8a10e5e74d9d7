"""Datasets: the paper's simulator and MovieLens loaders.

- :func:`simulate_paper` draws the paper's synthetic low-rank design and returns a
  :class:`Simulation` (observed entries, true matrix, full-matrix RMSE helper).
- :func:`load_movielens` reads a MovieLens release from a local file or folder, or from a
  user cache filled by a checksum-verified download; :data:`DATASETS` holds the metadata
  of the supported releases.

Nothing here touches the network at import time.
"""

from .movielens import DATASETS, MovieLensInfo, cache_root, load_movielens
from .simulate import Simulation, simulate_paper

__all__ = ["DATASETS", "MovieLensInfo", "Simulation", "cache_root", "load_movielens", "simulate_paper"]
