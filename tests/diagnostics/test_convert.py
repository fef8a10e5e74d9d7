"""ArviZ conversion: nothing lost, axes right, every method, the invariant quantities.

* ESS (bulk, tail), R-hat and MCSE of AR(1) draws fed through :func:`to_arviz` equal
  ArviZ's on the raw ``(chain, draw)`` array, and the ESS is near the AR(1) value
  ``C D (1 - phi) / (1 + phi)``;
* dims/coords ``chain, draw, h, entry`` (with ``row``/``col``), sorted gamma, per-draw
  RMSE aligned with the sweeps NumPyro keeps, singular values of ``M N^T``;
* VB: draws from q match its moments (full and diagonal covariances), rank posteriors
  are exact; SVI: the guide's draws.
"""

from __future__ import annotations

import arviz as az
import jax
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _arviz
from bmczoo import diagnostics as dg

from ._fakes import (
    K,
    NUM_CHAINS,
    NUM_SAMPLES,
    NUM_TRACK,
    NUM_WARMUP,
    PRIOR,
    THINNING,
    FakeGuideFit,
    FakeMCMCFit,
    FakeVBFit,
    ar1,
    fake_info,
    random_spd,
)

PHI = 0.6
C_AR, D_AR, E_AR = 4, 1000, 3


@pytest.fixture(scope="module")
def ar1_fit():
    rng = np.random.default_rng(2024)
    theta = ar1(rng, (C_AR, D_AR, E_AR), PHI)
    theta[..., 2] += np.arange(C_AR)[:, None]  # entry 2: chains disagree, R-hat >> 1
    gamma = np.exp(ar1(rng, (C_AR, D_AR, 2), PHI))
    return FakeMCMCFit(
        {"gamma": gamma, "theta": theta}, track_rows=[0, 3, 7], track_cols=[1, 1, 4], shape=(8, 5)
    )


def test_ar1_diagnostics_match_arviz_on_raw_arrays(ar1_fit):
    raw = ar1_fit.samples["theta"]
    table = dg.summary(ar1_fit)
    labels = ["theta[0,1]", "theta[3,1]", "theta[7,4]"]
    assert list(table.index[:E_AR]) == labels
    for e, lab in enumerate(labels):
        x = raw[..., e]  # (chain, draw)
        assert table.loc[lab, "ess_bulk"] == pytest.approx(_arviz.ess(x, method="bulk"), abs=0.5)
        assert table.loc[lab, "ess_tail"] == pytest.approx(_arviz.ess(x, method="tail"), abs=0.5)
        assert table.loc[lab, "r_hat"] == pytest.approx(_arviz.rhat(x), abs=0.005)
        assert table.loc[lab, "mcse_mean"] == pytest.approx(float(az.mcse(x)), abs=0.0005)
    # unrounded, through the ArviZ data
    post = _arviz.group(dg.to_arviz(ar1_fit))
    for e in range(E_AR):
        np.testing.assert_array_equal(post["theta"].isel(entry=e).values, raw[..., e])
        ess = np.asarray(az.ess(post, var_names=["theta"])["theta"].values)[e]
        assert ess == pytest.approx(_arviz.ess(raw[..., e]), rel=1e-12)
    # AR(1): ESS ~ C D (1 - phi) / (1 + phi) = 1000
    expected = C_AR * D_AR * (1 - PHI) / (1 + PHI)
    for lab in labels[:2]:
        assert 0.75 * expected < table.loc[lab, "ess_bulk"] < 1.3 * expected
        assert table.loc[lab, "r_hat"] < 1.01
    assert table.loc[labels[2], "r_hat"] > 1.5  # chains with different means
    # sorted gamma: rows 0 >= 1 in every draw, diagnostics of the sorted raw array
    g = np.sort(ar1_fit.samples["gamma"], axis=-1)[..., ::-1]
    np.testing.assert_array_equal(post["gamma_sorted"].values, g)
    assert table.loc["gamma_sorted[0]", "ess_bulk"] == pytest.approx(_arviz.ess(g[..., 0]), abs=0.5)


