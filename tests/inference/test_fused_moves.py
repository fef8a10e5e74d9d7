"""The column moves inside the sweep (``fuse_column_moves``;
:func:`bmczoo.inference.gibbs.fused_moves`).

* exactness (float64): the sums of a half sweep transformed for the rescaled (or
  reflected) other factor (:func:`~bmczoo.inference.gibbs.rows.transform_sums`) equal the
  sums recomputed from it, with biases and per-chain latent values; the fused plain moves'
  loop (``_plain_fused``) makes the same decisions and draws as the moves at the end of
  the sweep (``_plain_side``) from the same sums and random numbers;
* the schedule: with ``column_moves_every``, a sweep without its moves is the plain sweep
  bit for bit;
* Geweke (2004) joint-distribution tests of the sweep with its moves inside (the
  machinery of ``test_column_moves.py`` and ``test_geweke_components.py``), and their
  power: sums left untransformed are detected;
* settings: ``fuse_column_moves=`` through ``bmc.fit``, the kernel, the command line, and
  its errors.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs import columns as cm
from bmczoo.inference.gibbs import rows as gr
from bmczoo.inference.gibbs.rows import Side
from bmczoo.inference.settings import SweepOptions

from . import test_column_moves as tcm
from . import test_geweke as gw

pytestmark = pytest.mark.usefixtures("x64")

FUSED = SweepOptions(column_moves=True, fuse_column_moves=True)


def _random_side(rng, C=8, m1=7, m2=9, n=30, K=4, latent=False):
    """A random half sweep's operands on a pattern with empty rows and columns."""
    keys = np.sort(rng.choice(m1 * m2, n, replace=False))
    r, c = np.divmod(keys, m2)
    data = bmc.RatingData(r, c, rng.normal(size=n), (m1, m2))
    problem = gibbs.build_problem(data, 1.0, dtype=jnp.float64)
    M, N = jnp.asarray(rng.normal(size=(C, m1, K))), jnp.asarray(rng.normal(size=(C, m2, K)))
    b, cb = jnp.asarray(rng.normal(size=(C, m1))), jnp.asarray(rng.normal(size=(C, m2)))
    vals = jnp.asarray(rng.normal(size=(C, n))) if latent else None
    return Side(problem.rows, M, N, b, cb, vals)


# the sums are sums of a few dozen O(1) products; transformed, each is a sum of K of them
TOL = 1e3 * np.finfo(np.float64).eps


