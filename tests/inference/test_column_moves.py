"""The Gibbs column moves (docs/algorithms.md, "Column moves";
:func:`bmczoo.inference.gibbs.column_moves`).

* exactness: the marginal likelihood of a column with ``M_h`` integrated out
  (:func:`~bmczoo.inference.gibbs.column_log_marginal`, per-row closed form) equals the
  brute-force multivariate-normal log density ``log N(r; 0, gamma F F^T + I/tau) -
  log N(r; 0, I/tau)`` in float64 on a tiny problem;
* Geweke (2004) joint-distribution tests on the tiny problem of ``test_geweke.py``: the
  chains alternate the column moves alone (or a full sweep with them) with a fresh
  ``Y | theta``; they must keep the joint of ``(gamma, M, N, Y)`` invariant;
  (the discrete flip, the log-scale walk of the inverse-gamma and gamma priors);
* power: the same moves without the Jacobian of the rescaling are detected;
* settings: ``column_moves=`` through ``bmc.fit`` and its errors.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs import columns as cm
from bmczoo.inference.gibbs.rows import Side, _pattern_product
from bmczoo.inference.settings import SweepOptions

from . import test_geweke as gw
from ._geweke import run_chains, with_ratings, z_scores

pytestmark = pytest.mark.usefixtures("x64")

DISCRETE = gw.PRIORS["discrete"]  # Discrete(C=2, p=0.4, eps=0.3), K = 2, 6 x 5, 15 ratings

#: a short ``bmc.fit`` of ``tiny_ratings`` (the settings tests of the moves, their
#: schedule, the annealed switch and the moves inside the sweep)
TINY_RUN = dict(
    K=2,
    prior=bmc.priors.Discrete(1.0, 0.3, 0.05),
    num_warmup=3,
    num_samples=6,
    thinning=1,
    num_chains=2,
    progress_bar=False,
    seed=3,
)


# --------------------------------------------------------------------------- exactness
def test_column_log_marginal_matches_brute_force():
    rng = np.random.default_rng(3)
    m, m_other, n = 4, 5, 11
    keys = np.sort(rng.choice(m * m_other, size=n, replace=False))
    rows, cols = np.divmod(keys, m_other)  # row 3 may be empty; fine either way
    r = rng.normal(size=n) * 1.5
    for gamma, tau in ((0.7, 1.3), (3.0, 0.4), (0.02, 5.0)):
        f = rng.normal(size=m_other)
        F = np.zeros((n, m))
        F[np.arange(n), rows] = f[cols]
        cov = gamma * F @ F.T + np.eye(n) / tau
        brute = stats.multivariate_normal(np.zeros(n), cov).logpdf(r) - stats.multivariate_normal(
            np.zeros(n), np.eye(n) / tau
        ).logpdf(r)
        A = np.bincount(rows, weights=f[cols] ** 2, minlength=m)
        B = np.bincount(rows, weights=r * f[cols], minlength=m)
        got = gibbs.column_log_marginal(
            jnp.asarray([gamma]), jnp.asarray(A)[None], jnp.asarray(B)[None], jnp.asarray([tau])
        )
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(float(got[0]), brute, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("latent", [False, True])
@pytest.mark.parametrize(
    "prior",
    [bmc.priors.InverseGamma(1.0, 0.5), bmc.priors.Discrete(2.0, 0.4, 0.3)],
    ids=["inverse-gamma", "discrete"],
)
def test_gram_moves_equal_the_per_rating_reference(prior, latent, use_bias):
    """The moves computed from per-row Gram matrices (``_column_side``: O(m K^2) per
    column) equal the per-rating formulation they replaced (``_column_moves_reference``:
    a residual over every rating and segment sums), with the same random numbers, in
    float64: the same accept/reject decisions and gamma, factors within rounding.  64
    random chains (own column, biases, per-chain values for a latent likelihood), so that
    accepted and rejected moves of both kinds occur (checked)."""
    from . import _column_moves_reference as ref

    rng = np.random.default_rng(7)
    m1, m2, n, K, C = 7, 9, 30, 4, 64
    keys = np.sort(rng.choice(m1 * m2, n, replace=False))
    r, c = np.divmod(keys, m2)
    r[:2], c[:2] = 0, np.arange(2)  # some rows and columns of the pattern stay empty (row 6 maybe)
    data = bmc.RatingData(
        *np.unique(np.stack([r, c]), axis=1), rng.normal(size=len(np.unique(keys))), (m1, m2)
    )
    problem = gibbs.build_problem(data, 1.0, dtype=jnp.float64)
    M, N = jnp.asarray(rng.normal(size=(C, m1, K))), jnp.asarray(rng.normal(size=(C, m2, K)))
    if isinstance(prior, bmc.priors.Discrete):
        gamma = jnp.asarray(np.where(rng.random((C, K)) < 0.5, prior.C, prior.eps))
    else:
        gamma = jnp.asarray(rng.gamma(2.0, size=(C, K)))
    b, cb = jnp.asarray(rng.normal(size=(C, m1))), jnp.asarray(rng.normal(size=(C, m2)))
    tb = jnp.asarray(rng.uniform(0.5, 2.0, size=C))
    vals = jnp.asarray(rng.normal(size=(C, data.n))) if latent else problem.rows.values[None]
    ks = jax.random.split(jax.random.key(3), C)
    draws = cm._move_draws(ks, K, m1, jnp.float64, isinstance(prior, bmc.priors.Discrete))
    own, T, g = cm._column_side(
        Side(problem.rows, M, N, b, cb, vals if latent else None),
        gamma,
        tb,
        draws,
        cm.ColumnMove(prior, m1 + m2, m2, use_bias),
    )
    other = jnp.einsum("cjk,ckl->cjl", N, T)
    own_ref, other_ref, g_ref = ref.column_side(
        problem.rows, M, N, b, cb, gamma, tb, ks, prior, m1 + m2, use_bias, vals
    )
    np.testing.assert_array_equal(np.asarray(g), np.asarray(g_ref))
    tol = 1e3 * np.finfo(np.float64).eps  # sums of a few dozen O(1) terms, in another order
    np.testing.assert_allclose(np.asarray(own), np.asarray(own_ref), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(other), np.asarray(other_ref), rtol=tol, atol=tol)
    moved = np.asarray(g != gamma)
    assert moved.sum() > 0 and (~moved).sum() > 0
    if isinstance(prior, bmc.priors.Discrete):  # switched on and switched off both accepted
        assert np.any(moved & (np.asarray(gamma) == prior.C)) and np.any(
            moved & (np.asarray(gamma) == prior.eps)
        )


def test_reflected_flip_leaves_the_columns_outside_its_block_alone():
    """The reflection of the discrete prior's flip acts within the slab plus column ``h``
    only: every other column (a spike column: another scale) is left bit for bit, also
    where the slab is a single column and ``w = e_h`` up to rounding (found by the
    reference comparison above: a Householder map built from a rounding-noise ``u``
    reflected along a random direction and mixed spike and slab columns)."""
    from bmczoo.linalg import outer, pack_upper, unpack_upper

    rng = np.random.default_rng(11)
    m1, m2, K, C = 6, 8, 5, 128
    keys = np.sort(rng.choice(m1 * m2, 30, replace=False))
    data = bmc.RatingData(*np.divmod(keys, m2), rng.normal(size=30), (m1, m2))
    problem = gibbs.build_problem(data, 1.0, dtype=jnp.float64)
    prior = bmc.priors.Discrete(2.0, 0.4, 0.3)
    own, other = jnp.asarray(rng.normal(size=(C, m1, K))), jnp.asarray(rng.normal(size=(C, m2, K)))
    slab = rng.random((C, K)) < 0.25  # often a single slab column or none
    gamma = jnp.asarray(np.where(slab, prior.C, prior.eps))
    G0 = unpack_upper(
        _pattern_product(problem.rows, problem.rows.ones, pack_upper(outer(other))), K
    )
    Y = _pattern_product(problem.rows, problem.rows.values, other)
    S0 = jnp.einsum("cjk,cjl->ckl", other, other)
    sums = functools.partial(cm._column_sums, G0, Y, S0)
    T0 = jnp.broadcast_to(jnp.eye(K), (C, K, K))
    k = jax.random.split(jax.random.key(0), 5)
    for h in range(K):
        new_own, T, _ = cm._reflected_flip(
            h,
            (own, T0, gamma),
            sums,
            S0,
            cm.ColumnMove(prior, m1 + m2, m2, False),
            jnp.ones(C),
            cm.FlipDraws(
                jax.random.normal(k[0], (C, m1)),
                jax.random.normal(k[1], (C, m1)),
                jax.random.normal(k[2], (C, K)),
                jax.random.normal(k[3], (C,)),
                jnp.log(jax.random.uniform(k[4], (C,))),
            ),
        )
        outside = ~(slab | (np.arange(K) == h))
        new_other = np.asarray(jnp.einsum("cjk,ckl->cjl", other, T))
        for c in range(C):
            np.testing.assert_array_equal(
                np.asarray(new_own)[c][:, outside[c]], np.asarray(own)[c][:, outside[c]]
            )
            np.testing.assert_array_equal(
                new_other[c][:, outside[c]], np.asarray(other)[c][:, outside[c]]
            )


# --------------------------------------------------------------------------- Geweke
def _chains(problem, row_order, col_order, keys, gamma, M, N, Y, *, prior, num_steps, with_sweep):
    rows, cols = jnp.asarray(gw.ROWS), jnp.asarray(gw.COLS)

    def one_step(carry, _):
        key, gamma, M, N, Y = carry
        key, k_move, k_y = jax.random.split(key, 3)
        prob = with_ratings(problem, Y, row_order, col_order)
        state = gibbs.init(k_move[None], prob, prior, gw.K, gamma=gamma[None], M=M[None], N=N[None])
        if with_sweep:  # the sweep with the moves at its end (problem.options.column_moves is True)
            state = gibbs.sweep(state, prob, prior)
        elif problem.options.anneal_steps:  # the annealed switch alone (test_annealed_switch.py)
            state = gibbs.annealed_switch(state, prob, prior, k_move[None])[0]
        else:  # the moves alone
            state = gibbs.column_moves(state, prob, prior, k_move[None])
        gamma, M, N = state.gamma[0], state.M[0], state.N[0]
        f = gw.geweke_functions(prior, gamma, M, N, Y, xp=jnp)
        theta = jnp.sum(M[rows] * N[cols], axis=-1)
        Y = theta + jax.random.normal(k_y, theta.shape, theta.dtype) / math.sqrt(gw.TAU)
        return (key, gamma, M, N, Y), f

    return run_chains(one_step, (keys, gamma, M, N, Y), num_steps)


def column_geweke(
    prior,
    *,
    num_chains,
    num_steps,
    num_marginal=50_000,
    seed=0,
    with_sweep=False,
    anneal_steps=0,
    fuse=False,
):
    """Geweke z-scores of the column moves (``anneal_steps > 0``: of the annealed switch
    instead, every sweep; ``fuse``: the moves inside the sweep, with ``with_sweep``):
    ``(z, z_crit, report)``."""
    template = bmc.RatingData(gw.ROWS, gw.COLS, np.zeros(gw.N_OBS), (gw.M1, gw.M2))
    problem = gibbs.build_problem(
        template,
        gw.TAU,
        dtype=jnp.float64,
        options=SweepOptions(
            column_moves=not anneal_steps,
            fuse_column_moves=fuse,
            anneal_steps=anneal_steps,
            anneal_every=1,
        ),
    )
    init = gw.joint_draws(prior, num_chains, seed + 1)
    keys = jax.random.split(jax.random.key(seed), num_chains)
    succ = np.asarray(
        _chains(
            problem,
            jnp.asarray(template.row_view.order),
            jnp.asarray(template.col_view.order),
            keys,
            *(jnp.asarray(x) for x in init),
            prior=prior,
            num_steps=num_steps,
            with_sweep=with_sweep,
        )
    )
    z, z_crit = z_scores(succ, gw.marginal_conditional(prior, num_marginal, seed + 2))
    names = gw._names(prior)
    report = "\n".join(f"  {n:>22s}: z = {v:+8.3f}" for n, v in zip(names, z))
    return z, z_crit, report


MOVING = [
    n for n in gw.PRIORS if n != "fixed"
]  # the fixed prior has no column move (measured: no gain)


# the discrete prior's flip in the default suite; the continuous priors' random walk: slow
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n == "discrete" else pytest.mark.slow) for n in MOVING]
)
def test_geweke_column_moves_alone(name):
    """The moves alone (no row sweep) keep the joint invariant: gamma and the column
    moved together, the integrated column redrawn exactly (discrete: the spike/slab flip;
    continuous priors: the log-scale random walk)."""
    z, z_crit, rep = column_geweke(gw.PRIORS[name], num_chains=100, num_steps=200)
    assert np.max(np.abs(z)) < z_crit, f"column moves are not invariant:\n{rep}"


@pytest.mark.parametrize(
    "name",
    [
        "discrete",
        pytest.param("inverse-gamma", marks=pytest.mark.slow),
        pytest.param("gamma", marks=pytest.mark.slow),
    ],
)
def test_geweke_sweep_with_column_moves(name):
    z, z_crit, rep = column_geweke(
        gw.PRIORS[name], num_chains=100, num_steps=150, seed=3, with_sweep=True
    )
    assert np.max(np.abs(z)) < z_crit, f"sweep + column moves are not invariant:\n{rep}"


@pytest.mark.parametrize(
    "name", ["discrete", pytest.param("inverse-gamma", marks=pytest.mark.slow)]
)
def test_geweke_detects_column_move_without_jacobian(monkeypatch, name):
    """Power check: the rescaling's Jacobian ``m log s`` left out (discrete: log(C/eps) m/2
    nats per flip, here about 4.7) must be caught."""
    monkeypatch.setattr(cm, "_log_jacobian", lambda m, log_s: jnp.zeros_like(log_s))
    # other step count than above: a fresh trace picks up the patch
    z, z_crit, rep = column_geweke(gw.PRIORS[name], num_chains=100, num_steps=101)
    assert np.max(np.abs(z)) > 2 * z_crit, f"missing Jacobian not detected:\n{rep}"


@pytest.mark.slow
def test_geweke_detects_reflected_flip_without_its_proposal_ratio(monkeypatch):
    """Power check of the discrete prior's reflected flip: with the angular central
    Gaussian's density left out of the acceptance (switching off is then accepted too
    often), Geweke must fail (measured: |z| = 14 for gamma_max, critical 3.4; with 100 x
    103 steps it is not detected)."""
    monkeypatch.setattr(cm, "_acg_log_density", lambda w, v, k: jnp.zeros(w.shape[:-1], w.dtype))
    z, z_crit, rep = column_geweke(
        DISCRETE, num_chains=200, num_steps=303, num_marginal=200_000, seed=5
    )
    assert np.max(np.abs(z)) > 2 * z_crit, f"missing proposal ratio not detected:\n{rep}"


@pytest.mark.slow
def test_geweke_column_moves_long():
    z, z_crit, rep = column_geweke(
        DISCRETE, num_chains=400, num_steps=1000, num_marginal=400_000, seed=11
    )
    assert np.max(np.abs(z)) < z_crit, f"column moves are not invariant:\n{rep}"


# --------------------------------------------------------------------------- settings
def test_column_moves_through_fit_and_errors(tiny_ratings):
    f = bmc.fit(
        tiny_ratings,
        K=2,
        prior=bmc.priors.Discrete(1.0, 0.3, 0.05),
        num_warmup=5,
        num_samples=10,
        thinning=1,
        column_moves=True,
        progress_bar=False,
    )
    assert np.all(np.isin(np.asarray(f.samples["gamma"]), [1.0, 0.05]))
    assert bmc.inference.Gibbs(column_moves=True).column_moves is True
    with pytest.raises(TypeError, match="column_moves"):
        bmc.inference.Gibbs(column_moves="yes")
    with pytest.raises(ValueError, match="no column move"):
        bmc.fit(
            tiny_ratings,
            K=2,
            prior=bmc.priors.Fixed(1.0),
            num_warmup=1,
            num_samples=2,
            thinning=1,
            column_moves=True,
            progress_bar=False,
        )
    with pytest.raises(ValueError, match="no column move"):  # a prior without column scales
        bmc.fit(
            tiny_ratings,
            K=2,
            prior=bmc.priors.NormalWishart(),
            num_warmup=1,
            num_samples=2,
            thinning=1,
            column_moves=True,
            progress_bar=False,
        )
    assert bmc.inference.Gibbs(
        column_moves=True, devices=jax.devices()[:1]
    ).column_moves  # sharded: test_sharding


def test_moves_are_the_default_where_the_prior_has_one(tiny_ratings):
    """``column_moves=None`` (the default of ``bmc.fit`` and ``ConjugateGibbs``) runs the
    moves for the discrete, inverse-gamma and gamma priors (the same draws as
    ``column_moves=True``, others than the plain sweep's) and the plain sweep for the
    priors without a move; the resolved choice is recorded on the fit."""
    from numpyro.infer import MCMC

    assert bmc.inference.Gibbs().column_moves is None
    for prior, on in (
        (bmc.priors.InverseGamma(), True),
        (bmc.priors.Gamma(), True),
        (bmc.priors.Fixed(1.0), False),
        (bmc.priors.NormalWishart(), False),
    ):
        assert bmc.inference.Gibbs().for_prior(prior).column_moves is on, prior
        assert bmc.inference.Gibbs(column_moves=False).for_prior(prior).column_moves is False
    run = TINY_RUN
    default, moves, plain = (
        bmc.fit(tiny_ratings, **run, **kw)
        for kw in ({}, {"column_moves": True}, {"column_moves": False})
    )
    assert default.info.settings.column_moves is True and plain.info.settings.column_moves is False
    np.testing.assert_array_equal(default.samples["gamma"], moves.samples["gamma"])
    assert not np.array_equal(default.samples["gamma"], plain.samples["gamma"])
    assert (
        bmc.fit(tiny_ratings, **{**run, "prior": bmc.priors.Fixed(1.0)}).info.settings.column_moves
        is False
    )
    draws = {}
    for moves in (None, True, False):
        mcmc = MCMC(
            bmc.inference.ConjugateGibbs(num_samples=6, column_moves=moves),
            num_warmup=3,
            num_samples=6,
            progress_bar=False,
        )
        mcmc.run(jax.random.key(0), tiny_ratings, 2, bmc.priors.InverseGamma())
        draws[moves] = np.asarray(mcmc.get_samples()["gamma"])
    np.testing.assert_array_equal(draws[None], draws[True])
    assert not np.array_equal(draws[None], draws[False])
    with pytest.raises(TypeError, match="column_moves"):
        bmc.inference.ConjugateGibbs(column_moves="yes")


# --------------------------------------------------------------------------- with the other components
def discrete_prior_draws(base_draws):
    """``test_geweke_components._prior_draws`` extended to the discrete prior."""
    from . import test_geweke_components as gc

    def prior_draws(p, size, rng):
        if not isinstance(p, bmc.priors.Discrete):
            return base_draws(p, size, rng)
        gamma = np.where(rng.random((size, gc.K)) < p.p, p.C, p.eps)
        sd = np.sqrt(gamma)[:, None, :]
        return (
            {"gamma": gamma},
            rng.normal(size=(size, gc.M1, gc.K)) * sd,
            rng.normal(size=(size, gc.M2, gc.K)) * sd,
        )

    return prior_draws


def test_geweke_column_moves_with_learned_noise_and_biases(monkeypatch):
    """Sweep + column moves with a learned noise precision and row/column biases (the
    residual subtracts the biases, the marginal uses the block precision): the machinery
    of ``test_geweke_components.py`` with the discrete prior."""
    from . import test_geweke_components as gc

    prior = bmc.priors.Discrete(C=2.0, p=0.4, eps=0.3)
    monkeypatch.setattr(gc, "_prior_draws", discrete_prior_draws(gc._prior_draws))
    monkeypatch.setattr(
        gc.gibbs,
        "build_problem",
        functools.partial(gibbs.build_problem, options=SweepOptions(column_moves=True)),
    )
    # 400 chains: with 100 the chain means of the right-skewed squared quantities are too
    # few for the normal z (measured at seed 5: |z| = 3.7 with 100 x 150 steps, 1.8 with
    # 400 x 150; 2.1 with 400 x 400 at seed 7), at about the same cost (compilation dominates)
    z, z_crit = gc.geweke_z(prior, gc.LEARNED, gc.BIASES, num_chains=400, num_steps=150, seed=5)
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


# --------------------------------------------------------------------------- mixing of the rank
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bmczoo.diagnostics.RankMixingWarning")
def test_rank_posterior_mixes_on_the_rank3_simulation():
    """The rank-mixing check of bench_rank_mixing.py, shortened (seed 0, two chains per
    start, 200 warm-up sweeps as the benchmark's, 400 kept): started in the slab, in the
    spike and at random, the chains with ``bmc.fit``'s default column moves (inside the
    sweep, every fourth sweep for this prior) agree (rank posteriors within total variation
    0.1) and every chain's mode is the true rank 3; plain Gibbs from the same starts does
    not (power: its chains stay where they start)."""
    from bmczoo import diagnostics as dg

    sim = bmc.datasets.simulate_paper(200, rank=3, seed=0)
    prior = bmc.priors.Discrete(1.0, 0.05, 0.05)
    starts = (None, prior.eps, tuple([prior.C, prior.eps] * 5))

    def laws(moves):
        out = []
        with jax.enable_x64(
            False
        ):  # float32, as users run it (the module's fixture turns float64 on)
            for start in starts:
                fit = bmc.fit(
                    sim.train,
                    K=10,
                    prior=prior,
                    num_warmup=200,
                    num_samples=400,
                    thinning=1,
                    num_chains=2,
                    init_gamma=start,
                    progress_bar=False,
                    seed=1,
                    column_moves=moves,
                )
                out.append(
                    (
                        dg.rank_posterior(fit, dg.gamma_threshold(fit)),
                        dg.rank_mixing(fit)["chain_modes"],
                    )
                )
        return out

    def tv(ls):
        return max(0.5 * np.abs(p - q).sum() for (p, _), (q, _) in zip(ls, ls[1:] + ls[:1]))

    moved = laws(None)
    assert all(list(modes) == [3, 3] for _, modes in moved), [modes for _, modes in moved]
    assert tv(moved) < 0.1, [np.round(p, 3) for p, _ in moved]
    assert tv(laws(False)) > 0.5  # plain Gibbs: slab, spike and the 5-column start stay apart
