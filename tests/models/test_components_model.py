"""The NumPyro model's new components: :class:`bmczoo.priors.NormalWishart` (BPMF rows),
:class:`bmczoo.likelihoods.LearnedNoise` (``tau ~ Gamma(a, b)``, tempered likelihood) and
:class:`bmczoo.offsets.Biases` (row / column biases with inverse-gamma variances).

* The joint log density (float64, ``numpyro.infer.util.log_density``) equals an
  independent closed-form computation with scipy for each component and all together,
  with the tempering and the minibatch rescaling ``n / b``; the only tolerance is float64
  round-off (``rtol=1e-12``, as in ``test_matrix_completion.py``).
* ``tau`` is a global site (outside the ``ratings`` plate, never rescaled), so the model's
  conditional of ``tau`` is exactly the Gibbs block's ``Gamma(a + t n / 2, b + t SSE / 2)``.
* Prior predictive moments of the new sites within Monte Carlo error: exact variances
  where they have a closed form, else the sample variance; ``z`` is the two-sided
  Bonferroni threshold for a familywise level of 1e-3 over all comparisons of the test.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import jax
import numpy as np
import numpyro
import pytest
import scipy.stats as st
from numpyro.infer import Predictive
from numpyro.infer.util import log_density

import bmczoo as bmc
from bmczoo.models import matrix_completion

K = 2
NOISE_SD = 0.9


def _wishart_point(rng, K, scale):
    A = rng.normal(size=(K, K))
    return scale * (A @ A.T + K * np.eye(K))


def _params(r, K, *, nw, learned, biases, rng):
    """A point of every latent site of the model with these components (float64)."""
    m1, m2 = r.shape
    p = {}
    if nw:
        for side in ("M", "N"):
            p[f"Lambda_{side}"] = _wishart_point(rng, K, 0.7)
            p[f"mu_{side}"] = rng.normal(size=K)
    p["M"] = rng.normal(size=(m1, K))
    p["N"] = rng.normal(size=(m2, K))
    if biases:
        p["row_bias_var"], p["col_bias_var"] = 0.6, 1.7
        p["row_bias"], p["col_bias"] = rng.normal(size=m1), 0.5 * rng.normal(size=m2)
    if learned:
        p["tau"] = 2.3
    return p


def _reference(r, p, *, prior, lik, biases, rows=None):
    """log p(latents, Y) by scipy; ``rows``: the minibatch's positions (then the likelihood
    of those ratings is scaled by n / b)."""
    m1, m2 = r.shape
    lp = 0.0
    if isinstance(prior, bmc.priors.NormalWishart):
        nu0 = prior.degrees(K)
        for side in ("M", "N"):
            Lam, mu, F = p[f"Lambda_{side}"], p[f"mu_{side}"], p[side]
            lp += st.wishart.logpdf(Lam, df=nu0, scale=prior.W0_scale * np.eye(K))
            lp += st.multivariate_normal.logpdf(mu, np.zeros(K), np.linalg.inv(prior.beta0 * Lam))
            lp += st.multivariate_normal.logpdf(F, mu, np.linalg.inv(Lam)).sum()
    else:  # Fixed
        lp += st.norm.logpdf(p["M"], 0, math.sqrt(prior.gamma)).sum()
        lp += st.norm.logpdf(p["N"], 0, math.sqrt(prior.gamma)).sum()
    mean = np.sum(p["M"][r.rows] * p["N"][r.cols], axis=1)
    if biases is not None:
        for side, m in (("row", m1), ("col", m2)):
            var = p[f"{side}_bias_var"]
            lp += st.invgamma.logpdf(var, biases.a, scale=biases.b)
            lp += st.norm.logpdf(p[f"{side}_bias"], 0, math.sqrt(var)).sum()
        mean = mean + p["row_bias"][r.rows] + p["col_bias"][r.cols]
    if isinstance(lik, bmc.likelihoods.LearnedNoise):
        tau = p["tau"]
        lp += st.gamma.logpdf(tau, lik.a, scale=1.0 / lik.b)
        ll, t = st.norm.logpdf(r.values, mean, 1.0 / math.sqrt(tau)), lik.temper
    else:
        ll, t = st.norm.logpdf(r.values, mean, NOISE_SD), 1.0
    scale = 1.0 if rows is None else r.n / len(rows)
    sel = slice(None) if rows is None else rows
    return lp + t * scale * ll[sel].sum()


NW = bmc.priors.NormalWishart(beta0=2.5, nu0=K + 1.5, W0_scale=0.7)
FIXED = bmc.priors.Fixed(gamma=0.8)
LN = bmc.likelihoods.LearnedNoise(a=2.0, b=0.5, temper=0.4)
LN1 = bmc.likelihoods.LearnedNoise(a=1.5, b=3.0)  # temper = 1: no scale handler
BIASES = bmc.offsets.Biases(a=2.5, b=1.2)

CASES = {
    "normal-wishart": (NW, None, None),
    "learned-tempered": (FIXED, LN, None),
    "learned-untempered": (FIXED, LN1, None),
    "biases": (FIXED, None, BIASES),
    "all-three": (NW, LN, BIASES),
}


def _model_kwargs(lik, biases, **kw):
    if lik is None:
        kw["noise_sd"] = NOISE_SD
    else:
        kw["likelihood"] = lik
    return {**kw, "biases": biases}


@pytest.mark.parametrize("case", list(CASES))
def test_joint_log_density_matches_scipy(x64, tiny_ratings, case):
    prior, lik, biases = CASES[case]
    r = tiny_ratings
    p = _params(
        r,
        K,
        nw=prior is NW,
        learned=lik is not None,
        biases=biases is not None,
        rng=np.random.default_rng(7),
    )
    lj, tr = log_density(matrix_completion, (r, K, prior), _model_kwargs(lik, biases), p)
    ref = _reference(
        r, p, prior=prior, lik=lik if lik is not None else bmc.likelihoods.Tempered(), biases=biases
    )
    np.testing.assert_allclose(float(lj), ref, rtol=1e-12)
    # the global sites are outside the ratings plate and never rescaled
    for name in ("tau", "row_bias_var", "col_bias_var", "row_bias", "col_bias", "Lambda_M", "mu_M"):
        if name in tr:
            assert tr[name]["cond_indep_stack"] == [], name
            assert tr[name]["scale"] is None, name


@pytest.mark.parametrize("case", ["learned-tempered", "all-three"])
def test_subsampled_log_density_matches_scipy(x64, tiny_ratings, case):
    """A minibatch of b = 7 ratings: its tempered log-likelihood times n / b (the prior of
    tau not rescaled)."""
    prior, lik, biases = CASES[case]
    r, b = tiny_ratings, 7
    p = _params(
        r, K, nw=prior is NW, learned=True, biases=biases is not None, rng=np.random.default_rng(8)
    )
    kw = _model_kwargs(lik, biases, subsample_size=b)
    seeded = numpyro.handlers.seed(matrix_completion, rng_seed=3)
    lj, tr = log_density(seeded, (r, K, prior), kw, p)
    rows = np.asarray(tr["ratings"]["value"])
    assert rows.shape == (b,) and len(set(rows.tolist())) == b
    np.testing.assert_allclose(tr["obs"]["scale"], lik.temper * r.n / b, rtol=1e-12)
    assert tr["tau"]["scale"] is None and np.shape(tr["tau"]["value"]) == ()
    ref = _reference(r, p, prior=prior, lik=lik, biases=biases, rows=rows)
    np.testing.assert_allclose(float(lj), ref, rtol=1e-12)


@pytest.mark.parametrize("temper", [1.0, 0.3])
def test_tau_conditional_is_the_gibbs_block(x64, tiny_ratings, temper):
    """log p(tau1, rest) - log p(tau2, rest) equals the same difference of the log density of
    Gamma(a + t n / 2, rate b + t SSE / 2) (with biases: SSE about M N^T + b_i + c_j)."""
    r = tiny_ratings
    lik = bmc.likelihoods.LearnedNoise(a=1.7, b=0.6, temper=temper)
    p = _params(r, K, nw=False, learned=True, biases=True, rng=np.random.default_rng(9))
    mean = (
        np.sum(p["M"][r.rows] * p["N"][r.cols], 1) + p["row_bias"][r.rows] + p["col_bias"][r.cols]
    )
    sse = np.sum((r.values - mean) ** 2)
    shape, rate = lik.a + temper * r.n / 2, lik.b + temper * sse / 2
    taus = [0.4, 1.9, 6.0]
    lj = [
        float(
            log_density(
                matrix_completion,
                (r, K, FIXED),
                dict(likelihood=lik, biases=BIASES),
                {**p, "tau": t},
            )[0]
        )
        for t in taus
    ]
    ref = st.gamma.logpdf(taus, shape, scale=1.0 / rate)
    np.testing.assert_allclose(np.diff(lj), np.diff(ref), rtol=1e-11)


def test_discrete_prior_with_biases_and_learned_noise(x64, tiny_ratings):
    """The discrete prior (gamma integrated out) combines with both: the log density minus
    the biases', tau's and the likelihood's terms is the plain model's log prior of (M, N)."""
    r, prior = tiny_ratings, bmc.priors.Discrete(C=1.0, p=0.4, eps=0.05)
    p = _params(r, K, nw=False, learned=True, biases=True, rng=np.random.default_rng(10))
    lj, tr = log_density(matrix_completion, (r, K, prior), dict(likelihood=LN, biases=BIASES), p)
    l0, tr0 = log_density(
        matrix_completion, (r, K, prior), dict(noise_sd=NOISE_SD), {"M": p["M"], "N": p["N"]}
    )
    prior_MN = (
        float(l0)
        - st.norm.logpdf(r.values, np.sum(p["M"][r.rows] * p["N"][r.cols], 1), NOISE_SD).sum()
    )
    fixed_gamma = bmc.priors.Fixed(gamma=1.0)
    # the rest of the density, by scipy (the Fixed(1) prior's terms of M, N removed)
    rest = _reference(r, p, prior=fixed_gamma, lik=LN, biases=BIASES) - (
        st.norm.logpdf(p["M"]).sum() + st.norm.logpdf(p["N"]).sum()
    )
    np.testing.assert_allclose(float(lj), prior_MN + rest, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(tr["gamma"]["value"]), np.asarray(tr0["gamma"]["value"]), rtol=1e-12
    )


def test_normal_wishart_marginal_mode_keeps_its_sites(x64, tiny_ratings):
    """``marginal=True`` (what MAP uses) integrates column scales out; the Normal-Wishart
    prior has none, so its model is unchanged (same log density, same sites)."""
    p = _params(
        tiny_ratings, K, nw=True, learned=False, biases=False, rng=np.random.default_rng(11)
    )
    a, tra = log_density(matrix_completion, (tiny_ratings, K, NW), {"marginal": True}, p)
    b, trb = log_density(matrix_completion, (tiny_ratings, K, NW), {}, p)
    assert float(a) == float(b) and list(tra) == list(trb)


def test_bad_biases_argument(tiny_ratings):
    with pytest.raises(TypeError, match="biases"):
        numpyro.handlers.seed(matrix_completion, 0)(tiny_ratings, K, FIXED, biases="yes")


def test_normal_wishart_nu0_checked_against_K(tiny_ratings):
    with pytest.raises(ValueError, match="nu0"):
        numpyro.handlers.seed(matrix_completion, 0)(
            tiny_ratings, 3, bmc.priors.NormalWishart(nu0=1.5)
        )


# ----------------------------------------------------------------------------- prior predictive
def test_prior_predictive_moments():
    """Draws with ``observed=False`` (NW prior, learned noise, biases together).

    Exact moments: ``Lambda ~ Wishart(nu, w I)``: ``E = nu w I``, ``Var(L_ii) = 2 nu w^2``,
    ``Var(L_ij) = nu w^2``; ``mu``, rows of ``M``: mean 0, ``E[mu mu^T] = I / (w beta0
    (nu - K - 1))``, ``E[M_i M_i^T] = (1 + 1/beta0) I / (w (nu - K - 1))``;
    ``tau ~ Gamma(a, b)``: ``E = a/b``, ``Var = a/b^2``; bias variances
    ``InvGamma(a, b)``: ``E = b/(a-1)``, ``Var = b^2/((a-1)^2 (a-2))``; ``row_bias_i``:
    mean 0, variance ``b/(a-1)``; the noise ``e = obs - M_i.N_j - b_i - c_j``:
    ``E[e^2] = E[1/tau] = b/(a-1)``, ``Var(e^2) = 3 E[tau^-2] - E[1/tau]^2`` with
    ``E[tau^-2] = b^2/((a-1)(a-2))``.  Standard errors: exact where the variance is known,
    else the sample's."""
    nu, w, beta0 = 8.0, 0.5, 2.0
    prior = bmc.priors.NormalWishart(beta0=beta0, nu0=nu, W0_scale=w)
    lik = bmc.likelihoods.LearnedNoise(a=3.0, b=2.0)
    biases = bmc.offsets.Biases(a=4.0, b=3.0)
    r = bmc.RatingData([0, 1, 2], [0, 1, 2], [0.0, 1.0, -1.0], (5, 4))
    S = 20_000
    out = Predictive(matrix_completion, num_samples=S)(
        jax.random.key(0), r, K, prior, likelihood=lik, biases=biases, observed=False
    )
    d = {k: np.asarray(v, np.float64) for k, v in out.items()}
    checks = []  # (name, sample mean, expected, standard error)

    def exact(name, x, mean, var):
        checks.append((name, x.mean(), mean, math.sqrt(var / x.size)))

    def sample(name, x, mean):
        checks.append((name, x.mean(), mean, x.std(ddof=1) / math.sqrt(x.size)))

    c = 1.0 / (w * (nu - K - 1))
    for side in ("M", "N"):
        L = d[f"Lambda_{side}"]
        exact(f"Lambda_{side}[0,0]", L[:, 0, 0], nu * w, 2 * nu * w**2)
        exact(f"Lambda_{side}[1,1]", L[:, 1, 1], nu * w, 2 * nu * w**2)
        exact(f"Lambda_{side}[0,1]", L[:, 0, 1], 0.0, nu * w**2)
        mu = d[f"mu_{side}"]
        sample(f"mu_{side}[0]", mu[:, 0], 0.0)
        sample(f"mu_{side}[0]^2", mu[:, 0] ** 2, c / beta0)
        sample(f"{side}[0,0]^2", d[side][:, 0, 0] ** 2, (1 + 1 / beta0) * c)
        sample(f"{side}[0,0] {side}[0,1]", d[side][:, 0, 0] * d[side][:, 0, 1], 0.0)
    a, b = lik.a, lik.b
    exact("tau", d["tau"], a / b, a / b**2)
    ab, bb = biases.a, biases.b
    for side in ("row", "col"):
        exact(
            f"{side}_bias_var",
            d[f"{side}_bias_var"],
            bb / (ab - 1),
            bb**2 / ((ab - 1) ** 2 * (ab - 2)),
        )
        exact(f"{side}_bias[0]", d[f"{side}_bias"][:, 0], 0.0, bb / (ab - 1))
    rows, cols = r.rows, r.cols
    e = d["obs"][:, 0] - (
        np.sum(d["M"][:, rows[0]] * d["N"][:, cols[0]], -1)
        + d["row_bias"][:, rows[0]]
        + d["col_bias"][:, cols[0]]
    )
    e_inv, e_inv2 = b / (a - 1), b**2 / ((a - 1) * (a - 2))
    exact("noise e", e, 0.0, e_inv)
    exact("noise e^2", e**2, e_inv, 3 * e_inv2 - e_inv**2)
    z_crit = NormalDist().inv_cdf(1 - 1e-3 / (2 * len(checks)))
    report = [
        f"{n}: {m:+.4f} vs {want:+.4f} ({(m - want) / se:+.2f} SE)" for n, m, want, se in checks
    ]
    bad = [line for (n, m, want, se), line in zip(checks, report) if abs(m - want) > z_crit * se]
    assert not bad, f"z_crit {z_crit:.2f}:\n" + "\n".join(bad)


