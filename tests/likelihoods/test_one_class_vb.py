"""Mean-field VB of the one-class likelihood (docs/algorithms.md, "One-class likelihood in
VB"): every pair of the matrix observed, the rows' updates a weighted Gaussian update at
the ratings plus one shared ``K x K`` term, no ``m1 x m2`` array.

What is checked (float64 unless said otherwise):

* **The updates are exact**: one CAVI iteration's ``q(M)`` (given the starting ``q(N)``)
  and ``q(N)`` (given the new ``q(M)``) equal the dense Gaussian over every pair of the
  matrix (preferences and confidences as full ``m1 x m2`` arrays), with the prior's
  expected row precision and shift, for a column-scale prior and Normal-Wishart; and with
  the fixed prior the ELBO's gradient in each updated factor (means and the symmetric
  part of the covariances) is zero.
* **The ELBO's expected log-likelihood** equals the dense expectation (``E[theta_ij^2] =
  tr(E[M_i M_i^T] E[N_j N_j^T])`` at every pair) to rounding, and a Monte Carlo estimate
  from draws of ``q`` within ``z_crit`` standard errors.
* **CAVI never decreases the ELBO** for every prior of the paper and Normal-Wishart
  (relative tolerance 1e-12 of |ELBO|, as in ``test_vb_components``).
* ``bmc.fit(method="vb")`` in float32 and float64: finite, non-decreasing ELBO trace;
  on a planted block problem its top-10 recommendations beat popularity's (recall and
  NDCG at 10); a saved fit predicts the same bits; several devices and sampled offsets
  are clear errors (the biases: ``test_one_class_biases_vb.py``); a checkpointed fit continues to the straight fit's bits, and other one-class
  settings are another run.
"""

from __future__ import annotations

from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.evaluation import ndcg_at_k, recall_at_k
from bmczoo.inference import gibbs, vb
from bmczoo.inference.vb import all_pairs
from bmczoo.inference.vb.elbo import all_pairs_loglik

LIK = bmc.likelihoods.OneClass(alpha=2.0, c0=0.3, lam=1.5)
M1, M2, K = 7, 6, 2
Z_CRIT = NormalDist().inv_cdf(1 - 0.01 / 2)
PRIORS = {
    "fixed": bmc.priors.Fixed(),
    "inverse-gamma": bmc.priors.InverseGamma(),
    "gamma": bmc.priors.Gamma(),
    "discrete": bmc.priors.Discrete(),
    "normal-wishart": bmc.priors.NormalWishart(),
}


def _data(seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((M1, M2)) < 0.35)
    strengths = rng.integers(1, 5, rows.size).astype(np.float64)
    return bmc.RatingData(rows, cols, strengths, (M1, M2))


def _dense(data):
    """The preferences ``P`` and confidences ``C`` of every pair (numpy)."""
    P = np.zeros(data.shape)
    C = np.full(data.shape, LIK.c0)
    P[data.rows, data.cols] = 1.0
    C[data.rows, data.cols] = 1.0 + LIK.alpha * np.asarray(data.values)
    return P, C


def _random_pd(rng, shape):
    A = rng.normal(size=shape + (K, K)) * 0.3
    return A @ np.swapaxes(A, -1, -2) + 0.05 * np.eye(K)


def _state(prior, C=1, seed=1):
    """A starting state with random means and random positive definite covariances."""
    rng = np.random.default_rng(seed)
    keys = jax.random.split(jax.random.key(seed), C)
    st = vb.init(keys, (M1, M2), prior, K, jnp.float64)
    return st._replace(
        m=jnp.asarray(rng.normal(size=(C, M1, K))),
        V=jnp.asarray(_random_pd(rng, (C, M1))),
        n=jnp.asarray(rng.normal(size=(C, M2, K))),
        W=jnp.asarray(_random_pd(rng, (C, M2))),
    )


def _problem(data):
    return gibbs.build_problem(data, LIK.lam, dtype=jnp.float64)


def _dense_update(P, C, mean, cov, prec, shift):
    """The optimal Gaussian rows given the other factor's moments (numpy, one run)."""
    second = cov + np.einsum("jk,jl->jkl", mean, mean)
    prec_rows = prec + LIK.lam * np.einsum("ij,jkl->ikl", C, second)
    rhs = LIK.lam * (C * P) @ mean + shift
    return np.linalg.solve(prec_rows, rhs[..., None])[..., 0], np.linalg.inv(prec_rows)


def _row_prior(prec, shift):
    prec = np.asarray(prec)[0]
    prec = np.diag(prec) if prec.ndim == 1 else prec
    return prec, 0.0 if shift is None else np.asarray(shift)[0]