def test_one_chain_r_hat_is_split_r_hat_and_constants_have_no_ess():
    """One MCMC chain: R-hat is ArviZ's on the chain's halves (Gelman et al.'s split
    R-hat), the table says so; a quantity constant over all draws has undefined ESS, MCSE
    and R-hat (ArviZ alone reports ESS = draws for it); VB's independent draws: no R-hat."""
    rng = np.random.default_rng(7)
    D = 1001  # odd: the last draw is left out of the halves
    theta = ar1(rng, (1, D, 3), PHI)
    theta[0, D // 2 :, 1] += 1.0  # entry 1 shifts in the second half
    gamma = np.exp(ar1(rng, (1, D, 2), PHI))
    gamma[..., 1] = 1e-4  # a column scale that never moves (always the smaller)
    fit = FakeMCMCFit(
        {"gamma": gamma, "theta": theta}, track_rows=[0, 3, 7], track_cols=[1, 1, 4], shape=(8, 5)
    )
    table = dg.summary(fit, round_to="none")
    assert "split R-hat" in table.attrs["r_hat"]
    n = D // 2
    for e, lab in enumerate(["theta[0,1]", "theta[3,1]", "theta[7,4]"]):
        halves = theta[0, : 2 * n, e].reshape(2, n)
        assert table.loc[lab, "r_hat"] == pytest.approx(_arviz.rhat(halves), rel=1e-12)
        assert table.loc[lab, "ess_bulk"] == pytest.approx(
            _arviz.ess(theta[..., e], method="bulk"), rel=1e-12
        )
    assert table.loc["theta[3,1]", "r_hat"] > 1.05 > table.loc["theta[0,1]", "r_hat"]
    const = table.loc["gamma_sorted[1]"]
    assert (
        np.ptp(dg.to_arviz(fit).posterior["gamma_sorted"].values[..., 1]) == 0
    )  # (its float sd need not be 0)
    assert const[["ess_bulk", "ess_tail", "mcse_mean", "mcse_sd", "r_hat"]].isna().all()
    assert np.isfinite(table.loc["gamma_sorted[0]", ["ess_bulk", "r_hat"]].astype(float)).all()
    # several chains: ArviZ's R-hat across chains, no note
    assert (
        "r_hat"
        not in dg.summary(
            FakeMCMCFit(
                {"gamma": np.concatenate([gamma] * 2), "theta": np.concatenate([theta] * 2)},
                track_rows=[0, 3, 7],
                track_cols=[1, 1, 4],
                shape=(8, 5),
            )
        ).attrs
    )


def test_dims_and_coords(ar1_fit):
    idata = dg.to_arviz(ar1_fit)
    post = idata.posterior
    assert post["theta"].dims == ("chain", "draw", "entry")
    assert post["gamma"].dims == ("chain", "draw", "h")
    assert post["gamma_sorted"].dims == ("chain", "draw", "h")
    assert dict(post.sizes) == {"chain": C_AR, "draw": D_AR, "entry": E_AR, "h": 2}
    np.testing.assert_array_equal(post["chain"].values, np.arange(C_AR))
    np.testing.assert_array_equal(post["draw"].values, np.arange(D_AR))
    np.testing.assert_array_equal(post["row"].values, [0, 3, 7])
    np.testing.assert_array_equal(post["col"].values, [1, 1, 4])
    assert list(post["entry"].values) == ["0,1", "3,1", "7,4"]
    # no factor draws: no factor-based quantities, no made-up groups
    assert "theta_fro" not in post and "eff_rank" not in post
    assert _arviz.group_names(idata) == ["posterior"]
    # a chosen subset of the tracked entries, in the requested order
    sub = dg.to_arviz(ar1_fit, entries=[(7, 4), (0, 1)]).posterior
    np.testing.assert_array_equal(sub["theta"].values, ar1_fit.samples["theta"][..., [2, 0]])
    with pytest.raises(ValueError, match="not tracked"):
        dg.to_arviz(ar1_fit, entries=[(1, 1)])
    with pytest.raises(ValueError, match="outside"):
        dg.to_arviz(ar1_fit, entries=[(8, 0)])


def test_singular_values_and_effective_rank():
    rng = np.random.default_rng(0)
    M, N = rng.normal(size=(2, 3, 9, 4)), rng.normal(size=(2, 3, 7, 4))
    sv = dg.theta_singular_values(M, N)
    assert sv.shape == (2, 3, 4)
    for c in range(2):
        for d in range(3):
            ref = np.linalg.svd(M[c, d] @ N[c, d].T, compute_uv=False)[:4]
            np.testing.assert_allclose(sv[c, d], ref, rtol=1e-10)
    # rotation invariance: M R, N R for orthogonal R give the same theta
    R = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    np.testing.assert_allclose(dg.theta_singular_values(M @ R, N @ R), sv, rtol=1e-10)
    np.testing.assert_allclose(dg.effective_rank([3.0, 0.0, 0.0]), 1.0)
    np.testing.assert_allclose(dg.effective_rank([2.0, 2.0, 2.0, 2.0]), 4.0)
    np.testing.assert_allclose(dg.effective_rank([0.0, 0.0]), 0.0)
    assert 1.0 < float(dg.effective_rank([2.0, 1.0])) < 2.0


def test_gibbs_fit(gibbs_fit, sim_data):
    _, test = sim_data
    D = NUM_SAMPLES // THINNING
    idata = dg.to_arviz(gibbs_fit)
    post, stats, conv = idata.posterior, idata.sample_stats, idata.convergence
    assert dict(post.sizes) == {"chain": NUM_CHAINS, "draw": D, "h": K, "entry": NUM_TRACK}
    np.testing.assert_array_equal(post["theta"].values, gibbs_fit.samples["theta"])
    np.testing.assert_array_equal(post["row"].values, gibbs_fit.track_rows)
    for v in ("theta_sv", "theta_fro", "eff_rank"):
        assert v in post
    M, N = gibbs_fit.samples["M"], gibbs_fit.samples["N"]
    fro = np.sqrt(np.einsum("cdik,cdjk,cdil,cdjl->cd", M, N, M, N, optimize=True))
    np.testing.assert_allclose(post["theta_fro"].values, fro, rtol=1e-4)
    # the per-iteration traces, and the per-draw RMSE at exactly the sweeps kept
    assert conv["rmse_draw"].shape == (NUM_CHAINS, NUM_WARMUP + NUM_SAMPLES)
    np.testing.assert_array_equal(
        conv["iteration"].values, np.arange(1, NUM_WARMUP + NUM_SAMPLES + 1)
    )
    pred = (
        np.einsum("cdpk,cdpk->cdp", M[:, :, test.rows], N[:, :, test.cols])
        + gibbs_fit.meta["offset"]
    )
    rmse = np.sqrt(np.mean((pred - test.values) ** 2, axis=-1))
    np.testing.assert_allclose(stats["rmse"].values, rmse, rtol=1e-4)
    it = dg.kept_iterations(NUM_WARMUP, NUM_SAMPLES, THINNING)
    assert it[-1] == NUM_WARMUP + NUM_SAMPLES and it.size == D
    np.testing.assert_array_equal(stats["rmse_mean"].values, gibbs_fit.rmse_mean[:, it - 1])
    # entries not tracked: from the stored factor draws
    other = dg.to_arviz(gibbs_fit, entries=([0, 29], [29, 0])).posterior["theta"].values
    np.testing.assert_allclose(
        other, np.einsum("cdek,cdek->cde", M[:, :, [0, 29]], N[:, :, [29, 0]]), rtol=1e-6
    )
    # the table: invariant quantities only, multi-chain R-hat present
    table = dg.summary(gibbs_fit)
    assert not any(lab.startswith(("gamma[", "theta_sv")) for lab in table.index)
    assert {"ess_bulk", "ess_tail", "r_hat", "mcse_mean"} <= set(table.columns)
    # (a sorted gamma of the discrete prior, and so the number of active columns, can be
    # constant over all draws: NaN there)
    assert "num_active" in table.index
    smooth = [lab for lab in table.index if not lab.startswith(("gamma_sorted", "num_active"))]
    assert np.all(np.isfinite(table.loc[smooth, "r_hat"].values))
    # rank posterior equals the counts over draws
    g = gibbs_fit.samples["gamma"]
    np.testing.assert_allclose(
        dg.rank_posterior(gibbs_fit, 0.5),
        np.bincount(np.sum(g > 0.5, -1).ravel(), minlength=K + 1) / g[..., 0].size,
    )


def test_from_numpyro(sim_data):
    """ArviZ data of NumPyro's MCMC driving the conjugate kernel (bmc.fit runs its own loop)."""
    from numpyro.infer import MCMC

    from bmczoo.inference import ConjugateGibbs

    train, _ = sim_data
    mcmc = MCMC(
        ConjugateGibbs(store_factors=True),
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        num_chains=1,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), train, K, PRIOR)
    idata = dg.from_numpyro(mcmc)
    post = idata.posterior
    np.testing.assert_array_equal(
        post["gamma_sorted"].values[0], -np.sort(-np.asarray(mcmc.get_samples()["gamma"]), -1)
    )
    assert post["theta_sv"].dims == ("chain", "draw", "h") and "eff_rank" in post
    assert post["theta_sv"].dims == ("chain", "draw", "h") and "eff_rank" in post


