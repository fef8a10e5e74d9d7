"""The NumPyro model ``bmczoo.models.matrix_completion``: sites, likelihood scale, argument
checks, NUTS / SVI smoke runs for every prior, and exactness of the discrete prior's
marginalisation (``ColumnSpikeSlabNormal``)."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import scipy.stats as st
from numpyro.infer import MCMC, NUTS, SVI, Predictive, Trace_ELBO
from numpyro.infer.autoguide import AutoNormal
from numpyro.infer.util import log_density
from scipy.special import logsumexp

import bmczoo as bmc
from bmczoo.models import matrix_completion
from bmczoo.priors import ColumnSpikeSlabNormal, Discrete, Fixed, Gamma, InverseGamma

ALL_PRIORS = [Fixed(), InverseGamma(), Gamma(), Discrete()]
IDS = [p.name for p in ALL_PRIORS]


def _normal(fn):
    """The Normal inside the obs site's distribution (unwrap Independent / Expanded)."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    assert isinstance(fn, numpyro.distributions.Normal)
    return fn


def _trace(*args, seed=0, **kwargs):
    return numpyro.handlers.trace(numpyro.handlers.seed(matrix_completion, seed)).get_trace(
        *args, **kwargs
    )


# ----------------------------------------------------------------------------- sites
# (eager traces compile every op once per shape: the tests below reuse K = 3 on the 6 x 5 data)
@pytest.mark.parametrize("prior", ALL_PRIORS, ids=IDS)
@pytest.mark.parametrize("K", [3])
def test_sites_and_shapes(tiny_ratings, prior, K):
    r = tiny_ratings
    m1, m2 = r.shape
    tr = _trace(r, K, prior)
    assert tr["gamma"]["value"].shape == (K,)
    assert tr["M"]["value"].shape == (m1, K)
    assert tr["N"]["value"].shape == (m2, K)
    assert tr["obs"]["value"].shape == (r.n,)
    assert tr["M"]["type"] == tr["N"]["type"] == "sample"
    assert not tr["M"]["is_observed"] and not tr["N"]["is_observed"]
    assert tr["obs"]["is_observed"]
    np.testing.assert_array_equal(np.asarray(tr["obs"]["value"]), r.values.astype(np.float32))
    assert np.all(np.asarray(tr["gamma"]["value"]) > 0)
    # the mean of obs is theta = M N^T at the observed entries
    M, N = np.asarray(tr["M"]["value"]), np.asarray(tr["N"]["value"])
    loc = np.asarray(_normal(tr["obs"]["fn"]).loc)
    np.testing.assert_allclose(loc, (M @ N.T)[r.rows, r.cols], rtol=1e-5, atol=1e-6)


def test_discrete_gamma_site_is_deterministic_and_in_range(tiny_ratings):
    prior = Discrete(C=2.0, p=0.3, eps=0.1)
    tr = _trace(tiny_ratings, 3, prior)
    assert tr["gamma"]["type"] == "deterministic"
    g = np.asarray(tr["gamma"]["value"])
    assert np.all((g >= 0.1 - 1e-7) & (g <= 2.0 + 1e-7))


def test_prior_predictive_samples_obs(tiny_ratings):
    tr = _trace(tiny_ratings, 3, Fixed(), observed=False)
    assert not tr["obs"]["is_observed"]
    assert tr["obs"]["value"].shape == (tiny_ratings.n,)


# ----------------------------------------------------------------------------- likelihood scale
@pytest.mark.parametrize("noise_sd", [1.0, 0.7, 3.0])
def test_lam_none_gives_scale_noise_sd(tiny_ratings, noise_sd):
    tr = _trace(tiny_ratings, 3, Fixed(), noise_sd=noise_sd)
    scale = np.asarray(_normal(tr["obs"]["fn"]).scale)
    np.testing.assert_allclose(np.broadcast_to(scale, (tiny_ratings.n,)), noise_sd, rtol=1e-6)


@pytest.mark.parametrize("lam", [0.5, 3.0, 1000.0])
def test_given_lam_gives_scale_one_over_sqrt_tau(tiny_ratings, lam):
    n = tiny_ratings.n
    tr = _trace(tiny_ratings, 3, Fixed(), lam=lam, noise_sd=123.0)  # noise_sd ignored
    scale = np.asarray(_normal(tr["obs"]["fn"]).scale)
    np.testing.assert_allclose(
        np.broadcast_to(scale, (n,)), 1.0 / math.sqrt(2.0 * lam / n), rtol=1e-6
    )


