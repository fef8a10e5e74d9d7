"""Mean-field VB of the context offset (:class:`bmczoo.offsets.Context`'s VB hooks and
:mod:`bmczoo.inference.vb.offsets`), float64 unless said otherwise:

* each CAVI update is the optimum of the evidence lower bound in its factor (the ELBO's
  gradient in the updated parameters is zero);
* the offset's ELBO term against a Monte Carlo estimate from draws of q (within
  ``z_crit`` standard errors);
* the expected squared error of the Gaussian ELBO (the plain sum plus the offsets'
  correction) against the per-rating sum;
* at convergence the weights' means are the exact posterior means of the linear
  regression the model reduces to (mean-field Gaussian CAVI has exact means);
* fits with every likelihood family: the ELBO never decreases, the context is learned,
  predictions at new ratings read their context, save / load, ArviZ, checkpoints, errors.
"""

from __future__ import annotations

from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.inference import gibbs
from bmczoo.inference.results.vb import product_var
from bmczoo.inference.vb import cavi, state as vbstate
from bmczoo.inference.vb import offsets as vbo

from .test_context import _bin_data, _data

pytestmark = pytest.mark.usefixtures("x64")

Z_CRIT = NormalDist().inv_cdf(1 - 0.01 / 2)


def _offset_objective(ctx, arrays, target, precision):
    """The ELBO in the offset's q given a fixed target and precision (C,):
    ``-sum_k p_k E[(t_k - s_k)^2] / 2`` plus the offset's own term."""

    def f(q):
        mean, var = ctx.vb_moments(q, arrays)
        fit = -0.5 * jnp.sum(precision * ((target - mean) ** 2 + var), -1)
        return jnp.sum(fit + ctx.vb_elbo_term(q, arrays))

    return f


@pytest.mark.parametrize("groups", [None, ("bin",)])
def test_the_update_is_the_optimum_of_each_factor(groups):
    data, _ = _data()
    ctx = bmc.offsets.Context(groups=groups, a=2.0, b=3.0)
    arrays = ctx.arrays(data.context.take(np.asarray(data.row_view.order)), data.n, jnp.float64)
    rng = np.random.default_rng(1)
    C, F = 2, arrays["group"].shape[0]
    G = arrays["idx"].shape[0]
    target = jnp.asarray(rng.normal(size=(C, data.n)))
    precision = jnp.asarray(rng.uniform(0.5, 2.0, (C, data.n)))
    q0 = {
        "w_mean": jnp.asarray(rng.normal(size=(C, F))),
        "w_var": jnp.asarray(rng.uniform(0.1, 1.0, (C, F))),
        "lam_shape": jnp.asarray(rng.uniform(1.0, 3.0, (C, G))),
        "lam_rate": jnp.asarray(rng.uniform(1.0, 3.0, (C, G))),
    }
    f = _offset_objective(ctx, arrays, target, precision)
    q1 = ctx.vb_update(q0, arrays, target, precision)
    g = jax.grad(f)(q1)
    # q(lam) is updated last: optimal given the new q(w)
    for k in ("lam_shape", "lam_rate"):
        np.testing.assert_allclose(g[k], 0.0, atol=1e-9)
    # the last group's q(w) is optimal given the other groups and the previous q(lam)
    g = jax.grad(f)({**q1, "lam_shape": q0["lam_shape"], "lam_rate": q0["lam_rate"]})
    last = np.asarray(arrays["group"]) == G - 1
    for k in ("w_mean", "w_var"):
        np.testing.assert_allclose(np.asarray(g[k])[:, last], 0.0, atol=1e-8)
    # and the update moves the objective up
    assert np.all(np.asarray(f(q1)) >= np.asarray(f(q0)))


def test_the_elbo_term_against_monte_carlo():
    data, _ = _data()
    ctx = bmc.offsets.Context(a=2.0, b=3.0)
    arrays = ctx.arrays(data.context, data.n, jnp.float64)
    rng = np.random.default_rng(2)
    F, G = arrays["group"].shape[0], arrays["idx"].shape[0]
    q = {
        "w_mean": rng.normal(size=(1, F)),
        "w_var": rng.uniform(0.1, 1.0, (1, F)),
        "lam_shape": rng.uniform(1.0, 3.0, (1, G)),
        "lam_rate": rng.uniform(1.0, 3.0, (1, G)),
    }
    exact = float(ctx.vb_elbo_term({k: jnp.asarray(v) for k, v in q.items()}, arrays)[0])
    S, group = 20000, np.asarray(arrays["group"])
    lam = rng.gamma(q["lam_shape"][0], 1.0 / q["lam_rate"][0], (S, G))
    w = q["w_mean"][0] + np.sqrt(q["w_var"][0]) * rng.normal(size=(S, F))
    sd = 1.0 / np.sqrt(lam[:, group])
    val = (
        stats.norm.logpdf(w, 0.0, sd).sum(1)
        + stats.gamma.logpdf(lam, ctx.a, scale=1.0 / ctx.b).sum(1)
        - stats.norm.logpdf(w, q["w_mean"][0], np.sqrt(q["w_var"][0])).sum(1)
        - stats.gamma.logpdf(lam, q["lam_shape"][0], scale=1.0 / q["lam_rate"][0]).sum(1)
    )
    se = val.std(ddof=1) / np.sqrt(S)
    assert abs(val.mean() - exact) < Z_CRIT * se, (val.mean(), exact, se)


