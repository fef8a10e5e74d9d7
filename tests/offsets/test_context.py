"""The context offset (:class:`bmczoo.offsets.Context`): its per-rating arrays, its weight
block against the closed form (float64, tolerances from the Monte Carlo standard error),
the sweep's use of it (predictions at new entries with their context, the tracked
entries, the checkpoint's state) and its errors.  Its Geweke tests are in
``tests/inference/test_geweke_context.py``."""

from __future__ import annotations

import dataclasses
from statistics import NormalDist
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs import driver

pytestmark = pytest.mark.usefixtures("x64")

PRIOR = bmc.priors.InverseGamma()


def _data(n=120, m1=12, m2=10, seed=0, bins=4):
    rng = np.random.default_rng(seed)
    key = rng.choice(m1 * m2, n, replace=False)
    rows, cols = key // m2, key % m2
    b = rng.integers(0, bins, n)
    dense = np.zeros((n, bins + m1))
    dense[np.arange(n), b] = 1.0
    dense[np.arange(n), bins + rows] = rng.uniform(-1, 1, n)
    dense[:3, :bins] = 0.0  # three ratings without a bin
    names = [f"bin={i}" for i in range(bins)] + [f"dev={i}" for i in range(m1)]
    ctx = Features.from_dense(dense, names)
    y = rng.normal(size=n)
    return bmc.RatingData(rows, cols, y, (m1, m2), context=ctx), dense


def test_arrays_reproduce_the_dense_table():
    data, dense = _data()
    pos = np.asarray(data.row_view.order)
    a = bmc.offsets.Context().arrays(data.context.take(pos), data.n, jnp.float64)
    w = np.random.default_rng(1).normal(size=(2, dense.shape[1]))
    s = bmc.offsets.Context().shift({"w": jnp.asarray(w)}, a)
    np.testing.assert_allclose(np.asarray(s), w @ dense[pos].T, rtol=1e-12, atol=1e-12)
    assert a["group"].tolist() == [0] * 4 + [1] * 12


def test_a_subset_of_groups():
    data, dense = _data()
    off = bmc.offsets.Context(groups=("dev",))
    a = off.arrays(data.context, data.n, jnp.float64)
    w = np.random.default_rng(2).normal(size=(1, 12))
    s = off.shift({"w": jnp.asarray(w)}, a)
    np.testing.assert_allclose(np.asarray(s)[0], dense[:, 4:] @ w[0], rtol=1e-12)


def test_weight_block_matches_the_closed_form():
    """One group's weights given the rest: ``N(lin / prec, 1 / prec)`` with ``prec = lam +
    sum_k p_k x_kf^2`` and ``lin = sum_k p_k x_kf r_k``; the other group's weights drawn
    after it see the first group's new draw, so only the first group is compared (every
    chain starts at the same state)."""
    data, dense = _data(n=60, m1=6, m2=10, bins=3)
    off = bmc.offsets.Context(groups=("bin",))
    a = off.arrays(data.context, data.n, jnp.float64)
    rng = np.random.default_rng(3)
    C = 20_000
    target = jnp.broadcast_to(jnp.asarray(rng.normal(size=data.n)), (C, data.n))
    p = rng.uniform(0.5, 2.0, data.n)
    lam = np.array([0.7])
    state = {"w": jnp.zeros((C, 3)), "lam": jnp.full((C, 1), lam[0])}
    keys = jax.random.split(jax.random.key(0), C)
    new = off.gibbs_update(keys, state, a, target, jnp.broadcast_to(jnp.asarray(p), (C, data.n)))
    X = dense[:, :3]
    prec = lam[0] + (p[:, None] * X**2).sum(0)
    mean = (p[:, None] * X * np.asarray(target[0])[:, None]).sum(0) / prec
    w = np.asarray(new["w"])
    se = np.sqrt(1.0 / prec / C)
    z = (w.mean(0) - mean) / se
    assert np.max(np.abs(z)) < 4.0, z
    # the variance: its standard error sqrt(2 / C) sigma^2 for a normal
    zv = (w.var(0) - 1.0 / prec) / (np.sqrt(2.0 / C) / prec)
    assert np.max(np.abs(zv)) < 4.0, zv


