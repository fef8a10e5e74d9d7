"""Geweke (2004) joint-distribution test of the feature-driven biases (docs/algorithms.md,
"Biases"): the bias draws with per-row prior means ``x_i^T w`` and the blocks of ``w``,
``s^2`` and ``lam_w`` of each side, within full Gibbs sweeps.

The tiny problem of ``test_geweke.py`` (6 x 5, 15 observed entries, row 5 empty: a cold
row whose bias comes from its features alone, K = 2) with an inverse-gamma column prior
(another prior than the Normal-Wishart one: the link is the biases' own), a fixed ``tau``
and features on both sides' biases: the rows get the implicit feedback of the pattern plus
two dense features (7 features for 6 rows: ``X`` has a null space and the products go
through ``X Vr``), the columns two dense features.  The joint of ``(gamma, M, N, s^2, lam_w,
w, b, c, Y)`` is simulated directly with numpy (marginal-conditional) and by independent
chains alternating one :func:`bmczoo.inference.gibbs.sweep` with a fresh ``Y | theta``
(successive-conditional), each started from an exact joint draw; every test function's mean
must agree within a Bonferroni threshold at familywise level 1% (chain means iid across
chains under the null: exact standard errors).  ``s^2 ~ InvGamma(6, 5)`` and ``lam_w ~
Gamma(6, 5)`` keep the test functions' variances finite.

Power (slow): a variance block that leaves the ``F`` coordinates of ``w`` out of the shape
(``a + m/2``), and a bias draw that ignores the prior mean ``x_i^T w``, are each detected
(``max |z| > 2 z_crit``).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.offsets import bias_link
from bmczoo.inference import gibbs

from .test_geweke import COLS, K, M1, M2, N_OBS, ROWS
from ._geweke import run_chains, with_ratings, z_scores
from .test_geweke_components import E_COLS, E_ROWS

pytestmark = pytest.mark.usefixtures("x64")

TAU = 1.0
_rng = np.random.default_rng(11)
TEMPLATE = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2))
ROW_FEATURES = bmc.data.hstack_features(
    bmc.data.Features.from_dense(_rng.normal(size=(M1, 2))),
    bmc.data.implicit_features(TEMPLATE, "rows"),
)
COL_FEATURES = bmc.data.Features.from_dense(_rng.normal(size=(M2, 2)))
TEMPLATE = TEMPLATE.with_features(ROW_FEATURES, COL_FEATURES)
X = {"row": ROW_FEATURES.to_dense(), "col": COL_FEATURES.to_dense()}

PRIOR = bmc.priors.InverseGamma(6.0, 5.0)
BIASES = bmc.offsets.Biases(a=6.0, b=5.0, row_features=True, col_features=True, a_w=6.0, b_w=5.0)


def joint_draws(size, rng):
    """``size`` exact draws of the joint (numpy, leading axis ``size``)."""
    gamma = PRIOR.b / rng.gamma(PRIOR.a, size=(size, K))
    sd = np.sqrt(gamma)[:, None, :]
    M, N = rng.normal(size=(size, M1, K)) * sd, rng.normal(size=(size, M2, K)) * sd
    out = {"gamma": gamma, "M": M, "N": N}
    for label in ("row", "col"):
        var = BIASES.b / rng.gamma(BIASES.a, size=size)
        lam = rng.gamma(BIASES.a_w, 1.0 / BIASES.b_w, size=size)
        f = X[label].shape[1]
        w = rng.normal(size=(size, f)) * np.sqrt(var / lam)[:, None]
        m = X[label].shape[0]
        bias = w @ X[label].T + rng.normal(size=(size, m)) * np.sqrt(var)[:, None]
        out.update({f"{label}_var": var, f"{label}_lam": lam, f"{label}_w": w, label: bias})
    theta = np.sum(M[:, ROWS] * N[:, COLS], -1) + out["row"][:, ROWS] + out["col"][:, COLS]
    out["Y"] = theta + rng.normal(size=theta.shape) / np.sqrt(TAU)
    return out


def functions_of(d, xp=np):
    """Test functions of one joint draw (the same code for numpy and jax arrays)."""
    M, N, b, c, Y = d["M"], d["N"], d["row"], d["col"], d["Y"]
    f = [xp.log(d["gamma"][0]) + xp.log(d["gamma"][1])]
    for label in ("row", "col"):
        var, lam, w = d[f"{label}_var"], d[f"{label}_lam"], d[f"{label}_w"]
        f += [xp.log(var), var, xp.log(lam), lam, w[0], w[1], w[0] ** 2, xp.sum(w**2)]
        f += [xp.sum(w**2) * lam / var]
    theta_e = xp.sum(M[E_ROWS] * N[E_COLS], -1) + b[E_ROWS] + c[E_COLS]
    theta = xp.sum(M[ROWS] * N[COLS], -1) + b[ROWS] + c[COLS]
    f += list(theta_e) + list(theta_e**2)
    f += [b[0], b[5], b[5] ** 2, b[0] * b[5], c[0], c[0] ** 2]
    f += [xp.sum(b**2), xp.sum(c**2), xp.sum(M**2), xp.sum(Y**2), xp.sum((Y - theta) ** 2)]
    return jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in f])


def marginal_conditional(size, seed):
    d = jax.tree.map(jnp.asarray, joint_draws(size, np.random.default_rng(seed)))
    return np.asarray(jax.vmap(lambda x: functions_of(x, xp=jnp))(d))


def _chains(problem, row_order, col_order, keys, state, Y, *, num_steps):
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)
    V = {label: problem.bias_links[f"{label}/V"] for label in ("row", "col")}

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        prob = with_ratings(problem, Y, row_order, col_order)
        state = gibbs.sweep(state, prob, PRIOR)
        d = {"gamma": state.gamma[0], "M": state.M[0], "N": state.N[0], "Y": Y}
        d["row"], d["col"] = state.row_bias[0], state.col_bias[0]
        for i, label in enumerate(("row", "col")):
            d[f"{label}_var"] = state.bias_var[0, i]
            d[f"{label}_lam"] = state.bias_link[f"{label}_bias_lam"][0]
            d[f"{label}_w"] = V[label] @ state.bias_link[f"{label}_bias_wt"][0]
        f = functions_of(d, xp=jnp)
        theta = jnp.sum(d["M"][rows] * d["N"][cols], -1) + d["row"][rows] + d["col"][cols]
        Y = theta + jax.random.normal(k_y, theta.shape, theta.dtype) / jnp.sqrt(TAU)
        return (state, Y, key), f

    return run_chains(one_step, (state, Y, keys), num_steps)


def successive_conditional(*, num_chains, num_steps, seed):
    problem = gibbs.build_problem(TEMPLATE, TAU, dtype=jnp.float64, biases=BIASES)
    d = jax.tree.map(jnp.asarray, joint_draws(num_chains, np.random.default_rng(seed + 1)))

    def start(key, d):  # one chain's state (C = 1) at an exact joint draw
        st = gibbs.init(key[None], problem, PRIOR, K, gamma=d["gamma"][None])
        st = st._replace(
            M=d["M"][None],
            N=d["N"][None],
            row_bias=d["row"][None],
            col_bias=d["col"][None],
            bias_var=jnp.stack([d["row_var"], d["col_var"]])[None],
        )
        link = {}
        for label in ("row", "col"):
            link[f"{label}_bias_wt"] = (problem.bias_links[f"{label}/V"].T @ d[f"{label}_w"])[None]
            link[f"{label}_bias_lam"] = d[f"{label}_lam"][None]
        return st._replace(bias_link=link)

    state = jax.vmap(start)(jax.random.split(jax.random.key(seed + 10), num_chains), d)
    keys = jax.random.split(jax.random.key(seed), num_chains)
    out = _chains(
        problem,
        jnp.asarray(TEMPLATE.row_view.order),
        jnp.asarray(TEMPLATE.col_view.order),
        keys,
        state,
        d["Y"],
        num_steps=num_steps,
    )
    return np.asarray(out)


def geweke_z(*, num_chains=100, num_steps=200, num_marginal=40_000, seed=0):
    succ = successive_conditional(num_chains=num_chains, num_steps=num_steps, seed=seed)
    return z_scores(succ, marginal_conditional(num_marginal, seed + 2))


def test_geweke_feature_driven_biases():
    z, z_crit = geweke_z()
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


# --------------------------------------------------------------------------- deliberately wrong blocks
_VARIANCE_CONDITIONAL = bias_link.variance_conditional


def _shape_without_F(resid_sq, wt, lam, m, a, b):
    shape, scale = _VARIANCE_CONDITIONAL(resid_sq, wt, lam, m, a, b)
    return shape - 0.5 * wt.shape[-1], scale


def _prior_means_zero(state, links):
    return (None, None)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "name", "wrong"),
    [
        (bias_link, "variance_conditional", _shape_without_F),
        (bias_link, "prior_means", _prior_means_zero),
    ],
    ids=["variance-shape-without-F", "bias-draw-without-prior-mean"],
)
def test_geweke_detects_wrong_bias_link_blocks(monkeypatch, module, name, wrong):
    monkeypatch.setattr(module, name, wrong)
    jax.clear_caches()  # the sweep is traced again with the wrong block
    try:
        z, z_crit = geweke_z()
    finally:
        jax.clear_caches()
    assert np.max(np.abs(z)) > 2 * z_crit, (
        f"the wrong {name} was not detected: max |z| = {np.max(np.abs(z)):.2f}"
    )