def test_the_expected_squared_error_with_offsets():
    """The Gaussian ELBO's ``sum_k E[(y - theta - s)^2]`` (the plain model's sum, the
    offsets' correction, their variance) equals the per-rating sum."""
    data, _ = _data()
    ctx = bmc.offsets.Context()
    p = gibbs.build_problem(data, 1.0, dtype=jnp.float64, offsets=(ctx,))
    arrays = p.offset_arrays["ratings"]
    keys = jax.random.split(jax.random.key(0), 2)
    st = vbstate.init(keys, data.shape, bmc.priors.InverseGamma(), 3, jnp.float64)
    rng = np.random.default_rng(3)
    st = st._replace(
        V=st.V + 0.1 * jnp.eye(3),
        W=st.W + 0.2 * jnp.eye(3),
        offsets=vbo.init((ctx,), arrays, 2, jnp.float64),
    )
    q = dict(st.offsets)
    q["context/w_mean"] = jnp.asarray(rng.normal(size=q["context/w_mean"].shape))
    st = st._replace(offsets=q)
    es, vs = vbo.moments((ctx,), q, arrays)
    per_rating = jnp.sum(cavi.rating_expected_sq(st, p.rows, 4096, es, vs), axis=1)
    y = p.rows.values[None]
    total = (
        cavi.parts_of(st, p.rows, None, None)[0]["sq"]
        + vbo.sq_correction(y, vbstate.ratings_mean(st, p.rows), es)
        + jnp.sum(vs, axis=1)
    )
    np.testing.assert_allclose(total, per_rating, rtol=1e-12)


def test_converged_means_are_the_exact_posterior_means():
    """With a negligible factor term (``Fixed(gamma=1e-6)``), a known noise and the
    groups' precisions pinned near 1, the model is a linear regression; CAVI's fixed point
    has the exact posterior means given ``E[lam]`` (mean-field Gaussian)."""
    from .test_context_exact import CONTEXT, PRIOR, SD, _problem

    data, _ = _problem()
    fit = bmc.fit(
        data,
        K=2,
        prior=PRIOR,
        likelihood=bmc.likelihoods.Tempered(noise_sd=SD),
        center=False,
        method="vb",
        max_iter=3000,
        tol=1e-15,
        dtype="float64",
        context=CONTEXT,
        progress_bar=False,
    )
    X = data.context.to_dense()
    lam = fit.q_offsets["context/lam_shape"] / fit.q_offsets["context/lam_rate"]
    group = np.asarray(CONTEXT.arrays(data.context, data.n, np.float64)["group"])
    tau = 1.0 / SD**2
    P = np.diag(lam[group]) + tau * X.T @ X
    # the factor term's mean at the ratings (~1e-12) is part of the fit
    theta = np.sum(fit.m[data.rows] * fit.n[data.cols], axis=1)
    exact = np.linalg.solve(P, tau * X.T @ (data.values - theta))
    np.testing.assert_allclose(fit.q_offsets["context/w_mean"], exact, rtol=1e-7, atol=1e-9)
    # the variances are the inverse diagonal of the precision given the other groups'
    # means: at most the exact marginal variances (mean-field underestimates them)
    assert np.all(fit.q_offsets["context/w_var"] <= np.diag(np.linalg.inv(P)) * (1 + 1e-9))


VB = dict(
    K=4,
    prior=bmc.priors.InverseGamma(),
    method="vb",
    max_iter=200,
    progress_bar=False,
)


def _levels(d):
    v = np.clip(np.round(d.values), 1, 5)
    return bmc.RatingData(d.rows, d.cols, v, d.shape, context=d.context)


