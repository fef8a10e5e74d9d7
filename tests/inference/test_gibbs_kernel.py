"""Mechanics of the conjugate Gibbs kernel and of ``bmc.fit(..., method="gibbs")``.

* chain ``c`` of a vectorised ``MCMC`` run with key ``k`` equals a single-chain run with
  key ``jax.random.split(k, C)[c]`` (NumPyro splits the key into ``num_chains`` keys and
  the kernel gives chain ``c`` its own key); a sequential run equals a vectorised one;
* the kernel's running posterior mean is the average of exactly the draws NumPyro keeps
  (``num_kept == num_samples // thinning``, also when ``thinning`` does not divide
  ``num_samples``);
* ``bmc.fit`` argument checks, ``predict`` / ``rmse`` / ``rank_posterior`` /
  ``to_arviz`` of the fit, cold-start rows and columns, prediction from stored factor
  draws.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from numpyro.infer import MCMC

import bmczoo as bmc
from bmczoo.inference import ConjugateGibbs

M1, M2, K = 12, 10, 3
COLD_ROW, COLD_COL = 11, 9  # no rating in this row / column (train and test)
# the discrete prior compiles fastest (no rejection sampler) and still has a random gamma
PRIOR = bmc.priors.Discrete(C=2.0, p=0.5, eps=0.3)
# settings of the shared fit: 61 is not a multiple of 4 (NumPyro then keeps the draws
# num_warmup + 1 + 4q, q = 1..15, not num_warmup + 4q)
NUM_WARMUP, NUM_SAMPLES, THINNING, NUM_CHAINS = 20, 61, 4, 2


def _ratings():
    rng = np.random.default_rng(7)
    cells = [(i, j) for i in range(M1) for j in range(M2) if i != COLD_ROW and j != COLD_COL]
    pick = rng.choice(len(cells), size=60, replace=False)
    rows = np.array([cells[k][0] for k in pick])
    cols = np.array([cells[k][1] for k in pick])
    U, V = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    y = 3.0 + np.sum(U[rows] * V[cols], axis=1) + 0.5 * rng.normal(size=rows.size)
    return bmc.RatingData(rows, cols, y, (M1, M2)).split(test_fraction=0.25, seed=1)


def _fit_kwargs(**kw):
    base = dict(
        K=K,
        prior=PRIOR,
        method="gibbs",
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        thinning=THINNING,
        num_chains=NUM_CHAINS,
        seed=3,
        progress_bar=False,
        clip=False,
    )
    base.update(kw)
    return base


@pytest.fixture(scope="module")
def data():
    return _ratings()


@pytest.fixture(scope="module")
def shared_fit(data):
    """One float64 fit with a test set, extra requested entries (the cold row and column),
    the test entries tracked and the factor draws stored (centred, unclipped)."""
    train, test = data
    extra = (np.array([COLD_ROW, COLD_ROW, 0]), np.array([0, COLD_COL, COLD_COL]))
    with jax.enable_x64(True):
        fit = bmc.fit(
            train,
            test=test,
            predict=extra,
            track=(test.rows, test.cols),
            store_factors=True,
            **_fit_kwargs(),
        )
    return fit, extra


# --------------------------------------------------------------------------- chains
@pytest.mark.parametrize("c", [0, NUM_CHAINS - 1])
def test_vectorized_chain_equals_single_chain_with_split_key(shared_fit, data, c):
    """``bmc.fit`` runs ``MCMC(..., chain_method="vectorized")`` with ``jax.random.key(seed)``
    on the centred data; NumPyro splits that key into ``num_chains`` keys.  A single-chain
    run of the kernel with key ``split(key(seed), num_chains)[c]`` reproduces chain ``c``."""
    fit, _ = shared_fit
    train, _ = data
    key_c = jax.random.split(jax.random.key(fit.meta["seed"]), NUM_CHAINS)[c]
    track = (train.rows[:5], train.cols[:5])
    with jax.enable_x64(True):
        single = MCMC(
            ConjugateGibbs(
                num_samples=NUM_SAMPLES, thinning=THINNING, track=track, store_factors=True
            ),
            num_warmup=NUM_WARMUP,
            num_samples=NUM_SAMPLES,
            thinning=THINNING,
            num_chains=1,
            progress_bar=False,
        )
        single.run(key_c, train.centered()[0], K, PRIOR)
        ss = {k: np.asarray(v) for k, v in single.get_samples().items()}
    assert ss["M"].dtype == np.float64
    for site in ("gamma", "M", "N"):
        assert ss[site].shape == fit.samples[site].shape[1:]
        np.testing.assert_allclose(
            ss[site], fit.samples[site][c], rtol=1e-12, atol=1e-12, err_msg=site
        )
    theta = np.einsum(
        "dpk,dpk->dp", fit.samples["M"][c][:, track[0]], fit.samples["N"][c][:, track[1]]
    )
    np.testing.assert_allclose(ss["theta"], theta, rtol=1e-10, atol=1e-12)
    # and the chains differ from each other
    assert not np.allclose(fit.samples["M"][0], fit.samples["M"][-1])


def test_sequential_chains_equal_vectorized(shared_fit, data):
    fit, extra = shared_fit
    train, test = data
    with jax.enable_x64(True):
        seq = bmc.fit(
            train,
            test=test,
            predict=extra,
            track=(test.rows, test.cols),
            store_factors=False,
            chain_method="sequential",
            **_fit_kwargs(),
        )
    for site in ("gamma", "theta"):
        assert seq.samples[site].shape == fit.samples[site].shape
        np.testing.assert_allclose(seq.samples[site], fit.samples[site], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(seq.pred_mean, fit.pred_mean, rtol=1e-10, atol=1e-12)
    assert seq.meta["num_kept"] == fit.meta["num_kept"]
    assert seq.rmse_draw.shape == fit.rmse_draw.shape
    np.testing.assert_allclose(seq.rmse_draw, fit.rmse_draw, rtol=1e-10)
    # without stored factors, entries not requested at fit time cannot be predicted
    with pytest.raises(ValueError, match="store_factors"):
        seq.predict(np.array([1]), np.array([1]))


# --------------------------------------------------------------------------- running mean
@pytest.mark.parametrize("num_samples, thinning", [(20, 5), (23, 4)])
def test_running_mean_averages_the_kept_draws(data, x64, num_samples, thinning):
    train, _ = data
    entries = (np.concatenate([train.rows[:4], [COLD_ROW]]), np.concatenate([train.cols[:4], [0]]))
    kernel = ConjugateGibbs(
        num_samples=num_samples, thinning=thinning, predict=entries, track=entries
    )
    mcmc = MCMC(
        kernel,
        num_warmup=6,
        num_samples=num_samples,
        thinning=thinning,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), train, K, PRIOR)
    core = mcmc.last_state.core
    theta = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"])  # (chain, kept, entry)
    assert theta.shape[1] == num_samples // thinning
    assert int(core.stats.num_kept) == num_samples // thinning
    assert int(core.iteration) == 6 + num_samples
    np.testing.assert_allclose(
        np.asarray(core.stats.pred_sum) / int(core.stats.num_kept),
        theta.mean(axis=1),
        rtol=1e-10,
        atol=1e-12,
    )


def test_fit_num_kept_and_running_mean(shared_fit, data):
    fit, _ = shared_fit
    train, test = data
    kept = NUM_SAMPLES // THINNING
    assert fit.meta["num_kept"] == kept
    assert fit.samples["gamma"].shape == (NUM_CHAINS, kept, K)
    assert fit.samples["theta"].shape == (NUM_CHAINS, kept, test.n)
    assert fit.samples["M"].shape == (NUM_CHAINS, kept, M1, K)
    # tracked entries == test entries: the running mean is the mean of the collected draws
    offset = fit.meta["offset"]
    assert offset == pytest.approx(train.mean())
    np.testing.assert_allclose(
        fit.predict(test.rows, test.cols),
        fit.samples["theta"].mean(axis=(0, 1)) + offset,
        rtol=1e-10,
        atol=1e-12,
    )


# --------------------------------------------------------------------------- predict / rmse / rank
def test_predict_at_test_entries_is_the_stored_mean(shared_fit, data):
    fit, extra = shared_fit
    _, test = data
    n = test.n
    assert fit.pred_mean.shape == (n + extra[0].size,)
    np.testing.assert_array_equal(fit.predict(test.rows, test.cols), fit.pred_mean[:n])
    # any order, repeats, and the extra requested entries
    perm = np.r_[np.arange(n)[::-1], 0]
    np.testing.assert_array_equal(
        fit.predict(test.rows[perm], test.cols[perm]), fit.pred_mean[:n][perm]
    )
    np.testing.assert_array_equal(fit.predict(*extra), fit.pred_mean[n:])
    rmse = np.sqrt(np.mean((fit.pred_mean[:n] - test.values) ** 2))
    assert fit.rmse(test) == pytest.approx(rmse, rel=1e-12)
    # the RMSE trace of the running mean ends at the final RMSE
    assert fit.rmse_mean.shape == (NUM_CHAINS, NUM_WARMUP + NUM_SAMPLES)
    assert np.all(np.isnan(fit.rmse_mean[:, :NUM_WARMUP]))
    assert np.all(np.isfinite(fit.rmse_draw))


def test_cold_start_rows_and_columns_are_finite(shared_fit):
    fit, extra = shared_fit
    for site in ("M", "N", "gamma", "theta"):
        assert np.all(np.isfinite(fit.samples[site])), site
    assert np.all(np.isfinite(fit.predict(*extra)))
    # a row with no rating is drawn from its prior N(0, gamma): not stuck at zero
    assert np.std(fit.samples["M"][:, :, COLD_ROW]) > 0
    assert np.std(fit.samples["N"][:, :, COLD_COL]) > 0


def test_stored_factors_predict_arbitrary_entries(shared_fit, data):
    fit, extra = shared_fit
    _, test = data
    # mixing requested and unrequested entries forces the factor path for all of them
    rows = np.concatenate([test.rows, extra[0], [0, 5]])
    cols = np.concatenate([test.cols, extra[1], [0, 5]])
    pred = fit.predict(rows, cols)
    assert pred.shape == rows.shape and np.all(np.isfinite(pred))
    np.testing.assert_allclose(pred[: fit.pred_mean.size], fit.pred_mean, rtol=1e-9, atol=1e-10)
    Ms, Ns = fit.samples["M"], fit.samples["N"]
    manual = (
        np.einsum("cdk,cdk->", Ms[:, :, 5], Ns[:, :, 5]) / (Ms.shape[0] * Ms.shape[1])
        + fit.meta["offset"]
    )
    assert pred[-1] == pytest.approx(manual, rel=1e-10)


# at the median threshold the short chains may disagree on the count: the warning is due
@pytest.mark.filterwarnings("ignore::bmczoo.diagnostics.RankMixingWarning")
def test_rank_posterior(shared_fit):
    fit, _ = shared_fit
    g = fit.samples["gamma"]
    for threshold in (0.0, float(np.median(g)), float(g.max()) + 1.0):
        rp = fit.rank_posterior(threshold)
        assert rp.shape == (K + 1,)
        assert np.all(rp >= 0)
        assert rp.sum() == pytest.approx(1.0)
        counts = np.sum(g > threshold, axis=-1).ravel()
        np.testing.assert_allclose(rp, np.bincount(counts, minlength=K + 1) / counts.size)
    assert fit.rank_posterior(0.0)[K] == 1.0


def test_to_arviz(shared_fit):
    """Posterior of gamma and of theta at the tracked entries, plus the per-iteration RMSE
    traces (the fit has test data), without any warning (the suite turns warnings into
    errors)."""
    fit, _ = shared_fit
    idata = fit.to_arviz()
    assert idata.posterior["gamma"].shape == (NUM_CHAINS, NUM_SAMPLES // THINNING, K)
    np.testing.assert_array_equal(idata.posterior["theta"].values, fit.samples["theta"])
    # the per-iteration traces (one value per sweep) live in the "convergence" group
    rmse = [idata.convergence[v] for v in idata.convergence.data_vars if "rmse" in v]
    assert rmse, f"no RMSE trace in {idata.groups()}"
    assert all(NUM_WARMUP + NUM_SAMPLES in r.shape for r in rmse)


def test_fit_without_test_or_predict_float32(data):
    """The default use: no test set, no requested entries, float32 (x64 off)."""
    train, test = data
    fit = bmc.fit(train, **_fit_kwargs(num_warmup=5, num_samples=8, thinning=2))
    assert fit.samples["gamma"].dtype == np.float32
    assert fit.pred_mean.shape == (0,)
    pred = fit.predict(test.rows, test.cols)  # from the stored factor draws
    assert pred.shape == (test.n,) and np.all(np.isfinite(pred))
    assert np.isfinite(fit.rmse(test))


# --------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize(
    "kwargs, match, error",
    [
        (dict(num_samples=0), "num_samples", ValueError),
        (dict(num_samples=-5), "num_samples", ValueError),
        (dict(num_samples=2.5), "num_samples", TypeError),
        (dict(thinning=0), "thinning", ValueError),
        (dict(thinning=-1), "thinning", ValueError),
        (dict(thinning=200), "thinning", ValueError),  # > num_samples: keeps no draw
        (dict(num_chains=0), "num_chains", ValueError),
        (dict(num_warmup=-1), "num_warmup", ValueError),
        (dict(K=M2 + 1), "K", ValueError),
        (dict(K=0), "K", ValueError),
        (dict(method="hmc"), "method", ValueError),
        (dict(prior="discrete"), "prior", TypeError),
        (dict(noise_sd=0.0), "noise_sd", ValueError),
        (dict(lam=-1.0), "lam", ValueError),
    ],
)
def test_fit_rejects_bad_arguments(data, kwargs, match, error):
    train, _ = data
    with pytest.raises(error, match=match):
        bmc.fit(train, **_fit_kwargs(**kwargs))


def test_fit_rejects_test_of_another_shape(data):
    train, test = data
    other = bmc.RatingData(test.rows, test.cols, test.values, (M1 + 1, M2))
    with pytest.raises(ValueError, match="shape"):
        bmc.fit(train, test=other, **_fit_kwargs())


def test_fit_rejects_non_ratings():
    with pytest.raises(TypeError, match="RatingData"):
        bmc.fit(np.ones((3, 3)), **_fit_kwargs(K=1))


def test_predict_rejects_out_of_range(shared_fit):
    fit, _ = shared_fit
    with pytest.raises(ValueError):
        fit.predict(np.array([M1]), np.array([0]))
    with pytest.raises(ValueError):
        fit.predict(np.array([0]), np.array([-1]))
    with pytest.raises(ValueError, match="shape"):
        fit.rmse(bmc.RatingData([0], [0], [1.0], (M1, M2 + 1)))