def test_log_likelihood_is_the_tempered_one_up_to_a_constant(x64, tiny_ratings):
    """log p(Y | M, N) differences equal -(lam/n) * differences of the sum of squares."""
    r, K, lam = tiny_ratings, 2, 4.0
    rng = np.random.default_rng(0)
    lls, sse = [], []
    for _ in range(2):
        M, N = rng.normal(size=(r.shape[0], K)), rng.normal(size=(r.shape[1], K))
        _, tr = log_density(matrix_completion, (r, K, Fixed()), {"lam": lam}, {"M": M, "N": N})
        lls.append(float(jnp.sum(tr["obs"]["fn"].log_prob(tr["obs"]["value"]))))
        sse.append(np.sum((r.values - np.sum(M[r.rows] * N[r.cols], 1)) ** 2))
    np.testing.assert_allclose(lls[0] - lls[1], -(lam / r.n) * (sse[0] - sse[1]), rtol=1e-10)


def test_subsampled_likelihood_is_rescaled(tiny_ratings):
    """SVI minibatches: obs has the minibatch's size and its log-likelihood is scaled by n/b."""
    b = 6
    tr = _trace(tiny_ratings, 3, Fixed(), subsample_size=b)
    assert tr["obs"]["value"].shape == (b,)
    np.testing.assert_allclose(tr["obs"]["scale"], tiny_ratings.n / b, rtol=1e-6)


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("K", [0, -1, 6, 100])
def test_bad_K(tiny_ratings, K):  # tiny_ratings is 6 x 5: K <= 5
    with pytest.raises(ValueError, match="K"):
        _trace(tiny_ratings, K, Fixed())


@pytest.mark.parametrize("K", [2.0, True, "2", None])
def test_K_of_the_wrong_type(tiny_ratings, K):
    with pytest.raises(TypeError, match="K"):
        _trace(tiny_ratings, K, Fixed())


def test_K_equal_min_dimension_is_fine(tiny_ratings):
    assert _trace(tiny_ratings, 5, Fixed())["M"]["value"].shape == (6, 5)


