"""Fake fit objects with known draws, and helpers, for the diagnostics tests."""

from __future__ import annotations

import numpy as np

import bmczoo as bmc

K = 3
PRIOR = bmc.priors.Discrete(C=1.0, p=0.3, eps=0.05)
# 62 % 3 = 2: NumPyro keeps sweeps num_warmup + 2 + 3q, which the conversion must follow
NUM_WARMUP, NUM_SAMPLES, THINNING, NUM_CHAINS = 20, 62, 3, 2
NUM_TRACK = 6


def fake_info(method, K, shape, prior=None, **settings):
    """A typed :class:`~bmczoo.inference.results.FitInfo`, as a real fit carries, with the
    method's default settings updated by ``settings``; ``prior=None`` stands for a fit
    that records no prior (the diagnostics then fall back on their defaults)."""
    from bmczoo.inference.results import FitInfo
    from bmczoo.inference.settings import settings_for
    from bmczoo.offsets import Shift

    return FitInfo(
        method=method,
        prior=prior,
        likelihood=bmc.likelihoods.Tempered(),
        K=int(K),
        shape=tuple(shape),
        shift=Shift(0.0),
        center=False,
        seed=0,
        dtype="float64",
        settings=settings_for(method, **settings),
        tau=1.0,
    )


class FakeMCMCFit:
    """What the conversion reads from a ``GibbsFit``: draws with axes (chain, draw, ...)
    and the typed ``info``."""

    def __init__(
        self,
        samples,
        track_rows,
        track_cols,
        shape,
        rmse_draw=None,
        rmse_mean=None,
        *,
        method="gibbs",
        prior=None,
        settings=None,
    ):
        C = next(iter(samples.values())).shape[0]
        self.samples = samples
        self.track_rows = np.asarray(track_rows)
        self.track_cols = np.asarray(track_cols)
        self.shape = shape
        self.rmse_draw = np.zeros((C, 0)) if rmse_draw is None else rmse_draw
        self.rmse_mean = np.zeros((C, 0)) if rmse_mean is None else rmse_mean
        K = next(np.shape(samples[k])[-1] for k in ("gamma", "mu_M", "M", "theta") if k in samples)
        self.info = fake_info(method, K, shape, prior, **(settings or {}))
        self.mcmc = None


class FakeVBFit:
    """What the conversion reads from a ``VBFit`` (optionally with full covariances)."""

    def __init__(self, m, n, V, W, q_gamma, prior, elbo, rmse_trace=(), full=True):
        self.m, self.n = m, n
        self.V_diag = np.diagonal(V, axis1=-2, axis2=-1).copy()
        self.W_diag = np.diagonal(W, axis1=-2, axis2=-1).copy()
        self.state = None
        if full:
            from types import SimpleNamespace

            self.state = SimpleNamespace(V=V[None], W=W[None])
        self.q_gamma = q_gamma
        self.elbo = np.asarray(elbo, float)
        self.rmse_trace = np.asarray(rmse_trace, float)
        self.shape = (m.shape[0], n.shape[0])
        self.info = fake_info("vb", m.shape[1], self.shape, prior, tol=1e-4)


def ar1(rng, shape, phi, mean=0.0):
    """AR(1) series along axis 1 of ``shape`` with unit stationary variance."""
    x = np.empty(shape)
    x[:, 0] = rng.standard_normal((shape[0],) + shape[2:])
    s = np.sqrt(1.0 - phi**2)
    for t in range(1, shape[1]):
        x[:, t] = phi * x[:, t - 1] + s * rng.standard_normal((shape[0],) + shape[2:])
    return x + mean


def random_spd(rng, R, K, scale=0.2):
    A = rng.normal(size=(R, K, K)) * scale
    return A @ np.swapaxes(A, -1, -2) + 0.05 * np.eye(K)


def assert_png(path, min_bytes=5000):
    """A valid, non-empty PNG: the signature, a sensible size, and it decodes."""
    import matplotlib.image as mpimg

    import pathlib

    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) > min_bytes, f"{path} has only {len(data)} bytes"
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    # not a blank image
    assert float(np.std(img[..., :3])) > 0.01
