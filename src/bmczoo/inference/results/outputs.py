"""The Bayesian outputs of every fit: predictive uncertainty, held-out log predictive
density, recommendations, fold-in of new rows (docs/algorithms.md, "Predictive moments").

Every result class (and :class:`FoldInFit`) provides three hooks, from which
:class:`PredictiveMixin` builds the public methods:

* ``_theta_moments(rows, cols) -> (mean, var)``: posterior mean and variance of
  ``theta_ij`` (centred scale: no offset, no clipping), float64;
* ``noise_var()``: ``E[1/tau]`` (learned noise: its posterior mean; fixed: ``1/tau`` of
  the tempered likelihood, i.e. ``noise_sd^2`` or ``n / (2 lam)``);
* ``_user_scores(users, by, z, rng) -> (B, m2)``: for a batch of users, the unclipped
  ``theta`` score of every item (``"mean"``: posterior mean; ``"upper"``: ``mean + z *
  predictive sd``; ``"thompson"``: one posterior draw).

The posterior predictive of ``Y_ij`` is summarised by its first two moments: mean
``E[theta_ij] + offset`` and variance ``Var[theta_ij] + E[1/tau]``.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = [
    "PredictiveMixin",
    "FoldInFit",
    "flat_draws",
    "draws_theta_moments",
    "check_prob",
    "gaussian_logpdf",
]

_BUDGET = 2**22  # numbers per temporary block (32 MB in float64)


def check_prob(prob) -> float:
    """``prob`` as a float in (0, 1), else ``ValueError``."""
    try:
        p = float(prob)
    except (TypeError, ValueError):
        raise ValueError(f"prob must be a number in (0, 1), got {prob!r}") from None
    if not 0.0 < p < 1.0:
        raise ValueError(f"prob must be in (0, 1), got {prob!r}")
    return p


def z_of(prob: float) -> float:
    """Half-width of the central ``prob`` interval of N(0, 1)."""
    return NormalDist().inv_cdf(0.5 + 0.5 * check_prob(prob))


def gaussian_logpdf(y, mean, var):
    return -0.5 * (math.log(2.0 * math.pi) + np.log(var) + (y - mean) ** 2 / var)


# ---------------------------------------------------------------------------- draws
def flat_draws(src: dict, K: int) -> dict:
    """The factor draws of ``src`` (MCMC samples (chain, draw, ...), SVI draws (draw, ...)
    or a point (...)) with one leading draw axis S: ``M`` (S, m1, K), ``N`` (S, m2, K),
    ``row_bias`` (S, m1) / ``col_bias`` (S, m2) (None without biases), ``tau`` (S,) (None
    when the likelihood does not learn it)."""
    M = np.asarray(src["M"])
    N = np.asarray(src["N"])
    m1, m2 = M.shape[-2], N.shape[-2]
    out = {
        "M": M.reshape(-1, m1, K),
        "N": N.reshape(-1, m2, K),
        "row_bias": None,
        "col_bias": None,
        "tau": None,
    }
    S = out["M"].shape[0]
    if "row_bias" in src:
        out["row_bias"] = np.asarray(src["row_bias"]).reshape(S, m1)
        out["col_bias"] = np.asarray(src["col_bias"]).reshape(S, m2)
    if "tau" in src:
        out["tau"] = np.asarray(src["tau"], np.float64).reshape(S)
    return out


def _theta_block(d: dict, r, c) -> np.ndarray:
    """``theta`` (S, P) at the entries for each draw, float64."""
    t = np.einsum("spk,spk->sp", d["M"][:, r], d["N"][:, c], dtype=np.float64)
    if d["row_bias"] is not None:
        t = (
            t
            + np.asarray(d["row_bias"][:, r], np.float64)
            + np.asarray(d["col_bias"][:, c], np.float64)
        )
    return t


def draw_blocks(d: dict, rows, cols):
    """``(p0, p1, theta (S, p1 - p0))`` over blocks of the entries; ``d["entry_shift"]``,
    when present, is a function of ``(p0, p1)`` giving each draw's sampled offsets at
    those entries (S, p1 - p0), added to ``theta``."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    S, K = d["M"].shape[0], d["M"].shape[-1]
    chunk = max(256, _BUDGET // (S * max(K, 1)))
    shift = d.get("entry_shift")
    for p0 in range(0, len(rows), chunk):
        p1 = min(len(rows), p0 + chunk)
        t = _theta_block(d, rows[p0:p1], cols[p0:p1])
        yield p0, p1, (t if shift is None else t + shift(p0, p1))


def draws_theta_moments(d: dict, rows, cols) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance (two-pass, float64) over the draws of ``theta`` at the entries."""
    mean, var = np.zeros(len(rows)), np.zeros(len(rows))
    for p0, p1, t in draw_blocks(d, rows, cols):
        mean[p0:p1] = t.mean(0)
        var[p0:p1] = t.var(0)
    return mean, var


def draws_lpd(d: dict, rows, cols, y, offset: float, tau: float, lik=None) -> np.ndarray:
    """``log mean_s p(y | theta_s + offset, 1/tau_s)`` per entry (a mixture over draws) with
    the likelihood's density (``lik.log_density``; None: Gaussian)."""
    from scipy.special import logsumexp

    var = (
        (1.0 / d["tau"])[:, None] if d.get("tau") is not None else np.full((1, 1), 1.0 / float(tau))
    )
    out = np.zeros(len(rows))
    for p0, p1, t in draw_blocks(d, rows, cols):
        yb = np.asarray(y[p0:p1], np.float64)[None]
        lp = (
            gaussian_logpdf(yb, t + offset, var)
            if lik is None
            else lik.log_density(yb, t + offset, var)
        )
        out[p0:p1] = logsumexp(lp, axis=0) - math.log(t.shape[0])
    return out


def draws_user_scores(
    d: dict, mean_src: dict | None, users, by: str, z: float, noise_var: float, rng
) -> np.ndarray:
    """(B, m2) item scores (centred scale) of the users from factor draws; ``mean_src``
    (a one-draw dict, e.g. a guide's median) gives the mean when not None."""
    S = d["M"].shape[0]
    if by == "thompson":
        s = rng.integers(0, S, size=len(users))
        t = np.einsum("bk,bjk->bj", d["M"][s, users], d["N"][s], dtype=np.float64)
        if d["row_bias"] is not None:
            t = t + d["row_bias"][s, users][:, None] + d["col_bias"][s]
        return t
    src = d if mean_src is None else mean_src
    total = 0.0
    for s in range(src["M"].shape[0]):
        total = total + _user_theta(src, s, users)
    mean = total / src["M"].shape[0]
    if by == "mean":
        return mean
    sq = 0.0
    dm = 0.0
    for s in range(S):  # variance about the draws' own mean (two-pass)
        dm = dm + _user_theta(d, s, users)
    dm = dm / S
    for s in range(S):
        sq = sq + (_user_theta(d, s, users) - dm) ** 2
    return mean + z * np.sqrt(sq / S + noise_var)


def _user_theta(d, s, users):
    t = np.asarray(d["M"][s, users], np.float64) @ np.asarray(d["N"][s], np.float64).T
    if d["row_bias"] is not None:
        t = (
            t
            + np.asarray(d["row_bias"][s, users], np.float64)[:, None]
            + np.asarray(d["col_bias"][s], np.float64)
        )
    return t


# ---------------------------------------------------------------------------- mixin
def _check_users(users, m1: int) -> np.ndarray:
    """``users`` as a 1-D integer array of rows of an ``m1``-row matrix, or ``ValueError``."""
    users = np.asarray(users)
    if users.ndim != 1 or (users.size and users.dtype.kind not in "iu"):
        raise ValueError("users must be a 1-D array of integer row indices")
    if users.size and (users.min() < 0 or users.max() >= m1):
        raise ValueError(
            f"users must be in [0, {m1}), got values in [{users.min()}, {users.max()}]"
        )
    return users


def _top_n(sc: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` best columns of each row of the scores ``sc`` and their scores, best
    first (ties in column order); item ``-1`` where the score is not finite."""
    m2 = sc.shape[1]
    top = (
        np.argpartition(-sc, n - 1, axis=1)[:, :n]
        if n < m2
        else np.tile(np.arange(m2), (sc.shape[0], 1))
    )
    ts = np.take_along_axis(sc, top, axis=1)
    order = np.argsort(-ts, axis=1, kind="stable")
    top, ts = np.take_along_axis(top, order, axis=1), np.take_along_axis(ts, order, axis=1)
    top[~np.isfinite(ts)] = -1
    return top, ts


class PredictiveMixin:
    """``predictive_interval``, ``log_predictive_density``, ``recommend`` from the hooks
    ``_theta_moments``, ``noise_var``, ``_user_scores`` and the attributes ``shape``,
    ``_shift`` (a :class:`~bmczoo.offsets.Shift`), ``_seen_pattern()``."""

    def _context_kw(self, context, n: int) -> dict:
        """The keyword the hooks take for the entries' per-rating table: ``{}`` without
        one, else ``{"context": table}`` checked (a fit with sampled offsets, one row per
        entry, the training table's columns)."""
        if context is None:
            return {}
        offsets = getattr(getattr(self, "info", None), "offsets", ())
        if not offsets:
            raise ValueError(
                "context= is read by the sampled offsets of a fit (bmc.fit(..., context=...)); "
                "this fit has none"
            )
        from ...data import Features

        if not isinstance(context, Features):
            raise TypeError(
                f"context must be a bmczoo.data.Features table, got {type(context).__name__}"
            )
        if context.n_rows != n:
            raise ValueError(f"context has {context.n_rows} rows for {n} entries (one per entry)")
        for o in offsets:
            o.check_columns(context, "context")
        return {"context": context}

    def _test_context(self, test):
        """``test.context`` for a fit with sampled offsets, else None."""
        return test.context if getattr(getattr(self, "info", None), "offsets", ()) else None

    def _predictive(self, rows, cols, context=None):
        """(rows, cols, unclipped predictive mean on the data scale, predictive sd)."""
        r, c = self._check_entries(rows, cols)
        mean, var = self._theta_moments(r, c, **self._context_kw(context, r.size))
        sd = np.sqrt(np.maximum(var, 0.0) + self.noise_var())
        return r, c, mean + self._shift.offset, sd

    def predictive_interval(
        self, rows, cols, prob: float = 0.9, *, context=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Central ``prob`` interval of the Gaussian with the posterior predictive's mean
        (unclipped, offset added) and sd (``sqrt(Var[theta_ij] + noise_var())``), both ends
        clipped to the fit's clip range when it clips; for Student-t noise, of the ``t_nu``
        with that mean and sd (the likelihood's ``interval_half_width``).

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Row and column indices of the entries.
        prob : float
            Probability of the interval, in (0, 1).
        context : bmczoo.data.Features, optional
            The entries' per-rating table (one row each), for a fit with sampled offsets.
        """
        z = z_of(prob)
        _, _, mean, sd = self._predictive(rows, cols, context)
        lik = getattr(getattr(self, "info", None), "likelihood", None)
        half = z * sd if lik is None else lik.interval_half_width(sd, prob)
        lo, hi = mean - half, mean + half
        return np.clip(lo, self._shift.lo, self._shift.hi), np.clip(
            hi, self._shift.lo, self._shift.hi
        )

    def _gaussian_lpd(self, test) -> float:
        _, _, mean, sd = self._predictive(test.rows, test.cols, self._test_context(test))
        return float(np.mean(gaussian_logpdf(np.asarray(test.values, np.float64), mean, sd**2)))

    def log_predictive_density(self, test) -> float:
        """Mean over the ratings of ``test`` of ``log p(y | train)``; Gaussian with the
        predictive moments (unclipped mean, sd of :meth:`predict`) unless the class
        says otherwise.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape.
        """
        return self._gaussian_lpd(self._check_test(test))

    def _check_test(self, test):
        from ..._checks import check_ratings

        test = check_ratings(test, "test")
        if test.shape != tuple(self.shape):
            raise ValueError(f"test has shape {test.shape}, the fit has {tuple(self.shape)}")
        return test

    def recommend(
        self,
        users,
        n: int = 10,
        exclude_seen: bool = True,
        by: str = "mean",
        *,
        prob: float = 0.9,
        seed: int | None = None,
        seen=None,
        batch_size: int | None = None,
        num_draws: int = 50,
    ):
        """The top ``n`` items of each user: ``(items, scores)``, each (len(users), n), best first.

        Parameters
        ----------
        users : 1-D int array of row indices.
        n : number of items per user (``1 <= n <= m2``).
        exclude_seen : leave out the items the user rated in training (the fit stores the
            training pattern; ``seen=`` (a RatingData of this shape) replaces it).  Where
            fewer than ``n`` items remain, the missing places hold item ``-1`` and score
            ``-inf``.
        by : ``"mean"`` (posterior mean of ``theta``), ``"upper"`` (upper end of the
            central ``prob`` predictive interval), ``"thompson"`` (one posterior draw per
            user; needs ``seed``) or ``"top-k"`` (the posterior probability of the item to be
            among the user's top ``n``, from ``num_draws`` posterior draws, ties in the
            posterior mean's order; the scores are the probabilities; needs ``seed``).
        prob : float
            ``by="upper"``: probability of the central interval, in (0, 1).
        seed : int, optional
            ``by="thompson"`` or ``"top-k"``: seed of the posterior draws.
        seen : RatingData, optional
            The pattern excluded with ``exclude_seen`` (default: the training pattern).
        batch_size : int, optional
            Users scored at a time.
        num_draws : int
            ``by="top-k"``: posterior draws per user.

        Scores are on the data scale (offset added) and never clipped, so ranking is not
        tied at the clip bound.  Users are scored ``batch_size`` at a time (default: about
        2^22 numbers per batch), never the full ``m1 x m2`` matrix.
        """
        from ..._checks import check_bool, check_int, check_choice

        check_choice("by", by, ("mean", "upper", "thompson", "top-k"))
        check_bool("exclude_seen", exclude_seen)
        m1, m2 = self.shape
        n = check_int("n", n, minimum=1)
        if n > m2:
            raise ValueError(f"n={n} exceeds the number of items {m2}")
        users = _check_users(users, m1)
        if by in ("thompson", "top-k") and seed is None:
            raise ValueError(f'by="{by}" draws from the posterior: give seed=')
        if by == "top-k":
            return self._recommend_top_k(users, n, exclude_seen, seen, seed, num_draws, batch_size)
        z = z_of(prob) if by == "upper" else 0.0
        rng = np.random.default_rng(seed)
        indptr = index = None
        if exclude_seen:
            indptr, index = self._seen_csr(seen)
        K = int(self._K)
        B = batch_size or max(1, _BUDGET // (m2 * max(K, 1) * (2 if by == "thompson" else 1)))
        items = np.full((users.size, n), -1, np.int64)
        scores = np.full((users.size, n), -np.inf)
        for b0 in range(0, users.size, B):
            u = users[b0 : b0 + B]
            sc = np.array(self._user_scores(u, by, z, rng), np.float64) + self._shift.offset
            if indptr is not None:
                for k, user in enumerate(u):
                    sc[k, index[indptr[user] : indptr[user + 1]]] = -np.inf
            items[b0 : b0 + B], scores[b0 : b0 + B] = _top_n(sc, n)
        return items, scores

    def _recommend_top_k(self, users, n, exclude_seen, seen, seed, num_draws, batch_size):
        """``recommend(by="top-k")``: items by their posterior probability of being in the
        top ``n`` (:func:`bmczoo.evaluation.top_k_probability`), then by posterior mean."""
        from ..._ranking import top_k_probability

        m2 = self.shape[1]
        B = batch_size or max(1, _BUDGET // (m2 * max(int(self._K), 1)))
        items = np.full((users.size, n), -1, np.int64)
        scores = np.full((users.size, n), -np.inf)
        for b0 in range(0, users.size, B):
            u = users[b0 : b0 + B]
            p = top_k_probability(
                self, u, n, num_draws=num_draws, seed=seed, exclude_seen=exclude_seen, seen=seen
            )
            mean, _ = self.recommend(u, n=m2, exclude_seen=exclude_seen, seen=seen)
            rank = np.full((u.size, m2), m2, np.int64)  # each item's place in the mean's order
            rows = np.repeat(np.arange(u.size), m2)
            ok = mean.ravel() >= 0
            rank[rows[ok], mean.ravel()[ok]] = np.tile(np.arange(m2), u.size)[ok]
            p[rank == m2] = -np.inf  # excluded items
            order = np.lexsort((rank, -p), axis=-1)[:, :n]
            ps = np.take_along_axis(p, order, 1)
            order[~np.isfinite(ps)] = -1
            items[b0 : b0 + u.size], scores[b0 : b0 + u.size] = order, ps
        return items, scores

    def _seen_csr(self, seen):
        m1, m2 = self.shape
        if seen is not None:
            from ..._checks import check_ratings

            seen = check_ratings(seen, "seen")
            if seen.shape != (m1, m2):
                raise ValueError(f"seen has shape {seen.shape}, the fit has {(m1, m2)}")
            view = seen.row_view  # built once and cached on the data
            return view.indptr, view.index
        pattern = self._seen_pattern()
        if pattern is None:
            raise ValueError(
                "exclude_seen needs the training pattern, which this result does not hold: "
                "pass seen= (a RatingData) or exclude_seen=False"
            )
        rows, cols = pattern
        order = np.argsort(rows, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m1))])
        return indptr, np.asarray(cols)[order]


# ---------------------------------------------------------------------------- fold-in
def _solve_conditionals(P, rhs):
    """Means and covariances of N(P^{-1} rhs, P^{-1}) for stacked (..., D, D), (..., D)."""
    L = np.linalg.cholesky(P)
    eye = np.broadcast_to(np.eye(P.shape[-1]), P.shape)
    Linv = np.linalg.solve(L, eye)
    cov = np.swapaxes(Linv, -1, -2) @ Linv
    return np.einsum("...kl,...l->...k", cov, rhs), cov


def dense_precision(prec, K: int) -> np.ndarray:
    """A row prior's precision, (S, K) diagonal or (S, K, K), as (S, K, K) float64."""
    prec = np.asarray(prec, np.float64)
    if prec.ndim >= 2 and prec.shape[-2:] == (K, K):
        return prec
    return prec[..., :, None] * np.eye(K)


def fold_in_components(
    new,
    *,
    N,
    prior_prec,
    prior_shift,
    tb,
    col_bias=None,
    col_bias_var=None,
    row_bias_prec=None,
    W=None,
    offset=0.0,
):
    """Gaussian conditionals of the new rows, per component s (a draw, or the one q).

    ``N`` (S, m2, K) item factors (means under q), ``W`` (m2, K, K) or None their
    covariances, ``prior_prec`` (S, K, K), ``prior_shift`` (S, K) (``Lambda mu``) or (S, U,
    K) (a feature link's per-row ``Lambda (mu + B^T x_u)``), ``tb``
    (S,) the block precision, ``col_bias`` (S, m2) / ``col_bias_var`` (m2,) or None,
    ``row_bias_prec`` (S,) the prior precision of a new row bias (None: no biases), or
    ``(precision (S,), mean (S, U))`` with its prior mean (feature-driven biases).
    Features ``f_j = [N_j, 1]`` (with biases), ``x_u = [M_u, b_u]``:
    ``P = blockdiag(Lambda, 1/s_b^2) + tb sum_j E[f_j f_j^T]``,
    ``rhs = [Lambda mu, b0 / s_b^2] + tb sum_j (R_uj - E[c_j]) E[f_j]`` (``b0`` the
    bias's prior mean).
    Returns the means (S, U, D) and covariances (S, U, D, D)."""
    import scipy.sparse as sp

    S, m2, K = N.shape
    U = new.shape[0]
    bias = row_bias_prec is not None
    row_bias_mean = None
    if isinstance(row_bias_prec, tuple):
        row_bias_prec, row_bias_mean = row_bias_prec
    D = K + int(bias)
    rows, cols = np.asarray(new.rows), np.asarray(new.cols)
    R = np.asarray(new.values, np.float64) - offset
    A = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(U, m2))
    means, covs = np.zeros((S, U, D)), np.zeros((S, U, D, D))
    for s in range(S):
        F = np.asarray(N[s], np.float64)
        if bias:
            F = np.concatenate([F, np.ones((m2, 1))], axis=1)
        outer = np.einsum("jk,jl->jkl", F, F)
        if W is not None:
            outer[:, :K, :K] += np.asarray(W, np.float64)
        G = (A @ outer.reshape(m2, D * D)).reshape(U, D, D)
        resid = R - (np.asarray(col_bias[s], np.float64)[cols] if col_bias is not None else 0.0)
        Ar = sp.csr_matrix((resid, (rows, cols)), shape=(U, m2))
        r = Ar @ F
        P0 = np.zeros((D, D))
        P0[:K, :K] = prior_prec[s]
        sh0 = np.zeros((U, D))
        if prior_shift is not None:
            sh0[:, :K] = prior_shift[s]
        if bias:
            P0[K, K] = row_bias_prec[s]
            if row_bias_mean is not None:
                sh0[:, K] = row_bias_prec[s] * row_bias_mean[s]
        P = P0 + tb[s] * G
        means[s], covs[s] = _solve_conditionals(P, sh0 + tb[s] * r)
    return means, covs


class FoldInFit(PredictiveMixin):
    """New rows folded into a fit without refitting (``fit.fold_in(new)``).

    Holds, for each component ``s`` (a kept draw of an MCMC or SVI fit, or the one
    variational q of a VB fit), the exact Gaussian conditional ``N(mean[s, u], cov[s, u])``
    of each new row's ``x_u = [M_u, b_u]`` given that component's item factors, prior
    variables, noise precision and column biases (VB: the optimal joint ``q(x_u)`` given
    ``q(N)``, ``q(c)`` and the expectations of the others).  Predictions average over the
    components with equal weights (the draws are not reweighted by the new rows'
    likelihood: the new rows do not update N or the hyper-parameters).

    Rows are the new rows ``0..U-1``, columns the fit's items.  Gives ``predict``
    (``return_std=``), ``predictive_interval``, ``log_predictive_density`` (Gaussian with
    the predictive moments), ``recommend`` (the new rows' ratings are the seen items).
    """

    def __init__(
        self, parent, new, means, covs, N, W, col_bias, col_bias_var, noise_var, bias: bool
    ):
        self.parent = parent
        self.new = new
        self.means, self.covs = means, covs
        self.N, self.W = N, W
        self.col_bias, self.col_bias_var = col_bias, col_bias_var
        self._noise_var = float(noise_var)
        self.bias = bias
        self.shape = (int(new.shape[0]), int(N.shape[1]))
        self._shift = parent.info.shift
        self._K = N.shape[-1]

    def noise_var(self) -> float:
        return self._noise_var

    def _seen_pattern(self):
        return self.new.rows, self.new.cols

    def _check_entries(self, rows, cols):
        from ...data.ratings import check_entries

        return check_entries(rows, cols, self.shape, "predict")

    def _features(self, s, c):
        F = np.asarray(self.N[s][c], np.float64)
        if self.bias:
            F = np.concatenate([F, np.ones((len(c), 1))], axis=1)
        return F

    def _theta_moments(self, r, c):
        S, K = self.means.shape[0], self._K
        first, second = np.zeros(len(r)), np.zeros(len(r))
        for s in range(S):
            F = self._features(s, c)
            mu, cov = self.means[s, r], self.covs[s, r]
            m = np.einsum("pd,pd->p", F, mu)
            v = np.einsum("pd,pde,pe->p", F, cov, F)
            if self.W is not None:
                Wc = np.asarray(self.W[c], np.float64)
                v = (
                    v
                    + np.einsum("pk,pkl,pl->p", mu[:, :K], Wc, mu[:, :K])
                    + np.einsum("pkl,plk->p", cov[:, :K, :K], Wc)
                )
            if self.col_bias is not None:
                m = m + np.asarray(self.col_bias[s], np.float64)[c]
            if self.col_bias_var is not None:
                v = v + np.asarray(self.col_bias_var, np.float64)[c]
            first += m
            second += v + m * m
        mean = first / S
        return mean, np.maximum(second / S - mean * mean, 0.0)

    def predict(self, rows, cols, return_std: bool = False):
        """Predictive mean (offset added, clipped as the parent fit clips) at entries of
        the new rows; with ``return_std`` also the predictive sd.

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            Entries: rows of the new ratings, columns of the fit's items.
        return_std : bool
            Also return the predictive sd.
        """
        r, c = self._check_entries(rows, cols)
        mean, var = self._theta_moments(r, c)
        pred = self._shift.apply(mean)
        if not return_std:
            return pred
        return pred, np.sqrt(var + self.noise_var())

    def rmse(self, test) -> float:
        test = self._check_test(test)
        return float(np.sqrt(np.mean((self.predict(test.rows, test.cols) - test.values) ** 2)))

    def _user_scores(self, users, by, z, rng):
        S, K = self.means.shape[0], self._K
        m2 = self.shape[1]
        cols = np.arange(m2)
        if by == "thompson":
            out = np.zeros((len(users), m2))
            s_of = rng.integers(0, S, size=len(users))
            for k, (u, s) in enumerate(zip(users, s_of)):
                x = rng.multivariate_normal(self.means[s, u], self.covs[s, u])
                F = self._features(s, cols)
                if self.W is not None:  # N_j ~ q(N_j)
                    if getattr(self, "_Lw", None) is None:
                        self._Lw = np.linalg.cholesky(np.asarray(self.W, np.float64))
                    F[:, :K] = F[:, :K] + np.einsum(
                        "jkl,jl->jk", self._Lw, rng.standard_normal((m2, K))
                    )
                t = F @ x
                if self.col_bias is not None:
                    cb = np.asarray(self.col_bias[s], np.float64)
                    if self.col_bias_var is not None:
                        cb = cb + np.sqrt(
                            np.asarray(self.col_bias_var, np.float64)
                        ) * rng.standard_normal(m2)
                    t = t + cb
                out[k] = t
            return out
        r = np.repeat(users, m2)
        c = np.tile(cols, len(users))
        mean, var = self._theta_moments(r, c)
        if by == "mean":
            return mean.reshape(len(users), m2)
        return (mean + z * np.sqrt(var + self.noise_var())).reshape(len(users), m2)
