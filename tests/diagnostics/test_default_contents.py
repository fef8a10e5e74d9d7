"""What ``to_arviz`` holds by default, and what it adds on request.

By default the posterior holds the few variables one reads (theta at the tracked entries,
gamma / the Normal-Wishart state's invariant summaries, the singular values of theta,
``||theta||_F``, the effective rank, the noise sd, the biases' variances); per-row biases,
the factors and the full matrices only through ``var_names=`` or ``full=True``, as stored;
an unknown name raises an error that lists the available ones.  Checked on fake fits with
known draws and on a small real Gibbs fit of the recommended model (two chains).
"""

from __future__ import annotations

import dataclasses

import arviz as az
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _arviz
from bmczoo import diagnostics as dg
from bmczoo.diagnostics.plots import _quiet_arviz_plots

from ._fakes import FakeMCMCFit, FakeVBFit, random_spd

K, C, D, M1, M2 = 3, 2, 12, 6, 5
ROWS, COLS = np.array([0, 2, 5]), np.array([1, 4, 0])
NW_DEFAULT = [
    "theta",
    "theta_sv",
    "theta_fro",
    "eff_rank",
    "noise_sd",
    "bias_var",
    "cov_eig",
    "mu_norm",
]
PER_ROW = {"row_bias", "col_bias", "M", "N"}


def _full_fit(prior=None):
    """A fake Gibbs fit with everything a fit of the recommended model stores: factors,
    biases and their variances, tau, the Normal-Wishart state (or gamma)."""
    prior = bmc.priors.NormalWishart() if prior is None else prior
    rng = np.random.default_rng(5)
    lead = (C, D)
    M, N = rng.normal(size=lead + (M1, K)), rng.normal(size=lead + (M2, K))
    s = {
        "M": M,
        "N": N,
        "row_bias": rng.normal(size=lead + (M1,)),
        "col_bias": rng.normal(size=lead + (M2,)),
        "row_bias_var": rng.gamma(2.0, size=lead),
        "col_bias_var": rng.gamma(2.0, size=lead),
        "tau": rng.gamma(5.0, size=lead),
    }
    if prior.has_column_scales:
        s["gamma"] = rng.gamma(2.0, size=lead + (K,))
    else:
        for side in ("M", "N"):
            s[f"mu_{side}"] = rng.normal(size=lead + (K,))
            s[f"Lambda_{side}"] = random_spd(rng, C * D, K).reshape(lead + (K, K))
    s["theta"] = np.einsum("cdek,cdek->cde", M[:, :, ROWS], N[:, :, COLS])
    fit = FakeMCMCFit(s, ROWS, COLS, (M1, M2), prior=prior)
    fit.info = dataclasses.replace(
        fit.info, likelihood=bmc.likelihoods.LearnedNoise(), biases=bmc.offsets.Biases()
    )
    return fit


def test_default_holds_the_small_variables_in_order():
    fit = _full_fit()
    s = fit.samples
    post = dg.to_arviz(fit).posterior
    assert list(post.data_vars) == NW_DEFAULT
    assert not (PER_ROW | {"tau", "row_bias_var", "mu_M", "Lambda_M", "mu_N", "Lambda_N"}) & set(
        post.data_vars
    )
    np.testing.assert_array_equal(post["theta"].values, s["theta"])
    np.testing.assert_allclose(post["noise_sd"].values, 1.0 / np.sqrt(s["tau"]), rtol=1e-12)
    assert list(post["bias"].values) == ["row", "col"]
    np.testing.assert_array_equal(post["bias_var"].sel(bias="row").values, s["row_bias_var"])
    np.testing.assert_array_equal(post["bias_var"].sel(bias="col").values, s["col_bias_var"])
    # the singular values of theta from the factors, by NumPy's SVD of the formed product
    sv = np.linalg.svd(np.einsum("cdik,cdjk->cdij", s["M"], s["N"]), compute_uv=False)[..., :K]
    np.testing.assert_allclose(post["theta_sv"].values, sv, rtol=1e-9)
    np.testing.assert_allclose(post["theta_fro"].values, np.sqrt(np.sum(sv**2, -1)), rtol=1e-9)
    # a prior with column scales: gamma and its summaries instead of the Normal-Wishart ones
    post = dg.to_arviz(_full_fit(bmc.priors.Gamma())).posterior
    assert list(post.data_vars) == [
        "theta",
        "gamma",
        "gamma_sorted",
        "num_active",
        "theta_sv",
        "theta_fro",
        "eff_rank",
        "noise_sd",
        "bias_var",
    ]


