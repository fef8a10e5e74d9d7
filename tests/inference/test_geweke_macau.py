"""Geweke (2004) joint-distribution tests of the Normal-Wishart prior's feature link
(Macau, docs/algorithms.md, "Feature links (side information)"): the blocks of ``B``,
``lam_B`` and ``(mu, Lambda)`` given
the residuals, and the rows' per-row prior means, within full Gibbs sweeps.

The tiny problem of ``test_geweke.py`` (6 x 5, 15 observed entries, row 5 empty, K = 2)
with features on both sides: the rows get the implicit feedback of the pattern (which
columns each row rated, ``|R(i)|^-1/2``; the empty row has none) plus two dense features
(7 features for 6 rows: the sweep's products go through ``X Vr`` and ``X`` has a null
space, :func:`bmczoo.priors.macau.link_arrays`), the columns two dense features.  The joint of ``(mu, Lambda, lam_B, B, M, N, Y)`` is simulated
directly with numpy/scipy (marginal-conditional) and by independent chains that alternate
one :func:`bmczoo.inference.gibbs.sweep` with a fresh ``Y | theta`` (successive-
conditional), each chain started from an exact joint draw; every test function's mean must
agree within a Bonferroni threshold at familywise level 1% (the chain means are iid across
chains under the null, so their standard error is exact).

``nu0 = K + 8`` (not the ``K + 4`` of the other Geweke tests) and ``lam_B ~ Gamma(6, 5)``:
the second-moment test functions (``theta^2``, ``sum M^2``, ``sum Y^2``) are fourth moments
of the factors, hence second moments of ``Lambda^{-1}`` (inverse Wishart: finite iff ``nu0
> K + 3``), and their estimated standard errors need the fourth moments (finite iff ``nu0 >
K + 7``).  With ``nu0 = K + 4`` the link's extra spread ``B^T x_i`` makes those tails
heavy enough that the chains' sample moments and standard errors fall short on some seeds
(z about -5 on the second moments for seeds 0 and 1, none beyond 2 for seed 2); with ``K +
8`` seeds 0 and 5 give max |z| of 2.0.

Power: a link block that leaves ``F`` out of the Wishart degrees of freedom, and one that
leaves ``lam_B B^T B`` out of its scatter, are each detected (``max |z| > 2 z_crit``).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.priors import macau
from bmczoo.priors.normal_wishart import wishart_draw

from .test_geweke import COLS, K, M1, M2, N_OBS, ROWS
from ._geweke import run_chains, with_ratings, z_scores
from .test_geweke_components import E_COLS, E_ROWS

pytestmark = pytest.mark.usefixtures("x64")

TAU = 1.0
_rng = np.random.default_rng(7)
TEMPLATE = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2))
ROW_FEATURES = bmc.data.hstack_features(
    bmc.data.Features.from_dense(_rng.normal(size=(M1, 2)), names=["age", "height"]),
    bmc.data.implicit_features(TEMPLATE, "rows"),
)
COL_FEATURES = bmc.data.Features.from_dense(_rng.normal(size=(M2, 2)))
TEMPLATE = TEMPLATE.with_features(ROW_FEATURES, COL_FEATURES)
X = {"M": ROW_FEATURES.to_dense(), "N": COL_FEATURES.to_dense()}

PRIOR = bmc.priors.NormalWishart(
    beta0=2.0, nu0=K + 8.0, W0_scale=0.5, row_features=True, col_features=True, a_B=6.0, b_B=5.0
)


# --------------------------------------------------------------------------- direct simulation
def joint_draws(prior, size, rng):
    """``size`` exact draws of the joint: prior variables, M, N, Y (leading axis ``size``)."""
    state, F = {}, []
    for side, m in (("M", M1), ("N", M2)):
        Lam = stats.wishart(df=prior.nu0, scale=prior.W0_scale * np.eye(K)).rvs(
            size=size, random_state=rng
        )
        chol = np.linalg.cholesky(np.linalg.inv(Lam))  # covariance Lambda^{-1} = chol chol^T
        mu = np.einsum("nkl,nl->nk", chol, rng.normal(size=(size, K))) / math.sqrt(prior.beta0)
        lam = rng.gamma(prior.a_B, 1.0 / prior.b_B, size=size)
        f = X[side].shape[1]
        B = (
            np.einsum("nkl,nfl->nfk", chol, rng.normal(size=(size, f, K)))
            / np.sqrt(lam)[:, None, None]
        )
        mean = mu[:, None, :] + np.einsum("mf,nfk->nmk", X[side], B)
        F.append(mean + np.einsum("nkl,nml->nmk", chol, rng.normal(size=(size, m, K))))
        state.update(
            {f"mu_{side}": mu, f"Lambda_{side}": Lam, f"lam_B_{side}": lam, f"B_{side}": B}
        )
    theta = np.sum(F[0][:, ROWS] * F[1][:, COLS], axis=-1)
    Y = theta + rng.normal(size=theta.shape) / math.sqrt(TAU)
    return state, F[0], F[1], Y


def functions_of(state, M, N, Y, xp=np):
    """Test functions of one joint draw (the same code for numpy and jax arrays)."""
    f = []
    for side in ("M", "N"):
        L, mu, lam, B = (state[f"{k}_{side}"] for k in ("Lambda", "mu", "lam_B", "B"))
        f += [L[0, 0], L[1, 1], L[0, 1], xp.log(L[0, 0] * L[1, 1] - L[0, 1] ** 2)]
        f += [mu[0], mu[1], mu[0] ** 2, xp.log(lam), lam]
        f += [B[0, 0], B[-1, 1], B[0, 0] ** 2, xp.sum(B**2), xp.sum(B[:, 0] * B[:, 1])]
    theta_e = xp.sum(M[E_ROWS] * N[E_COLS], axis=-1)
    theta = xp.sum(M[ROWS] * N[COLS], axis=-1)
    f += list(theta_e) + list(theta_e**2)
    f += [
        M[5, 0],
        M[5, 0] ** 2,
        xp.sum(M**2),
        xp.sum(N**2),
        xp.sum(Y**2),
        xp.sum((Y - theta) ** 2),
        xp.sum(Y * theta),
    ]
    return jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in f])


def marginal_conditional(prior, size, seed):
    state, M, N, Y = joint_draws(prior, size, np.random.default_rng(seed))
    draws = jax.tree.map(jnp.asarray, (state, M, N, Y))
    return np.asarray(jax.vmap(lambda s, m, n, y: functions_of(s, m, n, y, xp=jnp))(*draws))


# --------------------------------------------------------------------------- Gibbs chains
def _chains(problem, row_order, col_order, keys, state, Y, *, prior, num_steps):
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        prob = with_ratings(problem, Y, row_order, col_order)
        state = gibbs.sweep(state, prob, prior)
        M, N = state.M[0], state.N[0]
        prior_state = jax.tree.map(
            lambda x: x[0],
            {**state.prior_state, **macau.stored_links(state.prior_state, problem.links)},
        )
        f = functions_of(prior_state, M, N, Y, xp=jnp)
        theta = jnp.sum(M[rows] * N[cols], axis=-1)
        Y = theta + jax.random.normal(k_y, theta.shape, theta.dtype) / jnp.sqrt(TAU)
        return (state, Y, key), f

    return run_chains(one_step, (state, Y, keys), num_steps)


def successive_conditional(prior, sampler, *, num_chains, num_steps, seed):
    problem = gibbs.build_problem(TEMPLATE, TAU, dtype=jnp.float64, prior=sampler)
    state0, M, N, Y = jax.tree.map(
        jnp.asarray, joint_draws(prior, num_chains, np.random.default_rng(seed + 1))
    )

    def start(key, prior_state, M, N):  # one chain's state (C = 1) at an exact joint draw
        prior_state = {
            (f"Bt_{k[2:]}" if k.startswith("B_") else k): (
                problem.links[f"{k[2:]}/V"].T @ v if k.startswith("B_") else v
            )
            for k, v in prior_state.items()
        }
        return gibbs.init(
            key[None],
            problem,
            sampler,
            K,
            prior_state=jax.tree.map(lambda x: x[None], prior_state),
            M=M[None],
            N=N[None],
        )

    state = jax.vmap(start)(jax.random.split(jax.random.key(seed + 10), num_chains), state0, M, N)
    keys = jax.random.split(jax.random.key(seed), num_chains)
    out = _chains(
        problem,
        jnp.asarray(TEMPLATE.row_view.order),
        jnp.asarray(TEMPLATE.col_view.order),
        keys,
        state,
        Y,
        prior=sampler,
        num_steps=num_steps,
    )
    return np.asarray(out)


def geweke_z(sampler=PRIOR, *, num_chains=100, num_steps=200, num_marginal=40_000, seed=0):
    succ = successive_conditional(
        PRIOR, sampler, num_chains=num_chains, num_steps=num_steps, seed=seed
    )
    return z_scores(succ, marginal_conditional(PRIOR, num_marginal, seed + 2))


# --------------------------------------------------------------------------- deliberately wrong blocks
@dataclasses.dataclass(frozen=True)
class WrongLink(bmc.priors.NormalWishart):
    """The link block with one mistake: ``drop="F"`` leaves ``F`` out of the Wishart
    degrees of freedom, ``drop="scatter"`` leaves ``lam_B B^T B`` out of its inverse scale."""

    drop: str = "F"

    def link_update(self, key, state, stats_M, stats_N, m1, m2, links):
        W0_inv = jnp.eye(K, dtype=stats_M[0].dtype) / self.W0_scale
        out = {}
        for side, (s1, s2, Gt), m, k in zip(
            ("M", "N"), (stats_M, stats_N), (m1, m2), jax.random.split(key)
        ):
            link = self._side_link(links, side)
            kB, kl, kw = jax.random.split(k, 3)
            Bt = macau.b_draw(
                link,
                state[f"mu_{side}"],
                state[f"Lambda_{side}"],
                state[f"lam_B_{side}"],
                Gt,
                jax.random.normal(kB, Gt.shape, Gt.dtype),
            )
            shape, rate = macau.lam_conditional(Bt, state[f"Lambda_{side}"], self.a_B, self.b_B)
            lam = jax.random.gamma(kl, shape, dtype=Gt.dtype) / rate
            mu, beta, nu, Winv = macau.nw_link_conditional(
                link,
                Bt,
                0.0 if self.drop == "scatter" else lam,
                s1,
                s2,
                Gt,
                m,
                self.beta0,
                self.nu0,
                W0_inv,
            )
            nu = nu - Gt.shape[0] if self.drop == "F" else nu
            out[f"mu_{side}"], out[f"Lambda_{side}"] = wishart_draw(kw, Winv, nu, beta, mu)
            out[f"Bt_{side}"], out[f"lam_B_{side}"] = Bt, lam
        return out


def _wrong(drop):
    return WrongLink(
        beta0=PRIOR.beta0,
        nu0=PRIOR.nu0,
        W0_scale=PRIOR.W0_scale,
        row_features=True,
        col_features=True,
        a_B=PRIOR.a_B,
        b_B=PRIOR.b_B,
        drop=drop,
    )


# --------------------------------------------------------------------------- tests
def test_geweke_feature_link():
    z, z_crit = geweke_z()
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("drop", ["F", "scatter"])
def test_geweke_detects_wrong_link_blocks(drop):
    z, z_crit = geweke_z(_wrong(drop))
    assert np.max(np.abs(z)) > 2 * z_crit, (
        f"dropping {drop} not detected: max |z| = {np.max(np.abs(z)):.2f}"
    )