@pytest.mark.parametrize("latent", [False, True])
@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("full", [False, True], ids=["diagonal", "full"])
def test_transform_sums_equal_the_sums_of_the_transformed_factor(full, use_bias, latent):
    rng = np.random.default_rng(11)
    side = _random_side(rng, latent=latent)
    C, K = side.other.shape[0], side.other.shape[-1]
    T = rng.normal(size=(C, K, K)) if full else rng.uniform(0.2, 3.0, size=(C, K))
    T = jnp.asarray(T)
    got = gr.transform_sums(gr.side_sums(side, use_bias), T)
    want = gr.side_sums(side._replace(other=gr._times(side.other, T)), use_bias)
    for name in gr.RowSums._fields:
        a, b = getattr(got, name), getattr(want, name)
        if b is None:
            assert a is None, name
            continue
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("latent", [False, True])
def test_fused_plain_moves_equal_the_moves_at_the_end(use_bias, latent):
    """``_plain_fused`` (proposals for all columns at once, a running residual) against
    ``_plain_side`` from the same sums and random numbers: the same accept/reject
    decisions and gamma, the own factor and the rescaling within rounding; 64 chains, so
    that accepted and rejected moves both occur (checked)."""
    rng = np.random.default_rng(5)
    C, K = 64, 4
    side = _random_side(rng, C=C, K=K, latent=latent)
    m1, m2 = side.own.shape[1], side.other.shape[1]
    prior = bmc.priors.InverseGamma(1.0, 0.5)
    gamma = jnp.asarray(rng.gamma(2.0, size=(C, K)))
    tb = jnp.asarray(rng.uniform(0.5, 2.0, size=C))
    sums = gr.side_sums(side, use_bias)
    draws = cm._move_draws(jax.random.split(jax.random.key(3), C), K, m1, jnp.float64, False)
    move = cm.ColumnMove(prior, m1 + m2, m2, use_bias)
    args = (side, sums.G, sums.r, sums.sumO, sums.sumBO, gamma, tb, draws, move)
    own, T, g = cm._moves_from_sums(*args)
    own_f, t_f, g_f = cm._moves_from_sums(*args, Gp=sums.Gp)
    np.testing.assert_array_equal(np.asarray(g_f), np.asarray(g))
    np.testing.assert_allclose(np.asarray(own_f), np.asarray(own), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(
        np.asarray(t_f), np.asarray(jnp.diagonal(T, axis1=1, axis2=2)), rtol=TOL, atol=TOL
    )
    moved = np.asarray(g != gamma)
    assert moved.sum() > 0 and (~moved).sum() > 0


@pytest.mark.parametrize(
    "prior",
    [bmc.priors.Discrete(1.0, 0.3, 0.05), bmc.priors.InverseGamma()],
    ids=["discrete", "inverse-gamma"],
)
def test_a_sweep_without_its_moves_is_the_plain_sweep(tiny_ratings, prior):
    """``column_moves_every=3``: sweeps 1, 2, 4, 5 are the plain sweep bit for bit (the
    moves' draws come from their own key stream, the sums multiplied by ones); sweep 3 and
    6 are not."""
    keys = jax.random.split(jax.random.key(7), 2)
    scheduled = gibbs.build_problem(
        tiny_ratings,
        1.0,
        options=SweepOptions(column_moves=True, fuse_column_moves=True, column_moves_every=3),
    )
    plain = gibbs.build_problem(tiny_ratings, 1.0)
    state = gibbs.init(keys, scheduled, prior, 3)
    for it in range(6):
        a = gibbs.sweep(state, scheduled, prior)
        b = gibbs.sweep(state, plain, prior)
        same = all(
            np.array_equal(np.asarray(getattr(a, n)), np.asarray(getattr(b, n)))
            for n in ("M", "N", "gamma")
        )
        assert same == ((it + 1) % 3 != 0), it
        state = a._replace(iteration=it + 1)


# --------------------------------------------------------------------------- Geweke
def _fused_geweke(prior, **kw):
    return tcm.column_geweke(prior, with_sweep=True, fuse=True, **kw)


@pytest.mark.parametrize(
    "name",
    ["discrete", "inverse-gamma", pytest.param("gamma", marks=pytest.mark.slow)],
)
def test_geweke_sweep_with_fused_moves(name):
    z, z_crit, rep = _fused_geweke(gw.PRIORS[name], num_chains=100, num_steps=150, seed=3)
    assert np.max(np.abs(z)) < z_crit, f"sweep with fused moves is not invariant:\n{rep}"


@pytest.mark.parametrize(
    "prior",
    [
        bmc.priors.Discrete(C=2.0, p=0.4, eps=0.3),
        pytest.param(bmc.priors.InverseGamma(), marks=pytest.mark.slow),
    ],
    ids=["discrete", "inverse-gamma"],
)
def test_geweke_fused_moves_with_learned_noise_and_biases(monkeypatch, prior):
    """The fused moves with a learned noise precision and row/column biases: the
    transformed bias sums, the block precision, the moved gamma in the rows' priors (the
    discrete prior: a full ``T``; the inverse-gamma prior: a diagonal one)."""
    from . import test_geweke_components as gc

    monkeypatch.setattr(gc, "_prior_draws", tcm.discrete_prior_draws(gc._prior_draws))
    monkeypatch.setattr(
        gc.gibbs, "build_problem", functools.partial(gibbs.build_problem, options=FUSED)
    )
    # 400 chains: as test_column_moves.test_geweke_column_moves_with_learned_noise_and_biases
    z, z_crit = gc.geweke_z(prior, gc.LEARNED, gc.BIASES, num_chains=400, num_steps=150, seed=5)
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


def test_geweke_detects_untransformed_sums(monkeypatch):
    """Power check: the rows drawn from the sums of the factor before its rescaling (the
    moves' ``T`` not applied to the sums) must be caught."""
    monkeypatch.setattr(cm, "transform_sums", lambda sums, T: sums)
    # other step count than above: a fresh trace picks up the patch
    z, z_crit, rep = _fused_geweke(gw.PRIORS["discrete"], num_chains=100, num_steps=151, seed=3)
    assert np.max(np.abs(z)) > 2 * z_crit, f"untransformed sums not detected:\n{rep}"


# --------------------------------------------------------------------------- settings
#: a short fit of the tiny problem, with the inverse-gamma prior
RUN = {**tcm.TINY_RUN, "prior": bmc.priors.InverseGamma()}


def test_fused_moves_through_fit_kernel_cli_and_errors(tiny_ratings):
    run = RUN
    fused = bmc.fit(tiny_ratings, **run)  # the default
    end = bmc.fit(tiny_ratings, **run, fuse_column_moves=False)
    assert fused.info.settings.fuse_column_moves is True
    assert end.info.settings.fuse_column_moves is False
    assert np.all(np.isfinite(fused.samples["gamma"]))
    assert not np.array_equal(np.asarray(fused.samples["M"]), np.asarray(end.samples["M"]))
    probit = bmc.fit(
        bmc.RatingData(
            tiny_ratings.rows,
            tiny_ratings.cols,
            (tiny_ratings.values > 0) * 1.0,
            tiny_ratings.shape,
        ),
        **run,
        likelihood=bmc.likelihoods.Probit(),
        fuse_column_moves=True,
    )
    assert np.all(np.isfinite(probit.samples["gamma"]))
    annealed = bmc.fit(
        tiny_ratings,
        **{**run, "prior": bmc.priors.Discrete(1.0, 0.3, 0.05)},
        fuse_column_moves=True,
        anneal_steps=2,
        anneal_every=2,
    )
    assert np.all(np.isfinite(annealed.samples["M"]))
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="fuse_column_moves"):
            bmc.inference.Gibbs(fuse_column_moves=bad)
        with pytest.raises(TypeError, match="fuse_column_moves"):
            bmc.inference.ConjugateGibbs(fuse_column_moves=bad)
    from bmczoo.cli.parser import build_parser

    args = build_parser().parse_args(["fit", "--data", "x.csv", "--no-fuse-column-moves"])
    assert args.fuse_column_moves is False


