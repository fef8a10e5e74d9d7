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
    from bmczoo.inference import FitInfo
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


def FakeMCMCFit(
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
    """A :class:`~bmczoo.inference.GibbsFit` holding the given draws (axes (chain, draw,
    ...)), tracked entries and RMSE traces, with a typed ``info``."""
    from bmczoo.inference import GibbsFit

    C = next(iter(samples.values())).shape[0]
    K = next(np.shape(samples[k])[-1] for k in ("gamma", "mu_M", "M", "theta") if k in samples)
    return GibbsFit(
        fake_info(method, K, shape, prior, **(settings or {})),
        samples=samples,
        track_rows=np.asarray(track_rows),
        track_cols=np.asarray(track_cols),
        rmse_draw=np.zeros((C, 0)) if rmse_draw is None else rmse_draw,
        rmse_mean=np.zeros((C, 0)) if rmse_mean is None else rmse_mean,
    )


def FakeVBFit(m, n, V, W, q_gamma, prior, elbo, rmse_trace=(), full=True):
    """A :class:`~bmczoo.inference.VBFit` with the given moments of q (full covariances in
    its ``state`` when ``full``, else the diagonals alone)."""
    from types import SimpleNamespace

    from bmczoo.inference import VBFit

    shape = (m.shape[0], n.shape[0])
    return VBFit(
        fake_info("vb", m.shape[1], shape, prior, tol=1e-4),
        m=m,
        n=n,
        V_diag=np.diagonal(V, axis1=-2, axis2=-1).copy(),
        W_diag=np.diagonal(W, axis1=-2, axis2=-1).copy(),
        state=SimpleNamespace(V=V[None], W=W[None]) if full else None,
        q_gamma=q_gamma,
        elbo=np.asarray(elbo, float),
        rmse_trace=np.asarray(rmse_trace, float),
    )


def FakeGuideFit(draws, losses, shape, info):
    """A :class:`~bmczoo.inference.SVIFit` (``info.method == "map"``:
    :class:`~bmczoo.inference.MAPFit`) holding the given guide draws."""
    from bmczoo.inference import MAPFit, SVIFit

    cls = MAPFit if info.method == "map" else SVIFit
    return cls(info, draws=draws, losses=np.asarray(losses))


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