def _problem(data, test=None, **kw):
    entries = gibbs.Entries()
    if test is not None:
        entries = gibbs.Entries(
            predict=(test.rows, test.cols), test_values=test.values, context=test.context
        )
    return gibbs.build_problem(
        data,
        1.0,
        dtype=jnp.float64,
        entries=entries,
        likelihood=bmc.likelihoods.LearnedNoise(),
        offsets=(bmc.offsets.Context(),),
        prior=PRIOR,
        schedule=gibbs.Schedule(0, 1, 10),
        **kw,
    )


def test_predictions_and_tracked_entries_include_the_offset():
    data, _ = _data()
    train, test = data.split(0.2, seed=0)
    p = _problem(
        train,
        test,
    )
    st = gibbs.init(jax.random.split(jax.random.key(0), 2), p, PRIOR, 2)
    st = jax.jit(lambda s: gibbs.step(s, p, PRIOR))(st)
    e = p.entries
    plain = gibbs.entries(st, p, e.pred_rows, e.pred_cols)
    ctx = st.offset_state["context"]["w"]
    shift = np.asarray(ctx) @ test.context.to_dense().T
    np.testing.assert_allclose(np.asarray(st.stats.pred_sum), np.asarray(plain) + shift, rtol=1e-10)
    tr = np.asarray(e.track_rows), np.asarray(e.track_cols)
    pos = [int(np.flatnonzero((train.rows == i) & (train.cols == j))[0]) for i, j in zip(*tr)]
    theta = gibbs.draws(st, p)["theta"]
    expect = (
        np.asarray(gibbs.entries(st, p, *tr)) + np.asarray(ctx) @ train.context.to_dense()[pos].T
    )
    np.testing.assert_allclose(np.asarray(theta), expect, rtol=1e-10)


def test_recovers_a_strong_time_effect():
    """Ratings made of a bin effect and noise: the posterior mean of the bin weights is the
    truth within a few posterior standard deviations."""
    data, dense = _data(n=400, m1=30, m2=20, seed=5)
    truth = np.array([1.5, -1.0, 0.5, 2.0])
    y = dense[:, :4] @ truth + 0.3 * np.random.default_rng(6).normal(size=data.n)
    data = bmc.RatingData(data.rows, data.cols, y, data.shape, context=data.context)
    p = _problem(data)
    st = gibbs.init(jax.random.split(jax.random.key(1), 2), p, PRIOR, 2)
    sweep = jax.jit(lambda s: gibbs.sweep(s, p, PRIOR))
    draws = []
    for i in range(400):
        st = sweep(st)
        if i >= 100:
            draws.append(np.asarray(st.offset_state["context"]["w"][:, :4]))
    draws = np.concatenate(draws)
    # the factors can absorb a little of each bin's mean: compare to the posterior spread
    z = (draws.mean(0) - truth) / (draws.std(0) + 0.05)
    assert np.max(np.abs(z)) < 4.0, (draws.mean(0), draws.std(0))


def test_checkpoint_arrays_round_trip():
    data, _ = _data()
    p = _problem(data)
    st = gibbs.init(jax.random.split(jax.random.key(0), 2), p, PRIOR, 2)
    st = jax.jit(lambda s: gibbs.sweep(s, p, PRIOR))(st)
    back = driver._restore_state(driver._state_arrays(st, p), p)
    for k in ("w", "lam"):
        np.testing.assert_array_equal(
            np.asarray(back.offset_state["context"][k]), np.asarray(st.offset_state["context"][k])
        )


def test_errors():
    data, dense = _data()
    plain = bmc.RatingData(data.rows, data.cols, data.values, data.shape)
    with pytest.raises(ValueError, match="needs per-rating features"):
        _problem(plain)
    with pytest.raises(ValueError, match="no group 'day'"):
        bmc.offsets.Context(groups=("day",)).arrays(data.context, data.n, jnp.float64)
    two = dense.copy()
    two[5, :2] = 1.0
    bad = data.with_context(Features.from_dense(two, data.context.names))
    with pytest.raises(
        ValueError, match="rating 5 of the table has more than one feature of group 'bin'"
    ):
        bmc.offsets.Context().arrays(bad.context, bad.n, jnp.float64)
    for kw in ({"a": 0.0}, {"b": -1.0}, {"a": float("nan")}, {"groups": ()}):
        with pytest.raises(ValueError, match="Context"):
            bmc.offsets.Context(**kw)
    train, test = data.split(0.2, seed=0)
    with pytest.raises(ValueError, match="needs per-rating features"):
        gibbs.build_problem(
            train,
            1.0,
            entries=gibbs.Entries(predict=(test.rows, test.cols)),
            offsets=(bmc.offsets.Context(),),
        )
    with pytest.raises(ValueError, match="is not a rating"):
        gibbs.build_problem(
            train,
            1.0,
            entries=gibbs.Entries(track=(test.rows[:1], test.cols[:1])),
            offsets=(bmc.offsets.Context(),),
        )
    with pytest.raises(ValueError, match="one device"):
        gibbs.build_problem(train, 1.0, offsets=(bmc.offsets.Context(),), mesh=jax.devices()[:1])


