"""The mean-field variational posterior of a VB run: :class:`VBFit`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from ..._arviz import add_factor_quantities, add_gamma, theta_singular_values
from .. import saving
from . import arrays, levels
from . import outputs as out
from .base import FitResult, theta_mean
from .fold_in import new_row_features
from ..vb import state as vbstate

__all__ = ["VBFit", "product_var"]


def product_var(a, b, A, B) -> np.ndarray:
    """``Var[x . y]`` of independent ``x ~ N(a, A)``, ``y ~ N(b, B)``:
    ``a^T B a + b^T A b + tr(A B)`` (docs/algorithms.md, "Predictive moments"), over the
    leading axes (broadcast).  ``A``, ``B``: full covariances (..., K, K), or their
    diagonals (..., K) (then ``sum_h a_h^2 B_hh + b_h^2 A_hh + A_hh B_hh``)."""
    if np.ndim(A) == np.ndim(a):
        return np.sum(a**2 * B + b**2 * A + A * B, axis=-1)
    return (
        np.einsum("...k,...kl,...l->...", a, B, a)
        + np.einsum("...k,...kl,...l->...", b, A, b)
        + np.einsum("...kl,...lk->...", A, B)
    )


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
    q_offsets : the q of the sampled offsets (``"<name>/<variable>"``, e.g. the context
        offset's ``context/w_mean``, ``context/w_var``, ``context/lam_shape``,
        ``context/lam_rate``; {} without offsets): its predictions at new ratings read
        their per-rating table (``context=``).
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
    q_offsets: dict = dataclasses.field(default_factory=dict)
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
    has_q: ClassVar[bool] = True

    def _state_arrays(self) -> dict:
        return {} if self.state is None else vbstate.state_arrays(self.state)

    @classmethod
    def _state_from_arrays(cls, arrays: dict) -> dict:
        return {"state": vbstate.state_from_arrays(arrays)} if arrays else {}

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

    def _predict_mean(self, r, c, context=None) -> np.ndarray:
        """``m_i . n_j`` (plus ``E[b_i] + E[c_j]`` with biases, plus ``E[s]`` at the
        entries' context with sampled offsets, plus the centring offset, clipped) at the
        given entries."""
        theta = self._theta_mean(r, c)
        if self.info.offsets:
            theta = theta + self._offset_moments(context, r.size)[0]
        return self._finish(theta)

    def _offset_moments(self, context, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``E_q[s]`` and ``Var_q[s]`` (n,) of the sampled offsets at ``n`` entries whose
        per-rating table is ``context`` (float64)."""
        import jax

        from ..vb import offsets as vbo

        if context is None:
            names = ", ".join(o.name for o in self.info.offsets)
            raise ValueError(
                f"this fit has sampled offsets ({names}): its predictions need each entry's "
                "per-rating table (predict(rows, cols, context=table), test.context); "
                "recommend and fold_in are not available"
            )
        offs = self.info.offsets
        with jax.enable_x64(True):
            q = {k: np.asarray(v, np.float64)[None] for k, v in self.q_offsets.items()}
            arrays = tuple(o.arrays(context, n, np.float64) for o in offs)
            mean, var = vbo.moments(offs, q, arrays)
            return np.asarray(mean, np.float64)[0], np.asarray(var, np.float64)[0]

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

    def _theta_moments(self, r, c, context=None):
        """``E_q[theta_ij]`` and, analytically (docs/algorithms.md, "Predictive moments"),
        ``Var_q[M_i . N_j]`` (:func:`product_var`) plus
        ``Var_q[b_i] + Var_q[c_j]`` with biases (plus the sampled offsets' ``E_q[s]``,
        ``Var_q[s]`` at the entries' ``context``)."""
        shift = self._offset_moments(context, len(r)) if self.info.offsets else (0.0, 0.0)
        V, W = self.covariances()
        var = np.zeros(len(r))
        chunk = max(256, out._BUDGET // (self.info.K**2 + 1))
        for p0 in range(0, len(r), chunk):
            rr, cc = r[p0 : p0 + chunk], c[p0 : p0 + chunk]
            a, b = np.asarray(self.m[rr], np.float64), np.asarray(self.n[cc], np.float64)
            A, B = np.asarray(V[rr], np.float64), np.asarray(W[cc], np.float64)
            var[p0 : p0 + chunk] = product_var(a, b, A, B)
        bv, cv = self._bias_vars()
        if bv is not None:
            var = var + bv[r] + cv[c]
        return self._theta_mean(r, c) + shift[0], var + shift[1]

    def noise_var(self) -> float:
        """``E_q[1/tau]`` of a learned noise (``q_noise["inv_mean"]``), else the fixed ``1/tau``."""
        if self.q_noise:  # times nu / (nu - 2) for Student-t noise
            return float(self.info.likelihood.noise_variance(float(self.q_noise["inv_mean"])))
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
        if self.info.likelihood.latent:
            return self._level_lpd(test)
        return self._gaussian_lpd(test)

    def _level_proba(self, r, c, context=None) -> np.ndarray:
        """``P_q(Y = l)`` with ``theta ~ N(E_q[theta], Var_q[theta])`` and the cut points
        at their fitted values (:func:`bmczoo.inference.results.levels.gaussian_level_proba`)."""
        mean, var = self._theta_moments(r, c, context)
        return levels.gaussian_level_proba(mean, var, self._cut_draws(self.q_noise, 1)[0])

    def _user_scores(self, users, by, z, rng):
        if self.info.offsets:
            self._offset_moments(None, 0)  # the error: no context for a recommendation
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
        var = product_var(a[:, None], nn[None], A[:, None], B[None])
        if bv is not None:
            var = var + bv[users][:, None] + cv[None]
        return mean + z * np.sqrt(var + self.noise_var())

    def _fold_in(self, new):
        """The optimal Gaussian ``q(M_u, b_u)`` of each new row given ``q(N)``, ``q(c)`` and
        the expectations of the prior's, the noise's and the bias variance's q."""
        info, K = self.info, self.info.K
        if info.offsets:
            self._offset_moments(None, 0)  # the error: the new ratings' context is not read
        (pM, shiftM), _ = info.prior.vb_row_priors(vbstate.prior_q(self.state))
        prec = out.dense_precision(np.asarray(pM), K)
        shift = None if shiftM is None else np.asarray(shiftM, np.float64).reshape(1, K)
        if "M" in getattr(info.prior, "linked_sides", ()):
            # E[Lambda (mu + B^T x_u)] = E[Lambda] (mu* + E[B]^T x_u) under the mean-field q
            EB = np.asarray(self.q_prior["B_M"], np.float64).reshape(-1, K)
            xb = new_row_features(info.prior, new, EB.shape[0]) @ EB
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
            if "rows" in info.biases.linked_sides:
                # E[(b_u - x_u^T w)^2 / s] in the new bias's q: prior mean x_u^T E[w]
                Ew = np.asarray(self.q_biases["bw"], np.float64).reshape(-1)
                rb_prec = (rb_prec, (new_row_features(info.biases, new, Ew.size) @ Ew)[None])
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

    # ------------------------------------------------------------------ arrays (hooks)
    def _product_moments(self, rows, cols) -> tuple[np.ndarray, np.ndarray, bool]:
        """Mean ``m_i^T n_j`` and variance (:func:`product_var`) of ``M_i . N_j`` under q
        (model scale, no biases): full covariances when the fit keeps its state, else the
        diagonals.  Returns (mean, var, full)."""
        m = np.asarray(self.m, np.float64)[rows]
        n = np.asarray(self.n, np.float64)[cols]
        mean = np.sum(m * n, axis=-1)
        cov = _vb_covariances(self)
        if cov is not None:
            return mean, product_var(m, n, cov[0][rows], cov[1][cols]), True
        Vd = np.asarray(self.V_diag, np.float64)[rows]
        Wd = np.asarray(self.W_diag, np.float64)[cols]
        return mean, product_var(m, n, Vd, Wd), False

    def _posterior_arrays(self, entries, num_draws: int, seed: int) -> arrays.Posterior:
        """``num_draws`` independent draws from q as one chain (``default_rng(seed)``):
        gamma, theta at the entries, the singular values of theta; the ELBO and RMSE
        traces."""
        rows, cols = arrays.resolve_entries(self, entries, seed)
        num_draws = int(num_draws)
        if num_draws < 1:
            raise ValueError(f"num_draws must be >= 1, got {num_draws}")
        post, stats, conv, full = _vb_arrays(
            self, (rows, cols), num_draws, np.random.default_rng(seed)
        )
        attrs = {
            "representation": "independent draws from the variational posterior q, one chain",
            "num_variational_draws": num_draws,
            "seed": int(seed),
            "vb_covariance": "full" if full else "diagonal",
        }
        return arrays.Posterior(post, stats, conv, attrs, {}, rows, cols)

    def _tau_draws(self, num_draws: int, seed: int):
        """``num_draws`` draws from ``q(tau)`` (Gamma(shape, rate)) with
        ``default_rng([seed, 1])``, apart from the other draws."""
        if "shape" not in (self.q_noise or {}):
            return None
        q = self.q_noise
        rng = np.random.default_rng([seed, 1])
        return rng.gamma(float(q["shape"]), 1.0 / float(q["rate"]), size=(1, num_draws))

    def _extra_draws(self, post: dict) -> dict:
        return {}  # the posterior is drawn from q: no stored draws

    def _ratings_theta_tau(self, rows, cols, num_draws: int, max_draws: int, rng, context=None):
        theta, tau, how = _vb_theta_tau(self, rows, cols, num_draws, max_draws, rng)
        if self.info.offsets:  # plus draws of the offsets from q at the ratings' context
            theta = theta + self._offset_draws(context, len(rows), theta.shape[1], rng)[None]
        return theta, tau, how

    def _offset_draws(self, context, n: int, S: int, rng) -> np.ndarray:
        """``S`` draws (S, n) of the offsets' sum from q at ``n`` entries whose per-rating
        table is ``context``."""
        import jax

        from ..vb import offsets as vbo

        if context is None:
            self._offset_moments(None, n)  # the error
        total = np.zeros((S, n))
        with jax.enable_x64(True):
            for o in self.info.offsets:
                q = {
                    k: np.asarray(v, np.float64) for k, v in vbo.own(self.q_offsets, o.name).items()
                }
                total += np.asarray(o.vb_draws(q, o.arrays(context, n, np.float64), S, rng))
        return total

    def _drawn_cuts(self, lik, shape, step: int) -> np.ndarray:
        return np.broadcast_to(
            np.asarray(self.q_noise["cuts"], np.float64).reshape(-1),
            tuple(shape) + (lik.num_levels - 1,),
        )

    def _gamma_draws(self):
        return 1.0 / np.asarray(self.q_gamma["inv_mean"], np.float64)

    def _prob_gamma_above(self, threshold: float) -> np.ndarray:
        """``q(gamma_h > threshold)`` (1, K): the prior's ``q_prob_above``."""
        prior = arrays.prior_of(self)
        if prior is None:
            raise ValueError("this VB fit records no prior: its q(gamma) cannot be evaluated")
        K = np.shape(self.m)[-1]
        p = np.asarray(prior.q_prob_above(_vb_q_gamma(self), threshold), np.float64)
        return np.array(np.broadcast_to(p, (K,)))[None]

    def _rmse_traces(self):
        """``(None, rmse)``: the RMSE of ``m_i . n_j`` after each iteration (1, iteration)."""
        mean = np.asarray(self.rmse_trace, np.float64)[None]
        if mean.size == 0:
            raise ValueError("this fit has no RMSE trace: fit it with test=RatingData")
        return None, mean


# --------------------------------------------------------------------------- arrays for ArviZ
def _vb_q_gamma(fit) -> dict:
    """The parameters of ``q(gamma)`` of a VB fit as float64 numpy arrays (``inv_mean`` and
    those of its prior's :meth:`~bmczoo.priors.Prior.vb_update`)."""
    return {k: np.asarray(v, np.float64) for k, v in fit.q_gamma.items()}


def _vb_gamma_draws(fit, num_draws: int, rng) -> np.ndarray | None:
    """Draws (num_draws, K) from ``q(gamma)``: the prior's
    :meth:`~bmczoo.priors.Prior.q_sample`; None when the fit records no prior or its
    prior has no column scales."""
    prior = arrays.prior_of(fit)
    if prior is None or not prior.has_column_scales:
        return None
    K = np.shape(fit.m)[-1]
    g = np.asarray(prior.q_sample(_vb_q_gamma(fit), num_draws, rng), np.float64)
    try:
        return np.array(np.broadcast_to(g, (num_draws, K)))
    except ValueError:
        raise ValueError(
            f"{type(prior).__name__}.q_sample returned shape {g.shape}, expected ({num_draws}, {K})"
        ) from None


def _vb_covariances(fit):
    """Full covariances (m1, K, K), (m2, K, K) when the fit keeps its VB state, else None."""
    state = getattr(fit, "state", None)
    if state is not None and getattr(state, "V", None) is not None:
        V, W = np.asarray(state.V), np.asarray(state.W)
        if V.ndim == 4:
            V, W = V[0], W[0]
        return V.astype(np.float64), W.astype(np.float64)
    return None


def _sqrt_cov(cov: np.ndarray) -> np.ndarray:
    """A square root ``L`` (``L L^T = cov``) of each covariance: Cholesky, or the symmetric
    square root from ``eigh`` (eigenvalues clipped at 0) when a matrix is not positive
    definite in floating point."""
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        w, U = np.linalg.eigh(0.5 * (cov + np.swapaxes(cov, -1, -2)))
        return U * np.sqrt(np.maximum(w, 0.0))[..., None, :]


def _gauss_draws(mean, root, num_draws, rng):
    """Draws of independent Gaussian rows ``mean + root z``: mean (R, K), root (R, K, K) (a
    covariance square root) or (R, K) (standard deviations) -> (num_draws, R, K)."""
    z = rng.standard_normal((num_draws,) + mean.shape)
    if root.ndim == mean.ndim + 1:
        return mean + np.einsum("rkl,srl->srk", root, z)
    return mean + root * z


def _vb_arrays(fit, entries, num_draws, rng):
    post: dict[str, np.ndarray] = {}
    g = _vb_gamma_draws(fit, num_draws, rng)
    if g is not None:
        add_gamma(post, g[None])
    rows, cols = entries
    cov = _vb_covariances(fit)
    full = cov is not None
    m = np.asarray(fit.m, np.float64)
    n = np.asarray(fit.n, np.float64)
    if full:
        rootV, rootW = _sqrt_cov(cov[0]), _sqrt_cov(cov[1])
    else:
        rootV = np.sqrt(np.maximum(np.asarray(fit.V_diag, np.float64), 0.0))
        rootW = np.sqrt(np.maximum(np.asarray(fit.W_diag, np.float64), 0.0))
    if rows.size:
        ur, ir = np.unique(rows, return_inverse=True)
        uc, ic = np.unique(cols, return_inverse=True)
        Mi = _gauss_draws(m[ur], rootV[ur], num_draws, rng)
        Nj = _gauss_draws(n[uc], rootW[uc], num_draws, rng)
        post["theta"] = np.sum(Mi[:, ir] * Nj[:, ic], axis=-1)[None]
    # singular values of full factor draws, a few draws at a time
    K = m.shape[-1]
    step = max(1, (16 * 2**20) // ((m.shape[0] + n.shape[0]) * K * 8))
    sv = np.empty((num_draws, K))
    for s in range(0, num_draws, step):
        k = min(step, num_draws - s)
        sv[s : s + k] = theta_singular_values(
            _gauss_draws(m, rootV, k, rng), _gauss_draws(n, rootW, k, rng)
        )
    add_factor_quantities(post, sv[None])
    conv = {"elbo": np.asarray(fit.elbo, np.float64)[None]}
    rt = np.asarray(getattr(fit, "rmse_trace", np.zeros(0)), np.float64)
    if rt.size:
        conv["rmse"] = rt[None]
    return post, {}, conv, full


def _vb_theta_tau(fit, rows, cols, num_draws, max_draws, rng):
    """Draws from q (one chain): theta (1, S, E) at the ratings (biases included) and tau
    (1, S) of a learned noise (q(tau) Gamma) or None."""
    S = min(int(num_draws), max_draws)
    cov = _vb_covariances(fit)
    m = np.asarray(fit.m, np.float64)
    n = np.asarray(fit.n, np.float64)
    ur, ir = np.unique(rows, return_inverse=True)
    uc, ic = np.unique(cols, return_inverse=True)
    if cov is not None:
        rootV, rootW = _sqrt_cov(cov[0][ur]), _sqrt_cov(cov[1][uc])
    else:
        rootV = np.sqrt(np.maximum(np.asarray(fit.V_diag, np.float64)[ur], 0.0))
        rootW = np.sqrt(np.maximum(np.asarray(fit.W_diag, np.float64)[uc], 0.0))
    K = m.shape[-1]
    theta = np.empty((S, rows.size))
    step = max(1, (2**21) // max((ur.size + uc.size) * K + rows.size, 1))
    qb = getattr(fit, "q_biases", None) or {}
    for s0 in range(0, S, step):
        k = min(step, S - s0)
        Mi = _gauss_draws(m[ur], rootV, k, rng)
        Nj = _gauss_draws(n[uc], rootW, k, rng)
        t = np.einsum("sek,sek->se", Mi[:, ir], Nj[:, ic])
        if qb:
            b = np.asarray(qb["b_mean"], np.float64)[ur] + np.sqrt(
                np.asarray(qb["b_var"], np.float64)[ur]
            ) * rng.standard_normal((k, ur.size))
            c = np.asarray(qb["c_mean"], np.float64)[uc] + np.sqrt(
                np.asarray(qb["c_var"], np.float64)[uc]
            ) * rng.standard_normal((k, uc.size))
            t = t + b[:, ir] + c[:, ic]
        theta[s0 : s0 + k] = t
    tau = None
    qn = getattr(fit, "q_noise", None) or {}
    if "shape" in qn:  # q(tau) of a learned noise
        shape = float(np.asarray(qn["shape"], np.float64).reshape(-1)[0])
        rate = float(np.asarray(qn["rate"], np.float64).reshape(-1)[0])
        tau = (rng.gamma(shape, 1.0 / rate, size=S))[None]
    return (
        theta[None],
        tau,
        {
            "draw_step": 1,
            "theta_source": "independent draws from q (one chain)",
            "num_variational_draws": S,
        },
    )
