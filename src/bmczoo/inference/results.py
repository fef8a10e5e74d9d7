"""Fit results: one class per method family, plain arrays behind one typed interface.

Every result carries a typed :class:`FitInfo` (the model's components, the settings
object it was run with, the map from ``theta`` to predictions) and gives:

* ``predict(rows, cols)``: posterior mean on the data's scale, ``rmse(test)``,
  ``rmse_theta(theta)`` (RMSE against a full true matrix, computed in blocks);
* the plain arrays of its family: draws with leading (chain, draw) axes (:class:`MCMCFit`:
  ``samples``; :class:`SVIFit`: ``draws``), or the moments of the variational posterior
  (:class:`VBFit`);
* ``family`` (``"mcmc"``, ``"vb"``, ``"svi"``): which of those it holds; diagnostics
  convert these arrays to ArviZ at the edge (:mod:`bmczoo.diagnostics.convert`).

``fit.meta`` is a read-only dict view of the same information.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, ClassVar

import numpy as np

from .._checks import check_ratings
from ..data.ratings import check_entries
from ..offsets import Shift
from ..priors import Prior
from . import levels
from . import outputs as out
from . import saving
from .info import FitInfo, _NoGamma, no_gamma  # noqa: F401 - FitInfo, no_gamma: importable from here

__all__ = [
    "FitInfo",
    "FitResult",
    "MCMCFit",
    "GibbsFit",
    "NUTSFit",
    "VBFit",
    "SVIFit",
    "MAPFit",
    "theta_mean",
    "bias_draws",
    "draws_theta_mean",
]


def theta_mean(M, N, rows, cols, budget: int = 2**24) -> np.ndarray:
    """Mean over draws of ``M_i . N_j``: M (..., m1, K), N (..., m2, K) -> (P,).

    Blocks over draws and entries keep the temporaries below ``budget`` numbers (128 MB).
    """
    M = np.asarray(M).reshape(-1, *np.shape(M)[-2:])
    N = np.asarray(N).reshape(-1, *np.shape(N)[-2:])
    S, _, K = M.shape
    rows, cols = np.asarray(rows), np.asarray(cols)
    out = np.zeros(len(rows))
    draws = max(1, min(S, budget // (K * 1024)))
    chunk = max(1024, budget // (draws * K))
    for s0 in range(0, S, draws):
        Ms, Ns = M[s0 : s0 + draws], N[s0 : s0 + draws]
        for p0 in range(0, len(rows), chunk):
            r, c = rows[p0 : p0 + chunk], cols[p0 : p0 + chunk]
            out[p0 : p0 + chunk] += np.einsum("spk,spk->p", Ms[:, r], Ns[:, c], dtype=np.float64)
    return out / S


def bias_draws(src: dict, rows, cols):
    """``row_bias_i + col_bias_j`` at the entries for each draw (..., P) when ``src`` (draws
    or a point) has the biases' sites, else ``0.0``."""
    if "row_bias" not in src:
        return 0.0
    rows, cols = np.asarray(rows), np.asarray(cols)
    return (
        np.asarray(src["row_bias"], np.float64)[..., rows]
        + np.asarray(src["col_bias"], np.float64)[..., cols]
    )


def draws_theta_mean(src: dict, rows, cols) -> np.ndarray:
    """Mean over the draws (or the point) in ``src`` of ``theta_ij = M_i . N_j`` plus, when
    ``src`` has them, ``row_bias_i + col_bias_j`` (P,)."""
    out = theta_mean(src["M"], src["N"], rows, cols)
    if "row_bias" in src:
        rb = np.asarray(src["row_bias"], np.float64)
        cb = np.asarray(src["col_bias"], np.float64)
        out = (
            out
            + rb.reshape(-1, rb.shape[-1]).mean(0)[np.asarray(rows)]
            + cb.reshape(-1, cb.shape[-1]).mean(0)[np.asarray(cols)]
        )
    return out


