"""What every driver starts from: the prepared data of a fit (:class:`Prepared`), the
entries whose draws are traced (:func:`track_entries`) and what identifies its run for a
checkpoint (:func:`run_settings`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from ..data import Features, RatingData
from .checkpoint import fingerprint

if TYPE_CHECKING:
    from .info import FitInfo

__all__ = ["Prepared", "run_settings", "track_entries"]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The data of one fit: the training data as given and as fitted (centred), the
    entries whose posterior mean is computed during the fit (test entries first), and
    the test values (data scale) for the per-iteration RMSE traces; ``context``: the test
    ratings' per-rating table, which the sampled offsets read at those entries (None
    without sampled offsets)."""

    train: RatingData
    fit_data: RatingData
    pred_rows: np.ndarray
    pred_cols: np.ndarray
    test_values: np.ndarray
    context: Features | None = None


def track_entries(train: RatingData, track, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The entries whose ``theta`` is recorded per kept draw: ``track`` a number ``k`` of
    observed entries, drawn uniformly without replacement with
    ``numpy.random.default_rng(seed)`` and sorted (None: none), or ``(rows, cols)``
    (checked against ``train``)."""
    if track is None:
        track = 0
    if isinstance(track, (int, np.integer)) and not isinstance(track, (bool, np.bool_)):
        if track < 0:
            raise ValueError(f"track must be (rows, cols) or a number of entries >= 0, got {track}")
        num = min(int(track), train.n)
        pos = np.sort(np.random.default_rng(seed).choice(train.n, size=num, replace=False))
        return train.rows[pos], train.cols[pos]
    return train.check_entries(*track, name="track")


def run_settings(prep: Prepared, info: FitInfo, **extra) -> dict:
    """What identifies a run for its checkpoint (JSON-serialisable)."""
    d = prep.fit_data
    return {
        "method": info.method,
        "data": fingerprint(d.rows, d.cols, d.values),
        "shape": list(info.shape),
        "prior": info.prior.name,
        "hyperparameters": {k: float(v) for k, v in info.prior.hyperparameters().items()},
        "K": int(info.K),
        "tau": float(info.tau),
        "likelihood": {
            k: (float(v) if isinstance(v, (int, float)) else v)
            for k, v in info.likelihood.describe().items()
        },
        "biases": None if info.biases is None else info.biases.describe(),
        "seed": int(info.seed),
        "dtype": info.dtype,
        "predict": fingerprint(prep.pred_rows, prep.pred_cols, prep.test_values),
        # a prior's feature links (only when it has some: other checkpoints stay valid)
        **({"links": links} if (links := getattr(info.prior, "links", dict)()) else {}),
        # sampled offsets and the per-rating tables they read (only with offsets)
        **(_offset_settings(prep, info) if info.offsets else {}),
        **extra,
    }


def _offset_settings(prep: Prepared, info: FitInfo) -> dict:
    """The sampled offsets and fingerprints of the context tables of the training ratings
    and of the requested entries."""

    def table(f):
        return None if f is None else fingerprint(f.indptr, f.indices, f.values)

    return {
        "offsets": [o.describe() for o in info.offsets],
        "context": [table(prep.fit_data.context), table(prep.context)],
    }
