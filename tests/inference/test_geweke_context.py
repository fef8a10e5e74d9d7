"""Geweke (2004) joint-distribution tests of the context offset's Gibbs block
(:class:`bmczoo.offsets.Context`) within the sweep: the weights of each feature group, the
groups' precisions, and the factor, bias and ``tau`` blocks fitting the ratings minus the
offset.

The tiny problem of ``test_geweke.py`` (6 x 5, 15 observed entries, row 5 empty, K = 2)
with a per-rating table of two groups: ``bin`` (one-hot, three bins; one rating has none)
and ``dev`` (one real number per rating, in the column of the rating's row: a drift
``alpha_u dev_u(t)``; row 5's feature is never observed, so its weight is a prior draw).
The joint of ``(prior variables, M, N, biases, tau, w, lam, Y)`` with
``lam_g ~ Gamma(a, b)``, ``w_f ~ N(0, 1/lam_g)`` and ``Y_k ~ N(theta_k + x_k . w, 1/tau)``
(``1/(tau v_k)`` for Student-t weights ``v``) is simulated directly with numpy
(marginal-conditional) and by independent chains that alternate one
:func:`bmczoo.inference.gibbs.sweep` with a fresh ``Y`` (successive-conditional), each
chain started from an exact joint draw.  ``a = 6`` keeps the weights' test functions'
variances finite.

Members: the inverse-gamma prior with biases and a learned noise (default suite); the
Student-t likelihood with the discrete prior and its fused column moves, and the ordered
probit (latent ``z`` and learned cut points given ``theta + x . w``) with the inverse-gamma
prior and biases (slow).  Power: a weight block that sees half of each rating's precision
(default suite; with the ordered probit, slow), a precision block with twice the prior's
rate (slow) and factor blocks that ignore the offset (default suite) are detected
(``max |z| > 2 z_crit``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.inference import gibbs
from bmczoo.inference.settings import SweepOptions

from ._geweke import run_chains, with_ratings, z_scores
from .test_geweke import COLS, K, M1, M2, N_OBS, PRIORS, ROWS, _prior_gamma
from .test_geweke_components import IG, LEARNED, bias_draws, functions_of

pytestmark = pytest.mark.usefixtures("x64")

BIASES = bmc.offsets.Biases(a=6.0, b=5.0)
CONTEXT = bmc.offsets.Context(a=6.0, b=5.0)
STUDENT = bmc.likelihoods.StudentT(nu=5.0, a=6.0, b=5.0)


def _context() -> Features:
    """The per-rating table (entry order): ``bin=0..2`` (rating 0 has none) and
    ``dev=0..5`` (rating k's row, value in [-1, 1])."""
    k = np.arange(N_OBS)
    dense = np.zeros((N_OBS, 3 + M1))
    has_bin = k > 0
    dense[k[has_bin], k[has_bin] % 3] = 1.0
    dense[k, 3 + ROWS] = ((k * 7) % 5 - 2) / 2.0 + 0.25
    names = [f"bin={i}" for i in range(3)] + [f"dev={i}" for i in range(M1)]
    return Features.from_dense(dense, names)


X = _context().to_dense()  # (n, F) in entry order
GROUP = np.array([0] * 3 + [1] * M1)


def joint_draws(prior, lik, biases, size, rng):
    """``size`` exact draws of the joint (numpy, leading axis ``size``)."""
    gamma = _prior_gamma(prior, size, rng)
    sd = np.sqrt(gamma)[:, None, :]
    M = rng.normal(size=(size, M1, K)) * sd
    N = rng.normal(size=(size, M2, K)) * sd
    tau = rng.gamma(lik.a, 1.0 / lik.b, size=size)
    var, b, c = bias_draws(biases, size, rng)
    lam = rng.gamma(CONTEXT.a, 1.0 / CONTEXT.b, size=(size, 2))
    w = rng.normal(size=(size, X.shape[1])) / np.sqrt(lam[:, GROUP])
    v = np.ones((size, N_OBS))
    if lik.weighted:
        v = rng.gamma(0.5 * lik.nu, 2.0 / lik.nu, size=(size, N_OBS))
    theta = np.sum(M[:, ROWS] * N[:, COLS], axis=-1) + b[:, ROWS] + c[:, COLS] + w @ X.T
    Y = theta + rng.normal(size=theta.shape) / np.sqrt(tau[:, None] * v)
    return dict(gamma=gamma, M=M, N=N, tau=tau, b=b, c=c, var=var, w=w, lam=lam, v=v, Y=Y)


def functions_c(gamma, M, N, tau, b, c, var, w, lam, v, Y, xp=np):
    """The components' test functions plus the offset's (weights of both groups, the
    precisions, and the squared error of the full mean)."""
    f = functions_of({"gamma": gamma}, M, N, tau, b, c, var, Y, xp=xp)
    s = xp.asarray(X) @ w
    theta = xp.sum(M[ROWS] * N[COLS], axis=-1) + b[ROWS] + c[COLS] + s
    more = [w[0], w[1] ** 2, w[3], w[3 + M1 - 1], xp.sum(w * w), s[1], s[1] ** 2]
    more += [lam[0], lam[1], xp.log(lam[0]), xp.log(lam[1]), xp.sum(v * (Y - theta) ** 2)]
    return jnp.concatenate([f, jnp.stack([jnp.asarray(x, jnp.float64) for x in more])])


def marginal_conditional(prior, lik, biases, size, seed):
    d = joint_draws(prior, lik, biases, size, np.random.default_rng(seed))
    return np.asarray(jax.vmap(lambda x: functions_c(**x, xp=jnp))(jax.tree.map(jnp.asarray, d)))


def successive_conditional(prior, lik, biases, offset, *, options, num_chains, num_steps, seed):
    template = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2), context=_context())
    problem = gibbs.build_problem(
        template,
        1.0,
        dtype=jnp.float64,
        likelihood=lik,
        biases=biases,
        options=options,
        offsets=(offset,),
    )
    row_order = jnp.asarray(template.row_view.order)
    col_order = jnp.asarray(template.col_view.order)
    d = joint_draws(prior, lik, biases, num_chains, np.random.default_rng(seed + 1))

    def start(key, gamma, M, N, tau, b, c, var, w, lam, v):
        st = gibbs.init(key[None], problem, prior, K, prior_state={"gamma": gamma[None]})
        lik_state = {"w": v[row_order][None]} if lik.weighted else {}
        return st._replace(
            M=M[None],
            N=N[None],
            tau=tau[None],
            row_bias=b[None],
            col_bias=c[None],
            bias_var=var[None],
            lik_state=lik_state,
            offset_state={"context": {"w": w[None], "lam": lam[None]}},
        )

    names = ("gamma", "M", "N", "tau", "b", "c", "var", "w", "lam", "v")
    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(keys0, *(jnp.asarray(d[k]) for k in names))
    rows, cols, x = jnp.asarray(ROWS), jnp.asarray(COLS), jnp.asarray(X)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        state = gibbs.sweep(state, with_ratings(problem, Y, row_order, col_order), prior)
        M, N, b, c = state.M[0], state.N[0], state.row_bias[0], state.col_bias[0]
        ctx = state.offset_state["context"]
        w, lam = ctx["w"][0], ctx["lam"][0]
        v = jnp.ones(N_OBS)
        if lik.weighted:  # entry order
            v = jnp.zeros(N_OBS).at[row_order].set(state.lik_state["w"][0])
        g = state.prior_state["gamma"][0]
        f = functions_c(g, M, N, state.tau[0], b, c, state.bias_var[0], w, lam, v, Y, xp=jnp)
        theta = jnp.sum(M[rows] * N[cols], axis=-1) + b[rows] + c[cols] + x @ w
        noise = jax.random.normal(k_y, theta.shape, theta.dtype)
        return (state, theta + noise / jnp.sqrt(state.tau[0] * v), key), f

    keys = jax.random.split(jax.random.key(seed), num_chains)
    return run_chains(one_step, (state, jnp.asarray(d["Y"]), keys), num_steps)


