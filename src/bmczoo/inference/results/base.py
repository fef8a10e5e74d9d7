"""The base of the result classes (:class:`FitResult`) and the means over draws they share.

Every result carries a typed :class:`FitInfo` (the model's components, the settings
object it was run with, the map from ``theta`` to predictions) and gives:

* ``predict(rows, cols)``: posterior mean on the data's scale, ``rmse(test)``,
  ``rmse_theta(theta)`` (RMSE against a full true matrix, computed in blocks);
* the plain arrays of its family: draws with leading (chain, draw) axes (:class:`MCMCFit`:
  ``samples``; :class:`SVIFit`: ``draws``), or the moments of the variational posterior
  (:class:`VBFit`);
* the per-family hooks, abstract methods here, from which :func:`~bmczoo.diagnostics.fit_arrays`
  builds the fit's quantities as plain arrays; the one conversion to ArviZ
  (:func:`bmczoo._arviz.arrays_to_arviz`) and the diagnostics start from those arrays.

``fit.meta`` is a read-only dict view of the same information.
"""

from __future__ import annotations

import abc
import dataclasses
import types
from typing import Any, ClassVar

import numpy as np

from ..._arviz import arrays_to_arviz
from ..._checks import check_ratings, x64_context
from ...data.ratings import check_entries
from ...offsets import Shift
from ...priors import Prior
from .. import saving
from ..info import FitInfo
from . import arrays, levels, rank
from . import outputs as out

