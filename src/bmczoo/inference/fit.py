"""``bmc.fit``: one entry point for every inference method, returning a fit object."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from .._checks import check_K, check_positive_int, check_prior, check_ratings, likelihood_precision
from ..data import RatingData
from ..priors import Discrete, Prior
from .numpyro_kernel import ConjugateGibbs

__all__ = ["fit", "GibbsFit", "looks_like_ratings"]

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


@dataclasses.dataclass
class GibbsFit:
    """Result of ``bmc.fit(..., method="gibbs")``.

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

    method = "gibbs"

    def _finish(self, theta: np.ndarray) -> np.ndarray:
        out = theta + self.meta["offset"]
        if self.meta["clip"] is not None:
            out = np.clip(out, *self.meta["clip"])
        return out

    def predict(self, rows, cols) -> np.ndarray:
        """Posterior mean of ``theta`` at the given entries (1-D array, original scale).

        Entries requested at fit time (``predict=`` or the test set) come from the running
        sums; other entries need the stored factor draws (``store_factors``).
        """
        r = np.asarray(rows)
        c = np.asarray(cols)
        RatingData(np.zeros(1, int), np.zeros(1, int), np.zeros(1), self.shape).check_entries(r, c, "predict")
        keys = _entry_keys(r, c, self.shape[1])
        known = _entry_keys(self.pred_rows, self.pred_cols, self.shape[1])
        order = np.argsort(known, kind="stable")
        pos = np.searchsorted(known, keys, sorter=order) if known.size else np.zeros(keys.shape, int)
        pos = np.minimum(pos, max(known.size - 1, 0))
        hit = known.size > 0 and np.all(known[order[pos]] == keys)
        if hit:
            return self.pred_mean[order[pos]]
        if "M" not in self.samples:
            raise ValueError(
                "these entries were not requested at fit time and no factor draws were stored: "
                "pass them as fit(..., predict=(rows, cols)) or use store_factors=True"
            )
        M, N = self.samples["M"], self.samples["N"]
        theta = np.zeros(r.shape, np.float64)
        # chunk over entries so that memory stays bounded for large requests
        for s in range(0, r.size, 65536):
            rr, cc = r[s : s + 65536], c[s : s + 65536]
            theta[s : s + 65536] = np.einsum("cdpk,cdpk->p", M[:, :, rr], N[:, :, cc]) / (M.shape[0] * M.shape[1])
        return self._finish(theta)

    def rmse(self, test: RatingData) -> float:
        """RMSE of :meth:`predict` against the values of ``test``."""
        test = check_ratings(test, "test")
        if test.shape != self.shape:
            raise ValueError(f"test has shape {test.shape}, the fit has {self.shape}")
        pred = self.predict(test.rows, test.cols)
        return float(np.sqrt(np.mean((pred - test.values) ** 2)))

    def rank_posterior(self, threshold: float) -> np.ndarray:
        """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K (over all kept draws)."""
        g = np.asarray(self.samples["gamma"])
        counts = np.sum(g > threshold, axis=-1).ravel()
        K = g.shape[-1]
        return np.bincount(counts, minlength=K + 1) / counts.size

    def to_arviz(self):
        """ArviZ ``InferenceData``: posterior ``gamma`` (chain, draw, h), ``theta`` at the
        tracked entries (chain, draw, entry); sample stats ``rmse_draw`` / ``rmse_mean``
        per iteration when test data were given."""
        import arviz as az

        post = {"gamma": np.asarray(self.samples["gamma"]), "theta": np.asarray(self.samples["theta"])}
        coords = {"h": np.arange(post["gamma"].shape[-1]), "entry": np.arange(post["theta"].shape[-1])}
        dims = {"gamma": ["h"], "theta": ["entry"]}
        idata = az.from_dict(posterior=post, coords=coords, dims=dims)
        if self.rmse_draw.size:
            idata.add_groups(
                {"rmse_trace": {"rmse_draw": self.rmse_draw[:, None], "rmse_mean": self.rmse_mean[:, None]}},
                coords={"iteration": np.arange(1, self.rmse_draw.shape[-1] + 1)},
                dims={"rmse_draw": ["iteration"], "rmse_mean": ["iteration"]},
            )
        return idata