def test_var_names_round_trip_and_unknown_names():
    fit = _full_fit()
    s = fit.samples
    extra = dg.extra_var_names(fit)
    assert extra == sorted(
        [
            "M",
            "N",
            "row_bias",
            "col_bias",
            "row_bias_var",
            "col_bias_var",
            "tau",
            "mu_M",
            "Lambda_M",
            "mu_N",
            "Lambda_N",
        ]
    )
    post = dg.to_arviz(fit, var_names=["row_bias", "col_bias", "M", "N", "tau", "theta"]).posterior
    assert list(post.data_vars) == NW_DEFAULT + ["row_bias", "col_bias", "M", "N", "tau"]
    for name in ("row_bias", "col_bias", "M", "N", "tau"):
        np.testing.assert_array_equal(post[name].values, s[name])
    assert post["row_bias"].dims == ("chain", "draw", "i") and post.sizes["i"] == M1
    assert post["col_bias"].dims == ("chain", "draw", "j") and post.sizes["j"] == M2
    assert post["M"].dims == ("chain", "draw", "i", "h") and post["N"].dims == (
        "chain",
        "draw",
        "j",
        "h",
    )
    # one name as a string; the method of a fit result passes it on
    assert list(dg.to_arviz(fit, var_names="Lambda_M").posterior.data_vars) == NW_DEFAULT + [
        "Lambda_M"
    ]
    # full=True: every stored draw
    assert set(dg.to_arviz(fit, full=True).posterior.data_vars) == set(NW_DEFAULT) | set(extra)
    with pytest.raises(ValueError, match=r"no variable \['row_biases'\].*can add \[.*'row_bias'"):
        dg.to_arviz(fit, var_names=["row_bias", "row_biases"])
    with pytest.raises(
        ValueError, match=r"no variable \['gamma'\]"
    ):  # a Normal-Wishart fit has no gamma
        dg.fit_arrays(fit, var_names=["gamma"])
    with pytest.raises(TypeError, match="var_names"):
        dg.to_arviz(fit, var_names=[3])


def test_vb_has_nothing_to_add():
    rng = np.random.default_rng(1)
    vb = FakeVBFit(
        rng.normal(size=(M1, K)),
        rng.normal(size=(M2, K)),
        random_spd(rng, M1, K),
        random_spd(rng, M2, K),
        {},
        bmc.priors.NormalWishart(),
        elbo=[-3.0, -2.0],
    )
    assert dg.extra_var_names(vb) == []
    with pytest.raises(ValueError, match="can add nothing"):
        dg.to_arviz(vb, var_names=["M"], num_draws=5)


@pytest.fixture(scope="module")
def recommended_fit():
    """The recommended model (Normal-Wishart, learned noise, biases) on a small simulated
    problem, two chains."""
    train = bmc.datasets.simulate_paper(20, seed=3).train
    return bmc.fit(
        train,
        K=3,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        num_warmup=10,
        num_samples=20,
        thinning=2,
        num_chains=2,
        progress_bar=False,
        seed=0,
    )


def test_recommended_fit_default_and_extras(recommended_fit, tmp_path):
    fit = recommended_fit
    idata = fit.to_arviz()
    post = idata.posterior
    assert list(post.data_vars) == NW_DEFAULT
    assert post.sizes["chain"] == 2 and post.sizes["draw"] == 10
    m1, m2 = fit.shape
    extra = set(dg.extra_var_names(fit))
    assert {"row_bias", "col_bias", "mu_M", "Lambda_M", "tau"} <= extra
    big = fit.to_arviz(var_names=["row_bias", "col_bias", "Lambda_N"]).posterior
    assert big["row_bias"].shape == (2, 10, m1) and big["col_bias"].shape == (2, 10, m2)
    np.testing.assert_array_equal(big["Lambda_N"].values, np.asarray(fit.samples["Lambda_N"]))
    # ArviZ's own trace plot of the default: one row per variable, at most 8 (ArviZ 0.23
    # under Matplotlib 3.11 triggers a deprecation that the suite's -W error would raise)
    with _quiet_arviz_plots():
        if _arviz.arviz_major() < 1:
            axes = az.plot_trace(idata, show=False)
            assert axes.shape == (len(NW_DEFAULT), 2)
            fig = axes.ravel()[0].figure
        else:
            pc = az.plot_trace_dist(idata, backend="matplotlib")
            assert list(pc.viz["plot"].data_vars) == NW_DEFAULT
            assert pc.viz["plot"].sizes["column"] == 2
            fig = pc.viz["figure"].item()
    import matplotlib.pyplot as plt

    plt.close(fig)
    # the summary and the report read the small default
    table = dg.summary(fit)
    assert not any(
        label.startswith(("row_bias", "col_bias", "Lambda", "mu_")) for label in table.index
    )
    written = {p.name for p in dg.report(fit, tmp_path, dpi=50)}
    assert {"summary.md", "trace.png"} <= written
