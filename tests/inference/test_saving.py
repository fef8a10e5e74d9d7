"""``fit.save`` / ``bmc.load``: errors for files that are not saved fits, the file's
permissions, and the bounded set of factor draws a saved MCMC fit keeps.

* ``bmc.load`` of a missing path is ``FileNotFoundError``; of a text file, an ``.npy``
  array or a foreign ``.npz`` a ``ValueError`` naming the path (never NumPy's advice to
  load with ``allow_pickle``).
* The saved file's mode is ``0o666`` less the umask (``tempfile.mkstemp`` alone gives
  ``0o600``).
* ``factor_draws=100``: at most 100 factor draws in all chains pooled, evenly spaced over
  each chain, every other per-draw site at the same draws; every draw of the small sites
  is kept.  ``predict`` (``return_std``) and ``predictive_interval`` at the entries
  accumulated during the fit, ``noise_var`` and the diagnostics' singular values equal the
  original's bit for bit; elsewhere the loaded fit averages over exactly the kept draws.
  ``factor_draws="all"`` keeps everything (bit for bit everywhere), and so does the default
  below the size limit (``tests/inference/test_saving_exact.py``).
* Slow: a fit of the recommended model's shape (943 x 1682, K = 10, 4 chains x 400 draws,
  biases, learned noise): the default keeps every draw (180+ MB of factor draws, below the
  size limit) and predicts the same everywhere; ``factor_draws=100`` saves under 40 MB.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference.results import outputs
from bmczoo.inference.results.base import draws_theta_mean
from bmczoo.inference.saving import FACTOR_BYTES_LIMIT, FACTOR_SITES, kept_factor_draws

FACTOR_DRAWS = 100  # the bound asked for below (the default keeps every draw)


@pytest.fixture(scope="module")
def data():
    sim = bmc.datasets.simulate_paper(24, rank=2, frac=0.5, noise_sd=0.5, seed=2)
    return sim.train.split(0.2, seed=0)


@pytest.fixture(scope="module")
def long_fit(data):
    """2 chains x 150 kept draws (300 > the bound of 100 asked for below)."""
    train, test = data
    return bmc.fit(
        train,
        K=3,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        num_warmup=10,
        num_samples=150,
        thinning=1,
        num_chains=2,
        test=test,
        progress_bar=False,
        store_factors=True,
    )


# ----------------------------------------------------------------------------- errors
def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        bmc.load(tmp_path / "nope.npz")
    with pytest.raises(FileNotFoundError):
        bmc.load("nope.npz")


@pytest.mark.parametrize("kind", ["text", "npy", "npz", "zip-like", "empty"])
def test_a_file_that_is_not_a_saved_fit_is_named(tmp_path, kind):
    path = tmp_path / f"model.{kind}"
    if kind == "text":
        path.write_text("196\t242\t3\t881250949\n")
    elif kind == "npy":
        with open(path, "wb") as f:
            np.save(f, np.arange(3))
    elif kind == "npz":
        with open(path, "wb") as f:
            np.savez(f, x=np.zeros(3))
    elif kind == "zip-like":
        path.write_bytes(b"PK\x03\x04 not really a zip archive")
    else:
        path.write_bytes(b"")
    with pytest.raises(ValueError, match="is not a saved bmczoo fit") as info:
        bmc.load(path)
    message = str(info.value)
    assert str(path) in message and "pickle" not in message
    if kind != "npz":  # load_extra reads the same way
        with pytest.raises(ValueError, match="is not a saved bmczoo fit"):
            bmc.inference.saving.load_extra(path)


def test_a_folder_is_an_os_error(tmp_path):
    with pytest.raises(IsADirectoryError):
        bmc.load(tmp_path)


# ----------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_saved_file_honours_the_umask(data, tmp_path, umask):
    train, _ = data
    fit = bmc.fit(train, K=2, method="vb", max_iter=3, progress_bar=False)
    old = os.umask(umask)
    try:
        fit.save(tmp_path / "fit.npz")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "fit.npz").st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.npz"]  # no temporary left


# ----------------------------------------------------------------------------- thinning
def test_kept_factor_draws_are_evenly_spaced_and_bounded():
    for C, D, limit in [
        (4, 400, 100),
        (2, 150, 100),
        (3, 10, 100),
        (1, 1000, 100),
        (7, 50, 100),
        (200, 5, 100),
        (4, 400, 7),
    ]:
        idx = kept_factor_draws(C, D, limit)
        n = min(D, max(1, limit // C))
        assert idx.size == n and idx[0] == 0 and (n == 1 or idx[-1] == D - 1)
        assert np.all(np.diff(idx) > 0)
        if n > 1:  # even spacing: gaps differ by at most one draw
            assert np.ptp(np.diff(idx)) <= 1
        assert C * idx.size <= max(limit, C)


def _saved(fit, path, **kw):
    fit.save(path, **kw)
    with np.load(path, allow_pickle=False) as z:
        names = list(z.files)
    return bmc.load(path), names


def test_factor_draws_n_keeps_a_bounded_set_of_factor_draws(long_fit, data, tmp_path):
    f = long_fit
    train, test = data
    C, D = np.shape(f.samples["M"])[:2]
    assert C * D > FACTOR_DRAWS
    g, names = _saved(f, tmp_path / "fit.npz", factor_draws=FACTOR_DRAWS)
    idx = kept_factor_draws(C, D, FACTOR_DRAWS)
    assert idx.size == FACTOR_DRAWS // C
    # the factor sites: only at the kept draws; every per-draw site there too, aligned
    assert not any(f"f/samples/{k}" in names for k in FACTOR_SITES)
    for k, v in f.samples.items():
        if k in FACTOR_SITES:
            assert k not in g.samples
        else:
            np.testing.assert_array_equal(g.samples[k], v)  # every draw of the small sites
        np.testing.assert_array_equal(g.factor_samples[k], np.asarray(v)[:, idx])
    all_path = tmp_path / "all.npz"
    h, _ = _saved(f, all_path, factor_draws="all")
    assert h.factor_samples is None and os.path.getsize(tmp_path / "fit.npz") < os.path.getsize(
        all_path
    )

    # at the entries accumulated during the fit, and for the noise: bit for bit
    r, c = test.rows, test.cols
    for a, b in zip(f.predict(r, c, return_std=True), g.predict(r, c, return_std=True)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(f.predictive_interval(r, c, 0.8), g.predictive_interval(r, c, 0.8)):
        np.testing.assert_array_equal(a, b)
    assert g.noise_var() == f.noise_var()
    assert g.rmse(test) == f.rmse(test)
    # elsewhere: exactly the average over the kept draws
    r2, c2 = np.arange(5), np.arange(5)[::-1]
    kept = {k: np.asarray(f.samples[k])[:, idx] for k in FACTOR_SITES}
    np.testing.assert_array_equal(g.predict(r2, c2), f._finish(draws_theta_mean(kept, r2, c2)))
    d = outputs.flat_draws({**kept, "tau": np.asarray(f.samples["tau"])[:, idx]}, 3)
    np.testing.assert_allclose(
        g.log_predictive_density(test),
        np.mean(
            outputs.draws_lpd(d, test.rows, test.cols, test.values, f.info.shift.offset, f.info.tau)
        ),
        rtol=1e-12,
    )
    items, _ = g.recommend(np.arange(3), n=2, by="thompson", seed=0)
    assert items.shape == (3, 2)
    # the diagnostics see every draw: singular values of theta stored for all of them
    pf, pg = bmc.diagnostics.to_arviz(f).posterior, bmc.diagnostics.to_arviz(g).posterior
    for v in ("theta_sv", "eff_rank", "theta", "noise_sd"):
        np.testing.assert_array_equal(pg[v].values, pf[v].values)
    # a Normal-Wishart fit's rank posterior: the effective rank of theta, over every draw
    rank = f.rank_posterior()
    assert rank.shape == (4,) and rank.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(g.rank_posterior(), rank)
    # a loaded fit saves again the same way (by default: the draws it holds)
    g2, _ = _saved(g, tmp_path / "again.npz")
    for k, v in g.factor_samples.items():
        np.testing.assert_array_equal(g2.factor_samples[k], v)
    np.testing.assert_array_equal(g2.predict(r2, c2), g.predict(r2, c2))


def test_all_factor_draws_round_trip_bit_for_bit(long_fit, data, tmp_path):
    f = long_fit
    _, test = data
    g, _ = _saved(f, tmp_path / "fit.npz", factor_draws="all")
    r, c = np.arange(6), np.arange(6)
    for a, b in zip(f.predict(r, c, return_std=True), g.predict(r, c, return_std=True)):
        np.testing.assert_array_equal(a, b)
    assert g.log_predictive_density(test) == f.log_predictive_density(test)
    g10, _ = _saved(f, tmp_path / "ten.npz", factor_draws=10)
    assert np.shape(g10.factor_samples["M"])[:2] == (2, 5)


@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), ("some", ValueError), (2.5, TypeError), (True, TypeError)]
)
def test_factor_draws_is_checked(long_fit, tmp_path, bad, error):
    with pytest.raises(error, match="factor_draws"):
        long_fit.save(tmp_path / "fit.npz", factor_draws=bad)
    assert not (tmp_path / "fit.npz").exists()


@pytest.mark.slow
def test_recommended_shape_saves_every_draw_by_default(tmp_path):
    """943 x 1682 (ML-100K's shape), K = 10, NormalWishart + LearnedNoise + biases, 4 chains
    x 400 kept draws as the README's recommended fit (on 3,000 simulated ratings, so that
    the sweeps are cheap: the file's size depends on the shapes alone)."""
    rng = np.random.default_rng(0)
    m1, m2, n = 943, 1682, 3000
    keys = rng.choice(m1 * m2, size=n, replace=False)
    train = bmc.RatingData(
        keys // m2, keys % m2, rng.integers(1, 6, size=n).astype(np.float64), (m1, m2)
    )
    fit = bmc.fit(
        train,
        K=10,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        num_warmup=2,
        num_samples=400,
        thinning=1,
        num_chains=4,
        progress_bar=False,
        predict=(np.arange(50), np.arange(50)),
        store_factors=True,
    )
    factor_bytes = sum(np.asarray(fit.samples[k]).nbytes for k in FACTOR_SITES)
    assert 180e6 < factor_bytes < FACTOR_BYTES_LIMIT
    fit.save(tmp_path / "fit.npz")
    assert os.path.getsize(tmp_path / "fit.npz") < factor_bytes + 10e6
    g = bmc.load(tmp_path / "fit.npz")
    r, c = np.arange(50, 150), np.arange(100)  # not accumulated during the fit
    for rows, cols in ((np.arange(50), np.arange(50)), (r, c)):
        for a, b in zip(
            fit.predict(rows, cols, return_std=True), g.predict(rows, cols, return_std=True)
        ):
            np.testing.assert_array_equal(a, b)
    fit.save(tmp_path / "thin.npz", factor_draws=FACTOR_DRAWS)
    assert os.path.getsize(tmp_path / "thin.npz") < 40e6
    h = bmc.load(tmp_path / "thin.npz")
    for a, b in zip(
        fit.predict(np.arange(50), np.arange(50), return_std=True),
        h.predict(np.arange(50), np.arange(50), return_std=True),
    ):
        np.testing.assert_array_equal(a, b)
