"""The one-class likelihood (implicit feedback): its checks, its row conditional, its Gibbs
sweep (Geweke) and its NumPyro model.

* Exact conditional (float64): on a partial pattern, the rows of ``M`` and of ``N`` that
  the engine draws (:func:`~bmczoo.inference.gibbs.rows.half_sweep` with zero normals: the
  mean; with unit normals: the columns of ``L^-T``, hence the covariance) against the dense
  Gaussian over every pair of the matrix (``c0`` at the unobserved ones), on every hot
  path (BCSR, segment sums and the compiled Gram kernel, at a K below and above its
  threshold).
* Geweke (2004): the joint of ``(gamma, M, N, Y)`` with ``Y_ij ~ N(theta_ij, 1/(lam
  c_ij))`` at every pair of a 6 x 5 matrix, the targets ``Y`` random (the one-class
  model's targets are the constants 1 and 0, which a joint test cannot redraw): a test
  likelihood reads the targets from the values and gives each pair a confidence from its
  position, so the sparse weights ``c_k - c0`` and the shared ``c0 N^T N`` both enter.
  Members: the inverse-gamma prior and the discrete prior with its column moves, fused
  and at the sweep's end (both read the same sums).  Power: a sweep without the shared
  Gram term, and one with ``c0`` counted twice at the ratings, are detected.  The
  unobserved pairs' part (``c0`` on pairs outside the pattern) is what the exact
  conditional checks.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _native
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs import rows as gibbs_rows
from bmczoo.inference.gibbs.latent import ratings_view
from bmczoo.inference.gibbs.rows import Conditional, Side, SweepFlags, half_sweep
from bmczoo.inference.settings import SweepOptions
from bmczoo.linalg import pack_upper, use_hot_path

from tests.inference._geweke import run_chains, with_ratings, z_scores

LIK = bmc.likelihoods.OneClass(alpha=2.0, c0=0.3, lam=1.5)


def _implicit_data(m1=16, m2=15, density=0.25, seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((m1, m2)) < density)
    strengths = rng.integers(1, 5, rows.size).astype(np.float64)
    return bmc.RatingData(rows, cols, strengths, (m1, m2))


# --------------------------------------------------------------------------- the component
def test_discovered_and_named():
    assert bmc.likelihoods.registry()["one-class"] is bmc.likelihoods.OneClass
    lik = bmc.likelihoods.get_likelihood("one_class", alpha=3.0)
    assert lik == bmc.likelihoods.OneClass(alpha=3.0) and lik.all_pairs
    assert lik.precision(12345) == lik.lam


@pytest.mark.parametrize(
    "name, value",
    [("alpha", 0.0), ("alpha", float("nan")), ("c0", 0.0), ("c0", 1.5), ("lam", -1.0)],
)
def test_bad_settings_name_the_parameter(name, value):
    with pytest.raises(ValueError, match=name):
        bmc.likelihoods.OneClass(**{name: value})
    with pytest.raises(TypeError, match=name):
        bmc.likelihoods.OneClass(**{name: "1"})


def test_negative_strengths_are_refused():
    data = bmc.RatingData([0, 1], [1, 0], [1.0, -2.0], (3, 3))
    with pytest.raises(ValueError, match="strengths r >= 0"):
        bmc.fit(data, K=1, likelihood=LIK, progress_bar=False)
    with pytest.raises(ValueError, match="strengths r >= 0"):
        gibbs.build_problem(data, 1.0, likelihood=LIK)


def test_unsupported_combinations_are_clear_errors():
    data = _implicit_data()
    with pytest.raises(ValueError, match="one-class .* annealed switch"):
        gibbs.build_problem(data, 1.0, likelihood=LIK, options=SweepOptions(anneal_steps=3))
    big = bmc.RatingData([0, 5], [1, 2], [1.0, 1.0], (2000, 1001))
    with pytest.raises(ValueError, match="at most 2e"):
        LIK.pair_arrays(big)


def test_fit_runs_in_both_dtypes(dtype):
    """A short fit in float32 and in float64: finite scores of the dtype, observed pairs
    scored above the average pair (the data have a rank-2 pattern)."""
    rng = np.random.default_rng(3)
    U, V = rng.random((20, 2)), rng.random((18, 2))
    rows, cols = np.nonzero(U @ V.T > 0.6)
    data = bmc.RatingData(rows, cols, np.ones(rows.size), (20, 18))
    fit = bmc.fit(
        data,
        K=2,
        prior=bmc.priors.InverseGamma(),
        likelihood=bmc.likelihoods.OneClass(alpha=4.0, c0=0.5),
        num_warmup=20,
        num_samples=40,
        num_chains=2,
        seed=0,
        progress_bar=False,
        dtype=dtype,
    )
    assert fit.info.dtype == np.dtype(dtype).name
    r, c = np.divmod(np.arange(20 * 18), 18)
    score = fit.predict(r, c)
    assert np.all(np.isfinite(score))
    assert score.reshape(20, 18)[rows, cols].mean() > score.mean()


def test_saved_fit_predicts_what_the_fit_predicted(tmp_path):
    data = _implicit_data()
    kw = dict(num_warmup=5, num_samples=10, num_chains=2, progress_bar=False)
    fit = bmc.fit(data, K=2, prior=bmc.priors.InverseGamma(), likelihood=LIK, **kw)
    fit.save(tmp_path / "one_class.npz")
    back = bmc.load(tmp_path / "one_class.npz")
    assert back.info.likelihood == LIK
    r, c = np.divmod(np.arange(40), 15)
    assert np.array_equal(fit.predict(r, c), back.predict(r, c))


# --------------------------------------------------------------------------- exact conditional
def _dense_rows(P, C, F, gamma, lam):
    """Mean (m, K) and covariance (m, K, K) of every row given the other factor ``F``, from
    the full matrices of preferences ``P`` and confidences ``C`` (numpy float64)."""
    prec = np.diag(1.0 / gamma) + lam * np.einsum("ij,jk,jl->ikl", C, F, F)
    rhs = lam * np.einsum("ij,jk->ik", C * P, F)
    return np.linalg.solve(prec, rhs[..., None])[..., 0], np.linalg.inv(prec)


def _engine_rows(problem, state, prior, which):
    """Mean and covariance of the rows (side ``which``) that the half sweep draws: zero
    normals give the mean, unit normals ``e_h`` give ``mean + L^-T e_h``."""
    views = ratings_view(state.lik_state, problem)
    pM, pN = prior.row_priors(state.prior_state)
    if which == 0:
        side = Side(problem.rows, state.M, state.N, state.row_bias, state.col_bias, *views[0])
    else:
        side = Side(problem.cols, state.N, state.M, state.col_bias, state.row_bias, *views[1])
    C, m, K = side.own.shape
    cond = Conditional((pM, pN)[which], state.tau, jnp.ones((C,)))
    zb = jnp.zeros((C, m))

    def draw(z):
        return half_sweep(side, z, zb, cond, SweepFlags(0.0, False, False))[0]

    mean = draw(jnp.zeros((C, m, K)))
    cols = [draw(jnp.broadcast_to(jnp.eye(K)[h], (C, m, K))) - mean for h in range(K)]
    X = jnp.stack(cols, axis=-1)  # L^-T, row by row
    return np.asarray(mean), np.asarray(X @ jnp.swapaxes(X, -1, -2))


HOT_PATHS = [("bcsr", 3), ("segment", 3)]
if _native.available():
    HOT_PATHS += [("gram", 3), ("gram", 14)]


@pytest.mark.parametrize("path, K", HOT_PATHS, ids=[f"{p}-K{k}" for p, k in HOT_PATHS])
def test_row_conditionals_are_the_dense_gaussian(x64, path, K):
    data = _implicit_data()
    m1, m2 = data.shape
    prior = bmc.priors.InverseGamma(3.0, 2.0)
    with use_hot_path(path):
        problem = gibbs.build_problem(data, LIK.lam, dtype=jnp.float64, likelihood=LIK)
    rng = np.random.default_rng(1)
    gamma = rng.uniform(0.5, 2.0, size=(2, K))  # two chains, each its own gamma
    state = gibbs.init(jax.random.split(jax.random.key(0), 2), problem, prior, K, gamma=gamma)
    P, Cf = LIK.pair_arrays(data)
    assert np.all(Cf[P == 0] == LIK.c0) and np.all(Cf[P == 1] > 1.0)
    for which, (F, Pw, Cw) in enumerate([(state.N, P, Cf), (state.M, P.T, Cf.T)]):
        mean, cov = _engine_rows(problem, state, prior, which)
        for c in range(2):
            want_mean, want_cov = _dense_rows(Pw, Cw, np.asarray(F[c]), gamma[c], LIK.lam)
            np.testing.assert_allclose(mean[c], want_mean, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(cov[c], want_cov, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- Geweke
M1, M2, K_G = 6, 5, 2
G_ROWS, G_COLS = (a.ravel().astype(np.int32) for a in np.divmod(np.arange(M1 * M2), M2))
IG = bmc.priors.InverseGamma(6.0, 5.0)
DISCRETE = bmc.priors.Discrete(C=2.0, p=0.4, eps=0.3)


def _strength(rows, cols):
    """A confidence pattern from the positions: strengths 0, 1, 2, 3."""
    return (3 * rows + 5 * cols) % 4


@dataclasses.dataclass(frozen=True)
class Targets(bmc.likelihoods.OneClass):
    """The one-class blocks with random targets: the values are the targets, each pair's
    strength comes from its position (:func:`_strength`)."""

    name = ""

    def gibbs_view(self, values, rows, cols):
        return values, self.confidence(_strength(rows, cols).astype(values.dtype))


GEWEKE_LIK = Targets(alpha=0.5, c0=0.5, lam=1.0)
CONF = GEWEKE_LIK.confidence(_strength(G_ROWS, G_COLS).astype(np.float64))
ENTRIES = np.array([0, 7, 18, 29])  # theta at these pairs is a test function


def _joint(prior, size, rng):
    """``size`` exact draws of ``(gamma, M, N, Y)`` (numpy float64)."""
    shape = (size, K_G)
    if isinstance(prior, bmc.priors.InverseGamma):
        gamma = prior.b / rng.gamma(prior.a, 1.0, shape)
    else:
        gamma = np.where(rng.random(shape) < prior.p, prior.C, prior.eps)
    sd = np.sqrt(gamma)[:, None, :]
    M = rng.standard_normal((size, M1, K_G)) * sd
    N = rng.standard_normal((size, M2, K_G)) * sd
    theta = np.sum(M[:, G_ROWS] * N[:, G_COLS], axis=-1)
    Y = theta + rng.standard_normal(theta.shape) / np.sqrt(GEWEKE_LIK.lam * CONF)
    return gamma, M, N, Y


def _functions(gamma, M, N, Y):
    theta = jnp.sum(M[G_ROWS] * N[G_COLS], axis=-1)
    f = [jnp.log(gamma[0]) + jnp.log(gamma[1]), gamma[0] + gamma[1]]
    f += list(theta[ENTRIES]) + list(theta[ENTRIES] ** 2)
    f += [jnp.sum(M**2), jnp.sum(N**2), jnp.sum(Y**2), jnp.sum(Y * theta)]
    f += [jnp.sum(CONF * (Y - theta) ** 2)]
    return jnp.stack(f)


def _successive(prior, options, num_chains, num_steps, seed):
    template = bmc.RatingData(G_ROWS, G_COLS, np.zeros(G_ROWS.size), (M1, M2))
    problem = gibbs.build_problem(
        template, GEWEKE_LIK.lam, dtype=jnp.float64, likelihood=GEWEKE_LIK, options=options
    )
    row_order = jnp.asarray(template.row_view.order)
    col_order = jnp.asarray(template.col_view.order)
    gamma, M, N, Y = _joint(prior, num_chains, np.random.default_rng(seed + 1))

    def start(key, g, M, N):
        st = gibbs.init(key[None], problem, prior, K_G, prior_state={"gamma": g[None]})
        return st._replace(M=M[None], N=N[None])

    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(keys0, jnp.asarray(gamma), jnp.asarray(M), jnp.asarray(N))
    sd = jnp.asarray(1.0 / np.sqrt(GEWEKE_LIK.lam * CONF))

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        state = gibbs.sweep(state, with_ratings(problem, Y, row_order, col_order), prior)
        M, N, g = state.M[0], state.N[0], state.prior_state["gamma"][0]
        f = _functions(g, M, N, Y)
        theta = jnp.sum(M[G_ROWS] * N[G_COLS], axis=-1)
        return (state, theta + sd * jax.random.normal(k_y, theta.shape, theta.dtype), key), f

    keys = jax.random.split(jax.random.key(seed), num_chains)
    return run_chains(one_step, (state, jnp.asarray(Y), keys), num_steps)


def _geweke_z(prior, options, seed=0):
    succ = _successive(prior, options, num_chains=100, num_steps=200, seed=seed)
    draws = _joint(prior, 40_000, np.random.default_rng(seed + 2))
    marg = np.asarray(jax.vmap(_functions)(*(jnp.asarray(d) for d in draws)))
    return z_scores(succ, marg)


MEMBERS = {
    "inverse-gamma": (IG, SweepOptions(column_moves=False)),
    "discrete+fused-moves": (DISCRETE, SweepOptions(column_moves=True)),
    "discrete+moves-at-end": (
        DISCRETE,
        SweepOptions(column_moves=True, fuse_column_moves=False, column_moves_every=1),
    ),
}


@pytest.mark.parametrize("name", list(MEMBERS))
def test_geweke_one_class(x64, name):
    prior, options = MEMBERS[name]
    z, z_crit = _geweke_z(prior, options)
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


@pytest.mark.parametrize("sign", [-1.0, 1.0], ids=["shared-term-missing", "c0-counted-twice"])
def test_geweke_one_class_detects_wrong_precisions(x64, monkeypatch, sign):
    """Factor blocks whose precisions lack the shared ``c0 F^T F`` (the ratings' weights
    still ``c_k - c0``), or whose ratings weigh ``c_k`` besides it (``c0`` counted twice at
    the ratings), are detected."""
    row_sums = gibbs_rows.row_sums

    def without_shared(csr, other, bias_other, use_bias, values, packed, weights, unrated):
        sums = row_sums(csr, other, bias_other, use_bias, values, packed, weights, unrated)
        shared = sign * unrated * jnp.einsum("cjk,cjl->ckl", other, other)
        Gp = None if sums.Gp is None else sums.Gp + pack_upper(shared)[:, None]
        return sums._replace(G=sums.G + shared[:, None], Gp=Gp)

    monkeypatch.setattr(gibbs_rows, "row_sums", without_shared)
    z, z_crit = _geweke_z(IG, SweepOptions(column_moves=False))
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"


# --------------------------------------------------------------------------- NumPyro model
def test_model_density_is_the_gaussian_over_every_pair(x64):
    """The model's log joint at given ``M``, ``N`` (fixed prior) is the prior plus the
    Gaussian log density of the preferences with the confidences, summed over every pair."""
    from numpyro.infer.util import log_density
    from scipy import stats

    data = _implicit_data(m1=7, m2=6, density=0.3)
    prior = bmc.priors.Fixed(0.7)
    rng = np.random.default_rng(4)
    M, N = rng.standard_normal((7, 2)), rng.standard_normal((6, 2))
    model = bmc.models.matrix_completion
    lp, _ = log_density(model, (data, 2, prior), {"likelihood": LIK}, {"M": M, "N": N})
    P, C = LIK.pair_arrays(data)
    want = stats.norm.logpdf(P, M @ N.T, 1.0 / np.sqrt(LIK.lam * C)).sum()
    want += stats.norm.logpdf(M, 0.0, np.sqrt(0.7)).sum() + stats.norm.logpdf(N, 0, 0.7**0.5).sum()
    assert float(lp) == pytest.approx(want, rel=1e-12)


def _theta_draws(fit, entries):
    """(chains, draws, P) ``theta`` at ``entries`` from a fit's factor draws."""
    M, N = (np.asarray(fit.samples[k], np.float64) for k in ("M", "N"))
    r, c = entries
    return np.einsum("cdpk,cdpk->cdp", M[:, :, r], N[:, :, c])