@pytest.mark.parametrize(
    "likelihood, biases",
    [
        (bmc.likelihoods.Tempered(), False),
        (bmc.likelihoods.LearnedNoise(), True),
        (bmc.likelihoods.StudentT(), False),
        (bmc.likelihoods.OrderedProbit(), True),
    ],
    ids=["tempered", "learned+biases", "student-t", "ordered-probit+biases"],
)
def test_vb_fits_the_context(likelihood, biases):
    train, test = _bin_data()
    if likelihood.latent:
        train, test = _levels(train), _levels(test)
    kw = dict(VB, likelihood=likelihood, biases=biases, dtype="float64")
    plain = bmc.fit(train, test=test, **kw)
    fit = bmc.fit(train, test=test, context=True, **kw)
    e = np.asarray(fit.elbo)
    assert np.all(np.diff(e) >= -1e-12 * np.abs(e[1:])), np.diff(e)
    assert fit.converged
    # the bin effect (sd 0.9) is what the plain model cannot fit
    assert fit.rmse(test) < plain.rmse(test) - 0.2
    assert fit.log_predictive_density(test) > plain.log_predictive_density(test)
    if not likelihood.latent:  # the trace is the predictive mean at the test ratings
        np.testing.assert_allclose(fit.rmse_trace[-1], fit.rmse(test), rtol=1e-12)


def test_vb_predictions_with_context_save_and_errors(tmp_path):
    train, test = _bin_data()
    fit = bmc.fit(train, test=test, context=True, likelihood=bmc.likelihoods.LearnedNoise(), **VB)
    assert fit.info.offsets == (bmc.offsets.Context().bind(train.context),)
    # the predictive moments: the factor part plus E[s], Var[s] at each entry's context
    q = fit.q_offsets
    X = test.context.to_dense()
    mean, sd = fit.predict(test.rows, test.cols, return_std=True, context=test.context)
    base = np.sum(fit.m[test.rows] * fit.n[test.cols], axis=1) + fit.info.shift.offset
    np.testing.assert_allclose(mean, base + X @ q["context/w_mean"], rtol=1e-12)
    V, W = fit.covariances()
    r, c = test.rows, test.cols
    var = product_var(fit.m[r], fit.n[c], V[r], W[c]) + X**2 @ q["context/w_var"]
    np.testing.assert_allclose(sd**2, var + fit.noise_var(), rtol=1e-12)
    lo, hi = fit.predictive_interval(test.rows, test.cols, 0.9, context=test.context)
    assert np.all(lo < mean) and np.all(mean < hi)
    # the pointwise log likelihood at the training ratings includes the offset's draws
    idata = fit.to_arviz(log_likelihood=True, num_draws=50)
    assert idata.log_likelihood["y"].shape == (1, 50, train.n)
    # save / load: the same predictions
    fit.save(tmp_path / "f.npz")
    back = bmc.load(tmp_path / "f.npz")
    assert back.info.offsets == fit.info.offsets
    np.testing.assert_array_equal(back.predict(test.rows, test.cols, context=test.context), mean)
    assert back.rmse(test) == fit.rmse(test)
    for f in (fit, back):
        with pytest.raises(ValueError, match=r"sampled offsets \(context\).*per-rating table"):
            f.predict(test.rows, test.cols)
        with pytest.raises(ValueError, match="recommend and fold_in are not available"):
            f.recommend(np.array([0]))
    other = Features(
        test.context.indptr, test.context.indices, test.context.values, [f"x{i}" for i in range(5)]
    )
    with pytest.raises(ValueError, match="reindex"):
        fit.predict(test.rows, test.cols, context=other)


def test_vb_float32_and_checkpoint(tmp_path):
    train, test = _bin_data()
    kw = dict(VB, likelihood=bmc.likelihoods.LearnedNoise(), biases=True, context=True)
    f32 = bmc.fit(train, test=test, dtype="float32", **kw)
    f64 = bmc.fit(train, test=test, dtype="float64", **kw)
    assert f32.q_offsets["context/w_mean"].dtype == np.float32
    e = np.asarray(f32.elbo)
    assert np.all(np.diff(e) >= -8 * np.finfo(np.float32).eps * np.abs(e[1:]))
    # both fit the bins (sd 0.9; noise sd 0.5)
    assert max(f32.rmse(test), f64.rmse(test)) < 0.6
    # a checkpointed run resumes with the offsets' q: the same as one run
    ck = tmp_path / "vb.npz"
    kw = dict(kw, dtype="float64", tol=0.0)
    whole = bmc.fit(train, test=test, **{**kw, "max_iter": 12})
    bmc.fit(train, test=test, checkpoint=ck, checkpoint_every=6, **{**kw, "max_iter": 6})
    resumed = bmc.fit(train, test=test, checkpoint=ck, checkpoint_every=6, **{**kw, "max_iter": 12})
    np.testing.assert_array_equal(resumed.elbo, whole.elbo)
    for k, v in whole.q_offsets.items():
        np.testing.assert_array_equal(resumed.q_offsets[k], v)


def test_vb_context_errors():
    train, test = _bin_data()
    with pytest.raises(ValueError, match="method='gibbs', 'vb' and 'nuts' only, not 'map'"):
        bmc.fit(train, method="map", context=True, K=2, progress_bar=False)
    with pytest.raises(ValueError, match="one device"):
        bmc.fit(train, context=True, devices=jax.devices()[:1], **VB)