__all__ = [
    "FitInfo",
    "FitResult",
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
class FitResult(out.PredictiveMixin, abc.ABC):
    """Base of the result classes: predictions and their RMSE, diagnostics delegation,
    and the Bayesian outputs (:mod:`bmczoo.inference.results.outputs`): ``predict(...,
    return_std=True)``, ``predictive_interval``, ``log_predictive_density``,
    ``recommend``, ``fold_in``, ``save`` (``bmc.load`` reads it back).

    ``seen_rows``, ``seen_cols``: the training pattern (set by ``bmc.fit``; used by
    ``recommend(exclude_seen=True)``; None when unknown).  ``seen_values``: the training
    ratings (set by ``bmc.fit``; used by ``to_arviz(log_likelihood=True)``; not saved),
    ``seen_context`` their per-rating table (likewise; None without one).

    A family's class defines the abstract methods: what its fit holds (``_repr_holds``),
    the moments of theta (``_predict_mean``, ``_theta_moments``), the level
    probabilities of a latent likelihood (``_level_proba``), ``_fold_in``, and what
    :func:`~bmczoo.diagnostics.fit_arrays` and :mod:`.rank` ask of it (``_posterior_arrays``,
    ``_tau_draws``, ``_extra_draws``, ``_ratings_theta_tau``, ``_drawn_cuts``,
    ``_gamma_draws``, ``_prob_gamma_above``).
    """

    info: FitInfo
    seen_rows: np.ndarray | None = dataclasses.field(default=None, kw_only=True, repr=False)
    seen_cols: np.ndarray | None = dataclasses.field(default=None, kw_only=True, repr=False)
    seen_values: np.ndarray | None = dataclasses.field(default=None, kw_only=True, repr=False)
    seen_context: Any = dataclasses.field(default=None, kw_only=True, repr=False)

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

    @abc.abstractmethod
    def _repr_holds(self) -> str:
        """What the fit holds, for :meth:`__repr__` (chains x draws, iterations, ...)."""

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

    @abc.abstractmethod
    def _predict_mean(self, r, c) -> np.ndarray:
        """Posterior mean at the checked entries (data scale, clipped when the fit clips)."""

    @abc.abstractmethod
    def _theta_moments(self, r, c):
        """Mean and variance of ``theta`` at the checked entries (model scale)."""

    def noise_var(self) -> float:
        """``E[1/tau]``, the noise part of the predictive variance: the posterior mean of
        ``1/tau`` for a learned noise, else the fixed ``1/tau`` of the tempered likelihood
        (``noise_sd^2``, or ``n / (2 lam)``)."""
        return 1.0 / float(self.info.tau)

    def predict(self, rows, cols, return_std: bool = False, *, context=None):
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
        context : bmczoo.data.Features, optional
            A fit with sampled offsets (``bmc.fit(..., context=...)``): the entries'
            per-rating table (one row per entry, the training table's columns), which the
            offsets read; needed at entries other than those requested at fit time.
        """
        r, c = self._check_entries(rows, cols)
        kw = self._context_kw(context, r.size)
        if self.info.likelihood.latent:
            mean, sd = levels.level_summary(
                self._level_proba(r, c, **kw), self.info.likelihood.level_values
            )
            return (mean, sd) if return_std else mean
        mean = self._predict_mean(r, c, **kw)
        if not return_std:
            return mean
        _, var = self._theta_moments(r, c, **kw)
        return mean, np.sqrt(np.maximum(var, 0.0) + self.noise_var())

    # ------------------------------------------------------------------ levels
    @abc.abstractmethod
    def _level_proba(self, r, c) -> np.ndarray:
        """Predictive level probabilities (P, L) of a latent likelihood (probit, ordered
        probit) at the checked entries."""

    def _cut_draws(self, src: dict | None, S: int) -> np.ndarray:
        """(S, L-1) cut points: the draws of ``cuts`` in ``src`` when learned, else the fixed ones."""
        fixed = self.info.likelihood.fixed_cuts()
        if fixed is not None:
            return np.broadcast_to(np.asarray(fixed, np.float64), (S, len(fixed)))
        if src is None or "cuts" not in src:
            raise ValueError("the fit holds no draws of the cut points")
        return np.asarray(src["cuts"], np.float64).reshape(S, -1)

    def predict_proba(self, rows, cols, *, context=None) -> np.ndarray:
        """Posterior predictive level probabilities at the given entries: for a
        :class:`~bmczoo.likelihoods.Probit` fit ``P(Y_ij = 1 | data)`` (P,); for an
        :class:`~bmczoo.likelihoods.OrderedProbit` fit (P, L), column ``l`` the
        probability of ``likelihood.levels[l]``.

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Row and column indices of the entries.
        context : bmczoo.data.Features, optional
            A fit with sampled offsets (``bmc.fit(..., context=...)``): the entries'
            per-rating table (one row per entry, the training table's columns), which the
            offsets read; needed at entries other than those requested at fit time.
        """
        if not self.info.likelihood.latent:
            raise ValueError(
                f"predict_proba needs a probit or ordered-probit likelihood; this fit's is "
                f"{self.info.likelihood.name!r} (use predict / predictive_interval)"
            )
        r, c = self._check_entries(rows, cols)
        probs = self._level_proba(r, c, **self._context_kw(context, r.size))
        return probs[:, 1] if self.info.likelihood.binary else probs

    def predictive_interval(self, rows, cols, prob: float = 0.9, *, context=None):
        """Central ``prob`` interval of the posterior predictive (see
        :meth:`bmczoo.inference.results.outputs.PredictiveMixin.predictive_interval`).  Probit and
        ordered probit: of the predictive level distribution (the lowest levels whose CDF
        reaches ``(1 - prob) / 2`` and ``(1 + prob) / 2``).

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Row and column indices of the entries.
        prob : float
            Probability of the interval, in (0, 1).
        context : bmczoo.data.Features, optional
            A fit with sampled offsets (``bmc.fit(..., context=...)``): the entries'
            per-rating table (one row per entry, the training table's columns), which the
            offsets read; needed at entries other than those requested at fit time.
        """
        if not self.info.likelihood.latent:
            return super().predictive_interval(rows, cols, prob, context=context)
        p = out.check_prob(prob)
        r, c = self._check_entries(rows, cols)
        probs = self._level_proba(r, c, **self._context_kw(context, r.size))
        return levels.level_interval(probs, self.info.likelihood.level_values, p)

    def _level_lpd(self, test) -> float:
        """Mean ``log P(Y = y | data)`` over ``test`` (exact predictive level probabilities)."""
        lik = self.info.likelihood
        kw = self._context_kw(self._test_context(test), test.n)
        probs = self._level_proba(test.rows, test.cols, **kw)
        return float(np.mean(levels.level_lpd(probs, lik.level_index(test.values))))

    def save(
        self, path, *, factor_draws: int | str | None = "auto", overwrite: bool = False
    ) -> None:
        """Write the fit to ``path`` (``.npz`` + JSON metadata, compressed, no pickle);
        ``bmc.load`` reads it back (:mod:`bmczoo.inference.saving`).

        An existing file is replaced only with ``overwrite=True`` (as ``bmczoo fit --save``
        with ``--overwrite``).  The file is written to a temporary file beside it and
        renamed into place: ``path`` never holds a half-written fit.

        By default the loaded fit predicts exactly what this fit predicts: ``predict``
        (``return_std``), ``predictive_interval``, ``predict_proba``,
        ``log_predictive_density``, ``recommend`` and ``fold_in`` are equal bit for bit.
        An MCMC fit's factor draws are kept whole unless they take more than
        ``bmczoo.inference.saving.FACTOR_BYTES_LIMIT`` (1 GiB, uncompressed); above
        it, as many draws as fit under it are kept, evenly spaced over each chain, with a
        ``bmczoo.inference.saving.FactorDrawsThinnedWarning``.  Thinned, the
        outputs at the entries whose moments were accumulated during the fit (the test set,
        ``predict=``) stay exact, and the others average over the kept draws.

        Parameters
        ----------
        path : str or os.PathLike
            The ``.npz`` file to write.
        factor_draws : "auto", "all", int or None
            The factor draws an MCMC fit keeps: ``"auto"`` (None is the same) every draw
            unless above the size limit; ``"all"`` every draw whatever their size; an
            integer at most that many in all chains pooled, evenly spaced over each chain.
        overwrite : bool
            Replace an existing file at ``path``; False (the default) raises
            ``FileExistsError`` naming it instead, and writes nothing.

        Raises
        ------
        FileExistsError
            ``path`` exists and ``overwrite`` is False.
        OSError
            ``path`` cannot be written: a folder (``IsADirectoryError``), its folder is
            missing (``FileNotFoundError``) or read-only (``PermissionError``), a full
            disk; the message names ``path``.
        """
        saving.save(self, path, factor_draws=factor_draws, overwrite=overwrite, _stacklevel=3)

    def _saved_fields(self, factor_limit: int | None) -> dict:
        """The dataclass fields :meth:`save` writes, by name (``factor_limit``: at most
        that many factor draws, None: all; used by the families that hold them)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

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
        into the fit without refitting: a :class:`~bmczoo.inference.results.outputs.FoldInFit`
        (``predict``, ``predictive_interval``, ``recommend``, ...).

        Parameters
        ----------
        new : RatingData
            Ratings of the new rows, shape ``(U, m2)``.
        """
        new = check_ratings(new, "new")
        if self.info.likelihood.latent:
            raise ValueError(
                f"fold_in is not available for the {self.info.likelihood.name} likelihood yet (its new "
                "rows would need their own latent block): refit with the new rows included"
            )
        if new.shape[1] != self.shape[1]:
            raise ValueError(
                f"new rows must be over the fit's {self.shape[1]} items, got shape {new.shape}"
            )
        with x64_context(self.info.dtype):  # a float64 fit folds in in float64
            return self._fold_in(new)

    @abc.abstractmethod
    def _fold_in(self, new):
        """:meth:`fold_in` of the checked ``new`` rows."""

    def rmse(self, test) -> float:
        """RMSE of :meth:`predict` against the values of ``test``.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape (with their ``context`` for a fit with
            sampled offsets).
        """
        test = check_ratings(test, "test")
        if test.shape != self.shape:
            raise ValueError(f"test has shape {test.shape}, the fit has {self.shape}")
        pred = self.predict(test.rows, test.cols, context=self._test_context(test))
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
    def rank_posterior(
        self, threshold: float | None = None, *, num_draws: int = 500, seed: int = 0
    ) -> np.ndarray:
        """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K (default
        threshold: the prior's); for a prior without column scales (Normal-Wishart), of
        the effective rank ``#{k: s_k(theta) > threshold}`` of theta (default threshold:
        1% of the largest singular value's posterior mean); see
        :func:`bmczoo.diagnostics.rank_posterior`.

        Parameters
        ----------
        threshold : float, optional
            The threshold (default as above).
        num_draws, seed : int
            A prior without column scales fitted by VB: the number and seed of the draws of
            ``q`` that give the singular values.
        """
        return rank.rank_posterior(self, threshold, num_draws=num_draws, seed=seed)

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
            ``var_names``, ``full``, ``entries``, ``num_draws``, ``seed``,
            ``log_likelihood``, ``max_draws``, ``max_ratings``: see
            :func:`bmczoo.diagnostics.to_arviz`.
        """
        return arrays_to_arviz(arrays.fit_arrays(self, **kwargs))

    # ------------------------------------------------------------------ per-family hooks
    #: the draws are Markov chains (autocorrelation, R-hat across chains, warm-up apply)
    has_chains: ClassVar[bool] = False
    #: the fit holds a closed-form variational posterior q (its moments are exact)
    has_q: ClassVar[bool] = False

    @abc.abstractmethod
    def _posterior_arrays(self, entries, num_draws: int, seed: int):
        """The default posterior, sample stats and traces (:class:`.arrays.Posterior`)."""

    @abc.abstractmethod
    def _tau_draws(self, num_draws: int, seed: int):
        """Draws of a learned noise precision aligned with the posterior (None: none)."""

    @abc.abstractmethod
    def _extra_draws(self, post: dict) -> dict:
        """The stored draws the conversion adds on request (``{}``: none)."""

    @abc.abstractmethod
    def _ratings_theta_tau(self, rows, cols, num_draws: int, max_draws: int, rng):
        """theta (chain, draw, rating) at the ratings, tau (chain, draw) or None, and how
        they were taken (a dict with at least ``draw_step``)."""

    @abc.abstractmethod
    def _drawn_cuts(self, lik, shape, step: int) -> np.ndarray:
        """Learned cut points (chain, draw, L-1) matching theta's draws of
        :meth:`_ratings_theta_tau` (every ``step``-th draw)."""

    @abc.abstractmethod
    def _gamma_draws(self):
        """Draws (..., K) of gamma (VB: ``1 / E_q[1/gamma]``), or None."""

    @abc.abstractmethod
    def _prob_gamma_above(self, threshold: float) -> np.ndarray:
        """``P(gamma_h > threshold)`` per draw, (S, K) (VB: (1, K), exact under q)."""

    def _rmse_traces(self):
        """``(per-draw or None, mean)`` test RMSE traces (chain, iteration)."""
        raise ValueError("RMSE traces are recorded by Gibbs and VB fits only")
