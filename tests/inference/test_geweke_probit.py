"""Geweke (2004) joint-distribution tests of the latent block of the probit and
ordered-probit likelihoods (:func:`bmczoo.inference.gibbs.latent_block`: the truncated
normal ``z`` and, for the ordered probit, the Metropolis-Hastings move of the cut points
with ``z`` integrated out).

Same tiny problem as ``test_geweke.py`` (6 x 5, 15 observed entries, row 5 empty, K = 2)
and the same construction as ``test_geweke_components.py``:

* marginal-conditional: prior variables, ``M``, ``N`` (and biases) from the prior, the
  cut points from their prior (``c = ordered(u)``, ``u_l ~ N(0, s^2)``, written here with
  numpy, not with bmczoo), ``z = theta + N(0, 1)`` and ``Y`` the level of ``z``;
* successive-conditional: independent chains (each started from an exact joint draw) that
  alternate one :func:`bmczoo.inference.gibbs.sweep` given the chain's current levels with
  a fresh ``Y | theta, c``.  After the sweep ``(prior, M, N, biases, c, z, Y)`` is a joint
  draw under the null (the sweep draws ``(c, z) | theta, Y`` first, then the rest given
  ``z``), so the test functions include ``z`` (``sum z^2``, ``sum z theta``) and the cut
  points as well as ``theta`` and the level counts.

The chain means are iid across chains under the null (exact standard errors); every test
function's z-score must be below the Bonferroni threshold at familywise level 1%.

Power: a latent block that truncates ``z`` to the interval of the wrong level (the levels
reversed: for the probit, the wrong side of the threshold) is detected (``max |z| > 2
z_crit``), and (slow) a cut-point move whose prior forgets the Jacobian of the ordered
transform.  The default suite runs the ordered probit with the inverse-gamma prior and
biases (both parts of the latent block) and the wrong-truncation check on the probit;
the other combinations and power checks are ``slow``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.likelihoods import OrderedProbit, Probit
from bmczoo.likelihoods import probit as probit_mod

from ._geweke import run_chains, z_scores
from .test_geweke import COLS, K, M1, M2, ROWS
from .test_geweke_components import (
    BIASES,
    E_COLS,
    E_ROWS,
    IG,
    NW,
    _prior_draws,
    bias_draws,
)

pytestmark = pytest.mark.usefixtures("x64")

THRESHOLD = 0.3
PROBIT = Probit(threshold=THRESHOLD)
ORDERED = OrderedProbit(levels=(0.0, 1.0, 2.0), cut_scale=0.5)


# --------------------------------------------------------------------------- direct simulation
def _cut_draws(lik, size, rng):
    """(size, L-1) cut points from the likelihood's prior (numpy)."""
    if lik.fixed_cuts() is not None:
        return np.broadcast_to(
            np.asarray(lik.fixed_cuts(), np.float64), (size, len(lik.fixed_cuts()))
        ).copy()
    u = rng.normal(size=(size, lik.num_levels - 1)) * lik.cut_scale
    return np.cumsum(np.concatenate([u[:, :1], np.exp(u[:, 1:])], axis=1), axis=1)


def joint_draws(prior, lik, biases, size, rng):
    prior_state, M, N = _prior_draws(prior, size, rng)
    var, b, c = bias_draws(biases, size, rng)
    cuts = _cut_draws(lik, size, rng)
    theta = np.sum(M[:, ROWS] * N[:, COLS], axis=-1) + b[:, ROWS] + c[:, COLS]
    z = theta + rng.normal(size=theta.shape)
    Y = np.sum(
        z[:, :, None] > cuts[:, None, :], axis=-1
    )  # level index: number of cut points below z
    return dict(prior_state=prior_state, M=M, N=N, b=b, c=c, var=var, cuts=cuts, z=z, Y=Y)


