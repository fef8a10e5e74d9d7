"""Rows beyond the paper: the library's other members on the paper's MovieLens data.

The paper has no such rows, so their reference RMSE is NaN (the table prints ``—``).
Each model is run on every (dataset, method) of the paper's Table 6 (:data:`MOVIELENS_LINKED`,
the models with the datasets' side features and implicit feedback, when asked for and where
the dataset has the side tables), with the same
selection as the paper's rows: a grid over the prior's tuned hyper-parameter
(:meth:`~bmczoo.priors.Prior.tuned_name`; ``W0_scale`` for the Normal-Wishart) chosen on
a validation split of the training data, then one test fit (the table: docs/paper.md,
"Table 6: MovieLens"; the models: docs/algorithms.md, "Normal-Wishart rows", "Learned
noise", "Biases" and "Feature links (side information)").
"""

from __future__ import annotations

from ..likelihoods import LearnedNoise
from ..offsets import Biases

__all__ = ["MOVIELENS_BEYOND", "MOVIELENS_LINKED", "linked_rows"]

# (prior, hyper-parameters the grid is centred on (None: the prior's command-line
# defaults), likelihood (None: the paper's tempered one), biases (None: none))
MOVIELENS_BEYOND: list[tuple] = [
    (
        "normal-wishart",
        None,
        None,
        None,
    ),  # BPMF rows (Salakhutdinov & Mnih 2008), the paper's likelihood
    ("normal-wishart", None, LearnedNoise(), Biases()),  # the README's recommended model
]

# the same with the prior's feature links (its keywords, :func:`~bmczoo.experiments.tasks.links_pairs`):
# the users' and movies' side tables the loader reads beside the ratings, and implicit
# feedback on both sides (docs/user-guide/priors.md, "Side information, implicit feedback
# and cold start")
MOVIELENS_LINKED: list[tuple] = [
    (
        "normal-wishart",
        None,
        LearnedNoise(),
        Biases(),
        {"row_features": True, "col_features": True, "implicit": True},
    ),
]


def linked_rows(train) -> tuple[list[tuple], str]:
    """The rows of :data:`MOVIELENS_LINKED` whose side tables (``row_features=True`` /
    ``col_features=True``: the data's) the ratings ``train`` have, and a message naming the
    rows skipped for a missing table ("" when none is)."""
    kept, skipped = [], []
    for row in MOVIELENS_LINKED:
        links = dict(row[4]) if len(row) > 4 and row[4] else {}
        missing = [
            name
            for name in ("row_features", "col_features")
            if links.get(name) and getattr(train, name) is None
        ]
        if missing:
            skipped.append(f"the row with {', '.join(missing)} skipped (no side table)")
        else:
            kept.append(row)
    return kept, "; ".join(skipped)
