"""The annealed spike/slab switch (:func:`bmczoo.inference.gibbs.annealed_switch`).

* Geweke (2004) joint-distribution tests on the tiny problem of ``test_geweke.py`` (the
  machinery of ``test_column_moves.py``): the switch alone, and a sweep that ends with it;
* power: the switch accepted on the prior odds alone (its work left out) is detected;
* the same draws as without it when it never runs, and the settings and their errors
  through ``bmc.fit``, ``ConjugateGibbs`` and the CLI.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs import anneal
from bmczoo.inference.settings import SweepOptions

from .test_column_moves import DISCRETE, TINY_RUN, column_geweke

pytestmark = pytest.mark.usefixtures("x64")


# --------------------------------------------------------------------------- Geweke
def test_geweke_annealed_switch_alone():
    """Three steps (two palindromic kernels between them) keep the joint of ``(gamma, M,
    N, Y)`` invariant."""
    z, z_crit, rep = column_geweke(DISCRETE, num_chains=100, num_steps=200, anneal_steps=3)
    assert np.max(np.abs(z)) < z_crit, f"the annealed switch is not invariant:\n{rep}"


def test_geweke_sweep_with_annealed_switch():
    """A plain sweep (no column moves) followed by a two-step switch, every sweep."""
    z, z_crit, rep = column_geweke(
        DISCRETE, num_chains=100, num_steps=150, seed=3, with_sweep=True, anneal_steps=2
    )
    assert np.max(np.abs(z)) < z_crit, f"sweep + annealed switch is not invariant:\n{rep}"


def test_geweke_detects_annealed_switch_without_its_work(monkeypatch):
    """Power check: with the work left out (the switch accepted on the prior odds alone,
    here ``(m1 + m2)/2 log(C/eps) ~ 10`` nats of column prior ignored) Geweke must fail."""
    monkeypatch.setattr(
        anneal, "_log_column_prior", lambda M, N, onehot, g, d: jnp.zeros(M.shape[0], M.dtype)
    )
    # another step count than above: a fresh trace picks up the patch
    z, z_crit, rep = column_geweke(DISCRETE, num_chains=100, num_steps=101, anneal_steps=3)
    assert np.max(np.abs(z)) > 2 * z_crit, f"missing work not detected:\n{rep}"


def test_geweke_annealed_switch_with_learned_noise_and_biases(monkeypatch):
    """Sweep + annealed switch with a learned noise precision and row/column biases (the
    switch's residual subtracts the biases; tau and the biases stay fixed during it): the
    machinery of ``test_geweke_components.py``, as for the column moves."""
    import functools

    from . import test_geweke_components as gc
    from .test_column_moves import discrete_prior_draws

    monkeypatch.setattr(gc, "_prior_draws", discrete_prior_draws(gc._prior_draws))
    monkeypatch.setattr(
        gc.gibbs,
        "build_problem",
        functools.partial(
            gibbs.build_problem,
            options=SweepOptions(column_moves=False, anneal_steps=2, anneal_every=1),
        ),
    )
    z, z_crit = gc.geweke_z(
        bmc.priors.Discrete(C=2.0, p=0.4, eps=0.3),
        gc.LEARNED,
        gc.BIASES,
        num_chains=400,
        num_steps=150,
        seed=5,
    )
    assert np.max(np.abs(z)) < z_crit, (
        f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


@pytest.mark.slow
def test_geweke_annealed_switch_long():
    """Longer paths and chains (ten steps, 400 chains x 500 switches)."""
    z, z_crit, rep = column_geweke(
        DISCRETE, num_chains=400, num_steps=500, num_marginal=400_000, seed=11, anneal_steps=10
    )
    assert np.max(np.abs(z)) < z_crit, f"the annealed switch is not invariant:\n{rep}"


# --------------------------------------------------------------------------- schedule, settings
def _fit(data, **kw):
    return bmc.fit(data, **{**TINY_RUN, **kw})


def test_switch_runs_every_anneal_every_sweeps(tiny_ratings, tmp_path):
    """With ``anneal_every`` beyond the run the draws are those of the run without the
    switch (its own key stream); with ``anneal_every=1`` they differ (a spike close to
    the slab, so that switches are accepted)."""
    prior = bmc.priors.Discrete(1.0, 0.5, 0.5)
    base = _fit(tiny_ratings, prior=prior)
    never = _fit(tiny_ratings, prior=prior, anneal_steps=4, anneal_every=100)
    every = _fit(tiny_ratings, prior=prior, anneal_steps=4, anneal_every=1)
    np.testing.assert_array_equal(base.samples["gamma"], never.samples["gamma"])
    np.testing.assert_array_equal(base.samples["theta"], never.samples["theta"])
    assert not np.array_equal(base.samples["theta"], every.samples["theta"])
    assert np.all(np.isin(np.asarray(every.samples["gamma"]), [1.0, 0.5]))
    assert every.info.settings.anneal_steps == 4 and every.info.settings.anneal_every == 1
    # the counts: one switch per chain and sweep (3 + 6 sweeps), some accepted (the draws differ)
    stats = every.run_stats()
    assert stats["switches_attempted"] == [9, 9]
    assert (
        all(0 <= a <= 9 for a in stats["switches_accepted"]) and sum(stats["switches_accepted"]) > 0
    )
    assert (
        never.run_stats()["switches_attempted"] == [0, 0]
        and "switches_attempted" not in base.run_stats()
    )
    every.save(tmp_path / "fit.npz")  # the counts are saved and loaded with the fit
    np.testing.assert_array_equal(bmc.load(tmp_path / "fit.npz").switches, every.switches)


@pytest.mark.slow  # the switch runs inside the sweep, which the checkpoint tests cover in the default suite
def test_switch_with_biases_learned_noise_and_checkpoint(tiny_ratings, tmp_path):
    """The other components stay fixed during the switch (no error, finite draws); a
    checkpointed run equals the run without checkpoints."""
    kw = dict(
        anneal_steps=3, anneal_every=2, biases=True, likelihood=bmc.likelihoods.LearnedNoise()
    )
    plain = _fit(tiny_ratings, **kw)
    ck = _fit(tiny_ratings, checkpoint=tmp_path / "run.npz", checkpoint_every=4, **kw)
    assert np.all(np.isfinite(plain.samples["theta"]))
    np.testing.assert_array_equal(plain.samples["theta"], ck.samples["theta"])
    np.testing.assert_array_equal(plain.switches, ck.switches)


def test_switch_with_a_latent_likelihood(tiny_ratings):
    """A probit likelihood: its latent ``z`` replace the ratings during the switch."""
    binary = bmc.RatingData(
        tiny_ratings.rows,
        tiny_ratings.cols,
        (tiny_ratings.values > 0).astype(float),
        tiny_ratings.shape,
    )
    f = _fit(
        binary,
        prior=bmc.priors.Discrete(1.0, 0.5, 0.5),
        likelihood=bmc.likelihoods.Probit(),
        anneal_steps=3,
        anneal_every=1,
    )
    assert np.all(np.isfinite(f.samples["theta"]))


def test_annealed_switch_errors(tiny_ratings):
    with pytest.raises(ValueError, match="anneal_steps"):
        bmc.inference.Gibbs(anneal_steps=-1)
    for bad in (1.5, True, "3"):  # not an int: a type error
        with pytest.raises(TypeError, match="anneal_steps"):
            bmc.inference.Gibbs(anneal_steps=bad)
    for bad in (0, -2):
        with pytest.raises(ValueError, match="anneal_every"):
            bmc.inference.Gibbs(anneal_steps=3, anneal_every=bad)
    with pytest.raises(TypeError, match="anneal_every"):
        bmc.inference.Gibbs(anneal_steps=3, anneal_every=2.0)
    for prior in (bmc.priors.InverseGamma(), bmc.priors.Fixed(1.0), bmc.priors.NormalWishart()):
        with pytest.raises(ValueError, match="no spike and slab"):
            _fit(tiny_ratings, prior=prior, anneal_steps=3)
    with pytest.raises(ValueError, match="anneal_steps"):
        bmc.inference.ConjugateGibbs(anneal_steps=-1)
    assert (
        bmc.inference.Gibbs().anneal_steps == 0
    )  # off by default: the paper's tables are unchanged


def test_cli_anneal_flags(capsys):
    from bmczoo.cli import main

    rc = main(
        [
            "fit",
            "--data",
            "sim:30",
            "--prior",
            "discrete",
            "-K",
            "2",
            "--num-warmup",
            "2",
            "--num-samples",
            "4",
            "--thinning",
            "1",
            "--anneal-steps",
            "3",
            "--anneal-every",
            "2",
            "--quiet",
        ]
    )
    assert rc == 0 and "theta_rmse=" in capsys.readouterr().out


def test_checkpoint_without_switch_counts_restores_zeros(tiny_ratings):
    """A checkpoint written before the counts existed (no ``state/switches``) restores
    with zero counts; one with them restores them."""
    from bmczoo.inference.gibbs import driver as gibbs_driver

    problem = gibbs.build_problem(
        tiny_ratings,
        1.0,
        dtype=jnp.float64,
        options=SweepOptions(column_moves=False, anneal_steps=2, anneal_every=1),
    )
    prior = bmc.priors.Discrete(1.0, 0.5, 0.5)
    state = gibbs.init(jax.random.split(jax.random.key(0), 3), problem, prior, 2)
    state = jax.jit(gibbs.sweep, static_argnums=2)(state, problem, prior)  # one switch each
    arrays = gibbs_driver._state_arrays(state, problem)
    np.testing.assert_array_equal(
        gibbs_driver._restore_state(arrays, problem).stats.switches, state.stats.switches
    )
    assert np.asarray(state.stats.switches)[:, 1].tolist() == [1, 1, 1]
    old = {k: v for k, v in arrays.items() if k != "state/switches"}
    np.testing.assert_array_equal(
        gibbs_driver._restore_state(old, problem).stats.switches, np.zeros((3, 2), np.int32)
    )
