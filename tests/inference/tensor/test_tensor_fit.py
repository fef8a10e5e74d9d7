"""``bmc.fit`` on a :class:`~bmczoo.data.TensorData`: the outputs against the kept draws
(float64, exact), save / load, ArviZ, the rank posterior from the slab start on a small
CP-rank-2 array, and the errors of what is not implemented yet."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import logsumexp

import bmczoo as bmc
from bmczoo.data import TensorData

pytestmark = pytest.mark.usefixtures("x64")


def _array(shape=(15, 12, 10), R=2, frac=0.3, sd=0.3, seed=0):
    rng = np.random.default_rng(seed)
    U = [rng.normal(size=(m, R)) for m in shape]
    n = int(frac * np.prod(shape))
    flat = rng.choice(np.prod(shape), n, replace=False)
    idx = np.stack(np.unravel_index(flat, shape), 1)
    truth = np.einsum("nr,nr,nr->n", *(u[idx[:, d]] for d, u in enumerate(U)))
    return TensorData(idx, 3.0 + truth + sd * rng.normal(size=n), shape).split(0.2, seed=0)


FIT = dict(K=4, num_warmup=100, num_samples=200, thinning=5, num_chains=2, progress_bar=False)


def _draws(fit, idx):
    """theta (draws, P) from the stored factors, centred scale."""
    U = [
        np.asarray(fit.factors[f"U{d}"]).reshape(-1, *fit.factors[f"U{d}"].shape[2:])
        for d in range(3)
    ]
    t = np.einsum("snk,snk,snk->sn", *(u[:, idx[:, d]] for d, u in enumerate(U)))
    for d in range(3):
        if f"b{d}" in fit.factors:
            t = t + np.asarray(fit.factors[f"b{d}"]).reshape(t.shape[0], -1)[:, idx[:, d]]
    return t


@pytest.mark.parametrize(
    "prior, biases",
    [
        (bmc.priors.InverseGamma(), False),
        (bmc.priors.InverseGamma(), True),
        (bmc.priors.NormalWishart(), True),
    ],
    ids=["inverse-gamma", "inverse-gamma+biases", "normal-wishart+biases"],
)
def test_outputs_are_the_draws(tmp_path, prior, biases):
    train, test = _array()
    fit = bmc.fit(
        train,
        test=test,
        prior=prior,
        biases=biases,
        likelihood=bmc.likelihoods.LearnedNoise(),
        **FIT,
    )
    assert fit.factors["U2"].shape == (2, 40, 10, 4)
    t = _draws(fit, test.indices)
    off = fit.info.shift.offset
    mean, sd = fit.predict(test.indices, return_std=True)
    np.testing.assert_allclose(
        mean, np.clip(t.mean(0) + off, fit.info.shift.lo, fit.info.shift.hi), rtol=1e-12
    )
    tau = np.asarray(fit.samples["tau"]).reshape(-1)
    np.testing.assert_allclose(sd**2, t.var(0) + np.mean(1 / tau), rtol=1e-10)
    y = test.values - off
    lp = 0.5 * np.log(tau[:, None] / (2 * math.pi)) - 0.5 * tau[:, None] * (y - t) ** 2
    lpd = np.mean(logsumexp(lp, axis=0) - math.log(t.shape[0]))
    assert fit.log_predictive_density(test) == pytest.approx(lpd, rel=1e-12)
    assert fit.rmse(test) < 0.6  # noise sd 0.3; the signal's sd is about 1.4
    lo, hi = fit.predictive_interval(test.indices, prob=0.9)
    # one index array per mode, as a matrix's predict(rows, cols)
    np.testing.assert_array_equal(fit.predict(*test.indices.T), mean)
    with pytest.raises(ValueError, match="3 index arrays, one per mode; got 2"):
        fit.predict(test.indices[:, 0], test.indices[:, 1])
    assert np.mean((lo < test.values) & (test.values < hi)) > 0.8
    from bmczoo._arviz import group

    idata = fit.to_arviz()
    name = "gamma" if prior.has_column_scales else "mu0"
    assert group(idata, "posterior")[name].shape == (2, 40, 4)
    np.testing.assert_array_equal(group(idata, "sample_stats")["rmse"], fit.rmse_draw)
    fit.save(tmp_path / "t.npz")
    back = bmc.load(tmp_path / "t.npz")
    assert type(back).__name__ == "TensorFit" and back.shape == fit.shape
    np.testing.assert_array_equal(back.predict(test.indices), fit.predict(test.indices))
    assert back.log_predictive_density(test) == fit.log_predictive_density(test)


def test_the_discrete_prior_finds_the_rank_from_the_slab():
    train, test = _array(shape=(20, 20, 20), R=2, frac=0.25, sd=0.5, seed=1)
    prior = bmc.priors.Discrete()
    fit = bmc.fit(
        train,
        test=test,
        prior=prior,
        likelihood=bmc.likelihoods.LearnedNoise(),
        **{**FIT, "K": 5, "num_warmup": 300, "num_samples": 300},
    )
    post = fit.rank_posterior()
    assert max(post, key=post.get) == 2, post


def test_errors():
    train, test = _array()
    with pytest.raises(ValueError, match="biases= is not implemented for method='vb'"):
        bmc.fit(train, K=2, method="vb", biases=True)
    with pytest.raises(ValueError, match="overrelax= is not implemented for a TensorData"):
        bmc.fit(train, K=2, overrelax=0.5)
    with pytest.raises(ValueError, match="probit likelihood is not implemented"):
        bmc.fit(train, K=2, likelihood=bmc.likelihoods.Probit())
    with pytest.raises(ValueError, match="normal-wishart prior with features is not implemented"):
        bmc.fit(train, K=2, prior=bmc.priors.NormalWishart(implicit=True))
    with pytest.raises(TypeError, match="test must be a TensorData"):
        bmc.fit(train, K=2, test=bmc.RatingData([0], [0], [1.0], (2, 2)))
    with pytest.raises(ValueError, match="predict= and context="):
        bmc.fit(train, K=2, predict=([0], [0]))
    fit = bmc.fit(train, **{**FIT, "num_warmup": 2, "num_samples": 5})
    with pytest.raises(ValueError, match="out of range"):
        fit.predict([[0, 0, 99]])
    with pytest.raises(ValueError, match=r"shape \(P, 3\)"):
        fit.predict([[0, 0]])
