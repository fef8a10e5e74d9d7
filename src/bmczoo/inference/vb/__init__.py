"""Closed-form mean-field variational Bayes (CAVI) for every model of the zoo.

:mod:`.state` holds the variational state (:class:`VBState`), its start and its arrays
by name; :mod:`.cavi` the coordinate updates (:func:`update`); :mod:`.elbo` the evidence
lower bound (:func:`elbo`); :mod:`.driver` runs them for ``bmc.fit(method="vb")``
(docs/algorithms.md, "Mean-field variational Bayes").
"""

from .cavi import update
from .elbo import elbo, expected_sq_error
from .state import (
    Sharded,
    VBState,
    init,
    prior_q,
    ratings_mean,
    shard_state,
    state_arrays,
    state_from_arrays,
    unshard_state,
    vb_prior,
)

__all__ = [
    "VBState",
    "Sharded",
    "init",
    "update",
    "elbo",
    "expected_sq_error",
    "prior_q",
    "ratings_mean",
    "shard_state",
    "state_arrays",
    "state_from_arrays",
    "unshard_state",
    "vb_prior",
]
