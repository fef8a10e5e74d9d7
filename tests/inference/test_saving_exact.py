"""A saved fit predicts exactly what the fit predicted: ``fit.save(path)`` with its default
arguments, then ``bmc.load(path)``.

* For every method (gibbs, vb, svi, map, nuts; probit with Gibbs) the loaded fit's
  ``predict`` (also ``return_std=True``), ``predictive_interval``, ``predict_proba``,
  ``log_predictive_density``, ``rmse``, ``recommend`` (``by="mean"``, ``"upper"``,
  ``"thompson"``) and ``fold_in`` equal the fit's bit for bit (``np.array_equal``), at the
  entries accumulated during the fit and at every other entry.  The MCMC fits hold more
  draws (2 chains x 60) than the former default kept (100).  Float32 for every method,
  float64 for Gibbs and VB.
* The file is compressed and keeps the fit's dtype (a float32 fit's draws are float32).
* Above :data:`~bmczoo.inference.saving.FACTOR_BYTES_LIMIT` (made small here) the default
  keeps as many draws as fit under it and warns (how many are kept, that the outputs will
  differ, ``factor_draws='all'``); ``"all"`` keeps every draw without a warning;
  ``factor_draws=n`` still thins when asked, without a warning.
* The loaded fit's ``repr`` says how many draws it holds.
* A file written uncompressed (as by earlier versions) loads the same.
"""

from __future__ import annotations

import os
import warnings
import zipfile

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import saving

DRAWS = 60  # per chain; 2 chains: 120, above the former default of 100 kept draws

METHODS = {
    "gibbs": dict(num_warmup=5, num_samples=DRAWS, thinning=1, num_chains=2, store_factors=True),
    "vb": dict(max_iter=10),
    "svi": dict(num_steps=20, num_draws=30),
    "map": dict(num_steps=20),
    "nuts": dict(num_warmup=5, num_samples=DRAWS, thinning=1, num_chains=2),
}
# SVI and NUTS take 10-30 s to compile even on this small problem
SLOW = {"svi", "nuts"}


@pytest.fixture(scope="module")
def data():
    sim = bmc.datasets.simulate_paper(20, rank=2, frac=0.5, noise_sd=0.5, seed=4)
    return sim.train.split(0.2, seed=0)


def _fit(data, method, **kw):
    train, test = data
    return bmc.fit(
        train,
        K=2,
        prior=bmc.priors.NormalWishart(),
        likelihood=kw.pop("likelihood", bmc.likelihoods.LearnedNoise()),
        biases=True,
        method=method,
        test=test,
        progress_bar=False,
        seed=1,
        **{**METHODS[method], **kw},
    )


@pytest.fixture(scope="module")
def gibbs_fit(data):
    return _fit(data, "gibbs")


def _equal(a, b):
    """``a`` and ``b`` (arrays or tuples of arrays) are equal bit for bit."""
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
    else:
        assert np.array_equal(np.asarray(a), np.asarray(b)), (a, b)


def _check_exact(f, g, data):
    """Every output of the loaded fit ``g`` equals that of the fit ``f``."""
    train, test = data
    m1, m2 = f.shape
    every = np.divmod(np.arange(m1 * m2), m2)  # the test set and every other entry
    for r, c in ((test.rows, test.cols), every):
        _equal(f.predict(r, c), g.predict(r, c))
        _equal(f.predict(r, c, return_std=True), g.predict(r, c, return_std=True))
        _equal(f.predictive_interval(r, c, prob=0.8), g.predictive_interval(r, c, prob=0.8))
        if f.info.likelihood.latent:
            _equal(f.predict_proba(r, c), g.predict_proba(r, c))
    assert g.log_predictive_density(test) == f.log_predictive_density(test)
    assert g.rmse(test) == f.rmse(test)
    users = np.arange(m1)
    for by, kw in (("mean", {}), ("upper", {"prob": 0.8}), ("thompson", {"seed": 3})):
        _equal(f.recommend(users, n=4, by=by, **kw), g.recommend(users, n=4, by=by, **kw))
    if not f.info.likelihood.latent:  # fold_in is not available for probit yet
        new = train.subset(np.flatnonzero(train.rows < 3))
        a, b = f.fold_in(new), g.fold_in(new)
        rr, cc = np.divmod(np.arange(3 * m2), m2)
        _equal(a.predict(rr, cc, return_std=True), b.predict(rr, cc, return_std=True))