def _fake_vb(rng, prior, q_gamma, full=True, m1=5, m2=4, Kv=3):
    V, W = random_spd(rng, m1, Kv), random_spd(rng, m2, Kv)
    if not full:
        V = V * np.eye(Kv)
        W = W * np.eye(Kv)
    return FakeVBFit(
        rng.normal(size=(m1, Kv)),
        rng.normal(size=(m2, Kv)),
        V,
        W,
        q_gamma,
        prior,
        elbo=[-50.0, -20.0, -19.0],
        rmse_trace=[2.0, 1.5, 1.4],
        full=full,
    )


@pytest.mark.parametrize("full", [True, False])
def test_vb_draws_match_q_moments(full):
    rng = np.random.default_rng(3)
    fit = _fake_vb(rng, bmc.priors.Fixed(0.7), {"inv_mean": np.full(3, 1 / 0.7)}, full=full)
    rows, cols = np.array([0, 0, 4, 2]), np.array([1, 3, 3, 0])
    mean, var, is_full = dg.vb_theta_moments(fit, rows, cols)
    assert is_full == full
    draws = dg.fit_arrays(fit, entries=(rows, cols), num_draws=40000, seed=1).groups["posterior"][
        "theta"
    ][0]
    np.testing.assert_allclose(draws.mean(0), mean, atol=4 * np.sqrt(var / 40000).max())
    np.testing.assert_allclose(draws.var(0), var, rtol=0.05)
    # same seed, same draws; the fixed prior's gamma is constant
    a = dg.to_arviz(fit, num_draws=50, seed=7).posterior
    b = dg.to_arviz(fit, num_draws=50, seed=7).posterior
    np.testing.assert_array_equal(a["theta"].values, b["theta"].values)
    assert a.sizes["chain"] == 1 and a.sizes["draw"] == 50
    np.testing.assert_array_equal(a["gamma"].values, 0.7)
    assert a.attrs["vb_covariance"] == ("full" if full else "diagonal")


