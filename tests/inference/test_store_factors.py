"""``store_factors="auto"`` counts every draw kept with the factors (a feature link's
``B`` and feature-driven biases' weights as well as ``M``, ``N`` and the biases)."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.inference.gibbs import driver

M1, M2, K, F, KEPT = 30, 20, 2, 200, 10
FACTORS = KEPT * (M1 + M2) * K * 4  # M and N of the kept draws, float32
LINK = KEPT * F * K * 4  # the row link's B


@pytest.fixture(scope="module")
def linked():
    rng = np.random.default_rng(0)
    r, c = np.nonzero(rng.random((M1, M2)) < 0.4)
    return bmc.RatingData(
        r,
        c,
        rng.normal(size=len(r)),
        shape=(M1, M2),
        row_features=Features.from_dense(rng.normal(size=(M1, F))),
    )


def _fit(data):
    return bmc.fit(
        data,
        K=K,
        prior=bmc.priors.NormalWishart(row_features=True),
        num_warmup=2,
        num_samples=KEPT,
        thinning=1,
        num_chains=1,
        seed=0,
        progress_bar=False,
    )


@pytest.mark.parametrize("budget, kept", [(FACTORS + LINK // 2, False), (FACTORS + LINK + 1, True)])
def test_auto_counts_the_link(linked, monkeypatch, budget, kept):
    """Within the budget by the factors alone, over it with ``B``: not kept."""
    monkeypatch.setattr(driver, "_STORE_FACTORS_BUDGET", budget)
    fit = _fit(linked)
    assert ("M" in fit.samples) is kept
    if kept:
        assert fit.samples["B_M"].shape[-2:] == (F, K)
    else:
        assert not any(k.startswith("B_") for k in fit.samples)