@pytest.mark.parametrize("prior", ["inverse-gamma", "normal-wishart"])
def test_updates_are_the_dense_gaussian(x64, prior):
    prior = PRIORS[prior]
    data = _data()
    p, (P, C) = _problem(data), _dense(data)
    st = _state(prior)
    new = jax.jit(lambda s: vb.update(s, p.rows, p.cols, prior, p.tau, likelihood=LIK))(st)
    (PM, sM), (PN, sN) = prior.vb_row_priors(vb.prior_q(st))
    m, V = _dense_update(P, C, np.asarray(st.n[0]), np.asarray(st.W[0]), *_row_prior(PM, sM))
    np.testing.assert_allclose(new.m[0], m, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(new.V[0], V, rtol=1e-10, atol=1e-12)
    n, W = _dense_update(P.T, C.T, m, V, *_row_prior(PN, sN))
    np.testing.assert_allclose(new.n[0], n, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(new.W[0], W, rtol=1e-10, atol=1e-12)


def test_each_update_zeroes_the_elbo_gradient(x64):
    """Fixed prior (no prior q): ``q(M)`` is optimal given the starting ``q(N)`` and
    ``q(N)`` given the new ``q(M)``; the ELBO reads only the covariances' upper triangle in
    the sparse sums, so the symmetric part of their gradient is the one that vanishes."""
    prior = PRIORS["fixed"]
    data = _data()
    p = _problem(data)
    st = _state(prior, C=2)
    new = jax.jit(lambda s: vb.update(s, p.rows, p.cols, prior, p.tau, likelihood=LIK))(st)

    def grads(state, mean, cov):
        def f(a, b):
            s = state._replace(**{mean: a, cov: b})
            return jnp.sum(vb.elbo(s, p.rows, prior, p.tau, likelihood=LIK))

        ga, gb = jax.grad(f, argnums=(0, 1))(getattr(state, mean), getattr(state, cov))
        return np.asarray(ga), np.asarray(gb + jnp.swapaxes(gb, -1, -2)) / 2

    for state, mean, cov in ((st._replace(m=new.m, V=new.V), "m", "V"), (new, "n", "W")):
        ga, gb = grads(state, mean, cov)
        np.testing.assert_allclose(ga, 0.0, atol=1e-10)
        np.testing.assert_allclose(gb, 0.0, atol=1e-10)
    # and the gradient is not zero before the update (the check has power)
    ga, _ = grads(st, "m", "V")
    assert np.abs(ga).max() > 1e-2


def test_expected_loglik_is_the_dense_expectation_and_monte_carlo(x64):
    data = _data()
    p, (P, C) = _problem(data), _dense(data)
    st = _state(PRIORS["fixed"])
    got = float(all_pairs_loglik(st, p.rows, LIK, p.tau)[0][0])
    m, V, n, W = (np.asarray(x[0]) for x in (st.m, st.V, st.n, st.W))
    A = V + np.einsum("ik,il->ikl", m, m)
    B = W + np.einsum("jk,jl->jkl", n, n)
    e_theta, e_theta2 = m @ n.T, np.einsum("ikl,jkl->ij", A, B)
    wsse = np.sum(C * (P**2 - 2 * P * e_theta + e_theta2))
    dense = 0.5 * np.sum(np.log(LIK.lam * C / (2 * np.pi))) - 0.5 * LIK.lam * wsse
    assert got == pytest.approx(dense, rel=1e-12)
    # Monte Carlo: draws of q(M), q(N), the log density of every pair
    rng = np.random.default_rng(4)
    S = 20000
    M = m + np.einsum("ikl,sil->sik", np.linalg.cholesky(V), rng.normal(size=(S, M1, K)))
    N = n + np.einsum("jkl,sjl->sjk", np.linalg.cholesky(W), rng.normal(size=(S, M2, K)))
    theta = np.einsum("sik,sjk->sij", M, N)
    val = stats.norm.logpdf(P, theta, 1.0 / np.sqrt(LIK.lam * C)).sum(axis=(1, 2))
    se = val.std(ddof=1) / np.sqrt(S)
    assert abs(val.mean() - got) < Z_CRIT * se, (val.mean(), got, se)


@pytest.mark.parametrize("prior", list(PRIORS))
def test_elbo_never_decreases(x64, prior):
    prior = PRIORS[prior]
    data = _data(seed=2)
    p = _problem(data)
    kw = dict(likelihood=LIK)

    @jax.jit
    def step(state):
        state = vb.update(state, p.rows, p.cols, prior, p.tau, **kw)
        return state, vb.elbo(state, p.rows, prior, p.tau, **kw)

    keys = jax.random.split(jax.random.key(1), 2)
    state, trace = vb.init(keys, (M1, M2), prior, K, jnp.float64), []
    for _ in range(30):
        state, e = step(state)
        trace.append(np.asarray(e))
    trace = np.array(trace)
    assert np.all(np.isfinite(trace))
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= 1e-12 * np.abs(trace[1:])), drops.max()


def _planted(seed=0, m1=60, m2=48, groups=3):
    """Users and items in ``groups`` blocks: a user clicks its block's items often and
    others rarely; item popularity varies within a block (so popularity alone mixes the
    blocks).  20% of each user's clicks held out."""
    rng = np.random.default_rng(seed)
    gu, gi = rng.integers(0, groups, m1), np.arange(m2) % groups
    pop = rng.uniform(0.3, 1.0, m2)
    prob = np.where(gu[:, None] == gi[None, :], 0.6 * pop[None, :], 0.04)
    rows, cols = np.nonzero(rng.random((m1, m2)) < prob)
    test = rng.random(rows.size) < 0.2
    ones = np.ones(rows.size)

    def part(keep):
        return bmc.RatingData(rows[keep], cols[keep], ones[keep], (m1, m2))

    return part(~test), part(test)


def test_fit_ranks_better_than_popularity_and_saves(tmp_path, dtype):
    train, test = _planted()
    fit = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.InverseGamma(),
        likelihood=bmc.likelihoods.OneClass(alpha=4.0, c0=0.3, lam=2.0),
        method="vb",
        max_iter=100,
        seed=0,
        progress_bar=False,
        dtype=dtype,
    )
    assert fit.info.dtype == np.dtype(dtype).name
    e = np.asarray(fit.elbo)
    assert np.all(np.isfinite(e))
    rounding = 1e-5 if dtype == np.float32 else 1e-12  # float32: ~1e-7 per operation
    assert np.all(np.diff(e) >= -rounding * np.abs(e[1:]))
    users = np.unique(test.rows)
    items, _ = fit.recommend(users, 10)
    seen = np.zeros(train.shape, bool)
    seen[train.rows, train.cols] = True
    counts = np.bincount(train.cols, minlength=train.shape[1]).astype(np.float64)
    pop = np.where(seen[users], -np.inf, counts[None, :])
    pop_items = np.argsort(-pop, axis=1, kind="stable")[:, :10]
    for metric in (recall_at_k, ndcg_at_k):
        ours = metric(test, users, items, 10, threshold=1.0)
        theirs = metric(test, users, pop_items, 10, threshold=1.0)
        assert ours > theirs + 0.05, (metric.__name__, ours, theirs)
    fit.save(tmp_path / "one_class_vb.npz")
    back = bmc.load(tmp_path / "one_class_vb.npz")
    assert back.info.likelihood == fit.info.likelihood
    r, c = np.divmod(np.arange(train.shape[0] * train.shape[1]), train.shape[1])
    assert np.array_equal(fit.predict(r, c), back.predict(r, c))