@dataclasses.dataclass(repr=False)
class FitResult(out.PredictiveMixin):
    """Base of the result classes: predictions and their RMSE, diagnostics delegation,
    and the Bayesian outputs (:mod:`bmczoo.inference.outputs`): ``predict(...,
    return_std=True)``, ``predictive_interval``, ``log_predictive_density``,
    ``recommend``, ``fold_in``, ``save`` (``bmc.load`` reads it back).

    ``seen_rows``, ``seen_cols``: the training pattern (set by ``bmc.fit``; used by
    ``recommend(exclude_seen=True)``; None when unknown).  ``seen_values``: the training
    ratings (set by ``bmc.fit``; used by ``to_arviz(log_likelihood=True)``; not saved).
    """

    info: FitInfo
    seen_rows: np.ndarray | None = dataclasses.field(default=None, kw_only=True, repr=False)
    seen_cols: np.ndarray | None = dataclasses.field(default=None, kw_only=True, repr=False)
    seen_values: np.ndarray | None = dataclasses.field(default=None, kw_only=True, repr=False)
    family: ClassVar[str] = ""

    # ------------------------------------------------------------------ info
    def __repr__(self) -> str:
        """A few lines: the class and method, the model's components, ``K``, what the fit
        holds (chains x draws, iterations), the dtype, the data's shape and the test RMSE
        when the fit recorded one (the arrays themselves are attributes)."""
        info = self.info
        m1, m2 = info.shape
        n = "" if self.seen_rows is None else f", {len(self.seen_rows)} training ratings"
        rmse = self._repr_rmse()
        lines = [
            f"{type(self).__name__}(method={info.method!r}, K={info.K}, {self._repr_holds()}, dtype={info.dtype})",
            f"  prior: {info.prior!r}",
            f"  likelihood: {info.likelihood!r}",
            f"  biases: {info.biases!r}",
            f"  data: {m1} x {m2}{n}",
        ]
        if rmse:
            lines.append(f"  test RMSE: {rmse}")
        return "\n".join(lines)

    def _repr_holds(self) -> str:
        return ""

    def _repr_rmse(self) -> str:
        return ""

    @property
    def shape(self) -> tuple[int, int]:
        return self.info.shape

    @property
    def method(self) -> str:
        return self.info.method

    @property
    def prior(self) -> Prior:
        return self.info.prior

    def run_stats(self) -> dict[str, Any]:
        """Per-run figures of the family (number of draws kept, iterations, ...)."""
        return {}

    @property
    def meta(self) -> types.MappingProxyType:
        """Read-only dict view of :attr:`info` and :meth:`run_stats`."""
        return types.MappingProxyType({**self.info.as_dict(), **self.run_stats()})

    # ------------------------------------------------------------------ predictions
    def _finish(self, theta) -> np.ndarray:
        return self.info.shift.apply(np.asarray(theta, np.float64))

    def _check_entries(self, rows, cols):
        return check_entries(rows, cols, self.shape, "predict")

    @property
    def _shift(self) -> Shift:
        return self.info.shift

    @property
    def _K(self) -> int:
        return self.info.K

    def _seen_pattern(self):
        return None if self.seen_rows is None else (self.seen_rows, self.seen_cols)

    def _predict_mean(self, r, c) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _theta_moments(self, r, c):  # pragma: no cover - abstract
        raise NotImplementedError

    def noise_var(self) -> float:
        """``E[1/tau]``, the noise part of the predictive variance: the posterior mean of
        ``1/tau`` for a learned noise, else the fixed ``1/tau`` of the tempered likelihood
        (``noise_sd^2``, or ``n / (2 lam)``)."""
        return 1.0 / float(self.info.tau)

    def predict(self, rows, cols, return_std: bool = False):
        """Posterior (predictive) mean at the given entries (1-D array, data scale: offset
        added, clipped when the fit clips).  With ``return_std=True`` returns ``(mean,
        sd)``, ``sd = sqrt(Var[theta_ij] + E[1/tau])`` the posterior predictive sd (never
        clipped); see the class for how ``Var[theta_ij]`` is computed.

        Probit and ordered probit: the expected level ``sum_l level_l P(Y_ij = l | data)``
        (binary: ``P(Y_ij = 1)``), and the sd of the predictive level distribution.

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Row and column indices of the entries.
        return_std : bool
            Also return the predictive sd.
        """
        r, c = self._check_entries(rows, cols)
        if self._latent:
            mean, sd = levels.level_summary(
                self._level_proba(r, c), self.info.likelihood.level_values
            )
            return (mean, sd) if return_std else mean
        mean = self._predict_mean(r, c)
        if not return_std:
            return mean
        _, var = self._theta_moments(r, c)
        return mean, np.sqrt(np.maximum(var, 0.0) + self.noise_var())

    # ------------------------------------------------------------------ levels
    @property
    def _latent(self) -> bool:
        """Whether the likelihood is a latent-Gaussian one (probit, ordered probit)."""
        return self.info.likelihood.latent

    def _level_proba(self, r, c) -> np.ndarray:  # pragma: no cover - per family
        raise ValueError(f"{type(self).__name__} has no level probabilities")

    def _cut_draws(self, src: dict | None, S: int) -> np.ndarray:
        """(S, L-1) cut points: the draws of ``cuts`` in ``src`` when learned, else the fixed ones."""
        fixed = self.info.likelihood.fixed_cuts()
        if fixed is not None:
            return np.broadcast_to(np.asarray(fixed, np.float64), (S, len(fixed)))
        if src is None or "cuts" not in src:
            raise ValueError("the fit holds no draws of the cut points")
        return np.asarray(src["cuts"], np.float64).reshape(S, -1)

    def predict_proba(self, rows, cols) -> np.ndarray:
        """Posterior predictive level probabilities at the given entries: for a
        :class:`~bmczoo.likelihoods.Probit` fit ``P(Y_ij = 1 | data)`` (P,); for an
        :class:`~bmczoo.likelihoods.OrderedProbit` fit (P, L), column ``l`` the
        probability of ``likelihood.levels[l]``.

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Row and column indices of the entries.
        """
        if not self._latent:
            raise ValueError(
                f"predict_proba needs a probit or ordered-probit likelihood; this fit's is "
                f"{self.info.likelihood.name!r} (use predict / predictive_interval)"
            )
        r, c = self._check_entries(rows, cols)
        probs = self._level_proba(r, c)
        return probs[:, 1] if self.info.likelihood.binary else probs

    def predictive_interval(self, rows, cols, prob: float = 0.9):
        """Central ``prob`` interval of the posterior predictive (see
        :meth:`bmczoo.inference.outputs.PredictiveMixin.predictive_interval`).  Probit and
        ordered probit: of the predictive level distribution (the lowest levels whose CDF
        reaches ``(1 - prob) / 2`` and ``(1 + prob) / 2``).

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Row and column indices of the entries.
        prob : float
            Probability of the interval, in (0, 1).
        """
        if not self._latent:
            return super().predictive_interval(rows, cols, prob)
        p = out.check_prob(prob)
        r, c = self._check_entries(rows, cols)
        return levels.level_interval(self._level_proba(r, c), self.info.likelihood.level_values, p)

    def _level_lpd(self, test) -> float:
        """Mean ``log P(Y = y | data)`` over ``test`` (exact predictive level probabilities)."""
        lik = self.info.likelihood
        probs = self._level_proba(test.rows, test.cols)
        return float(np.mean(levels.level_lpd(probs, lik.level_index(test.values))))

    def save(self, path, *, factor_draws: int | str = 100) -> None:
        """Write the fit to ``path`` (``.npz`` + JSON metadata, no pickle); ``bmc.load``
        reads it back (:mod:`bmczoo.inference.saving`).

        ``factor_draws``: an MCMC fit keeps at most this many draws of its factors ``M``,
        ``N`` (and biases) in all chains pooled, evenly spaced over each chain (default
        100), or every draw with ``"all"``.  The loaded fit's ``predict`` (``return_std``)
        and ``predictive_interval`` equal this fit's bit for bit at the entries whose
        moments were accumulated during the fit (the test set, ``predict=``); elsewhere,
        and for ``log_predictive_density``, ``recommend`` and ``fold_in``, it averages
        over the kept factor draws (bit for bit with ``"all"``).

        Parameters
        ----------
        path : str or os.PathLike
            The ``.npz`` file to write.
        factor_draws : int or "all"
            How many factor draws an MCMC fit keeps.
        """
        saving.save(self, path, factor_draws=factor_draws)

    def _state_arrays(self) -> dict:
        """Arrays of the fit's algorithm state that :meth:`save` writes beside its fields
        (``state/...`` names; none by default)."""
        return {}

    @classmethod
    def _state_from_arrays(cls, arrays: dict) -> dict:
        """The fields :func:`~bmczoo.inference.saving.load` gives back from what
        :meth:`_state_arrays` wrote (none by default)."""
        return {}

    def fold_in(self, new):
        """Fold new rows (a RatingData of shape ``(U, m2)``: new users over the same items)
        into the fit without refitting: a :class:`~bmczoo.inference.outputs.FoldInFit`
        (``predict``, ``predictive_interval``, ``recommend``, ...).

        Parameters
        ----------
        new : RatingData
            Ratings of the new rows, shape ``(U, m2)``.
        """
        from .._checks import check_ratings

        new = check_ratings(new, "new")
        if self._latent:
            raise ValueError(
                f"fold_in is not available for the {self.info.likelihood.name} likelihood yet (its new "
                "rows would need their own latent block): refit with the new rows included"
            )
        if new.shape[1] != self.shape[1]:
            raise ValueError(
                f"new rows must be over the fit's {self.shape[1]} items, got shape {new.shape}"
            )
        return self._fold_in(new)

    def _fold_in(self, new):
        raise ValueError(f"fold_in is not available for {type(self).__name__}")

    def rmse(self, test) -> float:
        """RMSE of :meth:`predict` against the values of ``test``.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape.
        """
        test = check_ratings(test, "test")
        if test.shape != self.shape:
            raise ValueError(f"test has shape {test.shape}, the fit has {self.shape}")
        pred = self.predict(test.rows, test.cols)
        return float(np.sqrt(np.mean((pred - test.values) ** 2)))

    def rmse_theta(self, theta, *, block_rows: int | None = None) -> float:
        """RMSE of the posterior mean against a full ``m1 x m2`` matrix ``theta`` over all
        its entries (the paper's simulation criterion), predicted a block of rows at a time.

        Parameters
        ----------
        theta : array_like, shape (m1, m2)
            The true matrix.
        block_rows : int, optional
            Rows predicted at a time (default: about 2^20 entries per block).
        """
        theta = np.asarray(theta, np.float64)
        if theta.shape != tuple(self.shape):
            raise ValueError(f"theta has shape {theta.shape}, the fit has {self.shape}")
        m1, m2 = self.shape
        step = block_rows or max(1, 2**20 // m2)
        sse = 0.0
        for r0 in range(0, m1, step):
            r1 = min(m1, r0 + step)
            rows, cols = np.divmod(np.arange(r0 * m2, r1 * m2), m2)
            sse += float(np.sum((self.predict(rows, cols) - theta[r0:r1].ravel()) ** 2))
        return float(np.sqrt(sse / (m1 * m2)))

    # ------------------------------------------------------------------ diagnostics
    def rank_posterior(self, threshold: float | None = None) -> np.ndarray:
        """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K (default
        threshold: the prior's); for a prior without column scales (Normal-Wishart), of
        the effective rank ``#{k: s_k(theta) > threshold}`` of theta (default threshold:
        1% of the largest singular value's posterior mean); see
        :func:`bmczoo.diagnostics.rank_posterior`.

        Parameters
        ----------
        threshold : float, optional
            The threshold (default as above).
        """
        from .. import diagnostics

        return diagnostics.rank_posterior(self, threshold)

    def to_arviz(self, **kwargs):
        """ArviZ data: by default a small posterior of what one reads (tracked theta
        entries, gamma and sorted gamma or a Normal-Wishart state's invariant summaries,
        singular values of theta, ``||theta||_F``, effective rank, noise sd, the biases'
        variances) and the per-iteration traces; ``var_names=["row_bias", ...]`` adds
        stored draws (per-row biases, factors, full matrices; ``full=True``: all of them);
        ``log_likelihood=True`` adds the pointwise log-likelihood, posterior predictive
        and observed data of the training ratings (``az.loo``, ``az.compare``,
        ``az.plot_ppc``); see :func:`bmczoo.diagnostics.to_arviz`.

        Parameters
        ----------
        **kwargs
            Passed to :func:`bmczoo.diagnostics.to_arviz` (``var_names``, ``full``,
            ``entries``, ``log_likelihood``, ...).
        """
        from .. import diagnostics

        return diagnostics.to_arviz(self, **kwargs)


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
    family: ClassVar[str] = "mcmc"

    def _repr_holds(self) -> str:
        lead = next((np.shape(v)[:2] for v in self.samples.values() if np.ndim(v) >= 2), None)
        if lead is None:
            return "no draws"
        text = f"{lead[0]} chain{'s' if lead[0] != 1 else ''} x {lead[1]} draws"
        if "M" in self.samples:
            return text + ", factor draws: all"
        if self.factor_samples is not None and "M" in self.factor_samples:
            return text + f", factor draws: {np.shape(self.factor_samples['M'])[1]} per chain"
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

    def _level_proba(self, r, c) -> np.ndarray:
        """Level probabilities (P, L): at entries requested at fit time from the running
        sums (Gibbs), else averaged over the stored factor and cut-point draws."""
        idx = self._lookup(r, c)
        if idx is not None and self.pred_proba is not None:
            return self.pred_proba[idx]
        d = self._draws()
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
        # searchsorted on the sorted copy: with sorter= it is ~20x slower on millions of keys
        known_sorted = known[order]
        pos = np.minimum(np.searchsorted(known_sorted, keys), known.size - 1)
        if np.all(known_sorted[pos] == keys):
            return order[pos]
        return None

    def _draws(self, what: str = "these entries were not requested at fit time and"):
        if "M" not in self._factor_src:
            hint = (
                "pass them as fit(..., predict=(rows, cols)) or use store_factors=True"
                if what.startswith("these")
                else "refit with store_factors=True"
            )
            raise ValueError(f"{what} no factor draws were stored: {hint}")
        return out.flat_draws(self._factor_src, self.info.K)

    def _predict_mean(self, r, c) -> np.ndarray:
        """Posterior mean of ``theta`` at the given entries (1-D array, data scale).

        Entries requested at fit time (``predict=`` or the test set) come from the running
        sums; other entries need the stored factor draws (``store_factors``).
        """
        idx = self._lookup(r, c)
        if idx is not None:
            return self.pred_mean[idx]
        self._draws()
        return self._finish(draws_theta_mean(self._factor_src, r, c))

    def _theta_moments(self, r, c):
        """Mean and variance of ``theta`` over the kept draws (all chains pooled): from the
        fit-time running sums at requested entries, else from the stored factor draws."""
        idx = self._lookup(r, c)
        if idx is not None and self.pred_theta is not None:
            return self.pred_theta[idx], self.pred_var[idx]
        return out.draws_theta_moments(self._draws(), r, c)

    def noise_var(self) -> float:
        """``E[1/tau]``: mean of ``1/tau`` over the kept draws of a learned tau, else the
        fixed ``1/tau``."""
        if self.info.likelihood.learned and "tau" in self.samples:
            return float(np.mean(1.0 / np.asarray(self.samples["tau"], np.float64)))
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
        if self._latent:
            return self._level_lpd(test)
        if "M" not in self._factor_src:
            return self._gaussian_lpd(test)
        d = self._draws()
        lp = out.draws_lpd(
            d, test.rows, test.cols, test.values, self.info.shift.offset, self.info.tau
        )
        return float(np.mean(lp))

    def _user_scores(self, users, by, z, rng):
        d = self._draws("recommend needs the factor draws, and")
        return out.draws_user_scores(d, None, users, by, z, self.noise_var(), rng)

    def _fold_in(self, new):
        d = self._draws("fold_in needs the factor draws of N, and")
        return _fold_in_draws(self, new, d, self._factor_src)


def _fold_in_draws(fit, new, d, src):
    """Fold-in per draw (MCMC samples or SVI draws) from the draws' prior variables."""
    import jax.numpy as jnp

    info = fit.info
    m1, m2 = info.shape
    K = info.K
    S = d["N"].shape[0]
    template = info.prior.gibbs_state(K, m1, m2)
    missing = [k for k in template if k not in src]
    if missing:
        raise ValueError(
            f"fold_in needs the draws of the prior's variables ({', '.join(missing)}), which this "
            f"fit does not hold (MAP integrates the column scales out)"
        )
    state = {
        k: jnp.asarray(np.asarray(src[k], np.float64).reshape((S,) + tuple(t.shape)))
        for k, t in template.items()
    }
    if "M" in getattr(info.prior, "linked_sides", ()):
        prec, shift = _linked_row_prior(info.prior, new, src, S, K)
    else:
        (pM, shiftM), _ = info.prior.row_priors(state)
        prec = out.dense_precision(np.asarray(pM), K)
        shift = None if shiftM is None else np.asarray(shiftM, np.float64)
    if d["tau"] is not None:
        tau = d["tau"]
    else:
        tau = np.full(S, float(info.tau))
    tb = np.asarray(info.likelihood.block_precision(tau), np.float64)
    col_bias = rb_prec = None
    if info.biases is not None:
        if d["col_bias"] is None or "row_bias_var" not in src:
            raise ValueError(
                "fold_in with biases needs the draws of the column biases and the row-bias variance"
            )
        col_bias = d["col_bias"]
        rb_prec = 1.0 / np.asarray(src["row_bias_var"], np.float64).reshape(S)
    means, covs = out.fold_in_components(
        new,
        N=d["N"],
        prior_prec=prec,
        prior_shift=shift,
        tb=tb,
        col_bias=col_bias,
        row_bias_prec=rb_prec,
        offset=info.shift.offset,
    )
    return out.FoldInFit(
        fit,
        new,
        means,
        covs,
        d["N"],
        None,
        col_bias,
        None,
        fit.noise_var(),
        info.biases is not None,
    )


def _linked_row_prior(prior, new, src, S: int, K: int):
    """Per draw, the prior precision ``Lambda_M`` (S, K, K) and the per-row shifts
    ``Lambda_M (mu_M + B_M^T x_u)`` (S, U, K) of new rows under the rows' feature link:
    ``x_u`` from ``new.row_features`` (the columns of the table the fit was given) and,
    with implicit feedback on the rows, from the new rows' own pairs."""
    if "B_M" not in src:
        raise ValueError(
            "fold_in with the rows' feature link needs the draws of B_M, which this fit does not hold"
        )
    B = np.asarray(src["B_M"], np.float64).reshape(S, -1, K)
    Xs = _new_row_features(prior, new, B.shape[1])
    Lam = np.asarray(src["Lambda_M"], np.float64).reshape(S, K, K)
    mu = np.asarray(src["mu_M"], np.float64).reshape(S, K)
    mean = mu[:, None, :] + np.stack([Xs @ B[s] for s in range(S)])
    return Lam, np.einsum("sul,skl->suk", mean, Lam)


def _new_row_features(prior, new, num_features: int):
    """The rows' link features of new rows (scipy CSR, U x F): ``new.row_features`` when
    the prior links explicit features, then the implicit feedback of the new rows' pairs."""
    from ..priors import macau

    spec = prior.row_features
    if spec is not None and new.row_features is None:
        raise ValueError(
            "fold_in: the fit's prior links the rows to their features, so the new rows need theirs: "
            "pass RatingData(..., row_features=...) with the columns of the training table "
            "(bmczoo.data.Features.reindex aligns a table to another's columns)"
        )
    X = macau.side_features(None if spec is None else True, prior.implicit, new, "rows")
    if X.n_features != num_features:
        raise ValueError(
            f"fold_in: the new rows have {X.n_features} features, the fit's row link has {num_features} "
            "(the new rows' feature table must have the training table's columns)"
        )
    return X.to_scipy()


@saving.result_class
@dataclasses.dataclass(repr=False)
class GibbsFit(MCMCFit):
    """Result of ``bmc.fit(..., method="gibbs")``: draws of the conjugate Gibbs sampler."""


@saving.result_class
@dataclasses.dataclass(repr=False)
class NUTSFit(MCMCFit):
    """Result of ``bmc.fit(..., method="nuts")``: draws of NumPyro's NUTS."""


@saving.result_class
@dataclasses.dataclass(repr=False)
class VBFit(FitResult):
    """Result of ``bmc.fit(..., method="vb")``: the mean-field variational posterior.

    Attributes
    ----------
    m, n : (m1, K), (m2, K) means of ``q(M_i)`` and ``q(N_j)``.
    V_diag, W_diag : (m1, K), (m2, K) diagonals of their covariances.
    q_gamma : parameters of ``q(gamma_h)`` (the prior's ``vb_update`` params) and ``inv_mean``;
        for a prior without column scales (Normal-Wishart) an empty mapping whose items
        raise ``ValueError`` saying so.
    q_prior : parameters of the q of the prior's variables (:meth:`Prior.vb_params`):
        ``q_gamma`` for the column-scale priors; Normal-Wishart: ``mu_F, beta_F, nu_F,
        W_F, E_Lambda_F`` of ``q(mu_F, Lambda_F) = NW(mu, beta, W, nu)``, F = M, N.
    q_noise : ``q(tau)`` of a learned likelihood (``shape, rate, mean, inv_mean``), else {}.
    q_biases, row_bias, col_bias : the biases' q (``b_mean, b_var, c_mean, c_var`` and
        the inverse-gamma ``sb_shape, sb_rate, sc_shape, sc_rate``) and the means
        ``E[b_i]``, ``E[c_j]`` ({} and None without biases).
    elbo, rmse_trace : per-iteration ELBO and test RMSE (empty without test data).
    converged : whether the relative-ELBO tolerance was reached before ``max_iter``.
    state : the full :class:`~bmczoo.inference.vb.VBState` of the kept run (covariances).
    num_iter, best_run, iteration_seconds, final_elbo_per_run : run figures.
    """

    m: np.ndarray = None
    n: np.ndarray = None
    V_diag: np.ndarray = None
    W_diag: np.ndarray = None
    q_gamma: dict = dataclasses.field(default_factory=dict)
    q_prior: dict = dataclasses.field(default_factory=dict)
    q_noise: dict = dataclasses.field(default_factory=dict)
    q_biases: dict = dataclasses.field(default_factory=dict)
    row_bias: np.ndarray | None = None
    col_bias: np.ndarray | None = None
    elbo: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    rmse_trace: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    converged: bool = False
    state: Any = None
    num_iter: int = 0
    best_run: int = 0
    iteration_seconds: tuple = ()
    final_elbo_per_run: tuple = ()
    family: ClassVar[str] = "vb"

    def _state_arrays(self) -> dict:
        from . import vb

        return {} if self.state is None else vb.state_arrays(self.state)

    @classmethod
    def _state_from_arrays(cls, arrays: dict) -> dict:
        from . import vb

        return {"state": vb.state_from_arrays(arrays)} if arrays else {}

    def _repr_holds(self) -> str:
        return (
            f"{self.num_iter} iterations, {'converged' if self.converged else 'not converged'}, "
            f"best of {self.info.settings.restarts} start{'s' if self.info.settings.restarts != 1 else ''}"
        )

    def _repr_rmse(self) -> str:
        r = np.asarray(self.rmse_trace)
        return f"{float(r[-1]):.4f} (last iteration)" if r.size else ""

    def run_stats(self):
        """Iterations, runs, the kept run, seconds per iteration and final ELBO per run."""
        return {
            "num_iter": self.num_iter,
            "num_runs": self.info.settings.restarts,
            "best_run": self.best_run,
            "iteration_seconds": list(self.iteration_seconds),
            "final_elbo_per_run": list(self.final_elbo_per_run),
        }

    def _predict_mean(self, r, c) -> np.ndarray:
        """``m_i . n_j`` (plus ``E[b_i] + E[c_j]`` with biases, plus the centring offset,
        clipped) at the given entries."""
        return self._finish(self._theta_mean(r, c))

    def _theta_mean(self, r, c) -> np.ndarray:
        theta = theta_mean(self.m, self.n, r, c)
        if self.row_bias is not None:
            theta = (
                theta
                + np.asarray(self.row_bias, np.float64)[r]
                + np.asarray(self.col_bias, np.float64)[c]
            )
        return theta

    def covariances(self) -> tuple[np.ndarray, np.ndarray]:
        """The full covariances ``V`` (m1, K, K) of ``q(M_i)`` and ``W`` (m2, K, K) of ``q(N_j)``."""
        return np.asarray(self.state.V[0]), np.asarray(self.state.W[0])

    def _bias_vars(self):
        if not self.q_biases:
            return None, None
        return np.asarray(self.q_biases["b_var"], np.float64), np.asarray(
            self.q_biases["c_var"], np.float64
        )

    def _theta_moments(self, r, c):
        """``E_q[theta_ij]`` and, analytically (docs/algorithms.md, "Predictive moments"),
        ``Var_q[M_i . N_j] = a^T B a + b^T A b + tr(A B)`` (``q(M_i) = N(a, A)``,
        ``q(N_j) = N(b, B)``) plus
        ``Var_q[b_i] + Var_q[c_j]`` with biases."""
        V, W = self.covariances()
        var = np.zeros(len(r))
        chunk = max(256, out._BUDGET // (self.info.K**2 + 1))
        for p0 in range(0, len(r), chunk):
            rr, cc = r[p0 : p0 + chunk], c[p0 : p0 + chunk]
            a, b = np.asarray(self.m[rr], np.float64), np.asarray(self.n[cc], np.float64)
            A, B = np.asarray(V[rr], np.float64), np.asarray(W[cc], np.float64)
            var[p0 : p0 + chunk] = (
                np.einsum("pk,pkl,pl->p", a, B, a)
                + np.einsum("pk,pkl,pl->p", b, A, b)
                + np.einsum("pkl,plk->p", A, B)
            )
        bv, cv = self._bias_vars()
        if bv is not None:
            var = var + bv[r] + cv[c]
        return self._theta_mean(r, c), var

    def noise_var(self) -> float:
        """``E_q[1/tau]`` of a learned noise (``q_noise["inv_mean"]``), else the fixed ``1/tau``."""
        if self.q_noise:
            return float(self.q_noise["inv_mean"])
        return 1.0 / float(self.info.tau)

    def log_predictive_density(self, test) -> float:
        """Mean over the ratings of ``test`` of the log density of the Gaussian with the
        variational predictive moments, ``N(y | E_q[theta] + offset, Var_q[theta] +
        E_q[1/tau])`` (unclipped).  Probit, ordered probit: ``log P_q(Y = y)``.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape.
        """
        test = self._check_test(test)
        if self._latent:
            return self._level_lpd(test)
        return self._gaussian_lpd(test)

    def _level_proba(self, r, c) -> np.ndarray:
        """``P_q(Y = l)`` with ``theta ~ N(E_q[theta], Var_q[theta])`` and the cut points
        at their fitted values (:func:`bmczoo.inference.levels.gaussian_level_proba`)."""
        mean, var = self._theta_moments(r, c)
        return levels.gaussian_level_proba(mean, var, self._cut_draws(self.q_noise, 1)[0])

    def _user_scores(self, users, by, z, rng):
        a = np.asarray(self.m[users], np.float64)
        nn = np.asarray(self.n, np.float64)
        bv, cv = self._bias_vars()
        if by == "thompson":
            V, W = self.covariances()
            if getattr(self, "_chol_W", None) is None:
                self._chol_W = np.linalg.cholesky(np.asarray(W, np.float64))
            LV = np.linalg.cholesky(np.asarray(V[users], np.float64))
            Mu = a + np.einsum("bkl,bl->bk", LV, rng.standard_normal(a.shape))
            Nd = nn[None] + np.einsum(
                "jkl,bjl->bjk", self._chol_W, rng.standard_normal((len(users),) + nn.shape)
            )
            t = np.einsum("bk,bjk->bj", Mu, Nd)
            if bv is not None:
                t = (
                    t
                    + (
                        np.asarray(self.row_bias, np.float64)[users]
                        + np.sqrt(bv[users]) * rng.standard_normal(len(users))
                    )[:, None]
                )
                t = (
                    t
                    + np.asarray(self.col_bias, np.float64)[None]
                    + np.sqrt(cv)[None] * rng.standard_normal((len(users), nn.shape[0]))
                )
            return t
        mean = a @ nn.T
        if bv is not None:
            mean = (
                mean
                + np.asarray(self.row_bias, np.float64)[users][:, None]
                + np.asarray(self.col_bias, np.float64)
            )
        if by == "mean":
            return mean
        V, W = self.covariances()
        A, B = np.asarray(V[users], np.float64), np.asarray(W, np.float64)
        var = (
            np.einsum("bk,jkl,bl->bj", a, B, a)
            + np.einsum("jk,bkl,jl->bj", nn, A, nn)
            + np.einsum("bkl,jlk->bj", A, B)
        )
        if bv is not None:
            var = var + bv[users][:, None] + cv[None]
        return mean + z * np.sqrt(var + self.noise_var())

    def _fold_in(self, new):
        """The optimal Gaussian ``q(M_u, b_u)`` of each new row given ``q(N)``, ``q(c)`` and
        the expectations of the prior's, the noise's and the bias variance's q."""
        from . import vb

        info, K = self.info, self.info.K
        (pM, shiftM), _ = info.prior.vb_row_priors(vb.prior_q(self.state))
        prec = out.dense_precision(np.asarray(pM), K)
        shift = None if shiftM is None else np.asarray(shiftM, np.float64).reshape(1, K)
        if "M" in getattr(info.prior, "linked_sides", ()):
            # E[Lambda (mu + B^T x_u)] = E[Lambda] (mu* + E[B]^T x_u) under the mean-field q
            EB = np.asarray(self.q_prior["B_M"], np.float64).reshape(-1, K)
            xb = _new_row_features(info.prior, new, EB.shape[0]) @ EB
            shift = (shift + xb @ prec.reshape(K, K).T)[None]
        tb = np.asarray(
            info.likelihood.vb_block_precision(self.state.noise, info.tau), np.float64
        ).reshape(-1)[:1]
        col_bias = cv = rb_prec = None
        if self.q_biases:
            col_bias = np.asarray(self.col_bias, np.float64)[None]
            cv = self._bias_vars()[1]
            rb_prec = np.asarray(
                [float(self.q_biases["sb_shape"]) / float(self.q_biases["sb_rate"])]
            )
        W = self.covariances()[1]
        means, covs = out.fold_in_components(
            new,
            N=np.asarray(self.n)[None],
            W=W,
            prior_prec=prec.reshape(1, K, K),
            prior_shift=shift,
            tb=tb,
            col_bias=col_bias,
            row_bias_prec=rb_prec,
            offset=info.shift.offset,
        )
        return out.FoldInFit(
            self,
            new,
            means,
            covs,
            np.asarray(self.n)[None],
            W,
            col_bias,
            cv,
            self.noise_var(),
            self.q_biases != {},
        )


@saving.result_class
@dataclasses.dataclass(repr=False)
class SVIFit(FitResult):
    """Result of ``bmc.fit(..., method="svi")``: a fitted NumPyro autoguide.

    Attributes
    ----------
    draws : dict of samples of the latent sites from the guide (one for MAP).
    point : the guide's medians of ``M``, ``N`` (AutoNormal, AutoDelta) used to predict,
        or None (predictions average over ``draws``).
    losses : per-step loss (negative ELBO; for MAP the negative log joint).
    guide : the NumPyro autoguide.
    """

    draws: dict = dataclasses.field(default_factory=dict)
    point: dict | None = None
    losses: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    guide: Any = None
    family: ClassVar[str] = "svi"

    def _draw_source(self) -> dict:
        """What the predictive quantities average over: the guide's draws (MAP: its point)."""
        return self.draws

    def _repr_holds(self) -> str:
        S = next((np.shape(v)[0] for v in self.draws.values() if np.ndim(v) >= 1), 0)
        return (
            f"{S} draws from the {self.info.settings.guide!r} guide, {np.size(self.losses)} steps"
        )

    def _predict_mean(self, r, c) -> np.ndarray:
        """``E_q[M_i . N_j]`` (plus ``E_q[row_bias_i + col_bias_j]`` with biases, plus the
        centring offset, clipped) at the given entries."""
        src = self.point if self.point is not None else self.draws
        return self._finish(draws_theta_mean(src, r, c))

    def _theta_moments(self, r, c):
        """Mean as :meth:`predict` (the guide's median, else the draws' mean); variance
        over the guide's draws (Monte Carlo; MAP: 0, a point has no spread)."""
        src = self.point if self.point is not None else self.draws
        return draws_theta_mean(src, r, c), self._theta_var(r, c)

    def _theta_var(self, r, c) -> np.ndarray:
        """The variance of ``theta`` at the entries over the guide's draws."""
        return out.draws_theta_moments(out.flat_draws(self.draws, self.info.K), r, c)[1]

    def noise_var(self) -> float:
        """``E_q[1/tau]`` over the guide's draws of a learned tau (MAP: ``1/tau`` at the
        point), else the fixed ``1/tau``."""
        src = self._draw_source()
        if self.info.likelihood.learned and "tau" in src:
            return float(np.mean(1.0 / np.asarray(src["tau"], np.float64)))
        return 1.0 / float(self.info.tau)

    def log_predictive_density(self, test) -> float:
        """SVI: ``log mean_s N(y | theta_s + offset, 1/tau_s)`` over the guide's draws; MAP:
        ``log N(y | theta + offset, 1/tau)`` at the point (no parameter uncertainty).
        Unclipped.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape.
        """
        test = self._check_test(test)
        if self._latent:
            return self._level_lpd(test)
        src = self._draw_source()
        d = out.flat_draws(src, self.info.K)
        return float(
            np.mean(
                out.draws_lpd(
                    d, test.rows, test.cols, test.values, self.info.shift.offset, self.info.tau
                )
            )
        )

    def _level_proba(self, r, c) -> np.ndarray:
        """Level probabilities averaged over the guide's draws (MAP: at the point)."""
        src = self._draw_source()
        d = out.flat_draws(src, self.info.K)
        cuts_src = src if "cuts" in src else self.draws
        return levels.draws_level_proba(
            out.draw_blocks(d, r, c), self._cut_draws(cuts_src, d["M"].shape[0])
        )

    def _user_scores(self, users, by, z, rng):
        d = out.flat_draws(self._draw_source(), self.info.K)
        mean_src = None if self.point is None else out.flat_draws(self.point, self.info.K)
        return out.draws_user_scores(d, mean_src, users, by, z, self.noise_var(), rng)

    def _fold_in(self, new):
        src = self._draw_source()
        return _fold_in_draws(self, new, out.flat_draws(src, self.info.K), src)


@saving.result_class
@dataclasses.dataclass(repr=False)
class MAPFit(SVIFit):
    """Result of ``bmc.fit(..., method="map")``: ``AutoDelta`` (one point, gamma integrated out).

    Its predictive variance is the noise's alone: ``Var[theta_ij] = 0`` at a point."""

    def _draw_source(self) -> dict:
        return self.draws if self.point is None else self.point

    def _repr_holds(self) -> str:
        return f"a point, {np.size(self.losses)} steps"

    def _theta_var(self, r, c) -> np.ndarray:
        return np.zeros(len(r))
