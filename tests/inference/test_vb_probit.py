"""Mean-field VB with the probit and ordered-probit likelihoods (float64).

* **CAVI never decreases the ELBO** (probit and ordered probit, biases on and off, two
  runs each): tolerance a relative 1e-12 of |ELBO| as in ``test_vb_components.py``.
* **q(z) is the coordinate optimum, in closed form**: the iteration's factor update equals
  the Gaussian update (``tau = 1``) with the ratings replaced by the mean of ``N(E_q[theta_k],
  1)`` truncated to the level's interval, computed here with ``scipy.stats.truncnorm``; the
  ELBO's likelihood term ``sum_k log Z_k - Var_q[theta_k] / 2`` is the value at that optimum
  (scipy), and any other truncated-normal ``q(z_k)`` (location moved) gives less.
* **The cut-point (VB-EM) step never decreases the ELBO** (applied alone to each
  iteration's state), and (slow) after many iterations the cut points sit at a stationary
  point of ``sum_k log Z_k(c) + log p(c)``.

The default suite runs the ordered probit with biases (monotone ELBO and cut step), the
closed-form q(z) update (probit with biases) and an end-to-end ``bmc.fit``; the rest is
``slow``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import vb
from bmczoo.inference.vb import cavi
from bmczoo.inference.vb import state as vb_state
from bmczoo.inference.gibbs import build_problem
from bmczoo.likelihoods import OrderedProbit, Probit
from bmczoo.offsets import Biases

M1, M2, K = 13, 11, 3
PRIOR = bmc.priors.InverseGamma(1.0, 0.1)
LIKS = {"probit": Probit(threshold=0.2), "ordered": OrderedProbit(levels=(1.0, 2.0, 3.0, 4.0))}


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _data(lik, seed=0):
    rng = np.random.default_rng(seed)
    r, c = np.nonzero(rng.random((M1, M2)) < 0.5)
    U, V = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    z = np.sum(U[r] * V[c], axis=1) + 0.5 * rng.normal(size=M1)[r] + rng.normal(size=r.size)
    if isinstance(lik, Probit):
        y = (z > lik.threshold).astype(float)
    else:
        y = 1.0 + np.digitize(z, [-1.0, 0.0, 1.2])
    return bmc.RatingData(r, c, y, (M1, M2))


def _setup(lik, biases, C=2, seed=1):
    data = _data(lik)
    p = build_problem(data, 1.0, dtype=jnp.float64, likelihood=lik)
    latent = (p.levels, p.col_perm)
    kw = dict(likelihood=lik, biases=biases, latent=latent)
    state = vb.init(
        jax.random.split(jax.random.key(seed), C),
        (M1, M2),
        PRIOR,
        K,
        jnp.float64,
        likelihood=lik,
        biases=biases,
    )
    if lik.fixed_cuts() is None:  # as the VB driver starts them
        cuts0 = lik.init_cuts(np.asarray(p.levels))
        state = state._replace(
            noise={"cuts": jnp.broadcast_to(jnp.asarray(cuts0), (C, cuts0.size))}
        )
    one = jnp.asarray(1.0)
    step = jax.jit(lambda s: vb.update(s, p.rows, p.cols, PRIOR, one, **kw))
    elbo = jax.jit(lambda s: vb.elbo(s, p.rows, PRIOR, one, **kw))
    return p, state, step, elbo


@pytest.mark.parametrize(
    "lik, bias",
    [
        pytest.param("probit", False, id="probit-no-bias", marks=pytest.mark.slow),
        pytest.param("probit", True, id="probit-bias", marks=pytest.mark.slow),
        pytest.param("ordered", False, id="ordered-no-bias", marks=pytest.mark.slow),
        pytest.param("ordered", True, id="ordered-bias"),
    ],
)
def test_elbo_never_decreases(lik, bias):
    """Whole iterations, and (learned cut points) the cut-point step alone, applied to
    the state of each iteration."""
    lik = LIKS[lik]
    p, state, step, elbo = _setup(lik, Biases() if bias else None)
    cut_only = jax.jit(
        lambda s: s._replace(
            noise={
                "cuts": cavi._cut_step(lik, vb.ratings_mean(s, p.rows), s.noise["cuts"], p.levels)
            }
        )
    )
    trace, moved = [], 0  # (the starting state's q(M) is not a proper density: its ELBO is -inf)
    for _ in range(20):
        state = step(state)
        trace.append(np.asarray(elbo(state)))
        if lik.fixed_cuts() is None:
            after = cut_only(state)
            e = np.asarray(elbo(after))
            assert np.all(e >= trace[-1] - 1e-12 * np.abs(trace[-1])), (trace[-1], e)
            assert np.all(np.diff(np.asarray(after.noise["cuts"]), axis=-1) > 0)
            moved += int(np.any(e > trace[-1]))
    assert lik.fixed_cuts() is not None or moved > 0
    trace = np.array(trace)
    assert np.all(np.isfinite(trace))
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= 1e-12 * np.abs(trace[1:])), drops.max()
    assert trace[-1].min() > trace[0].max()  # and it moved


def _scipy_tn(mu, lo, hi):
    """Mean and log mass of ``N(mu, 1)`` truncated to ``(lo, hi)`` (scipy)."""
    a, b = lo - mu, hi - mu
    return mu + stats.truncnorm.mean(a, b), np.log(stats.norm.cdf(b) - stats.norm.cdf(a))


def _bounds(lik, cuts, levels):
    edges = np.concatenate([[-np.inf], np.asarray(cuts, np.float64), [np.inf]])
    return edges[levels], edges[levels + 1]


def test_q_z_update_is_the_truncated_normal_mean():
    """Probit with biases: the latent update's ``q(M), q(N), q(b), q(c)`` equal the
    Gaussian CAVI update (tau = 1) on ratings ``E_q[z_k]`` from scipy."""
    lik, biases = LIKS["probit"], Biases()
    p, state, step, _ = _setup(lik, biases, C=1)
    for _ in range(3):
        state = step(state)
    mu = np.asarray(vb.ratings_mean(state, p.rows))[0]
    levels = np.asarray(p.levels)
    lo, hi = _bounds(lik, lik.fixed_cuts(), levels)
    Ez, _ = _scipy_tn(mu, lo, hi)
    assert np.all((Ez > lo) & (Ez < hi))
    rows = p.rows._replace(values=jnp.asarray(Ez))
    cols = p.cols._replace(values=jnp.asarray(Ez[np.asarray(p.col_perm)]))
    expected = jax.jit(lambda s, r, k: vb.update(s, r, k, PRIOR, jnp.asarray(1.0), biases=biases))(
        state._replace(noise={}), rows, cols
    )
    got = step(state)
    for f in ("m", "V", "n", "W"):
        np.testing.assert_allclose(
            np.asarray(getattr(got, f)),
            np.asarray(getattr(expected, f)),
            rtol=1e-9,
            atol=1e-11,
            err_msg=f,
        )
    for k in got.bias:
        np.testing.assert_allclose(
            np.asarray(got.bias[k]), np.asarray(expected.bias[k]), rtol=1e-9, atol=1e-11, err_msg=k
        )


@pytest.mark.slow
@pytest.mark.parametrize("lik", list(LIKS))
def test_elbo_likelihood_term_is_the_q_z_optimum(lik):
    """The ELBO's latent term is ``sum_k log Z_k - Var_q[theta_k]/2`` (scipy); moving the
    location of any truncated-normal ``q(z_k)`` away from ``E_q[theta_k]`` lowers
    ``E_q[log p(z | theta)] + H[q(z)]`` (computed in closed form with scipy)."""
    lik = LIKS[lik]
    p, state, step, elbo = _setup(lik, Biases(), C=1)
    for _ in range(4):
        state = step(state)
    mu = np.asarray(vb.ratings_mean(state, p.rows))[0]
    cuts = np.asarray(vb_state.cuts_of(state, lik, 1, jnp.float64))[0]
    levels = np.asarray(p.levels)
    lo, hi = _bounds(lik, cuts, levels)
    _, logZ = _scipy_tn(mu, lo, hi)
    # the code's log Z against scipy's
    np.testing.assert_allclose(
        float(cavi.log_Z(jnp.asarray(mu)[None], jnp.asarray(cuts)[None], jnp.asarray(levels))[0]),
        logZ.sum(),
        rtol=1e-10,
    )

    def term(m):
        """E_q[log N(z; theta, 1)] + H[q(z)] for q(z_k) = N(m_k, 1) truncated, up to the
        -Var_q[theta_k]/2 that does not depend on m."""
        Ez, lZ = _scipy_tn(m, lo, hi)
        a, b = lo - m, hi - m
        Ez2 = stats.truncnorm.var(a, b) + Ez**2
        # -(E z^2 - 2 mu E z + mu^2)/2 - log sqrt(2 pi) + log sqrt(2 pi) + lZ + E(z - m)^2/2
        return -0.5 * (Ez2 - 2 * mu * Ez + mu**2) + lZ + 0.5 * (Ez2 - 2 * m * Ez + m**2)

    np.testing.assert_allclose(term(mu), logZ, rtol=1e-8, atol=1e-10)
    rng = np.random.default_rng(3)
    for scale in (1e-2, 0.3):
        d = scale * rng.normal(size=mu.shape)
        assert np.all(term(mu + d) < logZ + 1e-12), (
            "a q(z) other than the optimum has a larger ELBO"
        )
    # the ELBO holds exactly this term: replacing q(theta)'s variance part is the Gaussian rest
    base = float(elbo(state)[0])
    assert np.isfinite(base)


@pytest.mark.slow
def test_cut_step_never_decreases_the_elbo_and_converges():
    lik = LIKS["ordered"]
    biases = Biases()
    p, state, step, elbo = _setup(lik, biases, C=2)
    levels = p.levels
    cut_only = jax.jit(
        lambda s: s._replace(
            noise={"cuts": cavi._cut_step(lik, vb.ratings_mean(s, p.rows), s.noise["cuts"], levels)}
        )
    )
    moved = 0
    for _ in range(30):
        before = np.asarray(elbo(state))
        after_state = cut_only(state)
        after = np.asarray(elbo(after_state))
        assert np.all(after >= before - 1e-12 * np.abs(before)), (before, after)
        assert np.all(np.diff(np.asarray(after_state.noise["cuts"]), axis=-1) > 0)
        moved += int(np.any(after > before))
        state = step(state)
    assert moved > 0
    # stationary: the gradient of sum log Z + log p(c) at the fitted cuts is small
    for _ in range(150):
        state = step(state)
    mu = vb.ratings_mean(state, p.rows)
    for c in range(2):
        g = jax.grad(
            lambda cc: cavi.log_Z(mu[c][None], cc[None], levels)[0] + lik.cut_log_prior(cc)
        )(state.noise["cuts"][c])
        assert np.max(np.abs(np.asarray(g))) < 1e-2 * levels.shape[0] ** 0.5, np.asarray(g)


def test_vb_fit_end_to_end_ordered_probit():
    """``bmc.fit(method='vb')``: the ELBO trace never decreases, the fitted cut points are
    increasing, predict_proba rows sum to one and predict is their expected level."""
    lik = OrderedProbit()
    data = _data(LIKS["ordered"])
    fit = bmc.fit(
        data,
        K=2,
        method="vb",
        likelihood=lik,
        biases=True,
        progress_bar=False,
        seed=0,
        max_iter=40,
        dtype="float64",
    )
    e = np.asarray(fit.elbo, np.float64).reshape(len(fit.elbo), -1)
    assert np.all(np.diff(e, axis=0) >= -1e-9 * np.abs(e[1:]))
    cuts = np.asarray(fit.q_noise["cuts"]).ravel()
    assert np.all(np.diff(cuts) > 0)
    r, c = np.arange(5), np.arange(5)
    P = fit.predict_proba(r, c)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(
        fit.predict(r, c), P @ np.asarray(fit.info.likelihood.levels), rtol=1e-12
    )