def functions_of(prior_state, M, N, b, c, var, cuts, z, Y, *, L, learned, bias, xp=jnp):
    """Test functions of one joint draw; ``z`` in any order (only its sums enter),
    ``Y`` the level indices in the order of ROWS/COLS."""
    f = []
    for name, x in sorted(prior_state.items()):
        if name.startswith("Lambda"):
            f += [x[0, 0], x[1, 1], x[0, 1]]
        elif name.startswith("mu"):
            f += [x[0], x[0] ** 2]
        else:
            f += [xp.log(x[0]) + xp.log(x[1]), x[0] + x[1]]
    theta_e = xp.sum(M[E_ROWS] * N[E_COLS], axis=-1) + b[E_ROWS] + c[E_COLS]
    theta = xp.sum(M[ROWS] * N[COLS], axis=-1) + b[ROWS] + c[COLS]
    f += list(theta_e) + list(theta_e**2)
    f += [xp.sum(M**2), xp.sum(N**2), xp.sum(z**2), xp.sum(Y * theta)]
    f += [xp.sum(Y == lv) for lv in range(L - 1)]
    if learned:
        f += list(cuts) + list(cuts**2) + [xp.log(cuts[1] - cuts[0])]
    if bias:
        f += [b[0], b[0] ** 2, xp.sum(c**2), xp.log(var[0]), xp.log(var[1])]
    return jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in f])


def _functions(lik, biases):
    return functools.partial(
        functions_of, L=lik.num_levels, learned=lik.fixed_cuts() is None, bias=biases is not None
    )


def marginal_conditional(prior, lik, biases, size, seed):
    d = joint_draws(prior, lik, biases, size, np.random.default_rng(seed))
    fn = _functions(lik, biases)
    return np.asarray(jax.vmap(lambda dd: fn(**dd))(jax.tree.map(jnp.asarray, d)))


# --------------------------------------------------------------------------- Gibbs chains
def _chains(problem, row_order, keys, state, Y, *, prior, num_steps, fn):
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        prob = dataclasses.replace(problem, levels=Y[row_order].astype(jnp.int32))
        state = gibbs.sweep(state, prob, prior)
        M, N, b, c = state.M[0], state.N[0], state.row_bias[0], state.col_bias[0]
        cuts = gibbs.latent_cuts(state, prob)[0]
        ps = jax.tree.map(lambda x: x[0], state.prior_state)
        f = fn(ps, M, N, b, c, state.bias_var[0], cuts, state.lik_state["z"][0], Y)
        theta = jnp.sum(M[rows] * N[cols], axis=-1) + b[rows] + c[cols]
        z = theta + jax.random.normal(k_y, theta.shape, theta.dtype)
        Y = jnp.sum(z[:, None] > cuts[None, :], axis=-1)
        return (state, Y, key), f

    return run_chains(one_step, (state, Y, keys), num_steps)


def successive_conditional(prior, lik, biases, *, num_chains, num_steps, seed):
    d = joint_draws(prior, lik, biases, num_chains, np.random.default_rng(seed + 1))
    template = bmc.RatingData(ROWS, COLS, np.asarray(lik.level_values)[d["Y"][0]], (M1, M2))
    problem = gibbs.build_problem(template, 1.0, dtype=jnp.float64, likelihood=lik, biases=biases)
    row_order = jnp.asarray(template.row_view.order)
    learned = lik.fixed_cuts() is None

    def start(key, prior_state, M, N, b, c, var, cuts, z):
        st = gibbs.init(
            key[None],
            problem,
            prior,
            K,
            prior_state=jax.tree.map(lambda x: x[None], prior_state),
            M=M[None],
            N=N[None],
        )
        lik_state = {"z": z[row_order][None]}
        if learned:
            lik_state["cuts"] = cuts[None]
        return st._replace(
            row_bias=b[None], col_bias=c[None], bias_var=var[None], lik_state=lik_state
        )

    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(
        keys0,
        *(
            jax.tree.map(jnp.asarray, d[k])
            for k in ("prior_state", "M", "N", "b", "c", "var", "cuts", "z")
        ),
    )
    keys = jax.random.split(jax.random.key(seed), num_chains)
    out = _chains(
        problem,
        row_order,
        keys,
        state,
        jnp.asarray(d["Y"]),
        prior=prior,
        num_steps=num_steps,
        fn=_functions(lik, biases),
    )
    return np.asarray(out)


