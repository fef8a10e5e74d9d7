"""ArviZ model comparison: ``to_arviz(log_likelihood=...)`` gives
``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups with bounded
memory, so ``az.loo``/``az.compare``/``az.plot_ppc`` (through ``bmc.diagnostics``, under
ArviZ 0.x and 1.x; ``az.waic`` with ArviZ 0.x) work across zoo members;
``az.from_numpyro`` works on a ConjugateGibbs run for every prior."""

from __future__ import annotations

import warnings

import arviz as az
import jax
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _arviz
from bmczoo import diagnostics as dg

PRIORS = ["discrete", "fixed", "gamma", "inverse-gamma", "normal-wishart"]


@pytest.fixture(scope="module")
def sim():
    return bmc.datasets.simulate_paper(m=20, rank=2, frac=0.3, seed=3)


@pytest.fixture(scope="module")
def gibbs_pair(sim):
    kw = dict(
        K=3, num_warmup=30, num_samples=40, thinning=1, num_chains=2, store_factors=True, seed=0
    )
    return {
        "fixed": bmc.fit(sim.train, prior=bmc.priors.Fixed(), **kw),
        "gamma": bmc.fit(sim.train, prior=bmc.priors.Gamma(), **kw),
    }


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


def test_compare_two_priors_on_the_paper_simulation(sim, gibbs_pair):
    ids = {k: f.to_arviz(log_likelihood=True) for k, f in gibbs_pair.items()}
    table = _quiet(dg.compare, ids)
    assert set(table.index) == {"fixed", "gamma"}
    assert np.all(np.isfinite(table["elpd_loo"].values))
    # fits are converted alike: the same table
    np.testing.assert_array_equal(
        _quiet(dg.compare, gibbs_pair)["elpd_loo"].values, table["elpd_loo"].values
    )
    loo = _quiet(dg.loo, ids["gamma"], pointwise=True)
    assert np.isfinite(loo.elpd_loo) and loo.loo_i.size == sim.train.n
    assert loo.pareto_k.size == sim.train.n and loo.p_loo > 0 and loo.se > 0
    assert _quiet(dg.loo, gibbs_pair["gamma"]).elpd_loo == loo.elpd_loo
    idata = ids["gamma"]
    assert idata.log_likelihood["y"].shape == (2, 40, sim.train.n)
    np.testing.assert_array_equal(idata.observed_data["y"].values, sim.train.values)
    # the pointwise log density of one draw, by hand (offset added, fixed tau)
    fit = gibbs_pair["gamma"]
    M, N = fit.samples["M"][1, 7], fit.samples["N"][1, 7]
    mu = np.sum(M[sim.train.rows] * N[sim.train.cols], axis=-1) + fit.info.shift.offset
    var = 1.0 / fit.info.tau
    expect = -0.5 * (np.log(2 * np.pi * var) + (sim.train.values - mu) ** 2 / var)
    np.testing.assert_allclose(
        idata.log_likelihood["y"].values[1, 7], expect, rtol=1e-5, atol=1e-6
    )  # float32 factors
    if _arviz.arviz_major() < 1:  # ArviZ 1.x has no WAIC
        assert _quiet(az.waic, idata).elpd_waic < 0


def test_bounds_subsample_the_same_ratings_for_every_fit(gibbs_pair):
    a, b = (
        f.to_arviz(log_likelihood=True, max_ratings=50, max_draws=30, seed=4)
        for f in gibbs_pair.values()
    )
    assert a.log_likelihood["y"].shape == (2, 14, 50)  # step ceil(80 / 30) = 3: draws 0, 3, ..., 39
    np.testing.assert_array_equal(
        a.observed_data["rating"].values, b.observed_data["rating"].values
    )
    assert a.log_likelihood.attrs["num_ratings"] == 50 and a.log_likelihood.attrs["draw_step"] == 3
    assert np.all(np.isfinite(_quiet(dg.compare, {"a": a, "b": b})["elpd_loo"].values))


def test_plot_ppc(gibbs_pair):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idata = gibbs_pair["fixed"].to_arviz(log_likelihood=True, max_draws=20)
    fig = _quiet(dg.plot_ppc, idata, num_pp_samples=10)
    # observed, 10 replicates and their pooled density (ArviZ draws the same three kinds)
    assert len(fig.axes) == 1 and len(fig.axes[0].get_lines()) >= 12
    fig, ax = plt.subplots()
    assert _quiet(dg.plot_ppc, gibbs_pair["fixed"], num_pp_samples=5, ax=ax) is fig
    plt.close("all")


