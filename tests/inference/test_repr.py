"""``repr(fit)`` is one screen for every result class: the class, method, components, K,
what the fit holds, dtype, data shape and (where recorded) the test RMSE, no arrays."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc


@pytest.fixture(scope="module")
def data():
    sim = bmc.datasets.simulate_paper(30, rank=2, frac=0.5, noise_sd=0.5, seed=3)
    return sim.train.split(0.2, seed=0)


@pytest.mark.parametrize(
    "method, kw, holds",
    [
        (
            "gibbs",
            dict(num_warmup=3, num_samples=40, thinning=1, num_chains=2),
            "2 chains x 40 draws, factor draws: all",
        ),
        ("vb", dict(max_iter=4), "4 iterations, not converged, best of 1 start"),
        ("svi", dict(num_steps=4, num_draws=6), "6 draws from the 'normal' guide, 4 steps"),
        ("map", dict(num_steps=4), "a point, 4 steps"),
        pytest.param(
            "nuts",
            dict(num_warmup=3, num_samples=3, thinning=1, num_chains=1),
            "1 chain x 3 draws",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_repr_is_one_screen(data, tmp_path, method, kw, holds):
    train, test = data
    fit = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        method=method,
        test=test,
        progress_bar=False,
        **kw,
    )
    text = repr(fit)
    lines = text.splitlines()
    assert len(lines) <= 8 and max(map(len, lines)) <= 200, text
    cls = type(fit).__name__
    assert (
        lines[0].startswith(f"{cls}(method={method!r}, K=3, {holds}")
        and "dtype=float32" in lines[0]
    )
    assert "NormalWishart(" in text and "LearnedNoise(" in text and "Biases(" in text
    assert f"data: 30 x 30, {train.n} training ratings" in text
    assert ("test RMSE" in text) == (method in ("gibbs", "vb"))
    assert "array(" not in text and "[[" not in text
    if method == "gibbs":
        last = ", ".join(f"{v:.4f}" for v in np.asarray(fit.rmse_mean)[:, -1])
        assert f"test RMSE: {last}" in text
        fit.save(tmp_path / "fit.npz", factor_draws=10)
        loaded = repr(bmc.load(tmp_path / "fit.npz"))
        assert "2 chains x 40 draws, factor draws: 5 per chain" in loaded
    if method == "vb":
        assert f"test RMSE: {float(fit.rmse_trace[-1]):.4f}" in text
