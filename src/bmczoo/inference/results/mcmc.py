"""Draws of an MCMC run (Gibbs, NUTS): :class:`MCMCFit` and its two methods' classes."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from ..._arviz import add_factor_quantities, add_gamma, add_hyper_summaries, theta_singular_values
from .. import saving
from ..thinning import kept_iterations
from . import arrays, levels
from . import outputs as out
from ...offsets.base import table_key
from .base import FitResult, draws_theta_mean
from .fold_in import fold_in_draws
from .loglik import draw_step

__all__ = ["MCMCFit", "GibbsFit", "NUTSFit"]


def _entry_keys(rows, cols, m2: int) -> np.ndarray:
    return np.asarray(rows, np.int64) * m2 + np.asarray(cols, np.int64)


@saving.result_class
@dataclasses.dataclass(repr=False)
class MCMCFit(FitResult):
    """Draws of an MCMC run (Gibbs or NUTS).

    Attributes
    ----------
    samples : dict of arrays with leading axes (chain, draw): ``gamma`` (K,), ``theta``
        at the tracked entries, and ``M``, ``N`` when factor draws were stored.
    pred_rows, pred_cols, pred_mean : the entries whose posterior mean was computed at
        fit time and that mean (data scale, clipped), averaged over chains.
    pred_theta, pred_var : posterior mean (centred scale: no offset, unclipped) and
        variance of ``theta`` at those entries over the kept draws of all chains (Gibbs:
        from running sums of ``theta`` and ``theta^2``, no stored draws needed).
    rmse_draw, rmse_mean : (chain, iteration) test RMSE of each draw and of the running
        posterior mean (empty without test data).
    track_rows, track_cols : the tracked entries.
    num_kept : draws kept per chain.
    mcmc : NumPyro's ``MCMC`` object when it drove the run (else None).
    factor_samples : None, or (a fit loaded from a file saved with thinned factor draws,
        :mod:`bmczoo.inference.saving`) every per-draw site at the kept factor draws
        (leading axes (chain, kept draw)); ``samples`` then has every draw of the other
        sites and no factor draws.
    switches : (chain, 2) accepted and attempted annealed spike/slab switches (Gibbs with
        ``anneal_steps > 0``; else None); also in :meth:`run_stats`.
    timings : Gibbs: ``compile_seconds`` (the sweeps' program) and ``sweep_seconds`` (per
        sweep, all chains) of the run (None after loading); also in :meth:`run_stats`.
    pred_context : with sampled offsets, the key (``bmczoo.offsets.base.table_key``)
        of the per-rating table of the entries requested at fit time: a ``context=`` equal
        to it reads the fit-time running sums (else None).
    """

    samples: dict = dataclasses.field(default_factory=dict)
    pred_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    pred_cols: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    pred_mean: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    pred_theta: np.ndarray | None = None
    pred_var: np.ndarray | None = None
    rmse_draw: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((1, 0)))
    rmse_mean: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((1, 0)))
    track_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    track_cols: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    num_kept: int = 0
    mcmc: Any = None
    pred_proba: np.ndarray | None = None
    switches: np.ndarray | None = None
    factor_samples: dict | None = dataclasses.field(default=None, repr=False)
    timings: dict | None = None
    pred_context: str | None = None
    has_chains: ClassVar[bool] = True

    def _saved_fields(self, factor_limit: int | None) -> dict:
        """The fields, with at most ``factor_limit`` factor draws evenly spaced over each
        chain (:func:`~bmczoo.inference.saving.thin_factor_draws`)."""
        values = super()._saved_fields(factor_limit)
        values["samples"], values["factor_samples"] = saving.thin_factor_draws(self, factor_limit)
        return values

    def _repr_holds(self) -> str:
        lead = next((np.shape(v)[:2] for v in self.samples.values() if np.ndim(v) >= 2), None)
        if lead is None:
            return "no draws"
        text = f"{lead[0]} chain{'s' if lead[0] != 1 else ''} x {lead[1]} draws"
        if "M" in self.samples:
            return text + ", factor draws: all"
        if self.factor_samples is not None and "M" in self.factor_samples:
            kept = np.shape(self.factor_samples["M"])[1]
            return text + f", factor draws: {kept} per chain (thinned when saved)"
        return text + ", no factor draws"

    def _repr_rmse(self) -> str:
        r = np.asarray(self.rmse_mean)
        if r.ndim != 2 or r.shape[1] == 0:
            return ""
        last = ", ".join(f"{v:.4f}" for v in r[:8, -1]) + (", ..." if r.shape[0] > 8 else "")
        return f"{last} (posterior mean of {'each chain' if r.shape[0] > 1 else 'the chain'} at the last sweep)"

    @property
    def _factor_src(self) -> dict:
        """The draws in which the factor draws and the other per-draw sites align."""
        return self.samples if self.factor_samples is None else self.factor_samples

    def _level_proba(self, r, c, context=None) -> np.ndarray:
        """Level probabilities (P, L): at entries requested at fit time from the running
        sums (Gibbs), else averaged over the stored factor and cut-point draws."""
        idx = self._known(r, c, context)
        if idx is not None and self.pred_proba is not None:
            return self.pred_proba[idx]
        d = self._draws(context=context)
        return levels.draws_level_proba(
            out.draw_blocks(d, r, c), self._cut_draws(self._factor_src, d["M"].shape[0])
        )

    def run_stats(self):
        """Number of kept draws, the run's ``timings`` and, with the annealed switch,
        its counts per chain."""
        out = {"num_kept": self.num_kept}
        if self.timings:
            out.update(self.timings)
        if self.switches is not None:  # per chain
            sw = np.asarray(self.switches).reshape(-1, 2)
            out["switches_accepted"], out["switches_attempted"] = (
                sw[:, 0].tolist(),
                sw[:, 1].tolist(),
            )
        return out

    def _lookup(self, r, c):
        """Positions of the entries among those requested at fit time, or None."""
        keys = _entry_keys(r, c, self.shape[1])
        known = _entry_keys(self.pred_rows, self.pred_cols, self.shape[1])
        if keys.size <= known.size and np.array_equal(keys, known[: keys.size]):
            return np.arange(keys.size)  # e.g. fit.rmse(test) with the test set of the fit
        if known.size == 0:
            return None
        order = np.argsort(known, kind="stable")
        # searchsorted on the sorted copy: with sorter= it is much slower on millions of keys
        known_sorted = known[order]
        pos = np.minimum(np.searchsorted(known_sorted, keys), known.size - 1)
        if np.all(known_sorted[pos] == keys):
            return order[pos]
        return None

    def _known(self, r, c, context):
        """Positions of the entries among those requested at fit time (None: not all
        requested, or a ``context`` table other than the fit-time one)."""
        if context is not None and table_key(context) != self.pred_context:
            return None
        return self._lookup(r, c)

    def _draws(self, what: str = "these entries were not requested at fit time and", context=None):
        """The flat factor draws; with sampled offsets, their value at the entries whose
        per-rating table ``context`` is (``entry_shift``)."""
        if context is None:
            _check_no_sampled_offsets(
                self.info,
                "entries not requested at fit time, the log predictive density, recommend, fold_in",
            )
        if "M" not in self._factor_src:
            hint = (
                "pass them as fit(..., predict=(rows, cols)) or use store_factors=True"
                if what.startswith("these")
                else "refit with store_factors=True"
            )
            raise ValueError(f"{what} no factor draws were stored: {hint}")
        d = out.flat_draws(self._factor_src, self.info.K)
        if context is not None:
            d["entry_shift"] = _offset_draws(self.info, self._factor_src, context)
        return d

    def _predict_mean(self, r, c, context=None) -> np.ndarray:
        """Posterior mean of ``theta`` at the given entries (1-D array, data scale).

        Entries requested at fit time (``predict=`` or the test set) come from the running
        sums; other entries need the stored factor draws (``store_factors``).
        """
        idx = self._known(r, c, context)
        if idx is not None:
            return self.pred_mean[idx]
        if context is not None:
            return self._finish(out.draws_theta_moments(self._draws(context=context), r, c)[0])
        self._draws()
        return self._finish(draws_theta_mean(self._factor_src, r, c))

    def _theta_moments(self, r, c, context=None):
        """Mean and variance of ``theta`` over the kept draws (all chains pooled): from the
        fit-time running sums at requested entries, else from the stored factor draws."""
        idx = self._known(r, c, context)
        if idx is not None and self.pred_theta is not None:
            return self.pred_theta[idx], self.pred_var[idx]
        return out.draws_theta_moments(self._draws(context=context), r, c)

    def noise_var(self) -> float:
        """The noise variance: ``E[1/tau]`` (the mean of ``1/tau`` over the kept draws of a
        learned tau, else the fixed ``1/tau``) for Gaussian noise, ``nu / (nu - 2) E[1/tau]``
        for Student-t (the likelihood's ``noise_variance``)."""
        lik = self.info.likelihood
        if lik.learned and "tau" in self.samples:
            return float(
                lik.noise_variance(np.mean(1.0 / np.asarray(self.samples["tau"], np.float64)))
            )
        return 1.0 / float(self.info.tau)

    def log_predictive_density(self, test) -> float:
        """Mean over the ratings of ``test`` of ``log p(y | train)``.

        With stored factor draws (``store_factors``, NUTS): ``log mean_s N(y | theta_s +
        offset, 1/tau_s)`` over the kept draws (the Monte Carlo estimate of the exact
        predictive density).  Without them (entries requested at fit time only): the
        Gaussian approximation ``N(y | E[theta] + offset, Var[theta] + E[1/tau])`` from the
        running moments.  No clipping in either.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape.
        """
        test = self._check_test(test)
        if self.info.likelihood.latent:
            return self._level_lpd(test)
        if "M" not in self._factor_src:
            return self._gaussian_lpd(test)
        d = self._draws(context=self._context_kw(self._test_context(test), test.n).get("context"))
        lp = out.draws_lpd(
            d,
            test.rows,
            test.cols,
            test.values,
            self.info.shift.offset,
            self.info.tau,
            self.info.likelihood,
        )
        return float(np.mean(lp))

    def _user_scores(self, users, by, z, rng):
        d = self._draws("recommend needs the factor draws, and")
        return out.draws_user_scores(d, None, users, by, z, self.noise_var(), rng)

    def _fold_in(self, new):
        d = self._draws("fold_in needs the factor draws of N, and")
        return fold_in_draws(self, new, d, self._factor_src)

    # ------------------------------------------------------------------ arrays (hooks)
    def _posterior_arrays(self, entries, num_draws: int, seed: int) -> arrays.Posterior:
        """The default posterior (gamma, theta at the tracked or given entries, the factor
        quantities, the hyper-parameters' summaries), the sample stats (RMSE at the kept
        sweeps, NumPyro's extra fields) and the per-sweep RMSE traces."""
        rows, cols, track_index = _resolve_entries(self, entries, seed)
        coords: dict = {}
        post = _mcmc_posterior(self, (rows, cols), track_index, entries is not None, coords)
        C, D = next(iter(post.values())).shape[:2]
        stats, conv = _mcmc_traces(self, C, D)
        attrs: dict[str, Any] = {"representation": "mcmc draws"}
        for k in ("num_warmup", "num_samples", "thinning"):
            if arrays.setting(self, k) is not None:
                attrs[k] = int(arrays.setting(self, k))
        return arrays.Posterior(post, stats, conv, attrs, coords, rows, cols)

    def _tau_draws(self, num_draws: int, seed: int):
        return self.samples.get("tau")

    def _extra_draws(self, post: dict) -> dict:
        """Every stored draw that is not in the default posterior, as stored."""
        lead = next(iter(post.values())).shape[:2]
        return {
            k: np.asarray(v)
            for k, v in self.samples.items()
            if k not in post and np.ndim(v) >= 2 and np.shape(v)[:2] == lead
        }

    def _ratings_theta_tau(self, rows, cols, num_draws: int, max_draws: int, rng, context=None):
        return _mcmc_theta_tau(self, rows, cols, max_draws, context)

    def _drawn_cuts(self, lik, shape, step: int) -> np.ndarray:
        return np.asarray(self._factor_src["cuts"], np.float64)[:, ::step]

    def _gamma_draws(self):
        return self.samples.get("gamma")

    def _prob_gamma_above(self, threshold: float) -> np.ndarray:
        return arrays.draws_prob_above(self, self.samples, threshold)

    def _rmse_traces(self):
        """``(per-draw, running-mean)`` RMSE traces (chain, sweep)."""
        draw = np.asarray(self.rmse_draw, np.float64)
        mean = np.asarray(self.rmse_mean, np.float64)
        if draw.size == 0:
            raise ValueError(
                "this fit has no RMSE trace: fit it with test=RatingData (not available for NUTS)"
            )
        return draw, mean


@saving.result_class
@dataclasses.dataclass(repr=False)
class GibbsFit(MCMCFit):
    """Result of ``bmc.fit(..., method="gibbs")``: draws of the conjugate Gibbs sampler."""


@saving.result_class
@dataclasses.dataclass(repr=False)
class NUTSFit(MCMCFit):
    """Result of ``bmc.fit(..., method="nuts")``: draws of NumPyro's NUTS."""


# --------------------------------------------------------------------------- arrays for ArviZ
def _tracked_index(fit, rows, cols) -> np.ndarray | None:
    """Positions of the requested entries among an MCMC fit's tracked entries (their draws
    of theta), or None unless all of them are tracked (first occurrence of repeats)."""
    if "theta" not in fit.samples or getattr(fit, "track_rows", None) is None:
        return None
    m2 = int(fit.shape[1]) if getattr(fit, "shape", None) else int(max(cols.max(initial=0), 0)) + 1
    known = np.asarray(fit.track_rows, np.int64) * m2 + np.asarray(fit.track_cols, np.int64)
    want = rows * m2 + cols
    pos = {int(k): i for i, k in reversed(list(enumerate(known.tolist())))}
    if not all(int(k) in pos for k in want.tolist()):
        return None
    return np.array([pos[int(k)] for k in want.tolist()], dtype=np.int64)


def _resolve_entries(fit, entries, seed: int):
    """``(rows, cols, track_index)``: the entries of theta to convert and their positions
    among the tracked entries (None: computed from the factors)."""
    if entries is not None:
        rows, cols = arrays.resolve_entries(fit, entries, seed)
        return rows, cols, _tracked_index(fit, rows, cols)
    if "theta" in fit.samples:
        E = np.asarray(fit.samples["theta"]).shape[-1]
        if getattr(fit, "track_rows", None) is not None and len(fit.track_rows) == E:
            rows, cols = arrays.default_entries(fit, seed)
        else:  # draws of theta without their entries: rows and cols unknown (-1)
            rows = cols = np.full(E, -1, np.int64)
        return rows, cols, np.arange(E)
    rows, cols = arrays.default_entries(fit, seed)
    return rows, cols, None


def _mcmc_theta(s: dict, entries, track_index, explicit: bool) -> np.ndarray | None:
    """Draws (chain, draw, entry) of theta at the entries: the tracked draws, or from the
    stored factor draws (None when there are neither and the entries are the defaults)."""
    rows, cols = entries
    if track_index is not None:
        return np.asarray(s["theta"])[..., track_index]
    if rows.size and ("M" in s and "N" in s or explicit):
        if "M" not in s or "N" not in s:
            raise ValueError(
                "these entries were not tracked and no factor draws were stored: pass "
                "fit(..., track=(rows, cols)) or store_factors=True"
            )
        M, N = np.asarray(s["M"]), np.asarray(s["N"])
        return np.einsum("cdek,cdek->cde", M[:, :, rows], N[:, :, cols])
    return None


def _mcmc_posterior(fit, entries, track_index, explicit: bool, coords: dict) -> dict:
    """The default posterior group of an MCMC fit: gamma, theta at the entries, the factor
    quantities and the summaries of the hyper-parameters."""
    s = fit.samples
    post: dict[str, np.ndarray] = {}
    if "gamma" in s:
        add_gamma(post, np.asarray(s["gamma"]))
        if np.ndim(s["gamma"]) == 3:  # (chain, draw, K)
            post["num_active"] = arrays.num_active_draws(fit, s)
    theta = _mcmc_theta(s, entries, track_index, explicit)
    if theta is not None:
        post["theta"] = theta
    if "theta_sv" in s:
        add_factor_quantities(post, np.asarray(s["theta_sv"], np.float64))
    elif "M" in s and "N" in s:
        add_factor_quantities(post, theta_singular_values(s["M"], s["N"]))
    if not post:
        raise ValueError("the fit holds no draws of gamma or theta")
    add_hyper_summaries(post, s, next(iter(post.values())).shape[:2], coords)
    return post


def _kept_iterations_of(fit) -> np.ndarray | None:
    """The sweeps (1-based) whose draws an MCMC fit kept, from its settings (None when the
    settings do not say)."""
    values = [arrays.setting(fit, k) for k in ("num_warmup", "num_samples", "thinning")]
    if any(v is None for v in values):
        return None
    return kept_iterations(*(int(v) for v in values))


def _mcmc_traces(fit, C: int, D: int) -> tuple[dict, dict]:
    """``(sample_stats, convergence)`` of an MCMC fit with C chains of D kept draws: the
    RMSE traces (per sweep, and at the kept sweeps) and NumPyro's extra fields."""
    stats: dict[str, np.ndarray] = {}
    conv: dict[str, np.ndarray] = {}
    rmse_draw = np.asarray(fit.rmse_draw)
    rmse_mean = np.asarray(fit.rmse_mean)
    if rmse_draw.size:
        conv["rmse_draw"] = rmse_draw.reshape(C, -1)
        conv["rmse_mean"] = rmse_mean.reshape(C, -1)
        it = _kept_iterations_of(fit)
        T = conv["rmse_draw"].shape[1]
        if it is not None and it.size == D and it.size and it[-1] <= T:
            stats["rmse"] = conv["rmse_draw"][:, it - 1]
            stats["rmse_mean"] = conv["rmse_mean"][:, it - 1]
    if fit.mcmc is not None:
        try:
            extra = fit.mcmc.get_extra_fields(group_by_chain=True)
        except AssertionError:  # NumPyro: `run` was not called, no states
            extra = {}
        for k, v in extra.items():
            v = np.asarray(v)
            if v.ndim >= 2 and v.shape[:2] == (C, D):
                stats[k] = v
    return stats, conv


def _offset_draws(info, src: dict, context):
    """``(p0, p1) -> (S, p1 - p0)``: each kept draw's sampled offsets at the entries
    ``p0:p1`` of the per-rating table ``context``, float64."""
    import jax

    lead = np.shape(src["M"])[:2]
    S = int(np.prod(lead))
    states = []
    for o in info.offsets:
        pre = f"{o.name}_"
        state = {
            k[len(pre) :]: np.asarray(v, np.float64).reshape(S, *np.shape(v)[2:])
            for k, v in src.items()
            if k.startswith(pre) and np.shape(v)[:2] == lead
        }
        states.append((o, state))

    def shift(p0: int, p1: int) -> np.ndarray:
        table = context.take(np.arange(p0, p1))
        total = np.zeros((S, p1 - p0))
        with jax.enable_x64(True):
            for o, state in states:
                total += np.asarray(o.shift(state, o.arrays(table, p1 - p0, np.float64)))
        return total

    return shift


def _check_no_sampled_offsets(info, what: str) -> None:
    """A clear error where an output would be computed from the factor draws at entries
    whose per-rating context the fit does not hold (the offsets would be left out)."""
    if info.offsets:
        names = ", ".join(o.name for o in info.offsets)
        raise ValueError(
            f"this fit has sampled offsets ({names}): it predicts at the entries requested at "
            "fit time (test=) from the running sums, and elsewhere from the factor draws "
            "with the entries' per-rating table (predict(rows, cols, context=table)); "
            f"outputs computed from the factor draws ({what}) need each entry's context"
        )


def _mcmc_theta_tau(fit, rows, cols, max_draws, context=None):
    """theta (C, D', E) at the ratings (centred scale, biases and the sampled offsets at
    the ratings' per-rating table ``context`` included) and tau (C, D') or None, over
    every ``step``-th kept draw."""
    if context is None:
        _check_no_sampled_offsets(fit.info, "the pointwise log likelihood")
    s = fit._factor_src
    if context is not None and "M" not in s:
        raise ValueError(
            "the pointwise log likelihood of a fit with sampled offsets needs the factor "
            "draws: refit with store_factors=True"
        )
    if "M" in s and "N" in s:
        C, D = np.shape(s["M"])[:2]
        step = draw_step(C, D, max_draws)
        K = np.shape(s["M"])[-1]
        prefixes = tuple(f"{o.name}_" for o in fit.info.offsets)
        src = {
            k: np.asarray(s[k])[:, ::step]
            for k in s
            if k in ("M", "N", "row_bias", "col_bias", "tau")
            or (k.startswith(prefixes) and np.shape(s[k])[:2] == (C, D))
        }
        d = out.flat_draws(src, K)
        if context is not None:
            d["entry_shift"] = _offset_draws(fit.info, src, context)
        theta = np.empty((d["M"].shape[0], rows.size))
        for p0, p1, t in out.draw_blocks(d, rows, cols):
            theta[:, p0:p1] = t
        theta = theta.reshape(C, src["M"].shape[1], rows.size)
        source = "stored factor draws"
    else:
        tidx = _tracked_index(fit, rows, cols) if "theta" in s else None
        if tidx is None:
            raise ValueError(
                "the pointwise log-likelihood needs theta at every rating for each draw, and this fit "
                "has no factor draws and does not track these entries: refit with "
                "store_factors=True, or pass the entries as track=(rows, cols)"
            )
        th = np.asarray(s["theta"])
        C, D = th.shape[:2]
        step = draw_step(C, D, max_draws)
        theta = np.asarray(th[:, ::step][..., tidx], np.float64)
        source = "tracked entries"
    tau = None
    if "tau" in s and fit.info.likelihood.learned:
        tau = np.asarray(s["tau"], np.float64).reshape(C, -1)[:, ::step]
    return theta, tau, {"draw_step": step, "theta_source": source}