def test_gibbs_without_factors_needs_tracked_entries(sim):
    train = sim.train
    part = train.subset(np.arange(25))
    fit = bmc.fit(
        train,
        K=2,
        prior=bmc.priors.Fixed(),
        num_warmup=10,
        num_samples=20,
        thinning=1,
        track=(part.rows, part.cols),
        store_factors=False,
    )
    with pytest.raises(ValueError, match="store_factors=True.*track="):
        fit.to_arviz(log_likelihood=True)
    idata = fit.to_arviz(log_likelihood=part)
    assert idata.log_likelihood["y"].shape == (fit.samples["theta"].shape[0], 20, 25)
    assert idata.log_likelihood.attrs["theta_source"] == "tracked entries"
    # summaries report theta on the data's scale
    table = bmc.diagnostics.summary(fit)
    assert "data" in table.attrs["theta_scale"]
    post = fit.to_arviz().posterior
    # the offset is added before az.summary's rounding (3 decimals), not to rounded values
    want = np.round(
        post["theta"].mean(("chain", "draw")).values.astype(np.float64) + fit.info.shift.offset, 3
    )
    np.testing.assert_allclose(table["mean"].values[: len(want)], want, rtol=0, atol=1e-9)
    raw = bmc.diagnostics.summary(fit, round_to="none")
    np.testing.assert_allclose(raw["mean"].values[: len(want)], want, rtol=0, atol=5e-4 + 1e-6)
    sd1 = bmc.diagnostics.summary(fit, round_to=1)["sd"].values
    np.testing.assert_array_equal(sd1, np.round(sd1, 1))


def test_vb_with_learned_noise_and_biases(sim):
    fit = bmc.fit(
        sim.train,
        K=3,
        prior=bmc.priors.Gamma(),
        method="vb",
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        max_iter=40,
    )
    idata = fit.to_arviz(log_likelihood=True, num_draws=60, seed=2)
    assert idata.log_likelihood["y"].shape == (1, 60, sim.train.n)
    assert "learned" in idata.log_likelihood.attrs["noise"]
    assert np.all(np.isfinite(idata.log_likelihood["y"].values))
    assert np.isfinite(_quiet(dg.loo, idata).elpd_loo)
    again = fit.to_arviz(log_likelihood=True, num_draws=60, seed=2)
    np.testing.assert_array_equal(
        idata.posterior_predictive["y"].values, again.posterior_predictive["y"].values
    )


def test_loaded_fit_needs_the_ratings(gibbs_pair, sim, tmp_path):
    fit = gibbs_pair["fixed"]
    fit.save(tmp_path / "f.npz")
    back = bmc.load(tmp_path / "f.npz")
    with pytest.raises(ValueError, match="log_likelihood=train"):
        back.to_arviz(log_likelihood=True)
    np.testing.assert_array_equal(
        back.to_arviz(log_likelihood=sim.train).log_likelihood["y"].values,
        fit.to_arviz(log_likelihood=True).log_likelihood["y"].values,
    )


def _conjugate_gibbs(train, prior, store_factors=False, **model_kw):
    from numpyro.infer import MCMC

    kernel = bmc.inference.ConjugateGibbs(num_samples=10, store_factors=store_factors)
    mcmc = MCMC(
        kernel,
        num_warmup=5,
        num_samples=10,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), train, 2, prior, **model_kw)
    return mcmc


def test_from_numpyro_readme_snippet(sim):
    """The README's snippet: the discrete prior (a TypeError before), tracked entries."""
    idata = az.from_numpyro(_conjugate_gibbs(sim.train, bmc.priors.Discrete()))
    assert idata.posterior["theta"].shape == (2, 10, 8)
    assert "log_likelihood" not in _arviz.group_names(idata)


@pytest.mark.slow
@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("store", [False, True])
def test_from_numpyro_every_prior(sim, name, store):
    kw = dict(biases=True, likelihood=bmc.likelihoods.LearnedNoise()) if store else {}
    idata = az.from_numpyro(
        _conjugate_gibbs(sim.train, bmc.priors.get_prior(name), store_factors=store, **kw)
    )
    assert idata.posterior["theta"].shape == (2, 10, 8)
    if store:
        assert idata.log_likelihood["obs"].shape == (2, 10, sim.train.n)
        assert np.isfinite(_quiet(dg.loo, idata).elpd_loo)
