"""Geweke (2004) joint-distribution test of the feature link with the decomposition on the
rows (``X X^T``; :mod:`bmczoo.priors.macau.eigen`) within full Gibbs sweeps, and of the
kept ``B``, whose null-space part is drawn from its conditional without a basis
(:func:`bmczoo.priors.macau.stored_links`).

The problem of ``test_geweke_macau.py`` with a wider row table: ten dense features and the
five implicit-feedback ones for the 6 rows (15 features, rank 6: a null space of dimension
9), decomposed on the rows (the rule's threshold set to zero); the columns' two features
stay on the feature decomposition.  The chains start from exact joint draws: the range
coordinates are ``V_r^T B = S^{-1} (X V_r)^T X B`` and the null coordinates a fresh draw of
their conditional ``N(0, (lam_B Lambda)^{-1})`` (a basis of the null space is never
formed).

Seeds 0, 1 and 2 give max |z| of 2.3, 2.2 and 2.6 (critical value 3.67).  Power: a kept
``B`` without its null part (its projection on the row space of ``X``) and one whose
null part is not projected off the row space are each detected (``max |z| > 2 z_crit``;
33 and 8.1 on seed 0).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.priors import macau
from bmczoo.priors.macau import arrays, eigen

from . import test_geweke_macau as base
from .test_geweke import COLS, K, M1, N_OBS, ROWS
from ._geweke import run_chains, with_ratings, z_scores

pytestmark = pytest.mark.usefixtures("x64")

_rng = np.random.default_rng(11)
_TEMPLATE = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), base.TEMPLATE.shape)
ROW_FEATURES = bmc.data.hstack_features(
    bmc.data.Features.from_dense(_rng.normal(size=(M1, 10))),
    bmc.data.implicit_features(_TEMPLATE, "rows"),
)
TEMPLATE = _TEMPLATE.with_features(ROW_FEATURES, base.COL_FEATURES)
X = {"M": ROW_FEATURES.to_dense(), "N": base.X["N"]}


def _chains(problem, prior, keys, state, Y, num_steps):
    """The chains of ``test_geweke_macau`` with the chains' keys given to ``stored_links``."""
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)
    row_order = jnp.asarray(TEMPLATE.row_view.order)
    col_order = jnp.asarray(TEMPLATE.col_view.order)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        prob = with_ratings(problem, Y, row_order, col_order)
        state = gibbs.sweep(state, prob, prior)
        stored = macau.stored_links(state.prior_state, problem.links, state.key)
        prior_state = jax.tree.map(lambda x: x[0], {**state.prior_state, **stored})
        f = base.functions_of(prior_state, state.M[0], state.N[0], Y, xp=jnp)
        theta = jnp.sum(state.M[0][rows] * state.N[0][cols], axis=-1)
        Y = theta + jax.random.normal(k_y, theta.shape, theta.dtype) / jnp.sqrt(base.TAU)
        return (state, Y, key), f

    return run_chains(one_step, (state, Y, keys), num_steps)


def _coords(problem, state0, rng):
    """The sweep's ``Bt_F`` of the joint draws' ``B_F`` (numpy, leading axis the chains)."""
    out = {}
    for side in ("M", "N"):
        link = {k[2:]: v for k, v in problem.links.items() if k[0] == side}
        B = state0[f"B_{side}"]
        if "V" in link:
            out[f"Bt_{side}"] = np.einsum("fg,cfk->cgk", np.asarray(link["V"]), B)
            continue
        d, XV = np.asarray(link["d"]), np.asarray(link["XV"])
        F, r = d.shape[0], XV.shape[1]
        coef = np.einsum("mr,mf,cfk->crk", XV, X[side], B) / d[F - r :, None]
        Lam, lam = state0[f"Lambda_{side}"], state0[f"lam_B_{side}"]
        chol = np.linalg.cholesky(np.linalg.inv(Lam))
        null = np.einsum("ckl,cfl->cfk", chol, rng.normal(size=(B.shape[0], F - r, K)))
        out[f"Bt_{side}"] = np.concatenate([null / np.sqrt(lam)[:, None, None], coef], axis=1)
    return out


def geweke_z(*, num_chains=100, num_steps=200, num_marginal=40_000, seed=0):
    problem = gibbs.build_problem(TEMPLATE, base.TAU, dtype=jnp.float64, prior=base.PRIOR)
    assert "M/V" not in problem.links and "N/V" in problem.links
    assert problem.links["M/XV"].shape == (M1, M1)  # rank 6: a null space of dimension 9
    state0, M, N, Y = base.joint_draws(base.PRIOR, num_chains, np.random.default_rng(seed + 1))
    prior_state = {k: v for k, v in state0.items() if not k.startswith("B_")}
    prior_state.update(_coords(problem, state0, np.random.default_rng(seed + 3)))

    def start(key, prior_state, M, N):
        one = jax.tree.map(lambda x: x[None], prior_state)
        return gibbs.init(key[None], problem, base.PRIOR, K, prior_state=one, M=M[None], N=N[None])

    keys = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(keys, *jax.tree.map(jnp.asarray, (prior_state, M, N)))
    keys = jax.random.split(jax.random.key(seed), num_chains)
    succ = _chains(problem, base.PRIOR, keys, state, Y, num_steps)
    return z_scores(succ, base.marginal_conditional(base.PRIOR, num_marginal, seed + 2))


@pytest.fixture
def wide(monkeypatch):
    """The wide row table, decomposed on the rows."""
    monkeypatch.setattr(eigen, "GRAM_MIN_FEATURES", 0)
    monkeypatch.setattr(base, "X", X)


@pytest.mark.usefixtures("wide")
def test_geweke_feature_link_on_the_rows():
    z, z_crit = geweke_z()
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


def _no_null(link, Z, Lam, lam_B):
    return jnp.zeros_like(Z)


def _unprojected(link, Z, Lam, lam_B):
    Lc = jnp.linalg.cholesky(Lam)
    Y = jnp.einsum("cfk,ckl->cfl", Z, jnp.linalg.inv(Lc))
    return Y * jax.lax.rsqrt(lam_B)[:, None, None]


@pytest.mark.slow
@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("wrong", [_no_null, _unprojected], ids=["no-null", "unprojected"])
def test_geweke_detects_a_wrong_null_part(monkeypatch, wrong):
    monkeypatch.setattr(arrays, "null_part", wrong)
    z, z_crit = geweke_z()
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"