@pytest.mark.parametrize(
    "prior, every", [(bmc.priors.Discrete(1.0, 0.3, 0.05), 4), (bmc.priors.InverseGamma(), 1)]
)
def test_default_schedule_is_the_priors(tiny_ratings, prior, every):
    """``column_moves_every=None`` (the default) is the prior's ``column_moves_every``:
    the fit records it and draws as with it given; given, it overrides the prior's."""
    run = {**RUN, "prior": prior, "num_warmup": 2}
    default = bmc.fit(tiny_ratings, **run)
    given = bmc.fit(tiny_ratings, **run, column_moves_every=every, fuse_column_moves=True)
    assert default.info.settings.column_moves_every == every == prior.column_moves_every
    for k in default.samples:
        np.testing.assert_array_equal(np.asarray(default.samples[k]), np.asarray(given.samples[k]))
    other = bmc.fit(tiny_ratings, **run, column_moves_every=every + 1)
    assert other.info.settings.column_moves_every == every + 1
    if every == 1:  # the scale walk is accepted on this problem (the flips need not be)
        assert not np.array_equal(np.asarray(other.samples["M"]), np.asarray(default.samples["M"]))
    assert SweepOptions().for_prior(prior).column_moves_every == every
    assert bmc.inference.Gibbs().column_moves_every is None  # resolved per prior by fit
    plain = bmc.fit(tiny_ratings, **{**run, "prior": bmc.priors.Fixed()})
    assert plain.info.settings.column_moves is False


def test_checkpoint_of_fused_moves(tiny_ratings, tmp_path):
    """A checkpointed run with the moves inside the sweep has the draws of the run without
    a checkpoint (bit for bit on a CPU); its checkpoint is refused to a run with the moves
    at the end, naming the option."""
    run = {**RUN, "num_warmup": 4, "num_samples": 8, "seed": 5, "fuse_column_moves": True}
    whole = bmc.fit(tiny_ratings, **run)
    path = tmp_path / "c.npz"
    saved = bmc.fit(tiny_ratings, **run, checkpoint=path, checkpoint_every=4)
    for k in whole.samples:
        np.testing.assert_array_equal(np.asarray(saved.samples[k]), np.asarray(whole.samples[k]))
    with pytest.raises(ValueError, match="fuse_column_moves"):
        bmc.fit(tiny_ratings, **{**run, "fuse_column_moves": False}, checkpoint=path)
