"""Geweke (2004) joint-distribution tests of the Student-t likelihood's Gibbs blocks: the
per-rating weights ``w``, the weighted factor, bias and column-move sums, and ``tau``
given the weighted squared error.

The tiny problem of ``test_geweke.py`` (6 x 5, 15 observed entries, row 5 empty, K = 2).
The joint of ``(prior variables, M, N, biases, tau, w, Y)`` is simulated directly with
numpy (``w_k ~ Gamma(nu/2, nu/2)``, ``Y_k ~ N(theta_k, 1/(tau w_k))``: marginal-conditional)
and by independent chains that alternate one :func:`bmczoo.inference.gibbs.sweep` with a
fresh ``Y | theta, tau, w`` (successive-conditional), each chain started from an exact
joint draw.  ``nu = 5`` keeps the test functions' variances finite.

Members: the inverse-gamma prior with biases, with an integer ``nu`` (the weights drawn
as ``chi^2_(nu+1) / 2``) and a fractional one (the gamma sampler), and the discrete prior
with its column moves, fused (default suite) and at the sweep's end (slow).  Power: a weight block with
shape ``nu/2`` instead of ``(nu + 1)/2`` (default suite) and a ``tau`` block with 0.8 times
the weighted squared error (slow) are detected (``max |z| > 2 z_crit``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.settings import SweepOptions

from ._geweke import run_chains, with_ratings, z_scores
from .test_geweke import COLS, K, M1, M2, N_OBS, PRIORS, ROWS, _prior_gamma
from .test_geweke_components import IG, bias_draws, functions_of

pytestmark = pytest.mark.usefixtures("x64")

STUDENT = bmc.likelihoods.StudentT(nu=5.0, a=6.0, b=5.0)
BIASES = bmc.offsets.Biases(a=6.0, b=5.0)
DISCRETE = PRIORS["discrete"]


def joint_draws(prior, lik, biases, size, rng):
    """``size`` exact draws of the joint (numpy, leading axis ``size``)."""
    gamma = _prior_gamma(prior, size, rng)
    sd = np.sqrt(gamma)[:, None, :]
    M = rng.normal(size=(size, M1, K)) * sd
    N = rng.normal(size=(size, M2, K)) * sd
    tau = rng.gamma(lik.a, 1.0 / lik.b, size=size)
    var, b, c = bias_draws(biases, size, rng)
    w = rng.gamma(0.5 * lik.nu, 2.0 / lik.nu, size=(size, N_OBS))
    theta = np.sum(M[:, ROWS] * N[:, COLS], axis=-1) + b[:, ROWS] + c[:, COLS]
    Y = theta + rng.normal(size=theta.shape) / np.sqrt(tau[:, None] * w)
    return dict(gamma=gamma, M=M, N=N, tau=tau, b=b, c=c, var=var, w=w, Y=Y)


def functions_t(gamma, M, N, tau, b, c, var, w, Y, xp=np):
    """The components' test functions plus the weights' (two ratings' ``w``, ``log w`` and
    the weighted squared error)."""
    f = functions_of({"gamma": gamma}, M, N, tau, b, c, var, Y, xp=xp)
    theta = xp.sum(M[ROWS] * N[COLS], axis=-1) + b[ROWS] + c[COLS]
    more = [w[0], w[-1], xp.log(w[0]), xp.sum(w), xp.sum(w * (Y - theta) ** 2)]
    return jnp.concatenate([f, jnp.stack([jnp.asarray(v, jnp.float64) for v in more])])


def marginal_conditional(prior, lik, biases, size, seed):
    d = joint_draws(prior, lik, biases, size, np.random.default_rng(seed))
    return np.asarray(jax.vmap(lambda x: functions_t(**x, xp=jnp))(jax.tree.map(jnp.asarray, d)))


def successive_conditional(
    prior, lik, biases, *, sampler_lik, options, num_chains, num_steps, seed
):
    template = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2))
    problem = gibbs.build_problem(
        template, 1.0, dtype=jnp.float64, likelihood=sampler_lik, biases=biases, options=options
    )
    row_order = jnp.asarray(template.row_view.order)
    col_order = jnp.asarray(template.col_view.order)
    d = joint_draws(prior, lik, biases, num_chains, np.random.default_rng(seed + 1))

    def start(key, gamma, M, N, tau, b, c, var, w):
        st = gibbs.init(key[None], problem, prior, K, prior_state={"gamma": gamma[None]})
        return st._replace(
            M=M[None],
            N=N[None],
            tau=tau[None],
            row_bias=b[None],
            col_bias=c[None],
            bias_var=var[None],
            lik_state={"w": w[row_order][None]},  # the state holds w in row order
        )

    names = ("gamma", "M", "N", "tau", "b", "c", "var", "w")
    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(keys0, *(jnp.asarray(d[k]) for k in names))
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        state = gibbs.sweep(state, with_ratings(problem, Y, row_order, col_order), prior)
        M, N, b, c = state.M[0], state.N[0], state.row_bias[0], state.col_bias[0]
        w = jnp.zeros(N_OBS).at[row_order].set(state.lik_state["w"][0])  # entry order
        g = state.prior_state["gamma"][0]
        f = functions_t(g, M, N, state.tau[0], b, c, state.bias_var[0], w, Y, xp=jnp)
        theta = jnp.sum(M[rows] * N[cols], axis=-1) + b[rows] + c[cols]
        noise = jax.random.normal(k_y, theta.shape, theta.dtype)
        return (state, theta + noise / jnp.sqrt(state.tau[0] * w), key), f

    keys = jax.random.split(jax.random.key(seed), num_chains)
    return run_chains(one_step, (state, jnp.asarray(d["Y"]), keys), num_steps)


def geweke_z(prior, biases, *, lik=STUDENT, sampler_lik=None, options=None, seed=0):
    options = SweepOptions(column_moves=False) if options is None else options
    succ = successive_conditional(
        prior,
        lik,
        biases,
        sampler_lik=lik if sampler_lik is None else sampler_lik,
        options=options,
        num_chains=100,
        num_steps=200,
        seed=seed,
    )
    return z_scores(succ, marginal_conditional(prior, lik, biases, 40_000, seed + 2))


@dataclasses.dataclass(frozen=True)
class WeightShapeHalfNu(bmc.likelihoods.StudentT):
    """A weight block with shape ``nu/2`` instead of ``(nu + 1)/2``."""

    name = ""

    def sample_weights(self, key, resid, tau):
        g = jax.vmap(lambda k: jax.random.gamma(k, 0.5 * self.nu, resid.shape[1:], resid.dtype))
        return g(key) / (0.5 * (self.nu + tau[:, None] * resid * resid))


@dataclasses.dataclass(frozen=True)
class TauScaledSSE(bmc.likelihoods.StudentT):
    """A ``tau`` block whose rate has ``0.8`` times the weighted squared error."""

    name = ""

    def sample_tau(self, key, sse, n):
        return super().sample_tau(key, 0.8 * sse, n)


MEMBERS = {
    "inverse-gamma+biases": (IG, BIASES, None),
    # a fractional nu: the weights from the gamma sampler (an integer nu: chi^2 / 2)
    "inverse-gamma+biases+nu-4.5": (IG, BIASES, None),
    "discrete+fused-moves": (DISCRETE, None, SweepOptions(column_moves=True)),
    "discrete+moves-at-end": (
        DISCRETE,
        None,
        SweepOptions(column_moves=True, fuse_column_moves=False, column_moves_every=1),
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=() if n == "inverse-gamma+biases" else pytest.mark.slow)
        for n in MEMBERS
    ],
)
def test_geweke_student_t(name):
    prior, biases, options = MEMBERS[name]
    lik = dataclasses.replace(STUDENT, nu=4.5) if name.endswith("nu-4.5") else STUDENT
    z, z_crit = geweke_z(prior, biases, lik=lik, options=options)
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


@pytest.mark.parametrize(
    "wrong",
    [WeightShapeHalfNu, pytest.param(TauScaledSSE, marks=pytest.mark.slow)],
    ids=["weight-shape", "tau-scaled-sse"],
)
def test_geweke_student_t_detects_wrong_blocks(wrong):
    z, z_crit = geweke_z(IG, BIASES, sampler_lik=wrong(nu=5.0, a=6.0, b=5.0))
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"


def test_geweke_student_t_detects_unweighted_factor_blocks(monkeypatch):
    """Factor and bias blocks that see unit weights (the sweep's view of the ratings
    without ``w``; ``tau`` still given the weighted squared error) are detected."""
    from bmczoo.inference.gibbs import sampler
    from bmczoo.inference.gibbs.rows import RatingsView

    monkeypatch.setattr(sampler, "ratings_view", lambda *a: (RatingsView(), RatingsView()))
    z, z_crit = geweke_z(IG, BIASES)
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"