def _bin_data(seed=0):
    """60 x 40 ratings of a rank-2 matrix plus a bin effect, split 80/20."""
    rng = np.random.default_rng(seed)
    m1, m2, n = 60, 40, 1500
    key = rng.choice(m1 * m2, n, replace=False)
    r, c = key // m2, key % m2
    tb = rng.integers(0, 5, n)
    ctx = Features(np.arange(n + 1), tb, np.ones(n), [f"bin={i}" for i in range(5)])
    U, V = rng.normal(size=(m1, 2)), rng.normal(size=(m2, 2))
    y = 3 + np.array([1.0, -1.0, 0.5, 1.5, 0.0])[tb] + 0.7 * (U @ V.T)[r, c]
    y = y + 0.5 * rng.normal(size=n)
    return bmc.RatingData(r, c, y, (m1, m2), context=ctx).split(0.2, seed=0)


FIT = dict(
    K=4,
    prior=bmc.priors.InverseGamma(),
    likelihood=bmc.likelihoods.LearnedNoise(),
    num_warmup=50,
    num_samples=100,
    thinning=1,
    num_chains=2,
    progress_bar=False,
)


def test_fit_with_context_predicts_the_bins_and_saves(tmp_path):
    train, test = _bin_data()
    plain = bmc.fit(train, test=test, **FIT)
    fit = bmc.fit(train, test=test, context=True, **FIT)
    # the bin effect (sd 0.9) is what the plain model cannot fit; noise sd 0.5
    assert fit.rmse(test) < 0.6 < plain.rmse(test)
    assert fit.samples["context_lam"].shape[-1] == 1
    assert fit.info.offsets == (bmc.offsets.Context().bind(train.context),)
    idata = fit.to_arviz(var_names=["context_lam", "context_w"])
    assert idata.posterior["context_lam"].dims == ("chain", "draw", "context_group")
    assert idata.posterior["context_w"].shape[-1] == 5
    # float32 fits the bins too (the same bound as float64's above)
    f32 = bmc.fit(train, test=test, context=True, dtype="float32", **FIT)
    assert f32.samples["context_lam"].dtype == np.float32 and f32.rmse(test) < 0.6
    fit.save(tmp_path / "f.npz")
    back = bmc.load(tmp_path / "f.npz")
    assert back.info.offsets == fit.info.offsets
    np.testing.assert_array_equal(
        back.predict(test.rows, test.cols), fit.predict(test.rows, test.cols)
    )
    with pytest.raises(ValueError, match=r"sampled offsets \(context\).*need each entry's context"):
        fit.predict(train.rows[:3], train.cols[:3])
    # a loaded fit does not hold the training ratings: given without their context
    bare = bmc.RatingData(train.rows, train.cols, train.values, train.shape)
    with pytest.raises(ValueError, match="need each entry's context"):
        back.to_arviz(log_likelihood=bare)


def _direct(fit, rows, cols, table, draws=False):
    """The posterior mean and variance of ``theta + x . w`` at the entries from the
    stored draws (float64), or (``draws``) each draw's value."""
    s = fit.samples
    M, N = (np.asarray(s[k], np.float64).reshape(-1, *np.shape(s[k])[2:]) for k in "MN")
    w = np.asarray(s["context_w"], np.float64).reshape(M.shape[0], -1)
    t = np.einsum("spk,spk->sp", M[:, rows], N[:, cols]) + w @ table.to_dense().T
    if "row_bias" in s:
        t += np.asarray(s["row_bias"]).reshape(M.shape[0], -1)[:, rows]
        t += np.asarray(s["col_bias"]).reshape(M.shape[0], -1)[:, cols]
    return t if draws else (t.mean(0), t.var(0))


