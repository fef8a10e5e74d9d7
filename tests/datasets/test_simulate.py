"""The paper's simulation design: shapes, reproducibility, distributions, RMSE helper."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.datasets import Simulation, simulate_paper


def test_paper_defaults():
    sim = simulate_paper(100)
    assert isinstance(sim, Simulation)
    assert (sim.noise_sd, sim.factor_scale, sim.rank, sim.frac) == (1.0, "variance", 2, 0.2)
    assert sim.train.n == 2000 and sim.train.shape == (100, 100)
    assert sim.theta.shape == (100, 100) and sim.theta.dtype == np.float64
    assert sim.M0.shape == (100, 2) and sim.N0.shape == (100, 2)
    assert np.linalg.matrix_rank(sim.theta) == 2
    assert "Simulation(shape=(100, 100), rank=2, n=2000" in repr(sim)


@pytest.mark.parametrize(
    "m, m2, rank, frac",
    [(50, None, 2, 0.2), (30, 45, 3, 0.5), (7, None, 1, 1.0), (20, 10, 5, 0.013)],
)
def test_shapes_and_n(m, m2, rank, frac):
    sim = simulate_paper(m, rank=rank, frac=frac, m2=m2, seed=1)
    cols = m if m2 is None else m2
    assert sim.shape == sim.train.shape == sim.theta.shape == (m, cols)
    assert sim.M0.shape == (m, rank) and sim.N0.shape == (cols, rank)
    assert sim.train.n == round(frac * m * cols)
    # observed positions: distinct, in range, sorted row-major
    key = sim.train.rows.astype(np.int64) * cols + sim.train.cols
    assert (np.diff(key) > 0).all()
    assert isinstance(sim.train, bmc.RatingData)


def test_exact_reproducibility_by_seed():
    a, b, c = simulate_paper(60, seed=7), simulate_paper(60, seed=7), simulate_paper(60, seed=8)
    for name in ("M0", "N0", "theta"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.train == b.train
    assert not np.array_equal(a.M0, c.M0) and a.train != c.train
    # a Generator is accepted as the seed
    g = simulate_paper(60, seed=np.random.default_rng(7))
    assert g.train == a.train


def test_observations_are_theta_plus_noise():
    sd = 1.5
    sim = simulate_paper(100, noise_sd=sd, seed=2)
    r = sim.train
    resid = r.values - sim.theta[r.rows, r.cols]
    n = resid.size
    # mean 0 and variance sd^2 within 5 standard errors (normal: SE of s^2 = sd^2 sqrt(2/(n-1)))
    assert abs(resid.mean()) < 5 * sd / math.sqrt(n)
    assert abs(resid.var(ddof=1) - sd**2) < 5 * sd**2 * math.sqrt(2 / (n - 1))
    exact = simulate_paper(100, noise_sd=0.0, seed=2)
    np.testing.assert_allclose(
        exact.train.values, exact.theta[exact.train.rows, exact.train.cols], rtol=0, atol=1e-12
    )
    # same seed: same factors and positions whatever the noise level
    assert np.array_equal(exact.M0, sim.M0) and np.array_equal(exact.train.rows, sim.train.rows)


@pytest.mark.parametrize("factor_scale", ["variance", "sd"])
def test_factor_entry_variance_under_both_readings(factor_scale):
    m, rank = 100, 10  # 20/sqrt(100) = 2: variance 2 ("variance") or 4 ("sd")
    sim = simulate_paper(m, rank=rank, factor_scale=factor_scale, seed=11)
    target = 20 / math.sqrt(m) if factor_scale == "variance" else (20 / math.sqrt(m)) ** 2
    assert sim.factor_sd == pytest.approx(math.sqrt(target))
    x = np.concatenate([sim.M0.ravel(), sim.N0.ravel()])
    n = x.size
    assert abs(x.mean()) < 5 * math.sqrt(target / n)
    assert abs(x.var(ddof=1) - target) < 5 * target * math.sqrt(2 / (n - 1))
    other = (20 / math.sqrt(m)) ** 2 if factor_scale == "variance" else 20 / math.sqrt(m)
    assert abs(x.var(ddof=1) - other) > 5 * target * math.sqrt(
        2 / (n - 1)
    )  # the readings are told apart


def test_readings_coincide_at_m_400():
    a = simulate_paper(400, factor_scale="variance", seed=0)
    b = simulate_paper(400, factor_scale="sd", seed=0)
    assert a.factor_sd == b.factor_sd == 1.0
    assert np.array_equal(a.M0, b.M0)


def test_positions_are_uniform():
    m, frac, reps = 10, 0.2, 300
    counts = np.zeros(m * m)
    for s in range(reps):
        r = simulate_paper(m, frac=frac, seed=s).train
        counts[r.rows * m + r.cols] += 1
    # each entry is observed with probability frac; hypergeometric variance <= binomial
    sd = math.sqrt(reps * frac * (1 - frac))
    assert np.abs(counts - reps * frac).max() < 5 * sd
    assert counts.sum() == reps * round(frac * m * m)


def test_rmse_array_callable_and_predict_agree():
    sim = simulate_paper(40, m2=30, seed=3)
    rng = np.random.default_rng(0)
    est = sim.theta + rng.normal(0, 0.3, sim.theta.shape)
    want = math.sqrt(np.mean((est - sim.theta) ** 2))
    assert sim.rmse(est) == pytest.approx(want, rel=1e-12)
    seen = []

    def predict(rows, cols):
        seen.append(rows.size)
        assert rows.dtype == cols.dtype == np.int32
        return est[rows, cols]

    assert sim.rmse(predict) == pytest.approx(want, rel=1e-12)
    assert sim.rmse(predict, chunk_entries=70) == pytest.approx(want, rel=1e-12)  # 2 rows per call
    assert max(seen[1:]) == 60 and sum(seen[1:]) == 40 * 30

    class Fit:
        def predict(self, rows, cols):
            return est[rows, cols].tolist()

    assert sim.rmse(Fit()) == pytest.approx(want, rel=1e-12)
    assert sim.rmse(sim.theta) == 0.0
    assert sim.rmse(np.zeros(sim.shape)) == pytest.approx(
        math.sqrt(np.mean(sim.theta**2)), rel=1e-12
    )


def test_rmse_without_materialising_theta():
    sim = simulate_paper(50, seed=4)
    zero = sim.rmse(lambda r, c: np.zeros(r.size))
    assert "theta" not in sim.__dict__  # computed block by block from the factors
    assert zero == pytest.approx(math.sqrt(np.mean(sim.theta**2)), rel=1e-12)


def test_rmse_errors():
    sim = simulate_paper(20, seed=0)
    with pytest.raises(ValueError, match=r"shape \(20, 20\)"):
        sim.rmse(np.zeros((20, 19)))
    with pytest.raises(ValueError, match="one value per entry"):
        sim.rmse(lambda r, c: np.zeros(3))
    bad = np.zeros((20, 20))
    bad[5, 6] = np.nan
    with pytest.raises(ValueError, match=r"not finite at entry \(5, 6\)"):
        sim.rmse(bad)
    with pytest.raises(ValueError, match="chunk_entries"):
        sim.rmse(bad, chunk_entries=0)


def test_immutable():
    sim = simulate_paper(20, seed=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sim.noise_sd = 2.0  # type: ignore[misc]
    for a in (sim.M0, sim.N0, sim.theta, sim.train.values):
        with pytest.raises(ValueError):
            a[0] = 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(m=0), "m must be a positive integer"),
        (dict(m=10.0), "m must be a positive integer"),
        (dict(m=True), "m must be a positive integer"),
        (dict(m=10, m2=0), "m2 must be a positive integer"),
        (dict(m=10, rank=0), "rank must be a positive integer"),
        (dict(m=10, rank=11), r"rank=11 exceeds min\(m, m2\) = 10"),
        (dict(m=10, m2=3, rank=4), "exceeds"),
        (dict(m=10, frac=0.0), r"frac must be in \(0, 1\]"),
        (dict(m=10, frac=1.5), r"frac must be in \(0, 1\]"),
        (dict(m=10, frac=float("nan")), "frac must be finite"),
        (dict(m=10, frac="0.2"), "frac must be a real number"),
        (dict(m=10, frac=0.001), "observes no entry"),
        (dict(m=10, noise_sd=-1.0), "noise_sd must be >= 0"),
        (dict(m=10, noise_sd=float("inf")), "noise_sd must be finite"),
        (dict(m=10, factor_scale="std"), "factor_scale must be 'variance' or 'sd'"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate_paper(**kwargs)
