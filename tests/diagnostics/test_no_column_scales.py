"""Diagnostics of a fit whose prior has no column scales gamma (``has_column_scales =
False``, e.g. :class:`~bmczoo.priors.NormalWishart`): its draws hold the prior's own state
(``mu_M``, ``Lambda_M``, ``mu_N``, ``Lambda_N``) instead of gamma.  The gamma diagnostics
refuse it with an error naming the prior; ``rank_posterior`` answers with the posterior of
the effective rank of theta (the number of its singular values above the threshold),
checked against NumPy's SVD of ``M N^T`` draw by draw; the conversion, summary and report
skip gamma; the conversion shows the state's invariant summaries and the state draws on
request."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import diagnostics as dg

from ._fakes import FakeGuideFit, FakeMCMCFit, FakeVBFit, fake_info, random_spd

NW = bmc.priors.NormalWishart()
K, C, D, M1, M2 = 3, 2, 12, 6, 5


def _state(rng, lead):
    out = {}
    for side in ("M", "N"):
        out[f"mu_{side}"] = rng.normal(size=lead + (K,))
        out[f"Lambda_{side}"] = random_spd(rng, int(np.prod(lead)), K).reshape(lead + (K, K))
    return out


@pytest.fixture
def nw_mcmc():
    rng = np.random.default_rng(0)
    M, N = rng.normal(size=(C, D, M1, K)), rng.normal(size=(C, D, M2, K))
    rows, cols = np.array([0, 2, 5]), np.array([1, 4, 0])
    theta = np.einsum("cdek,cdek->cde", M[:, :, rows], N[:, :, cols])
    samples = {**_state(rng, (C, D)), "M": M, "N": N, "theta": theta}
    return FakeMCMCFit(samples, rows, cols, (M1, M2), prior=NW)


def _check_error(fn, *args, **kwargs):
    with pytest.raises(ValueError, match="normal-wishart has no column scales gamma"):
        fn(*args, **kwargs)


def test_gamma_diagnostics_name_the_prior(nw_mcmc):
    _check_error(dg.prob_gamma_above, nw_mcmc, 0.5)
    _check_error(dg.gamma_threshold, nw_mcmc)
    _check_error(dg.plot_gamma, nw_mcmc)


def _svd_counts(M, N, t):
    """#{k: s_k(M N^T) > t} per draw, by NumPy's SVD of the formed theta."""
    M, N = M.reshape((-1,) + M.shape[-2:]), N.reshape((-1,) + N.shape[-2:])
    return np.array(
        [np.sum(np.linalg.svd(m @ n.T, compute_uv=False)[:K] > t) for m, n in zip(M, N)]
    )


def test_rank_posterior_is_the_effective_rank_of_theta(nw_mcmc):
    s = nw_mcmc.samples
    sv = np.concatenate(
        [
            np.linalg.svd(m @ n.T, compute_uv=False)[None, :K]
            for m, n in zip(s["M"].reshape(-1, M1, K), s["N"].reshape(-1, M2, K))
        ]
    )
    # thresholds between the singular values, so that the counts vary over the draws
    for t in (np.median(sv[:, 0]), np.median(sv[:, 1]), np.median(sv[:, 2]), 0.0, 1e9):
        want = np.bincount(_svd_counts(s["M"], s["N"], t), minlength=K + 1) / (C * D)
        np.testing.assert_array_equal(dg.rank_posterior(nw_mcmc, t), want)
        np.testing.assert_array_equal(dg.stats.theta_rank_posterior(nw_mcmc, t), want)
    assert 0 < dg.rank_posterior(nw_mcmc, np.median(sv[:, 1]))[2] < 1
    # default: 1% of the posterior mean of the largest singular value
    t = dg.stats.SV_RELATIVE_THRESHOLD * sv[:, 0].mean()
    want = np.bincount(_svd_counts(s["M"], s["N"], t), minlength=K + 1) / (C * D)
    np.testing.assert_array_equal(dg.rank_posterior(nw_mcmc), want)
    with pytest.raises(ValueError, match="threshold"):
        dg.rank_posterior(nw_mcmc, float("nan"))
    # without factor draws: a clear error
    nofactors = FakeMCMCFit(
        {k: v for k, v in s.items() if k not in ("M", "N")},
        [0, 2, 5],
        [1, 4, 0],
        (M1, M2),
        prior=NW,
    )
    with pytest.raises(ValueError, match="store_factors=True"):
        dg.rank_posterior(nofactors, 0.5)


def test_rank_posterior_of_a_vb_fit_is_that_of_its_draws():
    vb = FakeVBFit(
        np.ones((M1, K)),
        np.ones((M2, K)),
        random_spd(np.random.default_rng(1), M1, K),
        random_spd(np.random.default_rng(2), M2, K),
        {},
        NW,
        elbo=[-3.0, -2.0],
    )
    sv = dg.to_arviz(vb, num_draws=50, seed=4).posterior["theta_sv"].values.reshape(-1, K)
    t = float(np.median(sv[:, 1]))
    want = np.bincount(np.sum(sv > t, axis=-1), minlength=K + 1) / 50
    np.testing.assert_array_equal(dg.rank_posterior(vb, t, num_draws=50, seed=4), want)