def test_unsupported_combinations_are_clear_errors():
    with pytest.raises(ValueError, match="does not implement several devices"):
        all_pairs.check_support(LIK, sharded=object())
    with pytest.raises(ValueError, match="does not implement sampled offsets"):
        all_pairs.check_support(LIK, offsets=(bmc.offsets.Context(),))
    all_pairs.check_support(bmc.likelihoods.Tempered(), biases=object())  # not all_pairs
    all_pairs.check_support(LIK, biases=object())  # the biases are implemented


def test_fit_with_feature_links_never_decreases_the_elbo(x64):
    """Normal-Wishart with row features (the linked rows' own prior means): the one-class
    rows' update is unchanged, the ELBO trace of the fit non-decreasing."""
    from bmczoo.data import Features

    data = _planted(m1=30, m2=24)[0]
    X = np.random.default_rng(5).normal(size=(30, 3))
    fit = bmc.fit(
        data,
        K=2,
        prior=bmc.priors.NormalWishart(row_features=Features.from_dense(X)),
        likelihood=LIK,
        method="vb",
        max_iter=40,
        tol=0.0,
        progress_bar=False,
        dtype="float64",
    )
    e = np.asarray(fit.elbo)
    assert e.size == 40 and np.all(np.isfinite(e))
    assert np.all(np.diff(e) >= -1e-12 * np.abs(e[1:])), np.diff(e).min()


def test_checkpoint_continues_and_names_the_likelihood(tmp_path):
    """A checkpointed fit continued to more iterations equals the straight fit; one with
    other one-class settings is another run (its likelihood is part of the checkpoint)."""
    train = _planted(m1=30, m2=24)[0]
    kw = dict(K=2, prior=bmc.priors.Discrete(), method="vb", tol=0.0, progress_bar=False)
    path = tmp_path / "vb.npz"
    full = bmc.fit(train, likelihood=LIK, max_iter=12, **kw)
    bmc.fit(train, likelihood=LIK, max_iter=5, checkpoint=path, **kw)
    more = bmc.fit(train, likelihood=LIK, max_iter=12, checkpoint=path, **kw)
    for f in ("m", "n", "V_diag", "W_diag", "elbo"):
        assert np.array_equal(getattr(full, f), getattr(more, f)), f
    other = bmc.likelihoods.OneClass(alpha=3.0, c0=0.3, lam=1.5)
    with pytest.raises(ValueError, match="different run: likelihood"):
        bmc.fit(train, likelihood=other, max_iter=12, checkpoint=path, **kw)