@pytest.mark.parametrize(
    "prior,q",
    [
        (bmc.priors.Discrete(C=1.0, p=0.1, eps=0.05), {"slab_prob": np.array([0.9, 0.3, 0.02])}),
        (
            bmc.priors.InverseGamma(1.0, 0.1),
            {"shape": np.full(3, 6.0), "scale": np.array([10.0, 1.0, 0.2])},
        ),
        (
            bmc.priors.Gamma(beta=2.0),
            {"ig_mean": np.array([0.5, 3.0, 40.0]), "ig_shape": np.full(3, 4.0)},
        ),
    ],
    ids=["discrete", "inverse-gamma", "gamma"],
)
def test_vb_rank_posterior_exact(prior, q):
    rng = np.random.default_rng(5)
    fit = _fake_vb(rng, prior, {"inv_mean": np.ones(3), **q})
    threshold = 0.4
    exact = dg.rank_posterior(fit, threshold)
    assert exact.shape == (4,) and exact.sum() == pytest.approx(1.0)
    g = dg.to_arviz(fit, num_draws=40000, seed=0).posterior["gamma"].values.reshape(-1, 3)
    mc = np.bincount(np.sum(g > threshold, -1), minlength=4) / g.shape[0]
    np.testing.assert_allclose(exact, mc, atol=0.012)