@pytest.mark.parametrize("lam", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_lam(tiny_ratings, lam):
    with pytest.raises(ValueError, match="lam"):
        _trace(tiny_ratings, 2, Fixed(), lam=lam)


@pytest.mark.parametrize("noise_sd", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_noise_sd(tiny_ratings, noise_sd):
    with pytest.raises(ValueError, match="noise_sd"):
        _trace(tiny_ratings, 2, Fixed(), noise_sd=noise_sd)


@pytest.mark.parametrize(
    "ratings",
    [None, (np.arange(3), np.arange(3), np.ones(3)), np.ones((3, 3))],
    ids=["None", "tuple", "array"],
)
def test_non_rating_data(ratings):
    with pytest.raises(TypeError, match="RatingData"):
        _trace(ratings, 1, Fixed())


@pytest.mark.parametrize(
    "prior", ["discrete", None, Discrete, 1.0], ids=["str", "None", "class", "float"]
)
def test_non_prior(tiny_ratings, prior):
    with pytest.raises(TypeError, match="prior"):
        _trace(tiny_ratings, 2, prior)


# ----------------------------------------------------------------------------- log density
@pytest.mark.parametrize(
    "prior",
    [InverseGamma(a=2.0, b=0.5), Gamma(beta=3.0), Fixed(gamma=0.8)],
    ids=["inverse-gamma", "gamma", "fixed"],
)
def test_joint_log_density_matches_scipy(x64, tiny_ratings, prior):
    """log p(gamma, M, N, Y) = log prior(gamma) + sum log N(M_ih; 0, gamma_h)
    + sum log N(N_jh; 0, gamma_h) + sum log N(Y_k; theta_k, noise_sd), all columns of M and
    N sharing gamma_h."""
    r, K, s = tiny_ratings, 3, 0.9
    m1, m2 = r.shape
    d = m1 + m2
    rng = np.random.default_rng(1)
    gamma = np.array([0.3, 1.2, 2.5]) if prior.name != "fixed" else np.full(K, prior.gamma)
    M = rng.normal(size=(m1, K)) * np.sqrt(gamma)
    N = rng.normal(size=(m2, K)) * np.sqrt(gamma)
    params = {"M": M, "N": N} if prior.name == "fixed" else {"gamma": gamma, "M": M, "N": N}
    lj, _ = log_density(matrix_completion, (r, K, prior), {"noise_sd": s}, params)
    if prior.name == "inverse-gamma":
        lp = st.invgamma.logpdf(gamma, prior.a, scale=prior.b).sum()
    elif prior.name == "gamma":
        lp = st.gamma.logpdf(gamma, (d + 1) / 2, scale=2 / prior.beta**2).sum()
    else:
        lp = 0.0
    lp += st.norm.logpdf(M, 0, np.sqrt(gamma)).sum() + st.norm.logpdf(N, 0, np.sqrt(gamma)).sum()
    lp += st.norm.logpdf(r.values, np.sum(M[r.rows] * N[r.cols], 1), s).sum()
    np.testing.assert_allclose(float(lj), lp, rtol=1e-12)


# ----------------------------------------------------------------------------- discrete: exact
def _brute_force_discrete(M, N, p, C, eps):
    """log p(M, N) and P(gamma_h = C | M, N) by summing the joint over all 2^K gamma
    configurations (float64, log space)."""
    K = M.shape[1]
    logs, configs = [], list(itertools.product([0, 1], repeat=K))
    for z in configs:
        g = np.where(np.array(z) == 1, C, eps)
        lpz = np.sum(np.where(np.array(z) == 1, math.log(p), math.log1p(-p)))
        logs.append(
            lpz + st.norm.logpdf(M, 0, np.sqrt(g)).sum() + st.norm.logpdf(N, 0, np.sqrt(g)).sum()
        )
    logs = np.array(logs)
    log_marg = logsumexp(logs)
    post = np.exp(logs - log_marg)
    slab = np.array([[z[h] for h in range(K)] for z in configs])
    return log_marg, post @ slab


@pytest.mark.parametrize(
    "shape, col_scales",
    [
        ((6, 5), (1.0, 0.2, 0.05)),  # a slab-like, an ambiguous and a spike-like column
        ((6, 5), (3.0, 3.0, 0.01)),
        ((400, 300), (1.0, 0.23, 0.05)),
    ],  # d = 700: raw weights eps^(-d/2) ~ 1e455 overflow
)
def test_discrete_marginal_matches_brute_force_sum(x64, shape, col_scales):
    """``M ~ CSSN(p)``, ``N | M ~ CSSN(P(C | M))`` must equal sum_z p(z) p(M|z) p(N|z)."""
    C, p, eps = 1.5, 0.3, 0.05
    prior = Discrete(C=C, p=p, eps=eps)
    rng = np.random.default_rng(2)
    m1, m2 = shape
    rows, cols = np.divmod(rng.choice(m1 * m2, 12, replace=False), m2)
    r = bmc.RatingData(rows, cols, rng.normal(size=12), shape)
    K = len(col_scales)
    M = rng.normal(size=(m1, K)) * np.sqrt(col_scales)
    N = rng.normal(size=(m2, K)) * np.sqrt(col_scales)
    lj, tr = log_density(matrix_completion, (r, K, prior), {}, {"M": M, "N": N})
    loglik = st.norm.logpdf(r.values, np.sum(M[r.rows] * N[r.cols], 1), 1.0).sum()
    log_marg, slab_post = _brute_force_discrete(M, N, p, C, eps)
    assert np.isfinite(float(lj))
    np.testing.assert_allclose(float(lj) - loglik, log_marg, rtol=1e-11)
    # the deterministic sites are the exact posterior slab probabilities / E[gamma | M, N]
    np.testing.assert_allclose(
        np.asarray(tr["gamma_slab_prob"]["value"]), slab_post, rtol=1e-9, atol=1e-300
    )
    np.testing.assert_allclose(
        np.asarray(tr["gamma"]["value"]), slab_post * C + (1 - slab_post) * eps, rtol=1e-9
    )


def test_column_spike_slab_normal_log_prob_brute_force(x64):
    """The distribution alone, with per-column slab probabilities and a batch dimension."""
    C, eps, m = 2.0, 0.1, 7
    probs = np.array([[0.1, 0.5, 0.9], [0.3, 0.3, 0.3]])
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, m, 3)) * np.sqrt([1.0, 0.3, 0.05])
    lp = np.asarray(ColumnSpikeSlabNormal(m, probs, C, eps).log_prob(jnp.asarray(x)))
    assert lp.shape == (2,)
    for b in range(2):
        ref = 0.0
        for h in range(3):
            ref += np.logaddexp(
                math.log(probs[b, h]) + st.norm.logpdf(x[b, :, h], 0, math.sqrt(C)).sum(),
                math.log1p(-probs[b, h]) + st.norm.logpdf(x[b, :, h], 0, math.sqrt(eps)).sum(),
            )
        np.testing.assert_allclose(lp[b], ref, rtol=1e-12)