def test_feature_driven_biases_log_density_matches_scipy(x64, tiny_ratings):
    """Biases with features (explicit rows, implicit columns): ``row_bias_lam ~ Gamma(a_w,
    b_w)``, ``row_bias_w ~ N(0, (row_bias_var / row_bias_lam) I)``, ``row_bias ~ N(X w,
    row_bias_var I)``, the joint log density of the model against scipy."""
    rng = np.random.default_rng(3)
    Xr = rng.normal(size=(tiny_ratings.shape[0], 3))
    r = tiny_ratings.with_features(bmc.data.Features.from_dense(Xr), None)
    biases = bmc.offsets.Biases(a=2.5, b=1.2, row_features=True, implicit="cols", a_w=2.0, b_w=0.7)
    Xc = bmc.data.implicit_features(r, "cols").to_dense()
    p = _params(r, K, nw=False, learned=False, biases=True, rng=rng)
    p["row_bias_lam"], p["col_bias_lam"] = 1.4, 0.3
    p["row_bias_w"], p["col_bias_w"] = rng.normal(size=3), rng.normal(size=Xc.shape[1])
    lj, tr = log_density(matrix_completion, (r, K, FIXED), _model_kwargs(None, biases), p)
    ref = _reference(r, p, prior=FIXED, lik=bmc.likelihoods.Tempered(), biases=None)
    mean = np.sum(p["M"][r.rows] * p["N"][r.cols], axis=1)
    ref -= st.norm.logpdf(r.values, mean, NOISE_SD).sum()
    for side, X in (("row", Xr), ("col", Xc)):
        var, lam, w = p[f"{side}_bias_var"], p[f"{side}_bias_lam"], p[f"{side}_bias_w"]
        ref += st.invgamma.logpdf(var, biases.a, scale=biases.b)
        ref += st.gamma.logpdf(lam, biases.a_w, scale=1.0 / biases.b_w)
        ref += st.norm.logpdf(w, 0.0, math.sqrt(var / lam)).sum()
        ref += st.norm.logpdf(p[f"{side}_bias"], X @ w, math.sqrt(var)).sum()
    mean = mean + p["row_bias"][r.rows] + p["col_bias"][r.cols]
    ref += st.norm.logpdf(r.values, mean, NOISE_SD).sum()
    np.testing.assert_allclose(float(lj), ref, rtol=1e-12)
    assert {"row_bias_w", "row_bias_lam", "col_bias_w", "col_bias_lam"} <= set(tr)