@pytest.mark.slow
def test_gibbs_agrees_with_nuts():
    """On a 6 x 5 matrix the Gibbs sampler and NUTS on the NumPyro model (the full matrix)
    give the same posterior of ``theta`` at observed and unobserved pairs: means and second
    moments within Bonferroni z_crit combined ArviZ MCSEs."""
    import arviz as az

    from tests.inference.test_nuts_components import _z_crit

    data = _implicit_data(m1=6, m2=5, density=0.35, seed=2)
    lik = bmc.likelihoods.OneClass(alpha=1.0, c0=0.4, lam=3.0)
    entries = (np.array([0, 2, 5, 3]), np.array([1, 4, 0, 3]))
    kw = dict(K=2, prior=bmc.priors.Fixed(0.8), likelihood=lik, seed=0, progress_bar=False)
    runs = {
        "gibbs": dict(num_warmup=200, num_samples=4000, num_chains=4, thinning=1),
        "nuts": dict(num_warmup=500, num_samples=1500, num_chains=4),
    }
    moments = {}
    for method, settings in runs.items():
        extra = dict(store_factors=True) if method == "gibbs" else {}
        fit = bmc.fit(data, method=method, dtype="float64", **kw, **settings, **extra)
        t = _theta_draws(fit, entries)
        ds = az.convert_to_dataset({"t": t, "t2": t * t})
        moments[method] = [
            (ds[v].values.mean(axis=(0, 1)), az.mcse(ds, method="mean")[v].values)
            for v in ("t", "t2")
        ]
    z = np.concatenate(
        [
            (g[0] - n[0]) / np.sqrt(g[1] ** 2 + n[1] ** 2)
            for g, n in zip(moments["gibbs"], moments["nuts"])
        ]
    )
    assert np.max(np.abs(z)) < _z_crit(z.size), f"z {np.round(z, 2)}"