def geweke_z(prior, lik, biases, *, offset=CONTEXT, options=None, seed=0):
    options = SweepOptions(column_moves=False) if options is None else options
    succ = successive_conditional(
        prior, lik, biases, offset, options=options, num_chains=100, num_steps=200, seed=seed
    )
    return z_scores(succ, marginal_conditional(prior, lik, biases, 40_000, seed + 2))


@dataclasses.dataclass(frozen=True)
class HalfPrecision(bmc.offsets.Context):
    """A weight block that sees half of each rating's precision."""

    def gibbs_update(self, key, state, arrays, target, precision):
        return super().gibbs_update(key, state, arrays, target, 0.5 * precision)


@dataclasses.dataclass(frozen=True)
class DoubledRate(bmc.offsets.Context):
    """A precision block with twice the prior's rate."""

    def gibbs_update(self, key, state, arrays, target, precision):
        wrong = bmc.offsets.Context(a=self.a, b=2.0 * self.b)
        return wrong.gibbs_update(key, state, arrays, target, precision)


MEMBERS = {
    "inverse-gamma+biases+learned": (IG, LEARNED, BIASES, None),
    "discrete+student-t+fused-moves": (
        PRIORS["discrete"],
        STUDENT,
        None,
        SweepOptions(column_moves=True),
    ),
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=() if n.startswith("inverse") else pytest.mark.slow) for n in MEMBERS],
)
def test_geweke_context(name):
    prior, lik, biases, options = MEMBERS[name]
    z, z_crit = geweke_z(prior, lik, biases, options=options)
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


