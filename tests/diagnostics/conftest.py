"""Fixtures of the diagnostics tests: small real fits (compiled once per session) and
fake fit objects with known draws.  Plots use the Agg backend (headless)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import bmczoo as bmc  # noqa: E402

from ._fakes import K, NUM_CHAINS, NUM_SAMPLES, NUM_TRACK, NUM_WARMUP, PRIOR, THINNING  # noqa: E402


@pytest.fixture(scope="session")
def sim_data():
    sim = bmc.datasets.simulate_paper(30, seed=1)
    train, test = sim.train.split(test_fraction=0.25, seed=0)
    return train, test


@pytest.fixture(scope="session")
def gibbs_fit(sim_data):
    train, test = sim_data
    return bmc.fit(
        train,
        K=K,
        prior=PRIOR,
        method="gibbs",
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        thinning=THINNING,
        num_chains=NUM_CHAINS,
        test=test,
        track=NUM_TRACK,
        store_factors=True,
        clip=False,
        progress_bar=False,
        seed=0,
    )


@pytest.fixture(scope="session")
def vb_fit(sim_data):
    train, test = sim_data
    return bmc.fit(
        train, K=K, prior=PRIOR, method="vb", test=test, clip=False, progress_bar=False, seed=0
    )


@pytest.fixture(scope="session")
def svi_fit(sim_data):
    train, _ = sim_data
    return bmc.fit(
        train,
        K=K,
        prior=bmc.priors.InverseGamma(1.0, 0.1),
        method="svi",
        num_steps=60,
        progress_bar=False,
        seed=0,
    )
