"""The tensor model in NumPyro (:func:`bmczoo.models.tensor_completion`) against the CP
Gibbs sampler: on a small 6 x 5 x 4 array the posterior means of theta at observed and
unobserved entries, of ``|theta|`` and of the noise precision agree within ``z_crit``
Monte Carlo standard errors of the difference (ArviZ's MCSE of each method's mean,
Bonferroni at a familywise level of 1%); and ``bmc.fit(method="nuts")`` on a
``TensorData`` gives a ``TensorFit`` of its draws."""

from __future__ import annotations

from statistics import NormalDist

import arviz as az
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import TensorData

pytestmark = pytest.mark.usefixtures("x64")

SHAPE, K = (6, 5, 4), 2
PRIOR = bmc.priors.InverseGamma(10.0, 9.0)
LIK = bmc.likelihoods.LearnedNoise(a=6.0, b=5.0)


def _data():
    rng = np.random.default_rng(3)
    U = [rng.normal(size=(m, 2)) for m in SHAPE]
    flat = rng.choice(np.prod(SHAPE), 50, replace=False)
    idx = np.stack(np.unravel_index(flat, SHAPE), 1)
    y = np.einsum("nr,nr,nr->n", *(u[idx[:, d]] for d, u in enumerate(U)))
    return TensorData(idx, y + 0.5 * rng.normal(size=50), SHAPE)


ENTRIES = np.array([[0, 0, 0], [5, 4, 3], [2, 3, 1]])


def _functions(fit):
    """(chain, draw, F): theta at the entries, |theta| there, tau."""
    C, S = np.shape(fit.factors["U0"])[:2]
    t = np.concatenate([b for _, _, b in fit._theta_blocks(ENTRIES)], axis=1).reshape(C, S, -1)
    return np.concatenate([t, np.abs(t), np.asarray(fit.samples["tau"])[..., None]], axis=-1)


def _mean_mcse(f):
    ds = az.convert_to_dataset({"f": f})
    return f.mean((0, 1)), np.asarray(az.mcse(ds, method="mean")["f"]).reshape(-1)


@pytest.mark.slow
def test_nuts_agrees_with_gibbs():
    data = _data()
    kw = dict(K=K, prior=PRIOR, likelihood=LIK, center=False, progress_bar=False)
    gibbs = bmc.fit(data, num_warmup=500, num_samples=8000, thinning=2, num_chains=4, **kw)
    nuts = bmc.fit(
        data, method="nuts", num_warmup=500, num_samples=1000, thinning=1, num_chains=2, **kw
    )
    (mg, sg), (mn, sn) = _mean_mcse(_functions(gibbs)), _mean_mcse(_functions(nuts))
    z = (mg - mn) / np.sqrt(sg**2 + sn**2)
    z_crit = NormalDist().inv_cdf(1 - 0.01 / (2 * z.size))
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)


def test_nuts_fit_is_a_tensor_fit(tmp_path):
    data = _data()
    train, test = data.split(0.2, seed=0)
    fit = bmc.fit(
        train,
        test=test,
        K=K,
        prior=bmc.priors.Discrete(),
        likelihood=LIK,
        method="nuts",
        num_warmup=30,
        num_samples=20,
        thinning=1,
        num_chains=1,
        progress_bar=False,
    )
    assert type(fit).__name__ == "TensorFit"
    assert fit.factors["U2"].shape == (1, 20, 4, K) and fit.rmse_draw.shape == (1, 20)
    assert np.isfinite(fit.rmse(test)) and sum(fit.rank_posterior().values()) == pytest.approx(1)
    fit.save(tmp_path / "n.npz")
    np.testing.assert_array_equal(
        bmc.load(tmp_path / "n.npz").predict(test.indices), fit.predict(test.indices)
    )
