"""The NumPyro baselines behind ``bmc.fit``: ``method="nuts"``, ``"svi"`` (AutoNormal,
AutoLowRankMultivariateNormal, minibatches through ``subsample_size``) and ``"map"``
(AutoDelta on the model with gamma integrated out).

* **End to end** for every prior on a 6 x 5 matrix (short runs): predictions of the right
  shape, finite, ``fit.rmse`` agrees with a direct computation; loss traces of the right
  length.  The default suite runs NUTS, SVI (AutoNormal) and MAP for every prior, and the
  low-rank and minibatch SVI variants for one prior each; the rest of the prior x method
  grid is ``slow`` (each of these fits costs ~4 s of XLA compilation).
* **MAP of the fixed prior is the nuclear-norm-penalised estimator** (float64): the
  returned factors are a stationary point of ``tau/2 SSE + (||M||^2 + ||N||^2)/(2 gamma)``
  and ``theta = M N^T`` satisfies the optimality certificate of the *convex* problem
  ``min tau/2 SSE(theta) + ||theta||_* / gamma``, so it is its global minimiser.
* **MAP of the gamma prior is the group-lasso estimator**: the model's marginal column
  prior is ``const - beta sqrt(S_h)`` (the algebra of ``Gamma.vb_update(...)
  .log_normalizer`` is checked, and the constant against quadrature), the model's log
  density is ``-(tau/2 SSE + beta sum_h sqrt(S_h)) + const``, and the MAP is a stationary
  point of that objective (zero groups exactly at zero up to the optimiser's jitter).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as si
from numpyro.infer.util import log_density

import bmczoo as bmc
from bmczoo.models import matrix_completion

K = 2
# tiny_ratings is 6 x 5 (d = 11)
PRIORS = {
    "fixed": bmc.priors.Fixed(1.0),
    "inverse-gamma": bmc.priors.InverseGamma(1.0, 0.5),
    # prior mean of gamma (d + 1) / beta^2 = 1
    "gamma": bmc.priors.Gamma(beta=math.sqrt(12.0)),
    "discrete": bmc.priors.Discrete(C=1.0, p=0.5, eps=0.05),
}
NUM_STEPS = 200
METHODS = {
    "nuts": dict(method="nuts", num_warmup=50, num_samples=50, thinning=1, num_chains=1),
    "svi-normal": dict(method="svi", num_steps=NUM_STEPS),
    "svi-lowrank": dict(method="svi", guide="lowrank", num_steps=NUM_STEPS),
    "svi-minibatch": dict(method="svi", num_steps=NUM_STEPS, subsample_size=5),
    "map": dict(method="map", num_steps=NUM_STEPS),
}
# in the default suite: NUTS, SVI (AutoNormal) and MAP for every prior (the issue's
# check), and the low-rank and minibatch SVI variants with one prior each; the rest of
# the grid is slow (compilation dominates: ~3-4 s of CPU per NUTS / SVI fit)
DEFAULT = {(p, m) for p in PRIORS for m in ("nuts", "svi-normal", "map")} | {
    ("fixed", "svi-minibatch"),
    ("discrete", "svi-lowrank"),
}
GRID = [
    pytest.param(p, m, id=f"{p}-{m}", marks=() if (p, m) in DEFAULT else pytest.mark.slow)
    for p in PRIORS
    for m in METHODS
]


# ----------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("prior_name, method", GRID)
def test_end_to_end(tiny_ratings, prior_name, method):
    train, test = tiny_ratings.split(0.25, seed=0)
    kw = METHODS[method]
    fit = bmc.fit(train, K=K, prior=PRIORS[prior_name], seed=0, progress_bar=False, test=test, **kw)
    m1, m2 = train.shape
    assert fit.shape == (m1, m2)
    assert fit.method == kw["method"]
    # every entry of the matrix, observed or not
    rr, cc = np.divmod(np.arange(m1 * m2), m2)
    pred = fit.predict(rr, cc)
    assert pred.shape == (m1 * m2,)
    assert np.all(np.isfinite(pred))
    # rmse == direct computation from predict
    r = fit.rmse(test)
    want = float(np.sqrt(np.mean((fit.predict(test.rows, test.cols) - test.values) ** 2)))
    assert np.isfinite(r) and r >= 0
    np.testing.assert_allclose(r, want, rtol=1e-12)
    # a single entry and a list give consistent answers
    np.testing.assert_allclose(fit.predict([1], [2]), pred[[1 * m2 + 2]], rtol=1e-6, atol=1e-9)
    if kw["method"] == "nuts":
        assert fit.samples["M"].shape == (1, kw["num_samples"], m1, K)
        assert fit.samples["N"].shape == (1, kw["num_samples"], m2, K)
        assert fit.samples["theta"].shape[:2] == (1, kw["num_samples"])
        assert np.all(np.isfinite(fit.samples["theta"]))
        # the posterior mean is the average of the draws (plus the centring offset)
        M, N = fit.samples["M"][0], fit.samples["N"][0]
        theta = np.mean(np.sum(M[:, 1] * N[:, 2], axis=-1))
        np.testing.assert_allclose(
            pred[1 * m2 + 2], theta + fit.meta["offset"], rtol=1e-5, atol=1e-6
        )
    else:
        assert fit.losses.shape == (kw["num_steps"],)
        assert np.all(np.isfinite(fit.losses))
        # the loss went down over the run (for minibatches: on average over 50 steps)
        assert fit.losses[-50:].mean() < fit.losses[:50].mean()
        if "subsample_size" in kw:
            assert fit.meta["subsample_size"] == kw["subsample_size"]
        if kw["method"] == "map":
            assert fit.point["M"].shape == (m1, K) and fit.point["N"].shape == (m2, K)
            np.testing.assert_allclose(
                pred,
                (fit.point["M"] @ fit.point["N"].T).ravel() + fit.meta["offset"],
                rtol=1e-5,
                atol=1e-6,
            )
        else:
            assert fit.draws["M"].shape[1:] == (m1, K)
            assert np.all(np.isfinite(fit.draws["M"])) and np.all(np.isfinite(fit.draws["N"]))


@pytest.mark.parametrize(
    "kw",
    [
        dict(subsample_size=0),
        dict(subsample_size=10_000),
        dict(num_steps=0),
        dict(guide="delta"),
        dict(guide="full"),
    ],
)
def test_svi_bad_arguments(tiny_ratings, kw):
    with pytest.raises(ValueError):
        bmc.fit(tiny_ratings, K=K, prior=PRIORS["fixed"], method="svi", progress_bar=False, **kw)


# ----------------------------------------------------------------------------- MAP = penalised estimators
def _map_problem():
    """10 x 8 matrix, 45 ratings of a rank-2 signal plus N(0, 0.3^2) noise."""
    rng = np.random.default_rng(5)
    m1, m2, n = 10, 8, 45
    keys = np.sort(rng.choice(m1 * m2, n, replace=False))
    rows, cols = np.divmod(keys, m2)
    U, V = rng.normal(size=(m1, 2)), rng.normal(size=(m2, 2))
    y = np.sum(U[rows] * V[cols], 1) + 0.3 * rng.normal(size=n)
    return bmc.RatingData(rows, cols, y, (m1, m2))


NOISE_SD = 0.3
TAU = 1.0 / NOISE_SD**2


def _residual_matrix(data, M, N):
    """``P_Omega(Y - M N^T)`` as a dense m1 x m2 matrix (zeros off the observed entries)."""
    R = np.zeros(data.shape)
    R[data.rows, data.cols] = data.values - np.sum(M[data.rows] * N[data.cols], axis=1)
    return R


def _check_log_density_is_minus_objective(data, prior, K, F, seed):
    """The marginal model's log density (what AutoDelta maximises) plus ``F`` is the same
    constant at three random points (jitted: one compilation instead of one per op)."""
    m1, m2 = data.shape

    @jax.jit
    def ld(M, N):
        return log_density(
            matrix_completion,
            (data, K, prior, None, NOISE_SD),
            {"marginal": True},
            {"M": M, "N": N},
        )[0]

    rng = np.random.default_rng(seed)
    offsets = []
    for scale in (0.3, 1.0, 3.0):
        M, N = scale * rng.normal(size=(m1, K)), scale * rng.normal(size=(m2, K))
        offsets.append(float(ld(jnp.asarray(M), jnp.asarray(N))) + F(M, N))
    # F ranges over ~1e1..1e4 here: float64 round-off ~1e-12 relative
    np.testing.assert_allclose(offsets, offsets[0], rtol=1e-10)


def _map_fit(data, prior, K, num_steps=5000):
    fit = bmc.fit(
        data,
        K=K,
        prior=prior,
        method="map",
        noise_sd=NOISE_SD,
        num_steps=num_steps,
        learning_rate=0.05,
        center=False,
        clip=False,
        seed=0,
        progress_bar=False,
    )
    # end to end: predictions are the MAP's theta, rmse works, the loss trace is complete
    M, N = np.asarray(fit.point["M"]), np.asarray(fit.point["N"])
    m1, m2 = data.shape
    rr, cc = np.divmod(np.arange(m1 * m2), m2)
    pred = fit.predict(rr, cc)
    assert pred.shape == (m1 * m2,) and np.all(np.isfinite(pred))
    np.testing.assert_allclose(pred, (M @ N.T).ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        fit.rmse(data),
        np.sqrt(np.mean((pred.reshape(m1, m2)[data.rows, data.cols] - data.values) ** 2)),
        rtol=1e-12,
    )
    assert fit.losses.shape == (num_steps,) and np.all(np.isfinite(fit.losses))
    return fit


def test_map_fixed_prior_is_nuclear_norm_estimator(x64):
    """Fixed gamma: the MAP minimises ``F(M, N) = tau/2 ||P_Omega(Y - M N^T)||^2 +
    (||M||^2 + ||N||^2) / (2 gamma)``, whose minimum over factorisations of a given theta
    is ``tau/2 SSE(theta) + ||theta||_* / gamma`` (nuclear norm).

    Checks: (1) the model's log density is ``-F + const`` (two random points); (2) the
    returned point is stationary: ``grad F = 0`` (Adam with 5000 steps reaches ~1e-14 in
    float64; we allow 1e-8 of the gradient's scale ``tau ||Y|| ||N||``); (3) the factors
    are balanced, ``M^T M = N^T N`` (a consequence of stationarity); (4) the convex
    optimality certificate of the nuclear-norm problem: with ``theta = U diag(s) V^T``
    (rank r) and ``G = gamma tau P_Omega(Y - theta)``, ``U^T G V = I_r`` and
    ``||G||_op <= 1`` (``G`` is a subgradient of the nuclear norm at theta), so theta is
    the global minimiser of the convex problem.  With gamma = 0.05 the nuclear-norm
    solution has rank 2 < K = 3, so the rank constraint of the factorisation is inactive.
    """
    data = _map_problem()
    g, Kmap = 0.05, 3
    prior = bmc.priors.Fixed(g)

    # (1) the marginal model's log density is -F + const
    def F(M, N):
        R = _residual_matrix(data, M, N)
        return 0.5 * TAU * np.sum(R**2) + (np.sum(M**2) + np.sum(N**2)) / (2 * g)

    _check_log_density_is_minus_objective(data, prior, Kmap, F, seed=0)

    fit = _map_fit(data, prior, Kmap)
    M, N = np.asarray(fit.point["M"]), np.asarray(fit.point["N"])
    R = _residual_matrix(data, M, N)
    # (2) stationarity
    gM = -TAU * R @ N + M / g
    gN = -TAU * R.T @ M + N / g
    scale = TAU * np.abs(data.values).max() * max(np.abs(M).max(), np.abs(N).max())
    assert np.abs(gM).max() < 1e-8 * scale and np.abs(gN).max() < 1e-8 * scale, (
        np.abs(gM).max(),
        np.abs(gN).max(),
    )
    # (3) balance
    np.testing.assert_allclose(M.T @ M, N.T @ N, atol=1e-8 * np.abs(M.T @ M).max())
    # (4) convex certificate
    theta = M @ N.T
    U, s, Vt = np.linalg.svd(theta)
    r = int(np.sum(s > 1e-6 * s[0]))
    assert r == 2, s
    G = g * TAU * R
    np.testing.assert_allclose(U[:, :r].T @ G @ Vt[:r].T, np.eye(r), atol=1e-7)
    assert np.linalg.norm(G, 2) <= 1.0 + 1e-7
    # the part of G outside the solution's row / column spaces is strictly inside the
    # ball: the solution is the unique minimiser (strict complementarity)
    Pu, Pv = np.eye(10) - U[:, :r] @ U[:, :r].T, np.eye(8) - Vt[:r].T @ Vt[:r]
    assert np.linalg.norm(Pu @ G @ Pv, 2) < 1.0 - 1e-3


def _gamma_log_z_constant(beta, d):
    """``log Z(S) + beta sqrt(S)`` for the gamma prior, by hand.

    ``log Z = a log r - lgamma(a) + log 2 + (1/4) log(S / (2r)) + (1/2) log(pi/2)
    - (1/2) log(beta sqrt S) - beta sqrt S`` with ``a = (d+1)/2``, ``r = beta^2/2``; since
    ``2r = beta^2`` the ``log S`` terms cancel, ``(1/4) log S - (1/4) log S = 0``, and
    ``-(1/4) log(beta^2) - (1/2) log beta = -log beta``:
    ``log Z = a log(beta^2/2) - lgamma(a) + log 2 + (1/2) log(pi/2) - log beta - beta sqrt S``.
    """
    a = 0.5 * (d + 1)
    return (
        a * math.log(beta**2 / 2)
        - math.lgamma(a)
        + math.log(2.0)
        + 0.5 * math.log(math.pi / 2)
        - math.log(beta)
    )


def test_gamma_prior_marginal_is_group_lasso_penalty(x64):
    beta, d = 2.5, 18
    prior = bmc.priors.Gamma(beta)
    S = jnp.asarray([1e-6, 0.01, 0.7, 3.0, 50.0, 1e4])
    logz = np.asarray(prior.vb_update(S, d).log_normalizer)
    const = _gamma_log_z_constant(beta, d)
    np.testing.assert_allclose(logz + beta * np.sqrt(np.asarray(S)), const, rtol=1e-12, atol=1e-10)
    # the constant against quadrature of Z = int Gamma(g; a, r) g^(-d/2) exp(-S/(2g)) dg
    a, rate = 0.5 * (d + 1), beta**2 / 2
    for s in (0.7, 3.0):
        f = lambda g, s=s: math.exp(  # noqa: E731
            a * math.log(rate)
            - math.lgamma(a)
            + (a - 1 - d / 2) * math.log(g)
            - rate * g
            - s / (2 * g)
        )
        z, err = si.quad(f, 0, np.inf, epsabs=0, epsrel=1e-12, limit=200)
        np.testing.assert_allclose(math.log(z), const - beta * math.sqrt(s), rtol=1e-9)


def test_map_gamma_prior_is_group_lasso_stationary_point(x64):
    """Gamma prior: the MAP (gamma integrated out) minimises
    ``F(M, N) = tau/2 SSE + beta sum_h sqrt(||M_h||^2 + ||N_h||^2)`` (the marginal column
    prior is ``const - beta sqrt(S_h)``).

    Checks: (1) the model's log density is ``-F + const``; (2) at the returned point,
    for every active group (``S_h`` not ~0) the gradient of ``F`` w.r.t. ``(M_h, N_h)``
    vanishes relative to its penalty part ``beta (M_h, N_h)/sqrt(S_h)`` (norm beta).  The
    penalty is not differentiable at ``S_h = 0``; a group at zero is always stationary
    (the SSE gradient of a zero group is zero), and Adam leaves it jittering at
    ``S_h ~ 1e-6``.  Measured: relative gradient ~3e-5 on the active groups; allowed 1e-3.
    (3) The group lasso selects: the rank-2 signal keeps 2 of the K = 3 groups."""
    data = _map_problem()
    beta, Kmap = 10.0, 3
    prior = bmc.priors.Gamma(beta)

    def F(M, N):
        R = _residual_matrix(data, M, N)
        S = np.sum(M**2, 0) + np.sum(N**2, 0)
        return 0.5 * TAU * np.sum(R**2) + beta * np.sum(np.sqrt(S))

    _check_log_density_is_minus_objective(data, prior, Kmap, F, seed=1)

    fit = _map_fit(data, prior, Kmap)
    M, N = np.asarray(fit.point["M"]), np.asarray(fit.point["N"])
    R = _residual_matrix(data, M, N)
    S = np.sum(M**2, 0) + np.sum(N**2, 0)
    active = S > 1e-3 * S.max()
    assert active.sum() == 2, S
    assert np.all(S[~active] < 1e-4), S
    for h in np.flatnonzero(active):
        grad = np.concatenate(
            [
                -TAU * R @ N[:, h] + beta * M[:, h] / np.sqrt(S[h]),
                -TAU * R.T @ M[:, h] + beta * N[:, h] / np.sqrt(S[h]),
            ]
        )
        assert np.linalg.norm(grad) < 1e-3 * beta, (h, np.linalg.norm(grad))
