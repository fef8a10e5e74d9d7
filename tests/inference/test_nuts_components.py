"""``bmc.fit`` with the new components (Normal-Wishart rows, learned noise, biases) through
NumPyro: NUTS, SVI and MAP.

* **Every method runs every component** on a 12 x 10 matrix with 60 ratings (K = 2):
  finite predictions at every entry, which are the draws' / the point's
  ``M_i . N_j + row_bias_i + col_bias_j`` plus the centring offset.  The default suite
  runs NUTS for each component and all three together, SVI and MAP for all three together
  and MAP for the Normal-Wishart prior alone (each fit costs ~5-15 s of compilation); the
  rest of the grid (also the discrete prior with both other components, the low-rank guide
  and minibatch SVI) is ``slow``.
* **Exact posteriors** (NUTS, float64).  With ``Fixed(gamma=1e-6)`` the factor term
  ``M_i . N_j`` is ~1e-6 (posterior and prior alike), negligible against the Monte Carlo
  error, so the model reduces to one whose posterior is known in closed form:

  - learned noise on pure noise ``y ~ N(0, 0.5^2)``: ``tau | y ~ Gamma(a + t n/2,
    b + t sum y^2 / 2)`` (tempered, t = 0.5);
  - biases on ``y = b_i + c_j + N(0, 0.5^2)`` with the biases drawn from their prior
    ``N(0, 1)`` and the bias variances pinned at 1 (``InvGamma(1e6, 1e6)``, sd 1e-3): the
    biases' posterior is the Gaussian of the linear model, ``P = I + X^T X / s^2``.

  NUTS's posterior mean and sd of each quantity agree with the exact ones within
  ``z_crit * MCSE`` (ArviZ's MCSE of the mean / of the sd), ``z_crit`` the two-sided
  Bonferroni threshold for a familywise level of 1% over the comparisons; and the truth
  lies within ``z_crit`` exact posterior sds of the exact posterior mean (calibrated: the
  biases were drawn from the prior; the noise sd is recovered).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import arviz as az
import numpy as np
import pytest
import scipy.stats as st

import bmczoo as bmc

M1, M2, N_RATINGS, K = 12, 10, 60, 2
ALPHA = 0.01


def _z_crit(n_comparisons):
    return NormalDist().inv_cdf(1 - ALPHA / (2 * n_comparisons))


def _positions(seed, n=N_RATINGS):
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(M1 * M2, n, replace=False))
    return np.divmod(keys, M2)


def _problem():
    """Rank-2 signal plus row and column effects plus N(0, 0.3^2) noise, offset 3."""
    rng = np.random.default_rng(0)
    rows, cols = _positions(1)
    U, V = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    b, c = rng.normal(size=M1), rng.normal(size=M2)
    y = 3.0 + np.sum(U[rows] * V[cols], 1) + b[rows] + c[cols] + 0.3 * rng.normal(size=rows.size)
    return bmc.RatingData(rows, cols, y, (M1, M2))


COMPONENTS = {
    "normal-wishart": dict(prior=bmc.priors.NormalWishart()),
    "learned": dict(
        prior=bmc.priors.InverseGamma(), likelihood=bmc.likelihoods.LearnedNoise(temper=0.8)
    ),
    "biases": dict(prior=bmc.priors.InverseGamma(), biases=True),
    "all-three": dict(
        prior=bmc.priors.NormalWishart(), likelihood=bmc.likelihoods.LearnedNoise(), biases=True
    ),
    "discrete-all": dict(
        prior=bmc.priors.Discrete(), likelihood=bmc.likelihoods.LearnedNoise(), biases=True
    ),
}
METHODS = {
    "nuts": dict(method="nuts", num_warmup=60, num_samples=40, thinning=1, num_chains=1),
    "svi": dict(method="svi", num_steps=300, num_draws=20),
    "map": dict(method="map", num_steps=300),
    "svi-lowrank": dict(method="svi", guide="lowrank", num_steps=300, num_draws=20),
    "svi-minibatch": dict(method="svi", num_steps=300, num_draws=20, subsample_size=12),
}
# the default suite runs the components together under MAP (each alone and under NUTS:
# slow, ~25 s of compilation for NUTS on its own; Gibbs vs NUTS with all three: slow too)
DEFAULT = {("all-three", "map")}
# the low-rank guide (predictions from its draws) and minibatches (tau's prior not rescaled,
# the tempered obs term rescaled by n / b) only with the components all together
GRID = [
    pytest.param(c, m, id=f"{c}-{m}", marks=() if (c, m) in DEFAULT else pytest.mark.slow)
    for c in COMPONENTS
    for m in METHODS
    if not m.startswith("svi-") or c in ("all-three", "discrete-all")
]


def _theta(src, rows, cols):
    """Per draw (leading axes) ``M_i . N_j (+ row_bias_i + col_bias_j)``."""
    th = np.sum(np.asarray(src["M"])[..., rows, :] * np.asarray(src["N"])[..., cols, :], axis=-1)
    if "row_bias" in src:
        th = th + np.asarray(src["row_bias"])[..., rows] + np.asarray(src["col_bias"])[..., cols]
    return th


@pytest.mark.parametrize("component, method", GRID)
def test_every_method_runs_every_component(component, method):
    train, test = _problem().split(0.2, seed=0)
    comp, kw = COMPONENTS[component], METHODS[method]
    fit = bmc.fit(train, K=K, seed=0, progress_bar=False, test=test, clip=False, **comp, **kw)
    rr, cc = np.divmod(np.arange(M1 * M2), M2)
    pred = fit.predict(rr, cc)
    assert pred.shape == (M1 * M2,) and np.all(np.isfinite(pred))
    assert np.isfinite(fit.rmse(test))
    has_biases = "biases" in comp
    assert (fit.info.biases is not None) == has_biases
    offset = fit.info.shift.offset
    if method == "nuts":
        s = fit.samples
        assert ("row_bias" in s) == has_biases and ("tau" in s) == ("likelihood" in comp)
        if has_biases:
            assert (
                s["row_bias"].shape == (1, kw["num_samples"], M1) and s["col_bias"].shape[-1] == M2
            )
            assert np.all(np.asarray(s["row_bias_var"]) > 0)
        if isinstance(comp["prior"], bmc.priors.NormalWishart):
            assert s["Lambda_M"].shape == (1, kw["num_samples"], K, K) and s["mu_N"].shape[-1] == K
            assert np.all(np.linalg.eigvalsh(np.asarray(s["Lambda_M"])) > 0)
        if "tau" in s:
            assert np.all(np.asarray(s["tau"]) > 0)
        # the prediction at every entry (not requested at fit time: from the stored draws)
        # and the fit-time prediction at the test entries are the draws' mean + offset
        want = _theta(s, rr, cc).mean(axis=(0, 1)) + offset
        np.testing.assert_allclose(pred, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            fit.predict(test.rows, test.cols),
            _theta(s, test.rows, test.cols).mean(axis=(0, 1)) + offset,
            rtol=1e-5,
            atol=1e-5,
        )
        # the tracked theta includes the biases too
        np.testing.assert_allclose(
            s["theta"], _theta(s, fit.track_rows, fit.track_cols), rtol=1e-5, atol=1e-5
        )
    else:
        assert np.all(np.isfinite(fit.losses))
        src = fit.point if fit.point is not None else fit.draws
        assert ("row_bias" in src) == has_biases
        want = _theta(src, rr, cc)
        want = want.reshape(-1, want.shape[-1]).mean(0) + offset
        np.testing.assert_allclose(pred, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- exact posteriors
def _nuts(data, **kw):
    return bmc.fit(
        data,
        K=1,
        prior=bmc.priors.Fixed(gamma=1e-6),
        method="nuts",
        num_warmup=400,
        num_samples=1000,
        thinning=1,
        num_chains=2,
        center=False,
        clip=False,
        seed=0,
        progress_bar=False,
        dtype="float64",
        **kw,
    )


def _agreement(draws, exact_mean, exact_sd, what):
    """NUTS's mean and sd of each column of ``draws`` (chain, draw, q) against the exact
    ones within z_crit MCSEs; returns z_crit."""
    ds = az.convert_to_dataset({"q": draws})
    assert np.all(az.rhat(ds)["q"].values < 1.05), az.rhat(ds)["q"].values
    mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1), ddof=1)
    z = np.concatenate(
        [
            (mean - exact_mean) / az.mcse(ds, method="mean")["q"].values,
            (sd - exact_sd) / az.mcse(ds, method="sd")["q"].values,
        ]
    )
    zc = _z_crit(z.size)
    assert np.max(np.abs(z)) < zc, f"{what}: z {np.round(z, 2)} (z_crit {zc:.2f})"
    return zc


@pytest.mark.slow
def test_learned_noise_posterior_is_exact():
    """Pure noise, sd 0.5: tau | y ~ Gamma(a + t n/2, b + t sum y^2/2) (t = 0.5)."""
    rng = np.random.default_rng(2)
    rows, cols = _positions(3, n=80)
    sd_true = 0.5
    y = sd_true * rng.normal(size=rows.size)
    data = bmc.RatingData(rows, cols, y, (M1, M2))
    lik = bmc.likelihoods.LearnedNoise(a=2.0, b=1.0, temper=0.5)
    fit = _nuts(data, likelihood=lik)
    shape, rate = lik.a + lik.temper * data.n / 2, lik.b + lik.temper * np.sum(y**2) / 2
    tau = np.asarray(fit.samples["tau"], np.float64)
    post = st.gamma(shape, scale=1 / rate)
    zc = _agreement(tau[..., None], post.mean(), post.std(), "tau")
    # the noise sd is recovered: the exact posterior of sd = tau^(-1/2) covers 0.5
    sd_post = st.gamma(shape, scale=1 / rate).expect(lambda t: t**-0.5)
    sd_sd = math.sqrt(post.expect(lambda t: 1 / t) - sd_post**2)
    assert abs(sd_post - sd_true) < zc * sd_sd, (sd_post, sd_sd)
    # and the learned-noise prediction is ~0 (no signal): |pred| << noise
    assert np.max(np.abs(fit.predict(rows, cols))) < 1e-3


@pytest.mark.slow
def test_biases_posterior_is_exact():
    """y = b_i + c_j + N(0, 0.5^2), biases drawn from N(0, 1): the posterior of the biases
    is the linear model's Gaussian (variances pinned at 1).  Compared on every row and
    column bias."""
    rng = np.random.default_rng(4)
    rows, cols = _positions(5)
    s = 0.5
    b, c = rng.normal(size=M1), rng.normal(size=M2)
    y = b[rows] + c[cols] + s * rng.normal(size=rows.size)
    data = bmc.RatingData(rows, cols, y, (M1, M2))
    fit = _nuts(data, noise_sd=s, biases=bmc.offsets.Biases(a=1e6, b=1e6))
    X = np.zeros((rows.size, M1 + M2))
    X[np.arange(rows.size), rows] = 1.0
    X[np.arange(rows.size), M1 + cols] = 1.0
    P = np.eye(M1 + M2) + X.T @ X / s**2
    cov = np.linalg.inv(P)
    mean = cov @ X.T @ y / s**2
    draws = np.concatenate([fit.samples["row_bias"], fit.samples["col_bias"]], axis=-1).astype(
        np.float64
    )
    _agreement(draws, mean, np.sqrt(np.diag(cov)), "biases")
    # the truth is within the posterior's uncertainty (it was drawn from the prior)
    z_truth = (np.concatenate([b, c]) - mean) / np.sqrt(np.diag(cov))
    assert np.max(np.abs(z_truth)) < _z_crit(M1 + M2), z_truth
    # predictions are the biases' posterior mean of b_i + c_j at every entry
    rr, cc = np.divmod(np.arange(M1 * M2), M2)
    np.testing.assert_allclose(
        fit.predict(rr, cc), draws.mean((0, 1))[rr] + draws.mean((0, 1))[M1 + cc], atol=1e-5
    )