def geweke_z(prior, lik, biases, *, num_chains=100, num_steps=200, num_marginal=40_000, seed=0):
    succ = successive_conditional(
        prior, lik, biases, num_chains=num_chains, num_steps=num_steps, seed=seed
    )
    marg = marginal_conditional(prior, lik, biases, num_marginal, seed + 2)
    return z_scores(succ, marg)


# --------------------------------------------------------------------------- tests
LIKELIHOODS = {"probit": PROBIT, "ordered": ORDERED}
PRIORS = {"inverse-gamma": IG, "normal-wishart": NW}
DEFAULT = ("ordered", "inverse-gamma", True)


def _grid():
    for lik in LIKELIHOODS:
        for prior in PRIORS:
            for bias in (False, True):
                if (lik, prior) == ("probit", "normal-wishart") and bias:
                    continue
                key = (lik, prior, bias)
                yield pytest.param(
                    *key,
                    id=f"{lik}-{prior}-{'bias' if bias else 'no-bias'}",
                    marks=() if key == DEFAULT else pytest.mark.slow,
                )


@pytest.mark.parametrize("lik, prior, bias", list(_grid()))
def test_geweke_latent_block(lik, prior, bias):
    # the slow cells run 400 chains: the squared quantities (sum M^2, sum N^2, theta^2,
    # sum z^2) are heavy-tailed and right-skewed, so with 100 chains the z-score of their
    # chain means is skewed too: 100 x 200 steps gave z = -5.1 for sum N^2 (ordered,
    # inverse-gamma, no biases, seed 0) and 100 x 600 gave -4.1 for a theta^2 (ordered,
    # Normal-Wishart, biases), where 400 x 800 and 400 x 1200 steps give max |z| 2.1 and 1.6
    # over all functions: an artefact of too few chains, not a bias
    chains, steps = (100, 200) if (lik, prior, bias) == DEFAULT else (400, 300)
    z, z_crit = geweke_z(
        PRIORS[prior],
        LIKELIHOODS[lik],
        BIASES if bias else None,
        num_chains=chains,
        num_steps=steps,
    )
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


def _wrong_level_truncation(self, cuts, level, dtype):
    """The latent block's interval of level ``L - 1 - y`` instead of ``y`` (probit: the
    wrong side of the threshold)."""
    inf = jnp.full((1,), jnp.inf, dtype)
    edges = jnp.concatenate([-inf, cuts.astype(dtype), inf])
    wrong = self.num_levels - 1 - level
    return edges[wrong], edges[wrong + 1]


@pytest.mark.parametrize("lik", ["probit", pytest.param("ordered", marks=pytest.mark.slow)])
def test_geweke_detects_wrong_truncation(lik, monkeypatch):
    monkeypatch.setattr(probit_mod.LatentLikelihood, "latent_interval", _wrong_level_truncation)
    # other step counts than above: a fresh trace picks up the patch
    z, z_crit = geweke_z(
        IG, LIKELIHOODS[lik], None, num_chains=60, num_steps=101, num_marginal=20_000
    )
    assert np.max(np.abs(z)) > 2 * z_crit, (
        f"wrong truncation not detected: max |z| = {np.max(np.abs(z)):.2f}"
    )


@pytest.mark.slow
def test_geweke_detects_cut_prior_without_jacobian(monkeypatch):
    def no_jacobian(self, cuts):
        gaps = jnp.diff(cuts)
        u = jnp.concatenate([cuts[:1], jnp.log(gaps)])
        return jnp.sum(-0.5 * (u / self.cut_scale) ** 2)

    monkeypatch.setattr(OrderedProbit, "cut_log_prior", no_jacobian)
    z, z_crit = geweke_z(IG, ORDERED, None, num_chains=100, num_steps=203)
    assert np.max(np.abs(z)) > 2 * z_crit, (
        f"missing Jacobian not detected: max |z| = {np.max(np.abs(z)):.2f}"
    )
