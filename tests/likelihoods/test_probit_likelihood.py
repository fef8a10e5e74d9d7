"""The probit and ordered-probit likelihood objects: level probabilities, the cut-point
prior against NumPyro's ordered transform, binding to data, and bad inputs (each a clear
``ValueError`` naming the problem)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference.results import levels as lv
from bmczoo.likelihoods import OrderedProbit, Probit, get_likelihood
from bmczoo.likelihoods.probit import level_log_probs

ROWS, COLS = np.array([0, 1, 2, 0, 1]), np.array([0, 1, 0, 2, 2])
TINY = dict(K=1, num_warmup=2, num_samples=2, thinning=1, progress_bar=False)


def _data(values):
    return bmc.RatingData(ROWS, COLS, np.asarray(values, float), (3, 3))


# --------------------------------------------------------------------------- level probabilities
def test_level_log_probs_match_scipy_and_sum_to_one(x64):
    rng = np.random.default_rng(0)
    theta = np.concatenate([rng.normal(size=20) * 3, [-40.0, 40.0]])
    cuts = np.array([-1.0, 0.2, 1.5])
    lp = np.asarray(
        level_log_probs(jnp.asarray(theta), jnp.broadcast_to(jnp.asarray(cuts), (theta.size, 3)))
    )
    edges = np.concatenate([[-np.inf], cuts, [np.inf]])
    x = edges[None] - theta[:, None]
    a, b = x[:, :-1], x[:, 1:]
    with np.errstate(divide="ignore"):  # the differences underflow far in the tails
        # on the side where the difference does not cancel (upper tail: survival functions)
        ref = np.where(
            a > 0,
            np.log(stats.norm.sf(a) - stats.norm.sf(b)),
            np.log(stats.norm.cdf(b) - stats.norm.cdf(a)),
        )
    finite = np.isfinite(ref)
    np.testing.assert_allclose(lp[finite], ref[finite], rtol=1e-9, atol=1e-12)
    assert np.all(np.isfinite(lp))  # stable in both tails where scipy's difference underflows
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(lv.level_log_probs_np(theta, cuts), lp, rtol=1e-9, atol=1e-12)


def test_gaussian_level_proba_is_the_integral_over_theta():
    """``theta ~ N(m, v)``: P(Y = l) = E[Phi(c_l - theta) - Phi(c_{l-1} - theta)] (quadrature)."""
    m, v, cuts = np.array([-0.7, 0.4]), np.array([0.5, 2.0]), np.array([-0.5, 1.0])
    got = lv.gaussian_level_proba(m, v, cuts)
    x, w = np.polynomial.hermite_e.hermegauss(80)
    for p in range(2):
        t = m[p] + np.sqrt(v[p]) * x
        ref = (w[:, None] * np.exp(lv.level_log_probs_np(t, cuts))).sum(0) / w.sum()
        np.testing.assert_allclose(got[p], ref, rtol=1e-10)


def test_cut_log_prior_matches_numpyro_ordered_transform(x64):
    lik = OrderedProbit(levels=(1, 2, 3, 4), cut_scale=1.7)
    base = dist.Normal(0.0, lik.cut_scale).expand([3]).to_event(1)
    d = dist.TransformedDistribution(base, dist.transforms.OrderedTransform())
    rng = np.random.default_rng(1)
    diffs = []
    for _ in range(5):
        c = jnp.asarray(np.sort(rng.normal(size=3) * 2))
        diffs.append(float(lik.cut_log_prior(c)) - float(d.log_prob(c)))
    # equal up to the normalising constant of the three N(0, s^2) (which the MH ratio drops)
    np.testing.assert_allclose(diffs, 1.5 * np.log(2 * np.pi * lik.cut_scale**2), rtol=1e-10)


def test_bind_reads_levels_and_threshold():
    y = np.array([0, 1, 1, 1, 0], float)
    assert Probit().bind(y).threshold == pytest.approx(-stats.norm.ppf(0.6))
    assert Probit().bind(y, center=False).threshold == 0.0
    assert Probit(threshold=0.3).bind(y).threshold == 0.3
    o = OrderedProbit().bind(np.array([3, 1, 2, 3, 1.0]))
    assert o.levels == (1.0, 2.0, 3.0) and o.num_levels == 3
    np.testing.assert_array_equal(o.level_index([1.0, 3.0, 2.0]), [0, 2, 1])
    assert get_likelihood("ordered-probit", levels=[1, 2], cut_scale=1.0) == OrderedProbit(
        levels=(1, 2), cut_scale=1.0
    )


def test_init_cuts_are_increasing_and_cut_step_positive():
    o = OrderedProbit(levels=(1, 2, 3, 4))
    idx = np.array([0] * 50 + [3] * 50)  # two empty middle levels
    c = o.init_cuts(idx)
    assert np.all(np.diff(c) > 0) and np.all(np.isfinite(c))
    s = o.cut_step(idx)
    assert np.all(s > 0) and np.all(np.isfinite(s))


# --------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "values, lik, match",
    [
        ([0, 1, 2, 1, 0], Probit(), r"Probit needs binary values 0 or 1; value 2.0 at position 2"),
        ([0, 1, 0.5, 1, 0], Probit(), r"value 0.5 at position 2"),
        ([1, 1, 1, 1, 1], Probit(), r"every value is 1: a binary model needs both 0s and 1s"),
        ([0, 0, 0, 0, 0], Probit(), r"every value is 0"),
        (
            [1, 2, 3, 2.5, 1],
            OrderedProbit(levels=(1, 2, 3)),
            r"value 2.5 at position 3 is not one of the levels",
        ),
        (
            [1, 2, 3, 4, 1],
            OrderedProbit(levels=(1, 2, 3)),
            r"value 4.0 at position 3 is not one of the levels",
        ),
        ([2, 2, 2, 2, 2], OrderedProbit(), r"single distinct value"),
    ],
)
@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_bad_values_are_clear_errors(values, lik, match, method):
    kw = TINY if method == "gibbs" else dict(K=1, progress_bar=False)
    with pytest.raises(ValueError, match=match):
        bmc.fit(_data(values), likelihood=lik, method=method, **kw)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(levels=(2, 1)), "levels must be at least two finite, strictly increasing"),
        (dict(levels=(1, 1, 2)), "strictly increasing"),
        (dict(levels=(1,)), "at least two"),
        (dict(levels=(1, float("nan"))), "finite"),
        (dict(levels="ab"), "levels must be a sequence of numbers"),
        (dict(levels=(1, "x")), "levels must be a sequence of numbers"),
        (dict(cut_scale=0.0), "cut_scale must be finite and > 0"),
        (dict(cut_scale=-1.0), "cut_scale"),
        (dict(cut_scale=float("inf")), "cut_scale"),
    ],
)
def test_bad_ordered_probit_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OrderedProbit(**kwargs)


def test_bad_probit_threshold_and_unbound_use():
    with pytest.raises(ValueError, match="threshold must be finite"):
        Probit(threshold=float("nan"))
    with pytest.raises(ValueError, match="not bound to data yet"):
        OrderedProbit().num_levels
    with pytest.raises(ValueError, match="has no setting"):
        get_likelihood("probit", levels=(0, 1))


def test_too_many_distinct_values_need_explicit_levels():
    y = np.arange(101, dtype=float)
    with pytest.raises(ValueError, match="101 distinct values; give levels= explicitly"):
        OrderedProbit().bind(y)


def test_predict_proba_on_a_gaussian_fit_is_an_error():
    fit = bmc.fit(_data([0.5, 1, 2, 1, 3]), **TINY)
    with pytest.raises(
        ValueError,
        match="predict_proba needs a probit or ordered-probit likelihood; this fit's is 'tempered'",
    ):
        fit.predict_proba([0], [0])


@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_devices_with_a_latent_likelihood_is_a_clear_error(method):
    kw = TINY if method == "gibbs" else dict(K=1, progress_bar=False)
    with pytest.raises(
        ValueError,
        match="probit likelihood runs on one device: its sharded per-rating block is not "
        r"implemented \(drop devices=\)",
    ):
        bmc.fit(
            _data([0, 1, 0, 1, 1]), likelihood=Probit(), method=method, devices=jax.devices(), **kw
        )


def test_level_log_probs_have_finite_gradients_in_theta(x64):
    """NUTS differentiates the ordered probit's Categorical logits: the infinite outer
    edges must contribute a zero derivative, not NaN."""
    cuts = jnp.array([-0.7, 0.7])
    for t in (-3.0, 0.0, 1.0):
        g = jax.jacobian(lambda th: level_log_probs(th, cuts))(jnp.asarray(t))
        assert np.all(np.isfinite(np.asarray(g))), g
        p = np.exp(np.asarray(level_log_probs(jnp.asarray(t), cuts)))
        np.testing.assert_allclose(
            float(np.sum(p * np.asarray(g))), 0.0, atol=1e-12
        )  # sum_l dP_l = 0