def _pick_track(train: RatingData, num: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    num = min(num, train.n)
    pos = np.sort(np.random.default_rng(seed).choice(train.n, size=num, replace=False))
    return train.rows[pos], train.cols[pos]


def fit(
    train: RatingData,
    K: int = 5,
    prior: Prior | None = None,
    method: str = "gibbs",
    *,
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
    predict: tuple | None = None,
    center: bool = True,
    clip: str | bool | tuple[float, float] = "auto",
    track: int | tuple = 8,
    store_factors: bool | str = "auto",
    dtype=None,
    chain_method: str = "vectorized",
):
    """Fit the low-rank model to ``train``.

    Parameters
    ----------
    train : RatingData
    K : int
        Latent dimension.
    prior : bmczoo.priors.Prior, default ``Discrete()``
    method : {"gibbs", "vb", "svi", "nuts", "map"}
        Only ``"gibbs"`` is implemented in this release; the others raise ``ValueError``.
    num_warmup, num_samples, thinning, num_chains : int
        Sampler settings: ``num_warmup + num_samples`` sweeps per chain, every
        ``thinning``-th post-warm-up draw kept.
    lam, noise_sd : float
        Temperature (``None``: ``lam = n / (2 noise_sd^2)``) and noise sd.
    seed : int
        Seed of ``jax.random.key``.
    test : RatingData, optional
        Entries whose posterior mean is accumulated and whose running RMSE is recorded per
        iteration (the paper's Figure 1).
    predict : (rows, cols), optional
        Further entries whose posterior mean is accumulated.
    center : bool
        Fit ``train.values - train.mean()`` and add the mean back when predicting.
    clip : "auto", bool or (lo, hi)
        Clip predictions to the observed range; ``"auto"`` does so when the values look
        like star ratings (multiples of 0.5).
    track : int or (rows, cols)
        Entries whose ``theta`` is kept per draw (``int``: that many random training
        entries), for trace and ACF plots.
    store_factors : bool or "auto"
        Keep ``M``, ``N`` of each kept draw (``"auto"``: when they take < 256 MiB), needed
        to predict entries not requested at fit time.
    dtype : float dtype, optional
        Default float32 (float64 when ``jax_enable_x64`` is on).
    chain_method : str
        NumPyro chain method; ``"vectorized"`` advances all chains in one batched sweep.
    """
    train = check_ratings(train, "train")
    prior = Discrete() if prior is None else check_prior(prior)
    K = check_K(K, train.shape)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method != "gibbs":
        raise ValueError(f"method={method!r} is not available yet in this release; use method='gibbs'")
    if devices is not None:
        raise ValueError("devices= (sharding over several devices) is not available yet in this release")
    num_warmup = int(num_warmup)
    if num_warmup < 0:
        raise ValueError(f"num_warmup must be >= 0, got {num_warmup}")
    num_samples = check_positive_int("num_samples", num_samples)
    thinning = check_positive_int("thinning", thinning)
    num_chains = check_positive_int("num_chains", num_chains)
    if thinning > num_samples:
        raise ValueError(f"thinning={thinning} > num_samples={num_samples} keeps no draw")
    tau = likelihood_precision(train.n, lam, noise_sd)
    m1, m2 = train.shape

    # centring and clipping (reported in meta)
    fit_data, offset = train.centered() if center else (train, 0.0)
    if clip == "auto":
        clip_range = train.value_range() if looks_like_ratings(train.values) else None
    elif clip is True:
        clip_range = train.value_range()
    elif clip is False or clip is None:
        clip_range = None
    else:
        lo, hi = clip
        clip_range = (float(lo), float(hi))

    # entries whose posterior mean is accumulated: test first, then predict=
    pr, pc, tv = [], [], []
    if test is not None:
        test = check_ratings(test, "test")
        if test.shape != train.shape:
            raise ValueError(f"test has shape {test.shape}, train has {train.shape}")
        pr.append(test.rows), pc.append(test.cols), tv.append(test.values)
    if predict is not None:
        r, c = train.check_entries(*predict, name="predict")
        pr.append(r), pc.append(c), tv.append(np.full(r.shape, np.nan))
    pred_rows = np.concatenate(pr) if pr else np.zeros(0, np.int32)
    pred_cols = np.concatenate(pc) if pc else np.zeros(0, np.int32)
    test_values = np.concatenate(tv) if tv else np.zeros(0)
    n_test = test.n if test is not None else 0

    track_rc = _pick_track(train, int(track), seed) if isinstance(track, (int, np.integer)) else train.check_entries(*track, name="track")
    num_kept = num_samples // thinning
    if store_factors == "auto":
        itemsize = 8 if (dtype == jnp.float64 or (dtype is None and jax.config.jax_enable_x64)) else 4
        store = num_chains * num_kept * (m1 + m2) * K * itemsize < _STORE_FACTORS_BUDGET
    else:
        store = bool(store_factors)

    kernel = ConjugateGibbs(
        num_samples=num_samples,
        thinning=thinning,
        predict=(pred_rows, pred_cols),
        test_values=test_values[:n_test],
        offset=offset,
        clip=clip_range,
        track=track_rc,
        store_factors=store,
        dtype=dtype,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thinning=thinning,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=progress_bar,
    )
    mcmc.run(jax.random.key(seed), fit_data, K, prior, lam, noise_sd)
    core = mcmc.last_state.core
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    pred_sum = np.asarray(core.pred_sum, np.float64).reshape(-1, core.pred_sum.shape[-1])
    num_kept_run = int(np.asarray(core.num_kept).ravel()[0])
    theta_mean = pred_sum.mean(axis=0) / max(num_kept_run, 1)
    # (chain, iteration); chains of a sequential run come stacked, of a single run without axis
    rmse_draw = np.asarray(core.rmse_draw).reshape(num_chains, -1)
    rmse_mean = np.asarray(core.rmse_mean).reshape(num_chains, -1)
    meta = {
        "method": "gibbs",
        "prior": prior,
        "prior_name": prior.name,
        "hyperparameters": prior.hyperparameters(),
        "K": K,
        "lam": lam,
        "noise_sd": noise_sd,
        "tau": tau,
        "center": center,
        "offset": offset,
        "clip": clip_range,
        "num_warmup": num_warmup,
        "num_samples": num_samples,
        "thinning": thinning,
        "num_chains": num_chains,
        "num_kept": num_kept_run,
        "seed": seed,
        "dtype": str(mcmc.last_state.core.M.dtype),
    }
    result = GibbsFit(
        samples=samples,
        pred_rows=pred_rows,
        pred_cols=pred_cols,
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