def test_column_spike_slab_normal_logit_parametrisation(x64):
    """``slab_logit=`` gives the same density as ``slab_prob=``; saturated logits (|l| = 60,
    sigmoid(l) == 1.0 exactly in float64) keep a finite density and finite gradients."""
    C, eps, m = 2.0, 0.1, 5
    probs = np.array([0.2, 0.5, 0.7])
    logits = np.log(probs) - np.log1p(-probs)
    x = jnp.asarray(np.random.default_rng(5).normal(size=(m, 3)))
    a = ColumnSpikeSlabNormal(m, probs, C, eps).log_prob(x)
    b = ColumnSpikeSlabNormal(m, C=C, eps=eps, slab_logit=logits).log_prob(x)
    np.testing.assert_allclose(float(a), float(b), rtol=1e-13)
    with pytest.raises(ValueError):
        ColumnSpikeSlabNormal(m, probs, C, eps, slab_logit=logits)
    sat = jnp.array([60.0, -60.0, 0.0])

    def lp(logit, x):
        return ColumnSpikeSlabNormal(m, C=C, eps=eps, slab_logit=logit).log_prob(x)

    val, (g_logit, g_x) = jax.value_and_grad(lp, argnums=(0, 1))(sat, x)
    assert np.isfinite(float(val))
    assert np.all(np.isfinite(np.asarray(g_logit))) and np.all(np.isfinite(np.asarray(g_x)))


def test_discrete_prior_samples_column_variance_mixture():
    """Prior draws of (M, N) under the discrete model (exact marginalisation): each column
    is N(0, C) w.p. p else N(0, eps), and M's and N's column h SHARE gamma_h.

    With m1 = 40, m2 = 30 the per-column mean square S/m separates C from eps well, so the
    fraction of columns above t = sqrt(C eps) is ~p, with exact value
    p chi2.sf(m t/C, m) + (1-p) chi2.sf(m t/eps, m); for M and N jointly it is ~p (shared
    gamma_h), not ~p^2 (independent).  Binomial 5-sigma tolerances; columns are independent.
    """
    C, p, eps, m1, m2, K, n_draws = 1.0, 0.3, 0.05, 40, 30, 4, 20_000
    r = bmc.RatingData([0, 1, 2], [0, 1, 2], [0.0, 1.0, -1.0], (m1, m2))
    out = Predictive(matrix_completion, num_samples=n_draws, return_sites=["M", "N"])(
        jax.random.key(0), r, K, Discrete(C=C, p=p, eps=eps)
    )
    M = np.asarray(out["M"], dtype=np.float64)
    N = np.asarray(out["N"], dtype=np.float64)
    assert M.shape == (n_draws, m1, K) and N.shape == (n_draws, m2, K)
    vM = np.mean(M**2, axis=1).ravel()  # per-column mean squares
    vN = np.mean(N**2, axis=1).ravel()
    n = vM.size
    t = math.sqrt(C * eps)

    def sf(m, g):
        return st.chi2.sf(m * t / g, m)

    def check(freq, P, what):
        se = math.sqrt(P * (1 - P) / n)
        assert abs(freq - P) < 5 * se, (
            f"{what}: {freq:.5f} vs exact {P:.5f} ({(freq - P) / se:+.2f} SE)"
        )

    check(np.mean(vM > t), p * sf(m1, C) + (1 - p) * sf(m1, eps), "P(M column is slab-like)")
    check(np.mean(vN > t), p * sf(m2, C) + (1 - p) * sf(m2, eps), "P(N column is slab-like)")
    check(
        np.mean((vM > t) & (vN > t)),
        p * sf(m1, C) * sf(m2, C) + (1 - p) * sf(m1, eps) * sf(m2, eps),
        "P(both slab-like)",
    )
    # the entry variance is the mixture p C + (1-p) eps; SE from the exact variance of vM
    mean_v = p * C + (1 - p) * eps
    ev2 = (p * C**2 + (1 - p) * eps**2) * (1 + 2 / m1)  # E[(S/m)^2] for S/g ~ chi2_m
    se = math.sqrt((ev2 - mean_v**2) / n)
    assert abs(vM.mean() - mean_v) < 5 * se


