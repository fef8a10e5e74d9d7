"""``bmc.fit``: one entry point for every inference method, returning a fit object."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from numpyro.infer import MCMC

from .._checks import check_K, check_positive_int, check_prior, check_ratings, likelihood_precision
from ..data import RatingData
from ..data.ratings import check_entries
from ..priors import Discrete, Prior
from .baselines import _theta_mean, _x64_context, run_nuts, run_svi
from .numpyro_kernel import ConjugateGibbs

__all__ = ["fit", "GibbsFit", "VBFit", "SVIFit", "looks_like_ratings"]

METHODS = ("gibbs", "vb", "svi", "nuts", "map")

# factor draws are stored for arbitrary-entry prediction only below this many bytes
_STORE_FACTORS_BUDGET = 256 * 2**20


def looks_like_ratings(values: np.ndarray) -> bool:
    """True when every value is a multiple of 0.5 in a small range (star ratings)."""
    v = np.asarray(values)
    lo, hi = float(v.min()), float(v.max())
    return bool(hi - lo <= 10 and np.all(np.round(2 * v) == 2 * v))


def _entry_keys(rows, cols, m2: int) -> np.ndarray:
    return np.asarray(rows, np.int64) * m2 + np.asarray(cols, np.int64)


class _FitBase:
    """What every fit result shares: original-scale predictions and their RMSE."""

    shape: tuple[int, int]
    meta: dict

    def _finish(self, theta: np.ndarray) -> np.ndarray:
        out = np.asarray(theta, np.float64) + self.meta["offset"]
        if self.meta["clip"] is not None:
            out = np.clip(out, *self.meta["clip"])
        return out

    def _check_entries(self, rows, cols):
        return check_entries(rows, cols, self.shape, "predict")

    def rmse(self, test: RatingData) -> float:
        """RMSE of :meth:`predict` against the values of ``test``."""
        test = check_ratings(test, "test")
        if test.shape != self.shape:
            raise ValueError(f"test has shape {test.shape}, the fit has {self.shape}")
        pred = self.predict(test.rows, test.cols)
        return float(np.sqrt(np.mean((pred - test.values) ** 2)))

    def rank_posterior(self, threshold: float) -> np.ndarray:
        """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K; see
        :func:`bmczoo.diagnostics.rank_posterior`."""
        from .. import diagnostics

        return diagnostics.rank_posterior(self, threshold)

    def to_arviz(self, **kwargs):
        """ArviZ data (posterior of gamma, sorted gamma, tracked theta entries, invariant
        summaries, per-iteration traces); see :func:`bmczoo.diagnostics.to_arviz`."""
        from .. import diagnostics

        return diagnostics.to_arviz(self, **kwargs)


@dataclasses.dataclass
class GibbsFit(_FitBase):
    """Result of ``bmc.fit(..., method="gibbs")`` (and of ``method="nuts"``: draws of an MCMC).

    Attributes
    ----------
    samples : dict of arrays with leading axes (chain, draw): ``gamma`` (K,), ``theta``
        at the tracked entries, and ``M``, ``N`` when factor draws were stored.
    pred_rows, pred_cols, pred_mean : the entries whose posterior mean was accumulated
        during sampling and that mean (original scale, clipped), averaged over chains.
    rmse_draw, rmse_mean : (chain, iteration) test RMSE of each draw and of the running
        posterior mean (empty without test data).
    track_rows, track_cols : the tracked entries.
    meta : settings (prior, K, tau, lam, centring offset, clipping, sampler settings).
    """

    samples: dict
    pred_rows: np.ndarray
    pred_cols: np.ndarray
    pred_mean: np.ndarray
    rmse_draw: np.ndarray
    rmse_mean: np.ndarray
    track_rows: np.ndarray
    track_cols: np.ndarray
    shape: tuple[int, int]
    meta: dict[str, Any]
    mcmc: MCMC | None = None

    @property
    def method(self) -> str:
        return self.meta["method"]

    def predict(self, rows, cols) -> np.ndarray:
        """Posterior mean of ``theta`` at the given entries (1-D array, original scale).

        Entries requested at fit time (``predict=`` or the test set) come from the running
        sums; other entries need the stored factor draws (``store_factors``).
        """
        r, c = self._check_entries(rows, cols)
        keys = _entry_keys(r, c, self.shape[1])
        known = _entry_keys(self.pred_rows, self.pred_cols, self.shape[1])
        if keys.size <= known.size and np.array_equal(keys, known[: keys.size]):
            return self.pred_mean[: keys.size]  # e.g. fit.rmse(test) with the test set of the fit
        order = np.argsort(known, kind="stable")
        # searchsorted on the sorted copy: with sorter= it is ~20x slower on millions of keys
        known_sorted = known[order]
        pos = np.searchsorted(known_sorted, keys) if known.size else np.zeros(keys.shape, int)
        pos = np.minimum(pos, max(known.size - 1, 0))
        hit = known.size > 0 and np.all(known_sorted[pos] == keys)
        if hit:
            return self.pred_mean[order[pos]]
        if "M" not in self.samples:
            raise ValueError(
                "these entries were not requested at fit time and no factor draws were stored: "
                "pass them as fit(..., predict=(rows, cols)) or use store_factors=True"
            )
        return self._finish(_theta_mean(self.samples["M"], self.samples["N"], r, c))


def _pick_track(train: RatingData, num: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    num = min(num, train.n)
    pos = np.sort(np.random.default_rng(seed).choice(train.n, size=num, replace=False))
    return train.rows[pos], train.cols[pos]


@dataclasses.dataclass
class VBFit(_FitBase):
    """Result of ``bmc.fit(..., method="vb")``: the mean-field variational posterior.

    Attributes
    ----------
    m, n : (m1, K), (m2, K) means of ``q(M_i)`` and ``q(N_j)``.
    V_diag, W_diag : (m1, K), (m2, K) diagonals of their covariances.
    q_gamma : dict, parameters of ``q(gamma_h)`` (prior-specific) and ``inv_mean``.
    elbo, rmse_trace : per-iteration ELBO and test RMSE (empty without test data).
    converged : whether the relative-ELBO tolerance was reached before ``max_iter``.
    """

    m: np.ndarray
    n: np.ndarray
    V_diag: np.ndarray
    W_diag: np.ndarray
    q_gamma: dict
    elbo: np.ndarray
    rmse_trace: np.ndarray
    converged: bool
    shape: tuple[int, int]
    meta: dict[str, Any]
    state: Any = None

    method = "vb"

    def predict(self, rows, cols) -> np.ndarray:
        """``m_i . n_j`` (plus the centring offset, clipped) at the given entries."""
        r, c = self._check_entries(rows, cols)
        return self._finish(_theta_mean(self.m, self.n, r, c))


@dataclasses.dataclass
class SVIFit(_FitBase):
    """Result of ``bmc.fit(..., method="svi" | "map")``: a fitted NumPyro autoguide.

    Attributes
    ----------
    draws : dict of ``num_draws`` samples of the latent sites from the guide.
    point : dict of the guide's medians of ``M``, ``N`` (AutoNormal, AutoDelta) used to
        predict, or None (predictions average over ``draws``).
    losses : per-step loss (negative ELBO; for MAP the negative log joint).
    guide : the NumPyro autoguide.
    """

    draws: dict
    point: dict | None
    losses: np.ndarray
    guide: Any
    shape: tuple[int, int]
    meta: dict[str, Any]

    @property
    def method(self) -> str:
        return self.meta["method"]

    def predict(self, rows, cols) -> np.ndarray:
        """``E_q[M_i . N_j]`` (plus the centring offset, clipped) at the given entries."""
        r, c = self._check_entries(rows, cols)
        src = self.point if self.point is not None else self.draws
        return self._finish(_theta_mean(src["M"], src["N"], r, c))


@dataclasses.dataclass(frozen=True)
class _Prepared:
    fit_data: RatingData
    offset: float
    clip: tuple[float, float] | None
    tau: float
    pred_rows: np.ndarray
    pred_cols: np.ndarray
    test_values: np.ndarray


def _prepare(train, test, predict, center, clip, lam, noise_sd) -> _Prepared:
    tau = likelihood_precision(train.n, lam, noise_sd)
    fit_data, offset = train.centered() if center else (train, 0.0)
    if isinstance(clip, str):
        if clip != "auto":
            raise ValueError(f"clip must be 'auto', a bool or (lo, hi), got {clip!r}")
        clip_range = train.value_range() if looks_like_ratings(train.values) else None
    elif clip is True:
        clip_range = train.value_range()
    elif clip is False or clip is None:
        clip_range = None
    else:
        if not (isinstance(clip, (tuple, list)) and len(clip) == 2):
            raise ValueError(f"clip must be 'auto', a bool or a pair (lo, hi), got {clip!r}")
        lo, hi = (float(x) for x in clip)
        if not lo < hi:
            raise ValueError(f"clip range must have lo < hi, got {clip!r}")
        clip_range = (lo, hi)
    # entries whose posterior mean is accumulated: the test entries first, then predict=
    pr, pc = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)]
    test_values = np.zeros(0)
    if test is not None:
        test = check_ratings(test, "test")
        if test.shape != train.shape:
            raise ValueError(f"test has shape {test.shape}, train has {train.shape}")
        pr.append(test.rows), pc.append(test.cols)
        test_values = np.asarray(test.values, np.float64)
    if predict is not None:
        if not (isinstance(predict, (tuple, list)) and len(predict) == 2):
            raise ValueError(f"predict must be a pair (rows, cols), got {type(predict).__name__}")
        r, c = train.check_entries(*predict, name="predict")
        pr.append(r), pc.append(c)
    return _Prepared(fit_data, offset, clip_range, tau, np.concatenate(pr), np.concatenate(pc), test_values)


def _meta(method, prior, K, lam, noise_sd, prep: _Prepared, center, seed, **extra) -> dict:
    return {
        "method": method,
        "prior": prior,
        "prior_name": prior.name,
        "hyperparameters": prior.hyperparameters(),
        "K": K,
        "lam": lam,
        "noise_sd": noise_sd,
        "tau": prep.tau,
        "center": center,
        "offset": prep.offset,
        "clip": prep.clip,
        "seed": seed,
        **extra,
    }


def fit(
    train: RatingData,
    K: int = 5,
    prior: Prior | None = None,
    method: str = "gibbs",
    num_warmup: int = 100,
    num_samples: int = 900,
    thinning: int = 10,
    num_chains: int = 1,
    lam: float | None = None,
    noise_sd: float = 1.0,
    seed: int = 0,
    progress_bar: bool = True,
    test: RatingData | None = None,
    devices=None,
    *,
    predict: tuple | None = None,
    center: bool = True,
    clip: str | bool | tuple[float, float] = "auto",
    track: int | tuple = 8,
    store_factors: bool | str = "auto",
    dtype=None,
    chain_method: str = "vectorized",
    max_iter: int = 200,
    tol: float = 1e-4,
    init_gamma: float | np.ndarray | None = None,
    guide: str = "normal",
    num_steps: int = 2000,
    learning_rate: float = 0.05,
    subsample_size: int | None = None,
    checkpoint: str | None = None,
    checkpoint_every: int = 100,
    overrelax: float = 0.0,
):
    """Fit the low-rank model to ``train``.

    Parameters
    ----------
    train : RatingData
    K : int
        Latent dimension, ``1 <= K <= min(m1, m2)``.
    prior : bmczoo.priors.Prior, default ``Discrete()``
    method : {"gibbs", "vb", "svi", "nuts", "map"}
        ``"gibbs"``: conjugate blocked Gibbs; ``"vb"``: closed-form mean-field CAVI;
        ``"nuts"``: NumPyro NUTS on :func:`bmczoo.models.matrix_completion` (small
        problems); ``"svi"``: NumPyro SVI with an autoguide; ``"map"``: ``AutoDelta``.
    num_warmup, num_samples, thinning, num_chains : int
        Gibbs/NUTS settings: ``num_warmup + num_samples`` sweeps per chain, every
        ``thinning``-th post-warm-up draw kept.  For VB, ``num_chains`` is the number of
        random starting points run side by side; the run with the highest final ELBO is
        kept (CAVI can stop at poor local optima from a single start).
    lam, noise_sd : float
        Temperature (``None``: ``lam = n / (2 noise_sd^2)``) and noise sd.
    seed : int
        Seed of ``jax.random.key``.
    progress_bar : bool
    test : RatingData, optional
        Entries whose posterior mean is computed during the fit and whose RMSE is
        recorded per iteration (the paper's Figures 1 and 4).
    devices : sequence of jax devices or a one-axis ``jax.sharding.Mesh``, optional
        Gibbs and VB: shard every sweep / iteration over these devices (rows of ``M``,
        ``N`` and the ratings; :mod:`bmczoo.inference.sharding`), e.g. ``jax.devices()``
        for all GPUs.  The result equals the single-device run up to float rounding.
    predict : (rows, cols), optional
        Further entries whose posterior mean is accumulated (Gibbs).
    center : bool
        Fit ``train.values - train.mean()`` and add the mean back when predicting.
    clip : "auto", bool or (lo, hi)
        Clip predictions to a range; ``"auto"`` clips to the observed range when the
        values look like star ratings (multiples of 0.5 within a span of 10).
    track : int or (rows, cols)
        Gibbs: entries whose ``theta`` is kept per draw (``int``: that many random
        training entries), for trace and ACF plots.
    store_factors : bool or "auto"
        Gibbs: keep ``M``, ``N`` of each kept draw (``"auto"``: when they take < 256 MiB),
        needed to predict entries not requested at fit time.
    dtype : {float32, float64}, optional
        Default float32 (float64 when ``jax_enable_x64`` is on); float64 runs the fit under
        ``jax.enable_x64``.
    chain_method : str
        Gibbs: NumPyro chain method; ``"vectorized"`` advances all chains in one sweep.
    init_gamma : float or (K,) array, optional
        Gibbs: starting value of gamma (default: the prior's ``init_gamma``, e.g. the
        slab ``C`` for the discrete prior, i.e. every column active).  The spike-and-slab
        posterior can be multimodal with rare switches between modes; comparing chains
        started from the slab and from the spike shows whether that matters for a problem.
    overrelax : float
        Gibbs: Adler over-relaxation coefficient ``rho`` in (-1, 1) of the row updates
        (0: plain Gibbs, the paper's sampler).  Each update stays exact for the posterior;
        ``rho = -0.7`` makes theta entries' autocorrelations vanish within a few lags on
        the paper's m = 200 problem, with 2.5-4.5x the effective sample size
        (``benchmarks/bench_overrelax.py``).
    checkpoint : path, optional
        Gibbs and VB: save the state (``.npz``) every ``checkpoint_every`` iterations and
        when interrupted (Ctrl-C); if the file exists, resume from it.  A resumed run
        gives exactly the draws of an uninterrupted one
        (:mod:`bmczoo.inference.checkpoint`).
    checkpoint_every : int
        Iterations between checkpoints.
    max_iter, tol : int, float
        VB: stop when the relative ELBO change is below ``tol`` or after ``max_iter``.
    guide : {"normal", "lowrank"}
        SVI: ``AutoNormal`` or ``AutoLowRankMultivariateNormal``.
    num_steps, learning_rate, subsample_size : int, float, int
        SVI/MAP: Adam steps, initial step size (decays tenfold over the run), and the
        minibatch size over ratings (``None``: full batch).

    Returns
    -------
    GibbsFit (gibbs, nuts), VBFit or SVIFit (svi, map)
    """
    train = check_ratings(train, "train")
    prior = Discrete() if prior is None else check_prior(prior)
    K = check_K(K, train.shape)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if devices is not None:
        if method not in ("gibbs", "vb"):
            raise ValueError(f"devices= shards methods 'gibbs' and 'vb'; method={method!r} runs on one device")
        from .sharding import make_mesh

        devices = make_mesh(devices)
    if checkpoint is not None:
        if method not in ("gibbs", "vb"):
            raise ValueError(f"checkpoint= applies to methods 'gibbs' and 'vb', not {method!r}")
        if not isinstance(checkpoint, (str, os.PathLike)):
            raise ValueError(f"checkpoint must be a file path, got {checkpoint!r}")
    checkpoint_every = check_positive_int("checkpoint_every", checkpoint_every)
    from .gibbs import check_overrelax

    if check_overrelax(overrelax) != 0.0 and method != "gibbs":
        raise ValueError(f"overrelax applies to method='gibbs', not {method!r}")
    seed = _check_seed(seed)
    for name, flag in (("progress_bar", progress_bar), ("center", center)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    if not (isinstance(store_factors, (bool, np.bool_)) or store_factors == "auto"):
        raise ValueError(f"store_factors must be True, False or 'auto', got {store_factors!r}")
    if lam is not None:  # noise_sd is unused then, but a bad value is still a mistake
        likelihood_precision(1, None, noise_sd)
    # every argument is checked whatever the method: a bad value is a mistake even where
    # this method ignores it
    _check_sampler_args(num_warmup, num_samples, thinning, num_chains)
    check_positive_int("max_iter", max_iter)
    if isinstance(tol, (bool, np.bool_)) or not isinstance(tol, (int, float, np.integer, np.floating)) \
            or not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    check_positive_int("num_steps", num_steps)
    if subsample_size is not None:
        check_positive_int("subsample_size", subsample_size)
    if init_gamma is not None:
        try:
            g = np.broadcast_to(np.asarray(init_gamma, np.float64), (K,))
        except (ValueError, TypeError):
            raise ValueError(f"init_gamma must be a positive number or an array of K={K} of them, "
                             f"got {init_gamma!r}") from None
        if not np.all(np.isfinite(g) & (g > 0)):
            raise ValueError(f"init_gamma must be finite and > 0, got {init_gamma!r}")
    prep = _prepare(train, test, predict, center, clip, lam, noise_sd)
    if dtype is None:
        dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    if method == "vb":
        with _x64_context(dtype):
            return _fit_vb(train, K, prior, prep, lam, noise_sd, center, seed, progress_bar, dtype, max_iter,
                           tol, num_chains, devices=devices, checkpoint=checkpoint,
                           checkpoint_every=checkpoint_every)
    if method in ("svi", "map"):
        g = "delta" if method == "map" else guide
        if guide not in ("normal", "lowrank"):
            raise ValueError(f"guide must be 'normal' or 'lowrank', got {guide!r}")
        lr = float(learning_rate)
        if not np.isfinite(lr) or lr <= 0:
            raise ValueError(f"learning_rate must be finite and > 0, got {learning_rate!r}")
        draws, point, losses, guide_obj = run_svi(
            prep.fit_data, K, prior, lam, noise_sd, seed=seed, guide=g, num_steps=num_steps,
            learning_rate=learning_rate, subsample_size=subsample_size, progress_bar=progress_bar, dtype=dtype,
        )
        meta = _meta(method, prior, K, lam, noise_sd, prep, center, seed, guide=g, num_steps=num_steps,
                     learning_rate=learning_rate, subsample_size=subsample_size)
        return SVIFit(draws=draws, point=point, losses=losses, guide=guide_obj, shape=train.shape, meta=meta)
    if method == "nuts":
        return _fit_nuts(train, K, prior, prep, lam, noise_sd, center, seed, progress_bar, dtype,
                         num_warmup, num_samples, thinning, num_chains, track)
    with _x64_context(dtype):
        return _fit_gibbs(
            train, K, prior, prep, lam, noise_sd, center, seed, progress_bar, dtype,
            num_warmup, num_samples, thinning, num_chains, track, store_factors, chain_method, init_gamma,
            devices=devices, checkpoint=checkpoint, checkpoint_every=checkpoint_every, overrelax=overrelax,
        )


def _check_seed(seed) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_sampler_args(num_warmup, num_samples, thinning, num_chains):
    if isinstance(num_warmup, (bool, np.bool_)) or not isinstance(num_warmup, (int, np.integer)) or num_warmup < 0:
        raise ValueError(f"num_warmup must be a non-negative integer, got {num_warmup!r}")
    num_warmup = int(num_warmup)
    num_samples = check_positive_int("num_samples", num_samples)
    thinning = check_positive_int("thinning", thinning)
    num_chains = check_positive_int("num_chains", num_chains)
    if thinning > num_samples:
        raise ValueError(f"thinning={thinning} > num_samples={num_samples} keeps no draw")
    return num_warmup, num_samples, thinning, num_chains


def _track_entries(train, track, seed):
    if isinstance(track, (int, np.integer)) and not isinstance(track, (bool, np.bool_)):
        if track < 0:
            raise ValueError(f"track must be >= 0 or (rows, cols), got {track!r}")
        return _pick_track(train, int(track), seed)
    if not (isinstance(track, (tuple, list)) and len(track) == 2):
        raise ValueError(f"track must be a number of entries or a pair (rows, cols), got {track!r}")
    return train.check_entries(*track, name="track")


def _fit_nuts(train, K, prior, prep, lam, noise_sd, center, seed, progress_bar, dtype,
              num_warmup, num_samples, thinning, num_chains, track):
    num_warmup, num_samples, thinning, num_chains = _check_sampler_args(num_warmup, num_samples, thinning, num_chains)
    track_rc = _track_entries(train, track, seed)
    samples, mcmc = run_nuts(
        prep.fit_data, K, prior, lam, noise_sd, seed=seed, num_warmup=num_warmup, num_samples=num_samples,
        thinning=thinning, num_chains=num_chains, progress_bar=progress_bar, dtype=dtype,
    )
    M, N = samples["M"], samples["N"]
    samples["theta"] = np.sum(M[:, :, track_rc[0]] * N[:, :, track_rc[1]], axis=-1)
    meta = _meta("nuts", prior, K, lam, noise_sd, prep, center, seed, num_warmup=num_warmup,
                 num_samples=num_samples, thinning=thinning, num_chains=num_chains,
                 num_kept=M.shape[1], dtype=str(M.dtype))
    result = GibbsFit(
        samples=samples, pred_rows=prep.pred_rows, pred_cols=prep.pred_cols, pred_mean=np.zeros(0),
        rmse_draw=np.zeros((num_chains, 0)), rmse_mean=np.zeros((num_chains, 0)),
        track_rows=np.asarray(track_rc[0]), track_cols=np.asarray(track_rc[1]),
        shape=train.shape, meta=meta, mcmc=mcmc,
    )
    result.pred_mean = result._finish(_theta_mean(M, N, prep.pred_rows, prep.pred_cols))
    return result


def _run_settings(method, train, prep, prior, K, seed, dtype, **extra) -> dict:
    """What identifies a run for its checkpoint (JSON-serialisable)."""
    from .checkpoint import fingerprint

    d = prep.fit_data
    return {
        "method": method,
        "data": fingerprint(d.rows, d.cols, d.values),
        "shape": list(train.shape),
        "prior": prior.name,
        "hyperparameters": {k: float(v) for k, v in prior.hyperparameters().items()},
        "K": int(K),
        "tau": float(prep.tau),
        "seed": int(seed),
        "dtype": jnp.dtype(dtype).name,
        "predict": fingerprint(prep.pred_rows, prep.pred_cols, prep.test_values),
        **extra,
    }


def _fit_gibbs(train, K, prior, prep, lam, noise_sd, center, seed, progress_bar, dtype,
               num_warmup, num_samples, thinning, num_chains, track, store_factors, chain_method, init_gamma,
               devices=None, checkpoint=None, checkpoint_every=100, overrelax=0.0):
    from . import gibbs

    overrelax = gibbs.check_overrelax(overrelax)
    num_warmup, num_samples, thinning, num_chains = _check_sampler_args(num_warmup, num_samples, thinning, num_chains)
    m1, m2 = train.shape
    track_rc = _track_entries(train, track, seed)
    if store_factors == "auto":
        itemsize = jnp.dtype(dtype).itemsize
        store = num_chains * (num_samples // thinning) * (m1 + m2) * K * itemsize < _STORE_FACTORS_BUDGET
    else:
        store = bool(store_factors)
    if devices is not None and chain_method == "parallel":
        raise ValueError("chain_method='parallel' maps chains to devices; with devices= use 'vectorized'")
    init_params = None
    if init_gamma is not None:
        # validated by fit
        g = jnp.asarray(np.broadcast_to(np.asarray(init_gamma, np.float64), (K,)), dtype)
        init_params = {"gamma": jnp.broadcast_to(g, (num_chains, K)) if num_chains > 1 else g}
    mcmc = None
    if checkpoint is None:
        # NumPyro's MCMC drives the conjugate kernel
        kernel = ConjugateGibbs(
            num_samples=num_samples, thinning=thinning, predict=(prep.pred_rows, prep.pred_cols),
            test_values=prep.test_values, offset=prep.offset, clip=prep.clip, track=track_rc,
            store_factors=store, dtype=dtype, devices=devices, overrelax=overrelax,
        )
        mcmc = MCMC(
            kernel, num_warmup=num_warmup, num_samples=num_samples, thinning=thinning, num_chains=num_chains,
            chain_method=chain_method, progress_bar=progress_bar,
        )
        mcmc.run(jax.random.key(seed), prep.fit_data, K, prior, lam, noise_sd, init_params=init_params)
        core = mcmc.last_state.core
        gibbs.check_failure(core, dtype=dtype)
        samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    else:
        # the same chains (same keys as NumPyro's MCMC) with a checkpointing driver
        from .checkpoint import fingerprint, run_gibbs

        problem = gibbs.build_problem(
            prep.fit_data, prep.tau, dtype=dtype, predict=(prep.pred_rows, prep.pred_cols),
            test_values=prep.test_values, offset=prep.offset, clip=prep.clip, track=track_rc,
            num_warmup=num_warmup, thinning=thinning, num_total=num_warmup + num_samples, mesh=devices,
            overrelax=overrelax,
        )
        key = jax.random.key(seed)
        keys = key[None] if num_chains == 1 else jax.random.split(key, num_chains)
        init_kw = {} if init_params is None else {"gamma": jnp.broadcast_to(g, (num_chains, K))}
        core = gibbs.init(keys, problem, prior, K, **init_kw)
        settings = _run_settings(
            "gibbs", train, prep, prior, K, seed, dtype, num_warmup=num_warmup, num_samples=num_samples,
            thinning=thinning, num_chains=num_chains, track=fingerprint(*track_rc), store_factors=store,
            init_gamma=None if init_gamma is None else [float(x) for x in g], overrelax=overrelax,
        )
        core, samples = run_gibbs(
            core, problem, prior, lambda s: gibbs.draws(s, problem, store), num_warmup=num_warmup,
            num_samples=num_samples, thinning=thinning, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
            settings=settings, progress_bar=progress_bar,
        )
    pred_sum = np.asarray(core.pred_sum, np.float64).reshape(num_chains, -1)
    num_kept = int(np.asarray(core.num_kept).ravel()[0])
    theta_mean = pred_sum.mean(axis=0) / max(num_kept, 1)
    # (chain, iteration); chains of a sequential run come stacked, of a single run without axis
    rmse_draw = np.asarray(core.rmse_draw).reshape(num_chains, -1)
    rmse_mean = np.asarray(core.rmse_mean).reshape(num_chains, -1)
    meta = _meta(
        "gibbs", prior, K, lam, noise_sd, prep, center, seed, num_warmup=num_warmup,
        num_samples=num_samples, thinning=thinning, num_chains=num_chains, num_kept=num_kept,
        dtype=str(core.M.dtype), devices=None if devices is None else int(devices.devices.size),
        checkpoint=None if checkpoint is None else str(checkpoint), overrelax=overrelax,
    )
    result = GibbsFit(
        samples=samples,
        pred_rows=prep.pred_rows,
        pred_cols=prep.pred_cols,
        pred_mean=np.zeros(0),
        rmse_draw=rmse_draw,
        rmse_mean=rmse_mean,
        track_rows=np.asarray(track_rc[0]),
        track_cols=np.asarray(track_rc[1]),
        shape=train.shape,
        meta=meta,
        mcmc=mcmc,
    )
    result.pred_mean = result._finish(theta_mean)
    return result


def _vb_failure(state, iteration: int, dtype) -> str:
    """Message naming the first row whose variational factor is not finite."""
    where = ""
    for name, arr in (("M", state.m), ("N", state.n), ("M", state.V), ("N", state.W)):
        bad = ~np.isfinite(np.asarray(arr)).reshape(arr.shape[0], arr.shape[1], -1).all(axis=-1)
        if bad.any():
            c, row = np.argwhere(bad)[0]
            where = f" (first at row {row} of {name}, run {c}: its Cholesky factorisation failed or overflowed)"
            break
    dt = jnp.dtype(dtype).name
    hint = "try dtype=jnp.float64" if dt != "float64" else "check the data scale and hyper-parameters"
    return f"VB produced a non-finite ELBO at iteration {iteration}{where} in {dt}; {hint}"


def _fit_vb(train, K, prior, prep, lam, noise_sd, center, seed, progress_bar, dtype, max_iter, tol, num_runs=1,
            devices=None, checkpoint=None, checkpoint_every=100):
    from tqdm.auto import tqdm

    from . import vb
    from .gibbs import build_problem

    max_iter = check_positive_int("max_iter", max_iter)
    num_runs = check_positive_int("num_chains", num_runs)
    tol = float(tol)
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be finite and >= 0, got {tol!r}")
    problem = build_problem(prep.fit_data, prep.tau, dtype=dtype, mesh=devices)
    # run r starts from key split(key(seed), C)[r]; with C = 1 the key itself
    keys = jax.random.key(seed)[None] if num_runs == 1 else jax.random.split(jax.random.key(seed), num_runs)
    state = vb.init(keys, train.shape, prior, K, dtype)
    n_test = prep.test_values.shape[0]
    test_rows = jnp.asarray(prep.pred_rows[:n_test])
    test_cols = jnp.asarray(prep.pred_cols[:n_test])
    if devices is not None:
        shard = lambda st: vb.shard_state(st, devices)  # noqa: E731
        unshard = lambda st: vb.unshard_state(st, train.shape)  # noqa: E731
        step = functools.partial(vb.update_sharded, mesh=devices, dims=train.shape)
        bound = functools.partial(vb.elbo_sharded, mesh=devices, dims=train.shape, n_obs=train.n)
        test_rows, test_cols = (jax.device_put(x, NamedSharding(devices, PartitionSpec())) for x in (test_rows, test_cols))
    else:
        shard = unshard = lambda st: st  # noqa: E731
        step, bound = vb.update, vb.elbo
    state = shard(state)

    # the problem's arrays are arguments, not closed-over constants: constants would be
    # copied into the compiled program (twice the memory on 10M ratings, slow compiles)
    @jax.jit
    def iterate_jit(state, problem, test_rows, test_cols):
        state = step(state, problem.rows, problem.cols, prior, problem.tau)
        pred = jnp.sum(state.m[:, test_rows] * state.n[:, test_cols], axis=-1)
        return state, bound(state, problem.rows, prior, problem.tau), pred

    def iterate(state):
        return iterate_jit(state, problem, test_rows, test_cols)

    elbos, rmses, seconds = [], [], []
    converged = False
    # VB is deterministic after its start: a checkpoint can be continued with another
    # max_iter or tol, so those are not part of the settings
    settings = _run_settings("vb", train, prep, prior, K, seed, dtype, num_runs=num_runs)
    if checkpoint is not None and os.path.exists(checkpoint):
        from .checkpoint import check_settings, load_npz

        stored, arrays = load_npz(checkpoint)
        check_settings(checkpoint, stored, settings)
        state = shard(vb.VBState(**{f: jnp.asarray(arrays[f"state/{f}"]) for f in vb.VBState._fields}))
        elbos, rmses = list(arrays["elbo"]), list(arrays["rmse"])
        converged = len(elbos) > 1 and bool(np.all(np.abs(elbos[-1] - elbos[-2]) <= tol * np.abs(elbos[-1])))

    def save():
        from .checkpoint import save_npz

        arrays = {f"state/{f}": np.asarray(getattr(unshard(state), f)) for f in vb.VBState._fields}
        arrays["elbo"] = np.asarray(elbos, np.float64).reshape(len(elbos), num_runs)
        arrays["rmse"] = np.asarray(rmses, np.float64).reshape(len(rmses), num_runs)
        save_npz(checkpoint, settings, arrays)

    with tqdm(total=max_iter, initial=len(elbos), disable=not progress_bar, desc="vb") as bar:
        try:
            while len(elbos) < max_iter and not converged:
                t0 = time.perf_counter()
                new_state, e, pred = iterate(state)
                e = np.asarray(e, np.float64)
                seconds.append(time.perf_counter() - t0)
                if not np.all(np.isfinite(e)):
                    raise FloatingPointError(_vb_failure(new_state, len(elbos) + 1, dtype))
                r = []
                if n_test:
                    y = np.asarray(pred, np.float64) + prep.offset
                    if prep.clip is not None:
                        y = np.clip(y, *prep.clip)
                    r = [np.sqrt(np.mean((y - prep.test_values) ** 2, axis=-1))]
                # one assignment: a Ctrl-C (delivered between bytecodes that check for
                # signals, not inside an unpacking) cannot separate the state from its traces
                state, elbos, rmses = new_state, elbos + [e], rmses + r
                bar.update(1)
                bar.set_postfix_str(f"elbo {e.max():.6g}" + (f" rmse {rmses[-1].min():.4f}" if rmses else ""),
                                    refresh=False)
                # stop when every run has converged
                if len(elbos) > 1 and np.all(np.abs(elbos[-1] - elbos[-2]) <= tol * np.abs(elbos[-1])):
                    converged = True
                if checkpoint is not None and (len(elbos) % checkpoint_every == 0 or converged
                                               or len(elbos) == max_iter):
                    save()
        except KeyboardInterrupt:
            if checkpoint is not None:
                save()
                raise KeyboardInterrupt(
                    f"interrupted after {len(elbos)} VB iterations; the work done is saved in {str(checkpoint)!r}: "
                    "call fit again with the same arguments to resume"
                ) from None
            raise
    best = int(np.argmax(elbos[-1]))  # the run with the highest final ELBO
    if devices is not None:  # back to host arrays without the padding rows
        state = jax.tree.map(jnp.asarray, jax.device_get(unshard(state)))
    state = jax.tree.map(lambda x: x[best : best + 1], state)
    q = prior.vb_update(state.ES[0], train.shape[0] + train.shape[1])
    meta = _meta("vb", prior, K, lam, noise_sd, prep, center, seed, max_iter=max_iter, tol=tol,
                 num_iter=len(elbos), num_runs=num_runs, best_run=best,
                 # wall seconds of each iteration run by this call (the first includes compilation)
                 iteration_seconds=seconds,
                 final_elbo_per_run=[float(x) for x in elbos[-1]], dtype=str(state.m.dtype))
    return VBFit(
        m=np.asarray(state.m[0]),
        n=np.asarray(state.n[0]),
        V_diag=np.asarray(jnp.diagonal(state.V[0], axis1=-2, axis2=-1)),
        W_diag=np.asarray(jnp.diagonal(state.W[0], axis1=-2, axis2=-1)),
        q_gamma={"inv_mean": np.asarray(q.inv_mean), **{k: np.asarray(v) for k, v in q.params.items()}},
        elbo=np.asarray([e[best] for e in elbos]),
        rmse_trace=np.asarray([r[best] for r in rmses]),
        converged=converged,
        shape=train.shape,
        meta=meta,
        state=state,
    )