def _round_trip(f, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", saving.FactorDrawsThinnedWarning)
        f.save(path, **kw)
    return bmc.load(path)


@pytest.mark.parametrize(
    "method", [pytest.param(m, marks=[pytest.mark.slow] if m in SLOW else []) for m in METHODS]
)
def test_default_save_is_exact(data, tmp_path, method):
    f = _fit(data, method)
    g = _round_trip(f, tmp_path / "fit.npz")
    assert type(g) is type(f)
    _check_exact(f, g, data)
    if method in ("gibbs", "nuts"):
        assert np.shape(f.samples["M"])[:2] == (2, DRAWS)
        assert g.factor_samples is None
        _equal(g.samples["M"], f.samples["M"])


@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_default_save_is_exact_in_float64(data, tmp_path, method, x64):
    f = _fit(data, method, dtype="float64")
    g = _round_trip(f, tmp_path / "fit.npz")
    assert g.info.dtype == "float64"
    _check_exact(f, g, data)


def test_default_save_is_exact_for_probit(tmp_path):
    rng = np.random.default_rng(5)
    m1, m2 = 16, 12
    z = rng.normal(size=(m1, 2)) @ rng.normal(size=(m2, 2)).T + 0.5 * rng.normal(size=(m1, m2))
    r, c = np.nonzero(rng.random((m1, m2)) < 0.6)
    train, test = bmc.RatingData(r, c, (z[r, c] > 0).astype(float), (m1, m2)).split(0.2, seed=0)
    f = bmc.fit(
        train,
        K=2,
        likelihood=bmc.likelihoods.Probit(),
        num_warmup=5,
        num_samples=DRAWS,
        thinning=1,
        num_chains=2,
        test=test,
        progress_bar=False,
        store_factors=True,
    )
    g = _round_trip(f, tmp_path / "probit.npz")
    _check_exact(f, g, (train, test))


def test_file_is_compressed_and_keeps_the_dtype(gibbs_fit, tmp_path):
    f = gibbs_fit
    path = tmp_path / "fit.npz"
    f.save(path)
    with zipfile.ZipFile(path) as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    with np.load(path, allow_pickle=False) as z:
        for k in ("M", "N", "row_bias", "col_bias", "tau"):
            assert z[f"f/samples/{k}"].dtype == np.float32
            np.testing.assert_array_equal(z[f"f/samples/{k}"], f.samples[k])
    factor_bytes = saving.factor_draw_bytes(f)
    assert factor_bytes == sum(np.asarray(f.samples[k]).nbytes for k in saving.FACTOR_SITES)
    with np.load(path, allow_pickle=False) as z:
        np.savez(tmp_path / "plain.npz", **{k: z[k] for k in z.files})
    assert os.path.getsize(path) < os.path.getsize(tmp_path / "plain.npz")


def test_an_uncompressed_file_loads_the_same(gibbs_fit, data, tmp_path):
    f = gibbs_fit
    f.save(tmp_path / "fit.npz")
    with np.load(tmp_path / "fit.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "plain.npz", **arrays)  # how earlier versions wrote the file
    _check_exact(f, bmc.load(tmp_path / "plain.npz"), data)


def test_repr_of_the_loaded_fit_says_how_many_draws_it_holds(gibbs_fit, tmp_path):
    g = _round_trip(gibbs_fit, tmp_path / "fit.npz")
    assert f"GibbsFit(method='gibbs', K=2, 2 chains x {DRAWS} draws, factor draws: all" in repr(g)
    gibbs_fit.save(tmp_path / "ten.npz", factor_draws=10)
    assert f"2 chains x {DRAWS} draws, factor draws: 5 per chain (thinned when saved)" in repr(
        bmc.load(tmp_path / "ten.npz")
    )


def test_above_the_size_limit_the_default_thins_and_warns(gibbs_fit, data, tmp_path, monkeypatch):
    f = gibbs_fit
    _, test = data
    nbytes = saving.factor_draw_bytes(f)
    per_draw = nbytes // (2 * DRAWS)
    monkeypatch.setattr(saving, "FACTOR_BYTES_LIMIT", 2 * 7 * per_draw + per_draw // 2)
    path = tmp_path / "fit.npz"
    with pytest.warns(saving.FactorDrawsThinnedWarning) as record:
        f.save(path)
    assert len(record) == 1 and record[0].filename == __file__  # points at the caller
    message = str(record[0].message)
    assert f"2 chains x {DRAWS} draws" in message
    assert f"keeps 7 of the {DRAWS} draws of each chain (14 in all)" in message
    assert "will differ" in message and "factor_draws='all'" in message
    g = bmc.load(path)
    assert np.shape(g.factor_samples["M"])[:2] == (2, 7)
    assert "factor draws: 7 per chain (thinned when saved)" in repr(g)
    assert saving.factor_draw_bytes(g) <= saving.FACTOR_BYTES_LIMIT
    # the moments accumulated during the fit stay exact
    r, c = test.rows, test.cols
    _equal(f.predict(r, c, return_std=True), g.predict(r, c, return_std=True))
    # factor_draws=None is the default; "all" keeps every draw, an integer thins as asked
    with pytest.warns(saving.FactorDrawsThinnedWarning):
        saving.save(f, tmp_path / "none.npz", factor_draws=None)
    assert np.shape(bmc.load(tmp_path / "none.npz").factor_samples["M"])[:2] == (2, 7)
    _check_exact(f, _round_trip(f, tmp_path / "all.npz", factor_draws="all"), data)
    thin = _round_trip(f, tmp_path / "ten.npz", factor_draws=10)
    assert np.shape(thin.factor_samples["M"])[:2] == (2, 5)


def test_below_the_limit_nothing_is_thinned(gibbs_fit, tmp_path, monkeypatch):
    monkeypatch.setattr(saving, "FACTOR_BYTES_LIMIT", saving.factor_draw_bytes(gibbs_fit))
    g = _round_trip(gibbs_fit, tmp_path / "fit.npz", factor_draws="auto")
    assert g.factor_samples is None


def test_factor_draws_names_its_choices(gibbs_fit, tmp_path):
    with pytest.raises(ValueError, match="'auto' or 'all'"):
        gibbs_fit.save(tmp_path / "fit.npz", factor_draws="every")
    assert not (tmp_path / "fit.npz").exists()
