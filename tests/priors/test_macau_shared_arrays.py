"""A feature table linked by both the prior and the biases is decomposed once per fit
(:func:`bmczoo.priors.macau.shared_link_arrays`), with the same arrays as two calls."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.priors.macau import arrays

M1, M2, F = 40, 25, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    r, c = np.nonzero(rng.random((M1, M2)) < 0.4)
    return bmc.RatingData(
        r,
        c,
        rng.normal(size=len(r)),
        shape=(M1, M2),
        row_features=Features.from_dense(rng.normal(size=(M1, F))),
    )


@pytest.fixture
def calls(monkeypatch):
    """The tables decomposed (their shapes), one per call of the decomposition."""
    seen = []
    real = arrays._link_arrays

    def counted(X, dtype, gram):
        seen.append(X.shape)
        return real(X, dtype, gram)

    monkeypatch.setattr(arrays, "_link_arrays", counted)
    return seen


@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_a_table_linked_twice_is_decomposed_once(data, calls, method):
    kw = (
        dict(num_warmup=2, num_samples=4, thinning=1, num_chains=1)
        if method == "gibbs"
        else dict(max_iter=3)
    )
    bmc.fit(
        data,
        K=2,
        method=method,
        prior=bmc.priors.NormalWishart(row_features=True),
        biases=bmc.offsets.Biases(row_features=True),
        seed=0,
        progress_bar=False,
        **kw,
    )
    assert calls == [(M1, F)]


def test_the_shared_arrays_are_those_of_two_calls(data):
    X = data.row_features
    once = arrays.link_arrays(X, np.float32)
    with arrays.shared_link_arrays():
        a = arrays.link_arrays(X, np.float32)
        b = arrays.link_arrays(Features.from_dense(X.to_dense()), np.float32)  # equal, not the same
        with jax.enable_x64(True):
            c = arrays.link_arrays(X, np.float64)  # another dtype: its own arrays
    assert set(a) == set(b) == set(once)
    for k in once:
        if k in ("X", "Xt"):
            continue
        np.testing.assert_array_equal(a[k], once[k])
        assert b[k] is a[k]
        assert c[k].dtype == np.float64
    assert arrays._SHARED.cache is None  # nothing kept after the block