@pytest.mark.parametrize(
    "wrong",
    [HalfPrecision, pytest.param(DoubledRate, marks=pytest.mark.slow)],
    ids=["half-precision", "doubled-rate"],
)
def test_geweke_context_detects_wrong_blocks(wrong):
    z, z_crit = geweke_z(IG, LEARNED, BIASES, offset=wrong(a=6.0, b=5.0))
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"


def test_geweke_context_detects_factor_blocks_without_the_offset(monkeypatch):
    """Factor, bias and ``tau`` blocks that fit the ratings themselves (the sweep's view
    without the offset; the offset's own block unchanged) are detected."""
    from bmczoo.inference.gibbs import latent

    monkeypatch.setattr(latent, "offsets_shift", lambda problem, state, where="ratings": 0.0)
    z, z_crit = geweke_z(IG, LEARNED, BIASES)
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"


# --------------------------------------------------------------------------- ordered probit
def _probit_joint(prior, lik, biases, size, rng):
    """Exact joint draws with the ordered probit: ``z = theta + x . w + N(0, 1)``, ``Y`` its
    level (the construction of ``test_geweke_probit.py``)."""
    from .test_geweke_components import _prior_draws
    from .test_geweke_probit import _cut_draws

    prior_state, M, N = _prior_draws(prior, size, rng)
    var, b, c = bias_draws(biases, size, rng)
    cuts = _cut_draws(lik, size, rng)
    lam = rng.gamma(CONTEXT.a, 1.0 / CONTEXT.b, size=(size, 2))
    w = rng.normal(size=(size, X.shape[1])) / np.sqrt(lam[:, GROUP])
    theta = np.sum(M[:, ROWS] * N[:, COLS], axis=-1) + b[:, ROWS] + c[:, COLS] + w @ X.T
    z = theta + rng.normal(size=theta.shape)
    Y = np.sum(z[:, :, None] > cuts[:, None, :], axis=-1)
    return dict(
        prior_state=prior_state, M=M, N=N, b=b, c=c, var=var, cuts=cuts, w=w, lam=lam, z=z, Y=Y
    )


