"""``bmc.fit(TensorData, method="svi" | "map")``: NumPyro's autoguides on the tensor model
(the matrix path's ``run_svi`` given :func:`bmczoo.models.tensor_completion`), their
:class:`~bmczoo.inference.TensorFit` (the outputs from the guide's draws or the MAP
point), save / load, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import TensorData

pytestmark = pytest.mark.usefixtures("x64")

NOISE = 0.3


def _array(shape=(20, 20, 20), R=2, frac=0.25, seed=0):
    """A planted CP-rank-``R`` array with noise sd :data:`NOISE`: (train, test)."""
    rng = np.random.default_rng(seed)
    U = [rng.normal(size=(m, R)) for m in shape]
    n = int(frac * np.prod(shape))
    flat = rng.choice(np.prod(shape), n, replace=False)
    idx = np.stack(np.unravel_index(flat, shape), 1)
    truth = np.einsum("nr,nr,nr->n", *(u[idx[:, d]] for d, u in enumerate(U)))
    return TensorData(idx, 3.0 + truth + NOISE * rng.normal(size=n), shape).split(0.2, seed=0)


def _theta(fit, idx):
    """theta (draws, P) from the stored factors, centred scale."""
    U = [np.asarray(u).reshape(-1, *np.shape(u)[2:]) for k, u in fit.factors.items() if k[0] == "U"]
    return np.einsum("snk,snk,snk->sn", *(u[:, idx[:, d]] for d, u in enumerate(U)))


@pytest.mark.parametrize("method, steps", [("svi", 2000), ("map", 1000)], ids=["svi", "map"])
def test_recovers_a_planted_array(tmp_path, method, steps):
    train, test = _array()
    fit = bmc.fit(
        train,
        K=4,
        method=method,
        test=test,
        likelihood=bmc.likelihoods.LearnedNoise(),
        num_steps=steps,
        progress_bar=False,
    )
    assert type(fit).__name__ == "TensorFit" and fit.info.method == method
    S = 100 if method == "svi" else 1
    assert fit.factors["U1"].shape == (1, S, 20, 4) and fit.samples["gamma"].shape == (1, S, 4)
    assert fit.losses.shape == (steps,) and fit.losses[-100:].mean() < fit.losses[:100].mean()
    # the signal's sd is about 1.4: the fit's error is the noise's, well below it
    sd = float(np.std(test.values))
    rmse = fit.rmse(test)
    assert rmse < 1.5 * NOISE < 0.4 * sd, (rmse, sd)
    assert fit.rmse_draw.shape == (1, S)
    # the outputs are the draws' (SVI) or the point's (MAP: no spread but the noise's)
    t = _theta(fit, test.indices)
    mean, psd = fit.predict(test.indices, return_std=True)
    shift = fit.info.shift
    np.testing.assert_allclose(mean, np.clip(t.mean(0) + shift.offset, shift.lo, shift.hi))
    np.testing.assert_allclose(psd**2, t.var(0) + fit.noise_var())
    if method == "map":
        np.testing.assert_allclose(psd, np.sqrt(fit.noise_var()))
    else:
        post = fit.rank_posterior()
        assert max(post, key=post.get) == 2, post  # the discrete prior's rank
    assert np.isfinite(fit.log_predictive_density(test))
    idata = fit.to_arviz()
    from bmczoo._arviz import group

    assert group(idata, "posterior")["gamma"].shape == (1, S, 4)
    fit.save(tmp_path / "f.npz")
    back = bmc.load(tmp_path / "f.npz")
    assert back.info.method == method and type(back.info.settings) is type(fit.info.settings)
    np.testing.assert_array_equal(back.predict(test.indices), mean)
    np.testing.assert_array_equal(back.losses, fit.losses)
    np.testing.assert_array_equal(back.seen_index, train.indices)


@pytest.mark.slow
def test_gamma_prior_and_minibatches():
    """A prior with a ``gamma`` site in the guide, biases per mode and minibatches."""
    train, test = _array(shape=(8, 7, 6), frac=0.5)
    fit = bmc.fit(
        train,
        K=2,
        prior=bmc.priors.InverseGamma(),
        method="svi",
        biases=True,
        num_steps=50,
        num_draws=7,
        subsample_size=64,
        progress_bar=False,
    )
    assert fit.samples["gamma"].shape == (1, 7, 2) and fit.factors["b2"].shape == (1, 7, 6)
    assert fit.samples["bias_var"].shape == (1, 7, 3)
    assert np.all(np.isfinite(fit.predict(test.indices)))
    fit = bmc.fit(train, K=2, prior=bmc.priors.Fixed(1.0), method="map", num_steps=20,
                  progress_bar=False)  # fmt: skip
    np.testing.assert_allclose(fit.samples["gamma"], 1.0)


def test_errors():
    train, _ = _array(shape=(6, 5, 4), frac=0.5)
    with pytest.raises(ValueError, match="num_warmup= applies to method='gibbs' or 'nuts'"):
        bmc.fit(train, K=2, method="svi", num_warmup=10)
    with pytest.raises(ValueError, match="guide must be one of"):
        bmc.fit(train, K=2, method="svi", guide="delta")
    with pytest.raises(ValueError, match="method='map' on a TensorData takes a column-scale"):
        bmc.fit(train, K=2, method="map", prior=bmc.priors.NormalWishart())
    with pytest.raises(ValueError, match="subsample_size=1000 exceeds the number of"):
        bmc.fit(train, K=2, method="svi", subsample_size=1000, progress_bar=False)
    with pytest.raises(ValueError, match="probit likelihood is not implemented"):
        bmc.fit(train, K=2, method="svi", likelihood=bmc.likelihoods.Probit())
    with pytest.raises(ValueError, match="method='vb' on a TensorData takes a column-scale"):
        bmc.fit(train, K=2, method="vb", prior=bmc.priors.NormalWishart())
