"""The column moves on a schedule (``column_moves_every``): every that many sweeps, the
same draws as the plain sweeps with :func:`~bmczoo.inference.gibbs.column_moves` applied
by hand after the due ones; validated everywhere it is given."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs.columns import COLUMN_STREAM
from bmczoo.inference.settings import SweepOptions

from .test_column_moves import TINY_RUN

pytestmark = pytest.mark.usefixtures("x64")


@pytest.mark.parametrize("every", [1, 3])
def test_moves_every_k_sweeps_equal_the_moves_by_hand(tiny_ratings, every):
    prior = bmc.priors.Discrete(1.0, 0.3, 0.05)
    keys = jax.random.split(jax.random.key(7), 2)
    scheduled = gibbs.build_problem(
        tiny_ratings,
        1.0,
        options=SweepOptions(column_moves=True, column_moves_every=every, fuse_column_moves=False),
    )
    plain = gibbs.build_problem(tiny_ratings, 1.0)
    a = b = gibbs.init(keys, scheduled, prior, 3)
    moved = []
    for it in range(7):
        a = gibbs.sweep(a, scheduled, prior)._replace(iteration=it + 1)
        kc = jax.vmap(lambda k: jax.random.fold_in(k, COLUMN_STREAM))(b.key)
        nxt = gibbs.sweep(b, plain, prior)
        if (it + 1) % every == 0:
            nxt = gibbs.column_moves(nxt, plain, prior, kc)
            moved.append(it + 1)
        b = nxt._replace(iteration=it + 1)
        for name in ("M", "N"):
            np.testing.assert_array_equal(
                np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), err_msg=name
            )
        np.testing.assert_array_equal(np.asarray(a.gamma), np.asarray(b.gamma))
    assert moved == [k for k in range(1, 8) if k % every == 0]


def test_schedule_through_fit_kernel_and_errors(tiny_ratings):
    run = TINY_RUN
    every2 = bmc.fit(tiny_ratings, **run, column_moves_every=2)
    assert every2.info.settings.column_moves_every == 2
    every1 = bmc.fit(tiny_ratings, **run, column_moves_every=1)
    assert every1.info.settings.column_moves_every == 1
    assert not np.array_equal(
        np.asarray(every1.samples["gamma"]), np.asarray(every2.samples["gamma"])
    )
    for bad, err in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="column_moves_every"):
            bmc.inference.Gibbs(column_moves_every=bad)
        with pytest.raises(err, match="column_moves_every"):
            bmc.inference.ConjugateGibbs(column_moves_every=bad)
        with pytest.raises(err, match="column_moves_every"):
            SweepOptions(column_moves=True, column_moves_every=bad)