def test_predictions_at_new_entries_with_their_context(tmp_path):
    """``predict(rows, cols, context=)`` at entries not requested at fit time is the mean
    over the stored draws of ``theta + x . w`` (exact, float64); at the test entries in
    another order it is the fit-time running mean (the same draws); the fit-time table
    reads the running sums; a saved and loaded fit predicts the same; the log predictive
    density and the predictive interval take the context too."""
    train, test = _bin_data()
    fit = bmc.fit(train, test=test, context=True, biases=True, store_factors=True, **FIT)
    rows, cols, table = train.rows[:50], train.cols[:50], train.context.take(np.arange(50))
    mean, var = _direct(fit, rows, cols, table)
    got, sd = fit.predict(rows, cols, return_std=True, context=table)
    np.testing.assert_allclose(got, mean + fit.info.shift.offset, rtol=1e-10)
    np.testing.assert_allclose(sd**2, var + fit.noise_var(), rtol=1e-10)
    # one entry at two times: two predictions that differ by the bins' weights
    two = Features(np.arange(3), np.array([0, 3]), np.ones(2), train.context.names)
    a, b = fit.predict([0, 0], [1, 1], context=two)
    w = fit.samples["context_w"].reshape(-1, 5).mean(0)
    assert a - b == pytest.approx(w[0] - w[3], rel=1e-10)
    # the test entries reversed: the draws give the fit-time running mean
    rev = np.arange(test.n)[::-1]
    np.testing.assert_allclose(
        fit.predict(test.rows[rev], test.cols[rev], context=test.context.take(rev)),
        fit.pred_mean[rev],
        rtol=1e-10,
    )
    assert fit.rmse(test) == pytest.approx(np.sqrt(np.mean((fit.pred_mean - test.values) ** 2)))
    lpd = fit.log_predictive_density(test)
    assert np.isfinite(lpd)
    # the pointwise log likelihood of the training ratings includes the offset
    ll = fit.to_arviz(log_likelihood=True).log_likelihood["y"].values
    t = _direct(fit, train.rows, train.cols, train.context, draws=True)
    sd = 1.0 / np.sqrt(np.asarray(fit.samples["tau"], np.float64).reshape(-1, 1))
    from scipy.stats import norm

    want = norm.logpdf(train.values, t + fit.info.shift.offset, sd)
    np.testing.assert_allclose(ll.reshape(want.shape), want, rtol=1e-9)
    lo, hi = fit.predictive_interval(rows, cols, 0.9, context=table)
    assert np.all(lo < got) and np.all(got < hi)
    fit.save(tmp_path / "f.npz")
    back = bmc.load(tmp_path / "f.npz")
    np.testing.assert_array_equal(back.predict(rows, cols, context=table), got)
    assert back.log_predictive_density(test) == lpd
    # errors: a table of another length, other columns, not a table; a fit without offsets
    with pytest.raises(ValueError, match="context has 3 rows for 50 entries"):
        fit.predict(rows, cols, context=table.take([0, 1, 2]))
    other = Features(np.arange(51), np.zeros(50, np.int64), np.ones(50), ["bin=9"])
    with pytest.raises(ValueError, match=r"columns of the training.*reindex\(train.context\)"):
        fit.predict(rows, cols, context=other)
    np.testing.assert_array_equal(
        fit.predict(rows, cols, context=table.reindex(train.context)), got
    )
    with pytest.raises(TypeError, match="context must be a bmczoo.data.Features"):
        fit.predict(rows, cols, context=np.ones((50, 5)))
    plain = bmc.fit(train, test=test, store_factors=True, **FIT)
    with pytest.raises(ValueError, match="context= is read by the sampled offsets.*has none"):
        plain.predict(rows, cols, context=table)
    # without offsets, the log predictive density at the fit-time test entries is still the
    # mixture over the stored draws
    from scipy.special import logsumexp
    from scipy.stats import norm

    s = plain.samples
    M, N = (np.asarray(s[k], np.float64).reshape(-1, *np.shape(s[k])[2:]) for k in "MN")
    t = np.einsum("spk,spk->sp", M[:, test.rows], N[:, test.cols]) + plain.info.shift.offset
    sd = 1.0 / np.sqrt(np.asarray(s["tau"], np.float64).reshape(-1, 1))
    lp = logsumexp(norm.logpdf(test.values, t, sd), axis=0) - np.log(t.shape[0])
    assert plain.log_predictive_density(test) == pytest.approx(lp.mean(), rel=1e-9)
    no_factors = bmc.fit(train, context=True, store_factors=False, **FIT)
    with pytest.raises(ValueError, match="no factor draws were stored"):
        no_factors.predict(rows, cols, context=table)
    # a test set whose table has other columns is refused by fit
    with pytest.raises(ValueError, match="test.context does not have the columns"):
        bmc.fit(
            train,
            test=test.with_context(test.context.reindex(["bin=0", "bin=1"])),
            context=True,
            **FIT,
        )