def test_to_arviz_state_summaries_and_draws_on_request(nw_mcmc):
    post = dg.to_arviz(nw_mcmc).posterior
    assert "gamma" not in post and "gamma_sorted" not in post
    assert not {"mu_M", "Lambda_M", "mu_N", "Lambda_N", "M", "N"} & set(post.data_vars)
    assert list(post["side"].values) == ["M", "N"]
    for k, side in enumerate(("M", "N")):
        lam = nw_mcmc.samples[f"Lambda_{side}"]
        # eigenvalues of the covariance Lambda^{-1}, decreasing, by a route of their own
        want = -np.sort(-np.linalg.eigvals(np.linalg.inv(lam)).real, axis=-1)
        np.testing.assert_allclose(post["cov_eig"].values[:, :, k], want, rtol=1e-10)
        np.testing.assert_allclose(
            post["mu_norm"].values[:, :, k],
            np.sqrt(np.sum(nw_mcmc.samples[f"mu_{side}"] ** 2, axis=-1)),
            rtol=1e-12,
        )
    assert post["cov_eig"].dims == ("chain", "draw", "side", "h")
    assert post["mu_norm"].dims == ("chain", "draw", "side")
    # the state as stored, on request
    post = dg.to_arviz(nw_mcmc, var_names=["mu_M", "Lambda_M", "mu_N", "Lambda_N"]).posterior
    for side in ("M", "N"):
        np.testing.assert_array_equal(post[f"mu_{side}"].values, nw_mcmc.samples[f"mu_{side}"])
        np.testing.assert_array_equal(
            post[f"Lambda_{side}"].values, nw_mcmc.samples[f"Lambda_{side}"]
        )
        assert post[f"mu_{side}"].dims == ("chain", "draw", "h")
        assert post[f"Lambda_{side}"].dims == ("chain", "draw", "h", "h2")
    assert {"theta", "theta_sv", "theta_fro", "eff_rank", "cov_eig"} <= set(post.data_vars)
    assert post.attrs["prior"] == "normal-wishart"


def test_summary_and_report_skip_gamma(nw_mcmc, tmp_path):
    table = dg.summary(nw_mcmc)
    assert not any(label.startswith("gamma") for label in table.index)
    assert any(label.startswith("theta_fro") for label in table.index)
    names = {p.name for p in dg.report(nw_mcmc, tmp_path)}
    assert {"summary.csv", "summary.md", "summary.png", "trace.png"} <= names
    assert "gamma.png" not in names and "rank_posterior.csv" not in names
    assert "Rank posterior" not in (tmp_path / "summary.md").read_text()


def test_guide_draws_and_vb(nw_mcmc):
    rng = np.random.default_rng(3)
    S = 7
    draws = {
        **_state(rng, (S,)),
        "M": rng.normal(size=(S, M1, K)),
        "N": rng.normal(size=(S, M2, K)),
    }
    svi = FakeGuideFit(
        draws=draws,
        losses=np.array([2.0, 1.0]),
        shape=(M1, M2),
        info=fake_info("svi", K, (M1, M2), NW),
    )
    post = dg.to_arviz(svi).posterior
    assert "gamma" not in post and "Lambda_N" not in post and post["cov_eig"].shape == (1, S, 2, K)
    post = dg.to_arviz(svi, var_names=["Lambda_N"]).posterior
    np.testing.assert_array_equal(post["Lambda_N"].values[0], draws["Lambda_N"])
    r = dg.rank_posterior(svi, 0.5)
    np.testing.assert_array_equal(
        r, np.bincount(_svd_counts(draws["M"], draws["N"], 0.5), minlength=K + 1) / S
    )
    vb = FakeVBFit(
        rng.normal(size=(M1, K)),
        rng.normal(size=(M2, K)),
        random_spd(rng, M1, K),
        random_spd(rng, M2, K),
        {},
        NW,
        elbo=[-3.0, -2.0],
    )
    post = dg.to_arviz(vb, num_draws=20).posterior
    assert "gamma" not in post and "theta_sv" in post


def test_summary_converts_requested_extra_variables(nw_mcmc):
    """A variable outside the default conversion (here ``Lambda_M``) named in ``var_names``
    is converted for the table instead of reported missing."""
    assert "Lambda_M" not in dg.to_arviz(nw_mcmc).posterior
    table = dg.summary(nw_mcmc, var_names=["Lambda_M", "theta_fro"])
    assert any(label.startswith("Lambda_M") for label in table.index)
    assert any(label.startswith("theta_fro") for label in table.index)
    with pytest.raises(ValueError, match="no posterior variable"):
        dg.summary(nw_mcmc, var_names=["no_such_variable"])