@pytest.mark.parametrize("x64_on", [False, True], ids=["float32", "float64"])
def test_discrete_log_density_gradient_is_finite(tiny_ratings, x64_on):
    """NUTS and SVI need finite gradients of log p(M, N, Y) everywhere.  When a column of M
    is clearly slab-like (scale 1 or 3 below), P(C | M) = sigmoid(logit) rounds to exactly 1
    (logit > ~17 in float32, > ~37 in float64) and a log(1 - P) of it has an infinite
    derivative (inf * 0 = NaN through the sigmoid)."""
    r = tiny_ratings
    rng = np.random.default_rng(4)
    with jax.enable_x64(x64_on):
        dt = jnp.float64 if x64_on else jnp.float32

        @jax.jit
        def f(M, N):
            return log_density(matrix_completion, (r, 2, Discrete()), {}, {"M": M, "N": N})[0]

        vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
        for scale in (0.1, 1.0, 3.0):
            M = jnp.asarray(scale * rng.uniform(-2, 2, (r.shape[0], 2)), dt)
            N = jnp.asarray(scale * rng.uniform(-2, 2, (r.shape[1], 2)), dt)
            val, (gM, gN) = vg(M, N)
            assert np.isfinite(float(val))
            assert np.all(np.isfinite(np.asarray(gM))), (
                f"scale {scale}: d log p / dM not finite: {gM}"
            )
            assert np.all(np.isfinite(np.asarray(gN))), (
                f"scale {scale}: d log p / dN not finite: {gN}"
            )


# ----------------------------------------------------------------------------- inference smoke runs
# Each run costs a few seconds of compilation.  The default suite runs the discrete prior
# (custom marginalised distribution: the most fragile gradients) and the gamma prior (a
# positive sample site with a d-dependent shape); fixed and inverse-gamma, structurally
# covered by those two plus the trace / log-density tests above, run with ``-m slow``.
SMOKE_PRIORS = [
    pytest.param(Discrete(), id="discrete"),
    pytest.param(Gamma(), id="gamma"),
    pytest.param(Fixed(), id="fixed", marks=pytest.mark.slow),
    pytest.param(InverseGamma(), id="inverse-gamma", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("prior", SMOKE_PRIORS)
def test_runs_under_nuts(tiny_ratings, prior):
    K, ns = 2, 100
    # max_tree_depth bounds the cost on this tiny, badly identified posterior
    mcmc = MCMC(
        NUTS(matrix_completion, max_tree_depth=5),
        num_warmup=100,
        num_samples=ns,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), tiny_ratings, K, prior)
    s = mcmc.get_samples()
    m1, m2 = tiny_ratings.shape
    assert s["M"].shape == (ns, m1, K) and s["N"].shape == (ns, m2, K)
    assert s["gamma"].shape == (ns, K)
    for name in ("M", "N", "gamma"):
        assert np.all(np.isfinite(np.asarray(s[name]))), name
    assert np.all(np.asarray(s["gamma"]) > 0)
    # the chain moved
    assert np.std(np.asarray(s["M"])[:, 0, 0]) > 0


@pytest.mark.parametrize("prior", SMOKE_PRIORS)
def test_runs_under_svi_autonormal(tiny_ratings, prior):
    model = matrix_completion
    svi = SVI(model, AutoNormal(model), numpyro.optim.Adam(0.02), Trace_ELBO())
    res = svi.run(jax.random.key(0), 250, tiny_ratings, 2, prior, progress_bar=False)
    losses = np.asarray(res.losses)
    assert losses.shape == (250,) and np.all(np.isfinite(losses))
    assert losses[-50:].mean() < losses[:50].mean()
    for v in res.params.values():
        assert np.all(np.isfinite(np.asarray(v)))
