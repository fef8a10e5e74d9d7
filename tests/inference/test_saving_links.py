"""``fit.save`` / ``bmc.load`` of a fit whose Normal-Wishart prior has feature links: the
loaded fit's prior keeps the link specification (the data's tables, a user's
:class:`~bmczoo.data.Features` table stored as arrays, the implicit-feedback flag), and its
predictions equal the original's bit for bit (Gibbs with every factor draw kept, VB)."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference.saving import _read_npz


def _data(seed=0, m1=14, m2=10):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((m1, m2)) < 0.6)
    rf = bmc.data.Features.from_dense(rng.normal(size=(m1, 3)), names=["age", "height", "score"])
    cf = bmc.data.Features.from_dense(
        rng.integers(0, 2, size=(m2, 4)).astype(float),
        names=["genre=a", "genre=b", "genre=c", "year=old"],
    )
    return bmc.RatingData(
        rows, cols, rng.normal(size=rows.size), (m1, m2), row_features=rf, col_features=cf
    )


PRIORS = {
    "data-rows": lambda d: bmc.priors.NormalWishart(row_features=True, a_B=2.0),
    "table-cols-implicit-rows": lambda d: bmc.priors.NormalWishart(
        col_features=d.col_features, implicit="rows"
    ),
    "implicit-both": lambda d: bmc.priors.NormalWishart(implicit=True, b_B=0.5),
}


def _fit(method, prior, data):
    if method == "gibbs":
        return bmc.fit(
            data,
            K=2,
            prior=prior,
            method="gibbs",
            num_warmup=5,
            num_samples=6,
            thinning=1,
            num_chains=1,
            store_factors=True,
            progress_bar=False,
            seed=0,
        )
    return bmc.fit(data, K=2, prior=prior, method="vb", max_iter=10, progress_bar=False, seed=0)


@pytest.mark.parametrize("method", ["gibbs", "vb"])
@pytest.mark.parametrize("case", list(PRIORS))
def test_round_trip_keeps_the_link_spec_and_predictions(tmp_path, method, case):
    data = _data()
    prior = PRIORS[case](data)
    fit = _fit(method, prior, data)
    path = tmp_path / "fit.npz"
    fit.save(path)  # the default keeps every factor draw: the same predictions
    loaded = bmc.load(path)
    assert str(loaded.info.prior) == str(prior)
    assert loaded.info.prior.linked_sides == prior.linked_sides
    assert loaded.info.prior.links() == prior.links()
    assert loaded.info.prior.hyperparameters() == prior.hyperparameters()
    if prior.col_features is None or prior.col_features is True:
        assert loaded.info.prior == prior  # a table compares by identity; the rest by value
    else:
        a, b = prior.col_features.features, loaded.info.prior.col_features.features
        assert a.names == b.names and a.groups == b.groups
        for k in ("indptr", "indices", "values"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    rows, cols = np.meshgrid(np.arange(data.shape[0]), np.arange(data.shape[1]), indexing="ij")
    rows, cols = rows.ravel(), cols.ravel()
    np.testing.assert_array_equal(loaded.predict(rows, cols), fit.predict(rows, cols))


def test_files_without_links_have_no_link_metadata(tmp_path):
    data = _data()
    fit = _fit("vb", bmc.priors.NormalWishart(), data)
    fit.save(tmp_path / "plain.npz")
    import json

    raw = _read_npz(tmp_path / "plain.npz")
    meta = json.loads(str(raw["__meta__"]))
    assert "links" not in meta["prior"] and not any(k.startswith("p/") for k in raw)
    assert bmc.load(tmp_path / "plain.npz").info.prior == bmc.priors.NormalWishart()


def test_a_table_missing_from_the_file_is_named(tmp_path):
    data = _data()
    fit = _fit("vb", bmc.priors.NormalWishart(row_features=data.row_features), data)
    fit.save(tmp_path / "fit.npz")
    raw = _read_npz(tmp_path / "fit.npz")
    del raw["p/row_features/values"]
    np.savez(tmp_path / "broken.npz", **raw)
    with pytest.raises(
        ValueError, match="row_features table lacks its array 'p/row_features/values'"
    ):
        bmc.load(tmp_path / "broken.npz")