def test_fit_context_errors():
    train, test = _bin_data()
    kw = {
        k: v
        for k, v in FIT.items()
        if k not in ("num_warmup", "num_samples", "thinning", "num_chains")
    }
    with pytest.raises(ValueError, match="method='gibbs', 'vb' and 'nuts' only, not 'svi'"):
        bmc.fit(train, method="svi", context=True, **kw)
    with pytest.raises(ValueError, match="give the entries to predict as test="):
        bmc.fit(train, context=True, predict=(test.rows, test.cols), **kw)
    bare = bmc.RatingData(test.rows, test.cols, test.values, test.shape)
    with pytest.raises(ValueError, match="test has no per-rating context"):
        bmc.fit(train, context=True, test=bare, **kw)
    with pytest.raises(TypeError, match="context must be True, False or a bmczoo.offsets.Context"):
        bmc.fit(train, context="yes", **kw)
    no_ctx = bmc.RatingData(train.rows, train.cols, train.values, train.shape)
    with pytest.raises(ValueError, match="needs per-rating features"):
        bmc.fit(no_ctx, context=True, **kw)
    with pytest.raises(ValueError, match="no group 'day'"):
        bmc.fit(train, context=bmc.offsets.Context(groups=("day",)), **kw)


def test_checkpointed_fit_with_context(tmp_path):
    """A run with the context offset written every 40 sweeps and run again from its
    checkpoint gives the same predictions; a run without the offset (or with other
    groups) refuses that checkpoint."""
    train, test = _bin_data()
    path = tmp_path / "run.npz"
    kw = dict(FIT, test=test, context=True)
    a = bmc.fit(train, **kw)
    b = bmc.fit(train, checkpoint=path, checkpoint_every=40, **kw)
    np.testing.assert_array_equal(a.predict(test.rows, test.cols), b.predict(test.rows, test.cols))
    c = bmc.fit(train, checkpoint=path, checkpoint_every=40, **kw)  # finished: loaded
    np.testing.assert_array_equal(a.predict(test.rows, test.cols), c.predict(test.rows, test.cols))
    with pytest.raises(ValueError, match="different run: (offsets|context)"):
        bmc.fit(train, checkpoint=path, **{**kw, "context": False})
    other = bmc.offsets.Context(a=2.0)
    with pytest.raises(ValueError, match="different run: (offsets|context)"):
        bmc.fit(train, checkpoint=path, **{**kw, "context": other})


@dataclasses.dataclass(frozen=True)
class Level(bmc.offsets.Offset):
    """A second sampled offset for the tests: one level ``mu ~ N(0, 1)`` at every rating."""

    name: ClassVar[str] = "level"

    def arrays(self, context, n, dtype):
        return {"one": jnp.ones(n, dtype)}

    def gibbs_state(self, arrays, C, dtype):
        return {"mu": jnp.zeros((C,), dtype)}

    def shift(self, state, arrays):
        return state["mu"][:, None] * arrays["one"]

    def sample(self, ratings):
        raise AssertionError("not used")

    def gibbs_update(self, key, state, arrays, target, precision):
        prec = 1.0 + jnp.sum(precision, axis=1)
        z = jax.vmap(lambda k: jax.random.normal(k, (), prec.dtype))(key)
        return {"mu": jnp.sum(precision * target, axis=1) / prec + z / jnp.sqrt(prec)}