def _probit_functions(lik, biases):
    from .test_geweke_probit import _functions

    base = _functions(lik, biases)

    def fn(prior_state, M, N, b, c, var, cuts, w, lam, z, Y):
        f = base(prior_state, M, N, b, c, var, cuts, z, Y)
        s = jnp.asarray(X) @ w
        more = [w[0], w[3], jnp.sum(w * w), s[1], s[1] ** 2, lam[0], lam[1], jnp.log(lam[1])]
        return jnp.concatenate([f, jnp.stack([jnp.asarray(x, jnp.float64) for x in more])])

    return fn


def probit_geweke_z(prior, lik, biases, *, offset=CONTEXT, num_chains=100, num_steps=200, seed=0):
    fn = _probit_functions(lik, biases)
    d = _probit_joint(prior, lik, biases, 40_000, np.random.default_rng(seed + 2))
    marg = np.asarray(jax.vmap(lambda x: fn(**x))(jax.tree.map(jnp.asarray, d)))
    d = _probit_joint(prior, lik, biases, num_chains, np.random.default_rng(seed + 1))
    values = np.asarray(lik.level_values)[d["Y"][0]]
    template = bmc.RatingData(ROWS, COLS, values, (M1, M2), context=_context())
    problem = gibbs.build_problem(
        template, 1.0, dtype=jnp.float64, likelihood=lik, biases=biases, offsets=(offset,)
    )
    row_order = jnp.asarray(template.row_view.order)

    def start(key, prior_state, M, N, b, c, var, cuts, w, lam, z):
        st = gibbs.init(
            key[None], problem, prior, K, prior_state=jax.tree.map(lambda x: x[None], prior_state)
        )
        return st._replace(
            M=M[None],
            N=N[None],
            row_bias=b[None],
            col_bias=c[None],
            bias_var=var[None],
            lik_state={"z": z[row_order][None], "cuts": cuts[None]},
            offset_state={"context": {"w": w[None], "lam": lam[None]}},
        )

    names = ("prior_state", "M", "N", "b", "c", "var", "cuts", "w", "lam", "z")
    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(keys0, *(jax.tree.map(jnp.asarray, d[k]) for k in names))
    rows, cols, x = jnp.asarray(ROWS), jnp.asarray(COLS), jnp.asarray(X)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        prob = dataclasses.replace(problem, levels=Y[row_order].astype(jnp.int32))
        state = gibbs.sweep(state, prob, prior)
        M, N, b, c = state.M[0], state.N[0], state.row_bias[0], state.col_bias[0]
        cuts = gibbs.latent_cuts(state, prob)[0]
        ctx = state.offset_state["context"]
        w, lam = ctx["w"][0], ctx["lam"][0]
        ps = jax.tree.map(lambda v: v[0], state.prior_state)
        f = fn(ps, M, N, b, c, state.bias_var[0], cuts, w, lam, state.lik_state["z"][0], Y)
        theta = jnp.sum(M[rows] * N[cols], axis=-1) + b[rows] + c[cols] + x @ w
        z = theta + jax.random.normal(k_y, theta.shape, theta.dtype)
        return (state, jnp.sum(z[:, None] > cuts[None, :], axis=-1), key), f

    keys = jax.random.split(jax.random.key(seed), num_chains)
    succ = run_chains(one_step, (state, jnp.asarray(d["Y"]), keys), num_steps)
    return z_scores(succ, marg)


@pytest.mark.slow
def test_geweke_context_ordered_probit():
    """The ordered probit's latent ``z`` and cut points given ``theta + x . w``, the
    offset's block given ``z``."""
    from .test_geweke_probit import ORDERED

    z, z_crit = probit_geweke_z(IG, ORDERED, BIASES)
    assert np.max(np.abs(z)) < z_crit, f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}"


@pytest.mark.slow
def test_geweke_context_ordered_probit_detects_half_precision():
    from .test_geweke_probit import ORDERED

    z, z_crit = probit_geweke_z(IG, ORDERED, BIASES, offset=HalfPrecision(a=6.0, b=5.0))
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"
