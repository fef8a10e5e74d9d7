"""Rows beyond the paper: the library's other members on the paper's MovieLens data.

The paper has no such rows, so their reference RMSE is NaN (the table prints ``—``).
Each model is run on every (dataset, method) of the paper's Table 6, with the same
selection as the paper's rows: a grid over the prior's tuned hyper-parameter
(:meth:`~bmczoo.priors.Prior.tuned_name`; ``W0_scale`` for the Normal-Wishart) chosen on
a validation split of the training data, then one test fit (the table: docs/paper.md,
"Table 6: MovieLens"; the models: docs/algorithms.md, "Normal-Wishart rows", "Learned
noise" and "Biases").
"""

from __future__ import annotations

from ..likelihoods import LearnedNoise
from ..offsets import Biases

__all__ = ["MOVIELENS_BEYOND"]

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