def test_two_offsets_each_see_the_other():
    """A level and the drift group together: each block is given the ratings minus the
    other offset, and both are recovered (posterior means within a few posterior sds of
    the truth)."""
    data, dense = _data(n=500, m1=30, m2=25, seed=7)
    drift = np.random.default_rng(8).normal(size=30)
    y = 2.0 + dense[:, 4:] @ drift + 0.3 * np.random.default_rng(9).normal(size=data.n)
    data = bmc.RatingData(data.rows, data.cols, y, data.shape, context=data.context)
    p = gibbs.build_problem(
        data,
        1.0 / 0.09,
        dtype=jnp.float64,
        prior=bmc.priors.Fixed(gamma=1e-6),
        offsets=(Level(), bmc.offsets.Context(groups=("dev",))),
    )
    prior = bmc.priors.Fixed(gamma=1e-6)
    st = gibbs.init(jax.random.split(jax.random.key(2), 2), p, prior, 2)
    sweep = jax.jit(lambda s: gibbs.sweep(s, p, prior))
    mu, w = [], []
    for i in range(600):
        st = sweep(st)
        if i >= 100:
            mu.append(np.asarray(st.offset_state["level"]["mu"]))
            w.append(np.asarray(st.offset_state["context"]["w"]))
    mu, w = np.concatenate(mu), np.concatenate(w)
    # the truth is a draw of the weights' prior family: its z-scores against the posterior
    # are standard normal, compared with the Bonferroni threshold at a familywise 1%
    z = np.append((w.mean(0) - drift) / w.std(0), (mu.mean() - 2.0) / mu.std())
    z_crit = NormalDist().inv_cdf(1 - 0.01 / (2 * z.size))
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)
    with pytest.raises(ValueError, match="distinct names, got level, level"):
        gibbs.build_problem(data, 1.0, offsets=(Level(), Level()))
    with pytest.raises(TypeError, match="Offset components"):
        gibbs.build_problem(data, 1.0, offsets=("context",))


def test_level_probabilities_at_new_entries_with_their_context():
    """Ordered probit: ``predict_proba(rows, cols, context=)`` is the mean over the stored
    draws of ``Phi(c_l - t) - Phi(c_{l-1} - t)``, ``t = theta + x . w`` (float64)."""
    from scipy.stats import norm

    train, test = _bin_data()
    levels = lambda d: d.with_values(np.clip(np.round(d.values), 1, 5))  # noqa: E731
    train, test = levels(train), levels(test)
    kw = dict(FIT, likelihood=bmc.likelihoods.OrderedProbit(), num_samples=40)
    fit = bmc.fit(train, test=test, context=True, store_factors=True, **kw)
    rows, cols, table = train.rows[:30], train.cols[:30], train.context.take(np.arange(30))
    s = fit.samples
    M, N = (np.asarray(s[k], np.float64).reshape(-1, *np.shape(s[k])[2:]) for k in "MN")
    w = np.asarray(s["context_w"], np.float64).reshape(M.shape[0], -1)
    t = np.einsum("spk,spk->sp", M[:, rows], N[:, cols]) + w @ table.to_dense().T
    cuts = np.asarray(s["cuts"], np.float64).reshape(M.shape[0], -1)
    edges = np.concatenate(
        [np.full((M.shape[0], 1), -np.inf), cuts, np.full((M.shape[0], 1), np.inf)], 1
    )
    cdf = norm.cdf(edges[:, None, :] - t[:, :, None])
    want = np.diff(cdf, axis=-1).mean(0)
    np.testing.assert_allclose(fit.predict_proba(rows, cols, context=table), want, atol=1e-10)
    assert fit.log_predictive_density(test) < 0


def test_nuts_fit_with_context():
    """``bmc.fit(method="nuts", context=...)``: the test predictions and the tracked theta
    are ``theta + x . w`` over the draws (exact, float64), and other entries read their
    context."""
    train, test = _bin_data()
    fit = bmc.fit(
        train,
        test=test,
        context=True,
        method="nuts",
        K=2,
        num_warmup=60,
        num_samples=40,
        thinning=1,
        num_chains=1,
        track=15,
        progress_bar=False,
    )
    mean, _ = _direct(fit, test.rows, test.cols, test.context)
    np.testing.assert_allclose(
        fit.predict(test.rows, test.cols), fit.info.shift.apply(mean), rtol=1e-12
    )
    pos = np.arange(5)
    sub = test.context.take(pos)
    # the same entries with a table of their own rows: from the draws
    np.testing.assert_allclose(
        fit.predict(test.rows[pos], test.cols[pos], context=sub),
        fit.info.shift.apply(mean[pos]),
        rtol=1e-12,
    )
    # the tracked ratings' theta includes the offset at their own context
    where = {(int(r), int(c)): k for k, (r, c) in enumerate(zip(train.rows, train.cols))}
    at = np.array([where[(int(r), int(c))] for r, c in zip(fit.track_rows, fit.track_cols)])
    draws = _direct(fit, fit.track_rows, fit.track_cols, train.context.take(at), draws=True)
    np.testing.assert_allclose(
        np.asarray(fit.samples["theta"]).reshape(draws.shape), draws, rtol=1e-10
    )