def test_vb_fit(vb_fit):
    idata = dg.to_arviz(vb_fit, num_draws=100)
    post = idata.posterior
    assert dict(post.sizes) == {"chain": 1, "draw": 100, "h": K, "entry": 8}
    assert set(post["gamma"].values.ravel().tolist()) <= {PRIOR.C, PRIOR.eps}
    np.testing.assert_array_equal(idata.convergence["elbo"].values[0], vb_fit.elbo)
    np.testing.assert_array_equal(idata.convergence["rmse"].values[0], vb_fit.rmse_trace)
    assert post.attrs["vb_covariance"] == "full" and post.attrs["num_variational_draws"] == 100
    table = dg.summary(vb_fit, num_draws=100)
    assert "theta_fro" in table.index and "eff_rank" in table.index


def test_svi_fit(svi_fit):
    idata = dg.to_arviz(svi_fit)
    post = idata.posterior
    S = svi_fit.draws["M"].shape[0]
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == S
    np.testing.assert_array_equal(post["gamma"].values[0], svi_fit.draws["gamma"])
    np.testing.assert_array_equal(idata.convergence["loss"].values[0], svi_fit.losses)
    r = dg.rank_posterior(svi_fit, 0.5)
    assert r.shape == (K + 1,) and r.sum() == pytest.approx(1.0)


def test_no_gamma_raises():
    fit = FakeMCMCFit({"gamma": np.ones((1, 5, 2)), "theta": np.zeros((1, 5, 1))}, [0], [0], (2, 2))
    del fit.samples["gamma"]
    with pytest.raises(ValueError, match="no draws of gamma"):
        dg.rank_posterior(fit, 0.1)
    with pytest.raises(ValueError, match="threshold"):
        dg.rank_posterior(fit, float("nan"))


def test_map_like_fit_single_draw():
    """A MAP fit holds one draw of the factors and no gamma: the mean only, clear errors."""
    rng = np.random.default_rng(1)
    fit = FakeGuideFit(
        draws={"M": rng.normal(size=(1, 6, 2)), "N": rng.normal(size=(1, 5, 2))},
        losses=np.array([3.0, 2.0, 1.5]),
        shape=(6, 5),
        info=fake_info("map", 2, (6, 5), bmc.priors.InverseGamma(1.0, 0.1)),
    )
    idata = dg.to_arviz(fit, entries=[(0, 0), (5, 4)])
    assert dict(idata.posterior.sizes) == {"chain": 1, "draw": 1, "h": 2, "entry": 2}
    np.testing.assert_allclose(
        idata.posterior["theta"].values[0, 0, 1], fit.draws["M"][0, 5] @ fit.draws["N"][0, 4]
    )
    table = dg.summary(fit, entries=[(0, 0)])
    assert list(table.columns) == ["mean"]
    with pytest.raises(ValueError, match="no draws of gamma"):
        dg.rank_posterior(fit, 0.1)
    with pytest.raises(ValueError, match="no gamma"):
        dg.plot_gamma(fit)
