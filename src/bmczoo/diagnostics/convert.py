"""Fit results as ArviZ data: plain arrays first, converted to ArviZ only at the edge.

:func:`fit_arrays` turns any fit result (``GibbsFit`` from Gibbs or NUTS, ``VBFit``,
``SVIFit``, or any object with the same attributes) into a :class:`FitArrays`: numpy
arrays with a leading ``(chain, draw)`` axis pair (posterior and sample stats) or
``(chain, iteration)`` (per-iteration traces), their dimension names and coordinates.
:func:`to_arviz` converts that into an ArviZ ``InferenceData`` (ArviZ 0.x) or an
``xarray.DataTree`` (ArviZ 1.x), the only place that depends on the ArviZ version.

Groups and variables
--------------------
``posterior`` (chain, draw, ...), by default: the few variables one reads
    ``theta`` (entry): theta at the tracked entries, with coordinates ``row`` and ``col``
    on ``entry`` and ``"i,j"`` labels; ``gamma`` (h) where the method has it;
    ``gamma_sorted`` (h): gamma in decreasing order (the labels h are not identified: the
    posterior is invariant under permuting the columns of M, N together with gamma);
    MCMC draws of gamma: ``num_active``, the number of active columns ``sum_h P(gamma_h >
    t | draw)`` (the indicator count for drawn gamma; :func:`active_threshold` gives
    ``t``); where the factors ``M``, ``N`` of each draw are known (stored factor draws,
    or draws from q): ``theta_sv`` (h) the singular values of ``theta = M N^T``
    (decreasing), ``theta_fro`` = ``||theta||_F`` and ``eff_rank``, the entropy
    effective rank ``exp(-sum_k p_k log p_k)``, ``p = sv / sum(sv)`` (Roy and Vetterli,
    2007), a continuous rotation- and label-invariant measure of the rank of ``theta``;
    a likelihood that learns its noise: ``noise_sd`` = ``1 / sqrt(tau)`` (data scale);
    learned biases: ``bias_var`` (bias = ``row``, ``col``), the variances of the row and
    column biases; a Normal-Wishart prior (no gamma): ``cov_eig`` (side = ``M``, ``N``;
    h), the eigenvalues of ``Lambda_M^{-1}`` and ``Lambda_N^{-1}`` (the covariance of the
    rows of M and of N) in decreasing order, its analogue of sorted gamma, and
    ``mu_norm`` (side) = ``||mu_M||``, ``||mu_N||`` (both invariant under the rotations
    that leave the posterior unchanged, unlike ``mu`` and ``Lambda`` themselves); learned
    cut points of an ordinal likelihood: ``cuts`` (cut).
``posterior`` on request (``var_names=[...]``; ``full=True`` for all of them)
    Every other stored draw, as stored (:func:`extra_var_names` lists a fit's): the per-row
    and per-column biases ``row_bias`` (i), ``col_bias`` (j), the factor draws ``M``
    (i, h), ``N`` (j, h) (``store_factors``), ``tau``, ``row_bias_var``,
    ``col_bias_var`` and a Normal-Wishart state's ``mu_M`` (h), ``Lambda_M`` (h, h2),
    ``mu_N``, ``Lambda_N``.  They are left out by default because they are large (one
    value per row or column, or K x K per side) and, for the factors and the
    Normal-Wishart state, not identified (their traces and R-hat reflect rotations).
``sample_stats`` (chain, draw)
    Gibbs with test data: ``rmse`` (test RMSE of the kept draw) and ``rmse_mean`` (of
    the running posterior mean when that draw was kept); NUTS: NumPyro's extra fields
    (``diverging``, ...).
``convergence`` (chain, iteration), ``iteration = 1..T``
    Gibbs: ``rmse_draw`` and ``rmse_mean`` at every sweep (warm-up included); VB:
    ``elbo`` and ``rmse``; SVI/MAP: ``loss``.

Scale: ``theta`` is on the scale the model was fitted on (centred: the training mean,
``attrs["theta_offset"]``, is not added), as the sampler records it; the variable's own
attribute ``scale`` says so, and :func:`~bmczoo.diagnostics.summary` reports theta on the
data's scale (offset added).

Model comparison (``log_likelihood=True``, or a RatingData of entries)
--------------------------------------------------------------------
``log_likelihood`` (chain, draw, rating)
    ``y``: ``log N(y_k | theta_s[i_k, j_k] + offset, 1/tau_s)`` per rating and draw:
    ``theta`` with the biases, ``tau`` the draw's ``tau`` of a learned noise
    (:class:`~bmczoo.likelihoods.LearnedNoise`) or the fixed ``tau`` of the tempered
    likelihood.  ``az.loo``, ``az.waic`` and ``az.compare`` read it.
``posterior_predictive`` (chain, draw, rating)
    ``y``: one replicate ``theta_s + offset + e``, ``e ~ N(0, 1/tau_s)`` per draw
    (``default_rng(seed)``; unclipped), for ``az.plot_ppc``.
``observed_data`` (rating)
    ``y``: the ratings.  Coordinates ``rating`` (the position of each rating in its
    RatingData), ``rating_row``, ``rating_col``.

``True`` uses the training ratings the fit holds (``bmc.fit`` keeps them; a loaded fit
does not: pass the RatingData).  Memory is bounded by two rules: at most
``max_ratings`` ratings (default 5000), a uniform subsample without replacement drawn
with ``default_rng(seed)`` from the positions ``0..n-1`` alone, so two fits on the same
data with the same seed use the same ratings and their ``az.compare`` is valid; and at
most ``max_draws`` draws in all chains (default 1000), keeping every ``step``-th draw of
each chain, ``step = ceil(chains * draws / max_draws)`` (VB: ``min(num_draws,
max_draws)`` draws from q, one chain).  The attributes of the groups record both.
Draws of theta at the ratings come from the stored factor draws (Gibbs with
``store_factors=True``, NUTS, SVI, MAP), from the tracked entries when all the ratings
are tracked (Gibbs ``track=(rows, cols)``), or from q (VB, seeded); a Gibbs fit with
neither raises ``ValueError`` saying so.

Variational fits: the variational posterior ``q`` is represented by ``num_draws``
independent draws from ``q`` (``numpy.random.default_rng(seed)``, seed 0 by default)
forming a single chain: ``q(gamma)`` draws from the prior's own factor
(:meth:`bmczoo.priors.Prior.q_sample` on the fit's ``q_gamma``), ``theta`` at the
entries as ``M_i . N_j`` with ``M_i ~ N(m_i, V_i)``, ``N_j ~ N(n_j, W_j)`` independent
(full covariances when the fit keeps its ``state``, diagonals otherwise), and
``theta_sv`` from full draws of ``M`` and ``N``.  SVI fits use the draws
the fit already holds (one draw for MAP).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..inference.thinning import kept_iterations

__all__ = [
    "FitArrays",
    "fit_arrays",
    "to_arviz",
    "from_numpyro",
    "theta_singular_values",
    "effective_rank",
    "extra_var_names",
    "kept_iterations",
    "fit_kind",
    "INVARIANT_VARS",
    "DEFAULT_VARS",
]

#: the variables of the default posterior, in their order (those the fit has)
DEFAULT_VARS = (
    "theta",
    "gamma",
    "gamma_sorted",
    "num_active",
    "theta_sv",
    "theta_fro",
    "eff_rank",
    "noise_sd",
    "bias_var",
    "cov_eig",
    "mu_norm",
    "cuts",
)

#: rotation- and label-invariant posterior variables (in display order)
INVARIANT_VARS = ("theta", "gamma_sorted", "num_active", "theta_fro", "eff_rank", "noise_sd")

_LEAD = {
    "posterior": ("chain", "draw"),
    "sample_stats": ("chain", "draw"),
    "convergence": ("chain", "iteration"),
    "log_likelihood": ("chain", "draw"),
    "posterior_predictive": ("chain", "draw"),
    "observed_data": (),
}
_DEFAULT_NUM_TRACK = 8
_MAX_DRAWS = 1000
_MAX_RATINGS = 5000


@dataclasses.dataclass
class FitArrays:
    """Arrays-first form of a fit.

    Attributes
    ----------
    groups : ``{group: {variable: array}}``; arrays of ``posterior`` and ``sample_stats``
        have leading axes (chain, draw), of ``convergence`` (chain, iteration).
    dims : ``{variable: (dim, ...)}`` names of the trailing axes (``h``, ``entry``).
    coords : ``{name: (dim, values)}``; index coordinates (``name == dim``) and the
        ``row``/``col`` coordinates on ``entry`` (``rating_row``/``rating_col`` on ``rating``).
    attrs : metadata copied to every group (method, prior, K, representation, ...).
    group_attrs : extra metadata of single groups (how the ratings and draws of the
        ``log_likelihood`` groups were chosen).
    var_attrs : attributes of single variables (``theta``: its scale).
    """

    groups: dict[str, dict[str, np.ndarray]]
    dims: dict[str, tuple[str, ...]]
    coords: dict[str, tuple[str, Any]]
    attrs: dict[str, Any]
    group_attrs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    var_attrs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def num_chains(self) -> int:
        post = self.groups.get("posterior", {})
        return next(iter(post.values())).shape[0] if post else 0

    @property
    def num_draws(self) -> int:
        post = self.groups.get("posterior", {})
        return next(iter(post.values())).shape[1] if post else 0


# --------------------------------------------------------------------------- helpers
def fit_kind(fit) -> str:
    """``"mcmc"`` (draws: Gibbs, NUTS), ``"vb"`` (closed-form q) or ``"svi"`` (guide draws):
    the result class's ``family``; objects that merely have a fit's attributes (e.g. test
    fakes) are recognised by them."""
    family = getattr(type(fit), "family", None)
    if family in ("mcmc", "vb", "svi"):
        return family
    if hasattr(fit, "samples"):
        return "mcmc"
    if hasattr(fit, "q_gamma") and hasattr(fit, "m"):
        return "vb"
    if hasattr(fit, "draws"):
        return "svi"
    raise TypeError(f"not a bmczoo fit result: {type(fit).__name__}")


def _info(fit):
    """The fit's typed :class:`~bmczoo.inference.results.FitInfo` (``fit.info``), or None
    for an object that has a fit's arrays but records no info.

    The one place where the diagnostics find a fit's metadata: they read its typed
    attributes (``.method``, ``.prior``, ``.K``, ``.shift``, ``.settings``, ...) through
    the accessors below, which treat an attribute that such an object lacks as not
    recorded.
    """
    return getattr(fit, "info", None)


def _prior_of(fit):
    """The fit's prior (``fit.info.prior``, a :class:`~bmczoo.priors.Prior`), or None when
    the fit (e.g. an object with a fit's attributes) records none."""
    from ..priors import Prior

    prior = getattr(_info(fit), "prior", None)
    return prior if isinstance(prior, Prior) else None


def _prior_name(fit) -> str:
    """The name of the fit's prior (``""`` when it records none)."""
    return str(getattr(getattr(_info(fit), "prior", None), "name", "") or "")


def _method_of(fit) -> str:
    """``fit.info.method`` (``"gibbs"``, ``"vb"``, ...); else the fit's ``method`` or its
    family."""
    method = getattr(_info(fit), "method", None)
    return str(method if method is not None else getattr(fit, "method", fit_kind(fit)))


def _K_of(fit) -> int | None:
    """The latent dimension ``fit.info.K``, or None when not recorded."""
    K = getattr(_info(fit), "K", None)
    return None if K is None else int(K)


def _offset_of(fit) -> float:
    """The centring offset ``fit.info.shift.offset`` (0 when not recorded)."""
    return float(getattr(getattr(_info(fit), "shift", None), "offset", 0.0))


def _setting(fit, name: str):
    """The setting ``name`` of the fit's settings object (``fit.info.settings``), or None
    when its method has no such setting (or the fit records no settings)."""
    return getattr(getattr(_info(fit), "settings", None), name, None)


def _lacks_column_scales(fit) -> bool:
    """Whether the fit's prior has no column scales ``gamma_h`` (``has_column_scales =
    False``, e.g. :class:`~bmczoo.priors.NormalWishart`)."""
    prior = _prior_of(fit)
    return prior is not None and not prior.has_column_scales


def _require_column_scales(fit, what: str) -> None:
    """``ValueError`` naming the prior when the fit's prior has no column scales gamma."""
    if _lacks_column_scales(fit):
        name = _prior_name(fit)
        raise ValueError(
            f"{name} has no column scales gamma: {what} applies only to priors with column "
            f"scales gamma_h (the draws of a {name} fit hold the prior's own state instead)"
        )


def theta_singular_values(M, N, *, chunk_bytes: int = 64 * 2**20) -> np.ndarray:
    """Singular values (decreasing) of ``theta = M N^T`` for each draw, without forming it.

    ``M`` (..., m1, K), ``N`` (..., m2, K) -> (..., K): from the K x K Gram matrices
    ``M^T M = U_M E_M U_M^T`` (and likewise for N), square roots ``R_M = E_M^{1/2} U_M^T``
    with ``R_M^T R_M = M^T M`` (what a QR of M gives, up to an orthogonal factor), then the
    SVD of the K x K product ``R_M R_N^T`` (float64, processed in chunks of draws).  The
    absolute error is of the order of ``eps ||M|| ||N||``, as with a QR, at a fraction of
    its cost.
    """
    M = np.asarray(M)
    N = np.asarray(N)
    lead = M.shape[:-2]
    K = M.shape[-1]
    Mf = M.reshape((-1,) + M.shape[-2:])
    Nf = N.reshape((-1,) + N.shape[-2:])
    per_draw = (Mf.shape[1] + Nf.shape[1]) * K * 8 * 2
    step = max(1, chunk_bytes // max(per_draw, 1))
    out = np.empty((Mf.shape[0], K))
    for s in range(0, Mf.shape[0], step):
        R1 = _gram_root(Mf[s : s + step].astype(np.float64))
        R2 = _gram_root(Nf[s : s + step].astype(np.float64))
        out[s : s + step] = np.linalg.svd(R1 @ np.swapaxes(R2, -1, -2), compute_uv=False)
    return out.reshape(lead + (K,))


def _gram_root(X: np.ndarray) -> np.ndarray:
    """``R`` (S, K, K) with ``R^T R = X^T X`` for X (S, m, K): ``E^{1/2} U^T`` from the
    eigendecomposition of the Gram matrix."""
    e, U = np.linalg.eigh(np.swapaxes(X, -1, -2) @ X)
    return np.sqrt(np.maximum(e, 0.0))[..., :, None] * np.swapaxes(U, -1, -2)


def effective_rank(sv) -> np.ndarray:
    """Entropy effective rank ``exp(-sum p log p)``, ``p = sv / sum(sv)`` over the last axis
    (1 for a rank-one matrix, K for K equal singular values, 0 for the zero matrix)."""
    sv = np.abs(np.asarray(sv, np.float64))
    tot = sv.sum(axis=-1, keepdims=True)
    p = np.divide(sv, tot, out=np.zeros_like(sv), where=tot > 0)
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.where(tot[..., 0] > 0, np.exp(-plogp.sum(axis=-1)), 0.0)


def entry_labels(rows, cols) -> np.ndarray:
    """``"i,j"`` labels of entries (0-based), made unique with ``#k`` when repeated."""
    labels, seen = [], {}
    for i, j in zip(np.asarray(rows).tolist(), np.asarray(cols).tolist()):
        lab = f"{i},{j}"
        k = seen.get(lab, 0)
        seen[lab] = k + 1
        labels.append(lab if k == 0 else f"{lab}#{k}")
    return np.asarray(labels)


def _as_entries(entries) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` or a sequence of ``(i, j)`` pairs -> two int arrays."""
    if isinstance(entries, tuple) and len(entries) == 2 and np.ndim(entries[0]) == 1:
        rows, cols = entries
    else:
        arr = np.asarray(entries)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError("entries must be (rows, cols) arrays or a sequence of (i, j) pairs")
        rows, cols = arr[:, 0], arr[:, 1]
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(
            f"entries: rows {rows.shape} and cols {cols.shape} must be 1-D of equal length"
        )
    if rows.size and (rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu"):
        if not (np.all(rows == np.round(rows)) and np.all(cols == np.round(cols))):
            raise ValueError("entries must be integer (row, col) indices")
    return rows.astype(np.int64), cols.astype(np.int64)


def _check_in_shape(rows, cols, shape):
    if shape is None:
        return
    m1, m2 = shape
    bad = (rows < 0) | (rows >= m1) | (cols < 0) | (cols >= m2)
    if np.any(bad):
        k = int(np.argmax(bad))
        raise ValueError(
            f"entries: ({rows[k]}, {cols[k]}) at position {k} is outside the {m1} x {m2} matrix"
        )


def default_entries(fit, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fit's tracked entries (``track_rows``, ``track_cols``) or, where it has none,
    ``8`` distinct entries drawn uniformly from the matrix with ``default_rng(seed)``."""
    tr, tc = getattr(fit, "track_rows", None), getattr(fit, "track_cols", None)
    if tr is not None and tc is not None:
        return np.asarray(tr, np.int64), np.asarray(tc, np.int64)
    m1, m2 = fit.shape
    num = min(_DEFAULT_NUM_TRACK, m1 * m2)
    keys = np.sort(np.random.default_rng(seed).choice(m1 * m2, size=num, replace=False))
    return keys // m2, keys % m2


def _add_factor_quantities(post: dict, sv: np.ndarray) -> None:
    post["theta_sv"] = sv
    post["theta_fro"] = np.sqrt(np.sum(sv**2, axis=-1))
    post["eff_rank"] = effective_rank(sv)


def _add_noise_sd(post: dict, fit, kind: str, num_draws: int, seed: int) -> None:
    """``noise_sd = 1 / sqrt(tau)`` per draw (data scale) for a likelihood that learns
    its noise: MCMC and guide draws of tau; VB: ``num_draws`` draws from ``q(tau)``
    (Gamma(shape, rate)) with ``default_rng([seed, 1])``, apart from the other draws."""
    lik = getattr(_info(fit), "likelihood", None)
    if not getattr(lik, "learned", False) or not post:
        return
    tau = None
    if kind == "mcmc":
        tau = fit.samples.get("tau")
    elif kind == "svi":
        src = fit.draws if "tau" in (fit.draws or {}) else (fit.point or {})
        tau = None if src.get("tau") is None else np.reshape(src["tau"], (1, -1))
    elif kind == "vb" and "shape" in (fit.q_noise or {}):
        q = fit.q_noise
        rng = np.random.default_rng([seed, 1])
        tau = rng.gamma(float(q["shape"]), 1.0 / float(q["rate"]), size=(1, num_draws))
    if tau is None:
        return
    tau = np.asarray(tau, np.float64)
    lead = next(iter(post.values())).shape[:2]
    if tau.shape == lead:
        post["noise_sd"] = 1.0 / np.sqrt(tau)


def _add_gamma(post: dict, gamma: np.ndarray) -> None:
    post["gamma"] = gamma
    post["gamma_sorted"] = -np.sort(-gamma, axis=-1)


#: the factors' sides in the prior's state names (``mu_M``, ``Lambda_N``, ...)
_SIDES = ("M", "N")


def _add_hyper_summaries(
    post: dict, draws: dict, lead: tuple[int, int], coords: dict[str, tuple[str, Any]]
) -> None:
    """The small, rotation-invariant summaries of the stored hyper-parameter draws: the
    biases' variances (``bias_var`` (bias): row, col), a Normal-Wishart state's
    ``cov_eig`` (side, h), the eigenvalues of ``Lambda^{-1}`` (decreasing), and
    ``mu_norm`` (side), ``||mu||``; learned cut points ``cuts``.  ``lead``: the (chain,
    draw) axes of the posterior; draws without them are left out.  Adds the ``bias`` and
    ``side`` coordinates to ``coords``."""

    def get(name):
        v = draws.get(name)
        if v is None:
            return None
        v = np.asarray(v)
        return v if v.ndim >= 2 and v.shape[:2] == lead else None

    bias = [(label, get(f"{label}_bias_var")) for label in ("row", "col")]
    bias = [(label, v) for label, v in bias if v is not None and v.ndim == 2]
    if bias:
        post["bias_var"] = np.stack([np.asarray(v, np.float64) for _, v in bias], axis=-1)
        coords["bias"] = ("bias", np.array([label for label, _ in bias]))
    lam = [(side, get(f"Lambda_{side}"), get(f"mu_{side}")) for side in _SIDES]
    lam = [(side, L, mu) for side, L, mu in lam if L is not None and L.ndim == 4]
    if lam:
        # eigenvalues of the precision, increasing -> of the covariance, decreasing
        eig = [1.0 / np.linalg.eigvalsh(np.asarray(L, np.float64)) for _, L, _ in lam]
        post["cov_eig"] = np.stack(eig, axis=-2)
        coords["side"] = ("side", np.array([side for side, _, _ in lam]))
        if all(mu is not None for _, _, mu in lam):
            post["mu_norm"] = np.stack(
                [np.linalg.norm(np.asarray(mu, np.float64), axis=-1) for _, _, mu in lam], axis=-1
            )
    cuts = get("cuts")
    if cuts is not None and cuts.ndim == 3:
        post["cuts"] = cuts


def _extra_draws(fit, kind: str, post: dict) -> dict[str, np.ndarray]:
    """The stored draws that :func:`to_arviz` adds on request (``var_names``, ``full``):
    each draw the fit holds that is not in the default posterior (per-row biases, the
    factors ``M`` and ``N``, ``tau``, a Normal-Wishart state's ``mu_M``, ``Lambda_M``,
    ...), aligned with the posterior's (chain, draw) axes.  Views of the fit's arrays:
    nothing is computed here."""
    if kind == "mcmc":
        lead = next(iter(post.values())).shape[:2]
        return {
            k: np.asarray(v)
            for k, v in fit.samples.items()
            if k not in post and np.ndim(v) >= 2 and np.shape(v)[:2] == lead
        }
    if kind == "svi":
        S = next(iter(post.values())).shape[1]
        return {
            k: np.asarray(v)[None]
            for k, v in (fit.draws or {}).items()
            if k not in post and np.ndim(v) >= 1 and np.shape(v)[0] == S
        }
    return {}


# --------------------------------------------------------------------------- per method
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


def active_threshold(fit, gamma=None) -> float:
    """The threshold ``t`` on gamma_h of an "active" column: the prior's
    :meth:`~bmczoo.priors.Prior.active_threshold` where it has one, else 1% of the largest
    posterior mean of ``gamma`` (draws (..., K), default the fit's)."""
    prior = _prior_of(fit)
    t = prior.active_threshold() if prior is not None else None
    if t is not None:
        return float(t)
    if gamma is None:
        raise ValueError("the fit has no gamma")
    g = np.asarray(gamma, np.float64)
    return 0.01 * float(np.max(np.mean(g.reshape(-1, g.shape[-1]), axis=0)))


def num_active_draws(fit, draws: dict, threshold: float | None = None) -> np.ndarray:
    """``sum_h P(gamma_h > t | draw)`` for every draw (the draws' leading axes): the
    number of active columns (an integer count where gamma is drawn)."""
    from ..priors.base import indicator_above

    t = active_threshold(fit, draws.get("gamma")) if threshold is None else float(threshold)
    prior = _prior_of(fit)
    prob_above = prior.prob_above if prior is not None else indicator_above
    return np.sum(np.asarray(prob_above(draws, t), np.float64), axis=-1)


def _mcmc_posterior(
    fit, entries, track_index, explicit: bool, coords: dict
) -> dict[str, np.ndarray]:
    """The default posterior group of an MCMC fit: gamma, theta at the entries, the factor
    quantities and the summaries of the hyper-parameters (:func:`_add_hyper_summaries`)."""
    s = fit.samples
    post: dict[str, np.ndarray] = {}
    if "gamma" in s:
        _add_gamma(post, np.asarray(s["gamma"]))
        if np.ndim(s["gamma"]) == 3:  # (chain, draw, K)
            post["num_active"] = num_active_draws(fit, s)
    theta = _mcmc_theta(s, entries, track_index, explicit)
    if theta is not None:
        post["theta"] = theta
    if "theta_sv" in s:
        _add_factor_quantities(post, np.asarray(s["theta_sv"], np.float64))
    elif "M" in s and "N" in s:
        _add_factor_quantities(post, theta_singular_values(s["M"], s["N"]))
    if not post:
        raise ValueError("the fit holds no draws of gamma or theta")
    _add_hyper_summaries(post, s, next(iter(post.values())).shape[:2], coords)
    return post


def _kept_iterations_of(fit) -> np.ndarray | None:
    """The sweeps (1-based) whose draws an MCMC fit kept, from its settings (None when the
    settings do not say)."""
    keys = ("num_warmup", "num_samples", "thinning")
    values = [_setting(fit, k) for k in keys]
    if any(v is None for v in values):
        return None
    return kept_iterations(*(int(v) for v in values))


def _mcmc_traces(fit, C: int, D: int) -> tuple[dict, dict]:
    """``(sample_stats, convergence)`` of an MCMC fit with C chains of D kept draws: the
    RMSE traces (per sweep, and at the kept sweeps) and NumPyro's extra fields."""
    stats: dict[str, np.ndarray] = {}
    conv: dict[str, np.ndarray] = {}
    rmse_draw = np.asarray(getattr(fit, "rmse_draw", np.zeros((C, 0))))
    rmse_mean = np.asarray(getattr(fit, "rmse_mean", np.zeros((C, 0))))
    if rmse_draw.size:
        conv["rmse_draw"] = rmse_draw.reshape(C, -1)
        conv["rmse_mean"] = rmse_mean.reshape(C, -1)
        it = _kept_iterations_of(fit)
        T = conv["rmse_draw"].shape[1]
        if it is not None and it.size == D and it.size and it[-1] <= T:
            stats["rmse"] = conv["rmse_draw"][:, it - 1]
            stats["rmse_mean"] = conv["rmse_mean"][:, it - 1]
    mcmc = getattr(fit, "mcmc", None)
    if mcmc is not None:
        try:
            extra = mcmc.get_extra_fields(group_by_chain=True)
        except AssertionError:  # NumPyro: `run` was not called, no states
            extra = {}
        for k, v in extra.items():
            v = np.asarray(v)
            if v.ndim >= 2 and v.shape[:2] == (C, D):
                stats[k] = v
    return stats, conv


def _mcmc_arrays(fit, entries, track_index, explicit, coords):
    post = _mcmc_posterior(fit, entries, track_index, explicit, coords)
    C, D = next(iter(post.values())).shape[:2]
    stats, conv = _mcmc_traces(fit, C, D)
    return post, stats, conv


def _vb_q_gamma(fit) -> dict:
    """The parameters of ``q(gamma)`` of a VB fit as float64 numpy arrays (``inv_mean`` and
    those of its prior's :meth:`~bmczoo.priors.Prior.vb_update`)."""
    return {k: np.asarray(v, np.float64) for k, v in fit.q_gamma.items()}


def _vb_gamma_draws(fit, num_draws: int, rng) -> np.ndarray | None:
    """Draws (num_draws, K) from ``q(gamma)``: the prior's
    :meth:`~bmczoo.priors.Prior.q_sample`; None when the fit records no prior or its
    prior has no column scales."""
    prior = _prior_of(fit)
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


def vb_theta_moments(fit, rows, cols) -> tuple[np.ndarray, np.ndarray, bool]:
    """Mean and variance of ``theta_ij`` under the mean-field q (model scale).

    ``theta_ij = M_i^T N_j``: mean ``m_i^T n_j``, variance ``m_i^T W_j m_i + n_j^T V_i n_j + tr(V_i W_j)`` (full
    covariances when the fit keeps its state; with diagonals only,
    ``sum_h m_ih^2 W_jhh + n_jh^2 V_ihh + V_ihh W_jhh``).  Returns (mean, var, full).

    Parameters
    ----------
    fit : VBFit
        A variational fit.
    rows, cols : array_like of int, shape (P,)
        The entries.
    """
    m = np.asarray(fit.m, np.float64)[rows]
    n = np.asarray(fit.n, np.float64)[cols]
    mean = np.sum(m * n, axis=-1)
    cov = _vb_covariances(fit)
    if cov is not None:
        V, W = cov[0][rows], cov[1][cols]
        var = (
            np.einsum("ek,ekl,el->e", m, W, m)
            + np.einsum("ek,ekl,el->e", n, V, n)
            + np.einsum("ekl,elk->e", V, W)
        )
        return mean, var, True
    Vd = np.asarray(fit.V_diag, np.float64)[rows]
    Wd = np.asarray(fit.W_diag, np.float64)[cols]
    var = np.sum(m**2 * Wd + n**2 * Vd + Vd * Wd, axis=-1)
    return mean, var, False


def _vb_arrays(fit, entries, num_draws, rng):
    post: dict[str, np.ndarray] = {}
    g = _vb_gamma_draws(fit, num_draws, rng)
    if g is not None:
        _add_gamma(post, g[None])
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
    _add_factor_quantities(post, sv[None])
    conv = {"elbo": np.asarray(fit.elbo, np.float64)[None]}
    rt = np.asarray(getattr(fit, "rmse_trace", np.zeros(0)), np.float64)
    if rt.size:
        conv["rmse"] = rt[None]
    return post, {}, conv, full


def _svi_arrays(fit, entries, coords):
    d = fit.draws
    post: dict[str, np.ndarray] = {}
    if "gamma" in d:
        _add_gamma(post, np.asarray(d["gamma"])[None])
    rows, cols = entries
    if "M" in d and "N" in d:
        M, N = np.asarray(d["M"]), np.asarray(d["N"])
        if rows.size:
            post["theta"] = np.sum(M[:, rows] * N[:, cols], axis=-1)[None]
        _add_factor_quantities(post, theta_singular_values(M, N)[None])
    if post:
        _add_hyper_summaries(
            post,
            {k: np.asarray(v)[None] for k, v in d.items()},
            next(iter(post.values())).shape[:2],
            coords,
        )
    conv = {"loss": np.asarray(getattr(fit, "losses", np.zeros(0)), np.float64)[None]}
    if not conv["loss"].size:
        conv = {}
    return post, {}, conv


# --------------------------------------------------------------------------- predictive groups
def _ll_ratings(fit, log_likelihood):
    """The ratings (RatingData) of the log-likelihood groups."""
    from ..data import RatingData

    if log_likelihood is True:
        rows, cols = getattr(fit, "seen_rows", None), getattr(fit, "seen_cols", None)
        values = getattr(fit, "seen_values", None)
        if rows is None or values is None:
            raise ValueError(
                "this fit does not hold its training ratings (a loaded fit, or one not made by "
                "bmc.fit): pass them, to_arviz(log_likelihood=train)"
            )
        return RatingData(rows, cols, values, shape=tuple(fit.shape))
    if not isinstance(log_likelihood, RatingData):
        raise TypeError(
            f"log_likelihood must be True, False or a RatingData of ratings, got "
            f"{type(log_likelihood).__name__}"
        )
    if tuple(log_likelihood.shape) != tuple(fit.shape):
        raise ValueError(
            f"log_likelihood: the ratings have shape {log_likelihood.shape}, the fit {tuple(fit.shape)}"
        )
    return log_likelihood


def _check_bound(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _rating_subsample(n: int, max_ratings: int, seed: int) -> np.ndarray:
    """Positions of the ratings kept: all, or ``max_ratings`` drawn uniformly without
    replacement with ``default_rng(seed)`` (sorted): a function of ``n`` and the seed."""
    if n <= max_ratings:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_ratings, replace=False))


def _draw_step(C: int, D: int, max_draws: int) -> int:
    return max(1, -(-C * D // max_draws))


def _factor_samples(fit) -> dict:
    """The MCMC draws in which the factor draws align with the other sites: the
    ``factor_samples`` of a fit loaded with thinned factor draws, else ``samples``."""
    fs = getattr(fit, "factor_samples", None)
    return fit.samples if fs is None else fs


def _mcmc_theta_tau(fit, rows, cols, max_draws):
    """theta (C, D', E) at the ratings (centred scale, biases included) and tau (C, D') or
    None, over every ``step``-th kept draw."""
    from ..inference import outputs as out

    s = _factor_samples(fit)
    if "M" in s and "N" in s:
        C, D = np.shape(s["M"])[:2]
        step = _draw_step(C, D, max_draws)
        K = np.shape(s["M"])[-1]
        src = {
            k: np.asarray(s[k])[:, ::step]
            for k in ("M", "N", "row_bias", "col_bias", "tau")
            if k in s
        }
        d = out.flat_draws(src, K)
        theta = np.empty((d["M"].shape[0], rows.size))
        for p0, p1, t in out.draw_blocks(d, rows, cols):
            theta[:, p0:p1] = t
        Dk = src["M"].shape[1]
        theta = theta.reshape(C, Dk, rows.size)
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
        step = _draw_step(C, D, max_draws)
        theta = np.asarray(th[:, ::step][..., tidx], np.float64)
        source = "tracked entries"
    tau = None
    if "tau" in s and getattr(getattr(_info(fit), "likelihood", None), "learned", True):
        tau = np.asarray(s["tau"], np.float64).reshape(C, -1)[:, ::step]
    return theta, tau, {"draw_step": step, "theta_source": source}


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


def _svi_theta_tau(fit, rows, cols, max_draws):
    from ..inference import outputs as out

    src = fit.draws if fit.draws and "M" in fit.draws else (fit.point or {})
    if "M" not in src:
        raise ValueError("the fit holds no draws of the factors M, N")
    K = np.shape(src["M"])[-1]
    d = out.flat_draws(src, K)
    S = d["M"].shape[0]
    step = _draw_step(1, S, max_draws)
    d = {k: (None if v is None else v[::step]) for k, v in d.items()}
    theta = np.empty((d["M"].shape[0], rows.size))
    for p0, p1, t in out.draw_blocks(d, rows, cols):
        theta[:, p0:p1] = t
    tau = None
    if d["tau"] is not None and getattr(getattr(_info(fit), "likelihood", None), "learned", True):
        tau = d["tau"][None]
    return (
        theta[None],
        tau,
        {"draw_step": step, "theta_source": "draws from the fitted guide (one chain)"},
    )


def _cut_draws(fit, kind: str, lik, shape, step: int) -> np.ndarray:
    """Cut points (chain, draw, L-1) matching theta's draws: fixed, MCMC draws (every
    ``step``-th), SVI draws, or VB's point estimates."""
    fixed = lik.fixed_cuts()
    if fixed is not None:
        return np.broadcast_to(np.asarray(fixed, np.float64), tuple(shape) + (len(fixed),))
    if kind == "mcmc":
        return np.asarray(_factor_samples(fit)["cuts"], np.float64)[:, ::step]
    if kind == "vb":
        return np.broadcast_to(
            np.asarray(fit.q_noise["cuts"], np.float64).reshape(-1),
            tuple(shape) + (lik.num_levels - 1,),
        )
    src = fit.draws if "cuts" in (fit.draws or {}) else fit.point
    return np.asarray(src["cuts"], np.float64).reshape(1, -1, lik.num_levels - 1)[:, ::step]


def _add_level_groups(fa: FitArrays, fit, kind: str, lik, theta, y, step: int, rng) -> None:
    """``log_likelihood`` (log P(Y = y | theta, c)) and ``posterior_predictive`` (a level
    drawn from those probabilities) of a probit / ordered-probit fit."""
    from ..inference.levels import level_log_probs_np

    cuts = _cut_draws(fit, kind, lik, theta.shape[:2], step)
    logp = level_log_probs_np(theta, cuts[..., None, :])  # (chain, draw, rating, L)
    idx = lik.level_index(y)
    fa.groups["log_likelihood"] = {
        "y": np.take_along_axis(logp, idx[None, None, :, None], axis=-1)[..., 0]
    }
    cdf = np.cumsum(np.exp(logp), axis=-1)
    u = rng.random(theta.shape)[..., None]
    pick = np.minimum(np.sum(cdf < u * cdf[..., -1:], axis=-1), lik.num_levels - 1)
    fa.groups["posterior_predictive"] = {"y": np.asarray(lik.level_values, np.float64)[pick]}


def _add_predictive_groups(
    fa: FitArrays, fit, kind: str, log_likelihood, *, num_draws, seed, max_draws, max_ratings
) -> None:
    """Add ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` to ``fa``."""
    max_draws = _check_bound("max_draws", max_draws)
    max_ratings = _check_bound("max_ratings", max_ratings)
    data = _ll_ratings(fit, log_likelihood)
    pos = _rating_subsample(data.n, max_ratings, seed)
    rows = np.asarray(data.rows, np.int64)[pos]
    cols = np.asarray(data.cols, np.int64)[pos]
    y = np.asarray(data.values, np.float64)[pos]
    rng = np.random.default_rng([int(seed), 13])
    if kind == "mcmc":
        theta, tau, how = _mcmc_theta_tau(fit, rows, cols, max_draws)
    elif kind == "vb":
        theta, tau, how = _vb_theta_tau(fit, rows, cols, num_draws, max_draws, rng)
    else:
        theta, tau, how = _svi_theta_tau(fit, rows, cols, max_draws)
    offset = _offset_of(fit)
    lik = getattr(_info(fit), "likelihood", None)
    if lik is not None and lik.latent:
        _add_level_groups(fa, fit, kind, lik, theta, y, how["draw_step"], rng)
        noise = f"{lik.name} likelihood (levels {list(lik.level_values)})"
    elif tau is None:
        fixed = getattr(_info(fit), "tau", None)
        if fixed is None:
            raise ValueError("the fit records no noise precision tau")
        var = np.full(theta.shape[:2] + (1,), 1.0 / float(fixed))
        noise = f"fixed tau = {float(fixed):.6g} of the tempered likelihood"
    else:
        var = (1.0 / np.asarray(tau, np.float64))[..., None]
        noise = "the draws of the learned tau"
    if not (lik is not None and lik.latent):
        mean = theta + offset
        fa.groups["log_likelihood"] = {
            "y": -0.5 * (np.log(2.0 * np.pi * var) + (y - mean) ** 2 / var)
        }
        fa.groups["posterior_predictive"] = {
            "y": mean + np.sqrt(var) * rng.standard_normal(mean.shape)
        }
    fa.groups["observed_data"] = {"y": y}
    fa.dims["y"] = ("rating",)
    fa.coords["rating"] = ("rating", pos)
    fa.coords["rating_row"] = ("rating", rows)
    fa.coords["rating_col"] = ("rating", cols)
    info = {
        "num_ratings_total": int(data.n),
        "num_ratings": int(pos.size),
        "max_ratings": max_ratings,
        "max_draws": max_draws,
        "rating_subsample": (
            "all ratings"
            if pos.size == data.n
            else f"uniform without replacement, default_rng({int(seed)})"
        ),
        "noise": noise,
        "scale": "data (offset added, unclipped)",
        **how,
    }
    for g in ("log_likelihood", "posterior_predictive", "observed_data"):
        fa.group_attrs[g] = dict(info)


# --------------------------------------------------------------------------- public
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


def _resolve_entries(fit, kind: str, entries, seed: int):
    """``(rows, cols, track_index)``: the entries of theta to convert and, for MCMC draws of
    theta, their positions among the tracked entries (None: computed from the factors)."""
    if entries is not None:
        rows, cols = _as_entries(entries)
        _check_in_shape(rows, cols, getattr(fit, "shape", None))
        return rows, cols, (_tracked_index(fit, rows, cols) if kind == "mcmc" else None)
    if kind == "mcmc" and "theta" in fit.samples:
        E = np.asarray(fit.samples["theta"]).shape[-1]
        if getattr(fit, "track_rows", None) is not None and len(fit.track_rows) == E:
            rows, cols = default_entries(fit, seed)
        else:  # draws of theta without their entries: rows and cols unknown (-1)
            rows = cols = np.full(E, -1, np.int64)
        return rows, cols, np.arange(E)
    rows, cols = default_entries(fit, seed)
    return rows, cols, None


def _base_attrs(fit, kind: str) -> dict[str, Any]:
    """The attributes every group gets, from the fit's typed info."""
    K = _K_of(fit)
    return {
        "method": _method_of(fit),
        "prior": _prior_name(fit),
        "K": -1 if K is None else K,
        "theta_offset": _offset_of(fit),
        "theta_scale": "model (centred): add theta_offset for the original scale",
    }


def _method_arrays(
    fit, kind: str, rows, cols, track_index, explicit: bool, num_draws: int, seed: int, coords: dict
):
    """``(posterior, sample_stats, convergence, attrs)`` of the fit's family; ``attrs``: the
    representation and the family's own settings."""
    if kind == "mcmc":
        post, stats, conv = _mcmc_arrays(fit, (rows, cols), track_index, explicit, coords)
        attrs: dict[str, Any] = {"representation": "mcmc draws"}
        for k in ("num_warmup", "num_samples", "thinning"):
            if _setting(fit, k) is not None:
                attrs[k] = int(_setting(fit, k))
        return post, stats, conv, attrs
    if kind == "vb":
        num_draws = int(num_draws)
        if num_draws < 1:
            raise ValueError(f"num_draws must be >= 1, got {num_draws}")
        post, stats, conv, full = _vb_arrays(
            fit, (rows, cols), num_draws, np.random.default_rng(seed)
        )
        attrs = {
            "representation": "independent draws from the variational posterior q, one chain",
            "num_variational_draws": num_draws,
            "seed": int(seed),
            "vb_covariance": "full" if full else "diagonal",
        }
        return post, stats, conv, attrs
    post, stats, conv = _svi_arrays(fit, (rows, cols), coords)
    return post, stats, conv, {"representation": "draws from the fitted guide, one chain"}


#: dims of the trailing axes of the posterior variables (``i``/``j``: a row/column of Y)
_DIMS = {
    "gamma": ("h",),
    "gamma_sorted": ("h",),
    "theta_sv": ("h",),
    "theta": ("entry",),
    "bias_var": ("bias",),
    "cov_eig": ("side", "h"),
    "mu_norm": ("side",),
    "cuts": ("cut",),
    "M": ("i", "h"),
    "N": ("j", "h"),
    "row_bias": ("i",),
    "col_bias": ("j",),
}


def _state_dims(post: dict, K: int) -> dict[str, tuple[str, ...]]:
    """Dims of other draws whose trailing axes all have length K (``mu_M``: ``h``;
    ``Lambda_M``: ``h``, ``h2``); the rest keep ArviZ's default names."""
    out = {}
    for name, arr in post.items():
        trail = np.shape(arr)[2:]
        if name not in _DIMS and trail and K and all(n == K for n in trail):
            out[name] = tuple("h" if i == 0 else f"h{i + 1}" for i in range(len(trail)))
    return out


def _assemble(post, stats, conv, rows, cols, attrs, K_info: int | None, coords) -> FitArrays:
    """The :class:`FitArrays` of the groups: dims and coordinates (``h``, ``entry`` with
    ``row``/``col``, ``i``, ``j`` and the ``coords`` found with the variables)."""
    if not post:
        raise ValueError("the fit has no posterior quantity to convert")
    groups = {"posterior": post}
    if stats:
        groups["sample_stats"] = stats
    if conv:
        groups["convergence"] = conv
    K = next(
        (post[v].shape[-1] for v in ("gamma", "theta_sv", "cov_eig") if v in post), K_info or 0
    )
    dims = {**_DIMS, **_state_dims(post, K)}
    coords = {"h": ("h", np.arange(K)), **coords}
    for extra in sorted({d for ds in dims.values() for d in ds if d.startswith("h") and d != "h"}):
        coords[extra] = (extra, np.arange(K))
    for name, dim in (
        ("M", "i"),
        ("N", "j"),
        ("row_bias", "i"),
        ("col_bias", "j"),
        ("cuts", "cut"),
    ):
        if name in post and dim not in coords:
            coords[dim] = (dim, np.arange(np.shape(post[name])[2]))
    var_attrs = {}
    if "theta" in post:
        coords["entry"] = ("entry", entry_labels(rows, cols))
        coords["row"] = ("entry", rows)
        coords["col"] = ("entry", cols)
        var_attrs["theta"] = {
            "scale": "model (centred): add theta_offset for the data's scale",
            "theta_offset": attrs.get("theta_offset", 0.0),
        }
    return FitArrays(groups=groups, dims=dims, coords=coords, attrs=attrs, var_attrs=var_attrs)


def _default_posterior(fit, kind: str, entries, num_draws: int, seed: int):
    """``(posterior, sample_stats, convergence, attrs, coords, rows, cols)``: the default
    contents of :func:`to_arviz` (module docstring)."""
    rows, cols, track_index = _resolve_entries(fit, kind, entries, seed)
    coords: dict[str, tuple[str, Any]] = {}
    post, stats, conv, attrs = _method_arrays(
        fit, kind, rows, cols, track_index, entries is not None, num_draws, seed, coords
    )
    _add_noise_sd(post, fit, kind, num_draws, seed)
    return post, stats, conv, attrs, coords, rows, cols


def _check_var_names(var_names) -> list[str]:
    if var_names is None:
        return []
    if isinstance(var_names, str):
        return [var_names]
    names = list(var_names)
    bad = [v for v in names if not isinstance(v, str)]
    if bad:
        raise TypeError(f"var_names must be variable names (str), got {bad!r}")
    return names


def _add_extras(post: dict, fit, kind: str, var_names: list[str], full: bool) -> None:
    """Add the requested stored draws (:func:`_extra_draws`) to the default posterior;
    ``ValueError`` naming the unknown names and those available."""
    if not var_names and not full:
        return
    extra = _extra_draws(fit, kind, post)
    unknown = [v for v in var_names if v not in extra and v not in post]
    if unknown:
        raise ValueError(
            f"to_arviz: no variable {unknown} in this fit; the default posterior holds "
            f"{sorted(post)}, var_names= can add {sorted(extra) or 'nothing'} "
            f"(full=True adds them all)"
        )
    for name in extra if full else var_names:
        if name not in post:
            post[name] = extra[name]


def extra_var_names(fit) -> list[str]:
    """The names :func:`to_arviz` adds on request (``var_names=``; ``full=True`` adds
    them all): the stored draws that are not in its default posterior, e.g. a Gibbs fit's
    ``row_bias``, ``col_bias`` (one value per row / column of Y), ``M``, ``N`` (the factor
    draws, with ``store_factors``), ``tau``, ``row_bias_var``, ``col_bias_var`` and a
    Normal-Wishart state's ``mu_M``, ``Lambda_M``, ``mu_N``, ``Lambda_N``.  Sorted; empty
    for a VB fit (its posterior is drawn from q).

    Parameters
    ----------
    fit : GibbsFit, VBFit or SVIFit (or an object with their attributes)
    """
    kind = fit_kind(fit)
    if kind == "vb":
        return []
    post = _default_posterior(fit, kind, None, 1, 0)[0]
    return sorted(_extra_draws(fit, kind, post))


def fit_arrays(
    fit,
    *,
    var_names=None,
    full: bool = False,
    entries=None,
    num_draws: int = 500,
    seed: int = 0,
    log_likelihood=False,
    max_draws: int = _MAX_DRAWS,
    max_ratings: int = _MAX_RATINGS,
) -> FitArrays:
    """The arrays behind :func:`to_arviz` (see the module docstring for the variables).

    Parameters
    ----------
    fit : GibbsFit, VBFit or SVIFit (or an object with their attributes)
    var_names : str or list of str, optional
        Variables to add to the default posterior: stored draws such as ``row_bias``,
        ``col_bias``, ``M``, ``N``, ``tau``, ``Lambda_M`` (:func:`extra_var_names` lists
        those of a fit; names already in the default posterior are accepted).  An unknown
        name raises ``ValueError`` listing the available ones.
    full : bool
        Add every stored draw (all of :func:`extra_var_names`).
    entries : (rows, cols) or sequence of (i, j), optional
        Entries of ``theta`` to include; default the fit's tracked entries (VB/SVI fits
        without tracked entries: 8 entries drawn uniformly with ``default_rng(seed)``).
        Gibbs/NUTS: entries must be tracked, or the factor draws stored.
    num_draws, seed : int
        VB only: number of draws from ``q`` and the seed of ``numpy.random.default_rng``
        (the seed also draws the rating subsample and the predictive replicates).
    log_likelihood : bool or RatingData
        Add the ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups
        of the training ratings (``True``) or of the given ratings (module docstring).
    max_draws, max_ratings : int
        Bounds of those groups (module docstring).

    Returns
    -------
    FitArrays
    """
    kind = fit_kind(fit)
    var_names = _check_var_names(var_names)
    post, stats, conv, attrs, coords, rows, cols = _default_posterior(
        fit, kind, entries, num_draws, seed
    )
    post = {
        k: post[k]
        for k in sorted(
            post, key=lambda k: DEFAULT_VARS.index(k) if k in DEFAULT_VARS else len(DEFAULT_VARS)
        )
    }
    if post:
        _add_extras(post, fit, kind, var_names, bool(full))
    if "theta" in post:
        attrs["theta_offset"] = _offset_of(fit)
    fa = _assemble(
        post, stats, conv, rows, cols, {**_base_attrs(fit, kind), **attrs}, _K_of(fit), coords
    )
    if log_likelihood is not False and log_likelihood is not None:
        _add_predictive_groups(
            fa,
            fit,
            kind,
            log_likelihood,
            num_draws=num_draws,
            seed=seed,
            max_draws=max_draws,
            max_ratings=max_ratings,
        )
    return fa


def _arviz_major() -> int:
    import arviz as az

    try:
        return int(str(az.__version__).split(".")[0])
    except ValueError:  # pragma: no cover - unusual version strings
        return 0


def arrays_to_arviz(fa: FitArrays):
    """Convert :class:`FitArrays` into ArviZ data: ``InferenceData`` with ArviZ 0.x,
    ``xarray.DataTree`` with ArviZ >= 1 (the edge: the only version-dependent code)."""
    import xarray as xr

    datasets = {}
    for group, variables in fa.groups.items():
        lead = _LEAD.get(group, ("chain", "draw"))
        data_vars = {}
        used = set(lead)
        for name, arr in variables.items():
            arr = np.asarray(arr)
            trail = fa.dims.get(name, tuple(f"{name}_dim_{k}" for k in range(arr.ndim - 2)))
            data_vars[name] = (lead + tuple(trail), arr)
            used.update(trail)
        shape0 = next(iter(variables.values())).shape
        coords = {}
        if lead:
            coords[lead[0]] = np.arange(shape0[0])
            coords[lead[1]] = (
                np.arange(1, shape0[1] + 1) if lead[1] == "iteration" else np.arange(shape0[1])
            )
        for cname, (dim, values) in fa.coords.items():
            if dim in used:
                coords[cname] = (dim, np.asarray(values))
        ds = xr.Dataset(
            data_vars, coords=coords, attrs={**fa.attrs, **fa.group_attrs.get(group, {})}
        )
        for name, vattrs in fa.var_attrs.items():
            if name in ds.data_vars:
                ds[name].attrs.update(vattrs)
        datasets[group] = ds
    if _arviz_major() >= 1:  # pragma: no cover - exercised with ArviZ 1.x only
        return xr.DataTree.from_dict(datasets)
    import arviz as az

    return az.InferenceData(**datasets)


def to_arviz(
    fit,
    *,
    var_names=None,
    full: bool = False,
    entries=None,
    num_draws: int = 500,
    seed: int = 0,
    log_likelihood=False,
    max_draws: int = _MAX_DRAWS,
    max_ratings: int = _MAX_RATINGS,
):
    """ArviZ data for any fit (``InferenceData`` with ArviZ 0.x, ``DataTree`` with 1.x).

    By default the ``posterior`` group holds what one reads, a few small variables (see
    the module docstring): ``theta`` at the tracked entries, ``gamma``, ``gamma_sorted``
    and ``num_active`` (column-scale priors), ``cov_eig`` and ``mu_norm`` (Normal-Wishart),
    ``theta_sv``, ``theta_fro``, ``eff_rank``, ``noise_sd``, ``bias_var`` and ``cuts``,
    where the fit has them.  Per-row biases, the factor draws and full matrices come on
    request: ``var_names=["row_bias", "Lambda_M"]`` adds those stored draws
    (:func:`extra_var_names` lists them; an unknown name raises ``ValueError`` listing
    the available ones), ``full=True`` adds them all.  ``sample_stats`` (per kept draw)
    and ``convergence`` (per iteration: RMSE traces, ELBO, SVI loss); dims ``chain``,
    ``draw``, ``h``, ``entry`` (coordinates ``row``, ``col``), ``iteration``.  VB: draws
    from q with ``default_rng(seed)`` as one chain.

    ``log_likelihood=True`` (the training ratings) or a RatingData of ratings adds the
    ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups (variable
    ``y``, dim ``rating``) for ``az.loo``, ``az.waic``, ``az.compare`` and
    ``az.plot_ppc``, with at most ``max_ratings`` ratings and ``max_draws`` draws (a
    seeded subsample and a thinning; see :mod:`bmczoo.diagnostics.convert`).

    Parameters are those of :func:`fit_arrays`.
    """
    return arrays_to_arviz(
        fit_arrays(
            fit,
            var_names=var_names,
            full=full,
            entries=entries,
            num_draws=num_draws,
            seed=seed,
            log_likelihood=log_likelihood,
            max_draws=max_draws,
            max_ratings=max_ratings,
        )
    )


def from_numpyro(mcmc, *, fit=None, **kwargs):
    """``az.from_numpyro(mcmc, log_likelihood=False)`` plus the invariant quantities.

    For an ``MCMC`` run directly with :class:`~bmczoo.inference.ConjugateGibbs` or NUTS on
    :func:`bmczoo.models.matrix_completion`: NumPyro's conversion (all sampled sites, its
    own dims) to which ``gamma_sorted`` and, when ``M`` and ``N`` were collected,
    ``theta_sv``, ``theta_fro`` and ``eff_rank`` are added in the posterior.  ArviZ 0.x
    only (ArviZ 1.x moved the converter to ``arviz_base``).
    """
    import arviz as az

    kwargs.setdefault("log_likelihood", False)
    idata = az.from_numpyro(mcmc, **kwargs)
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    post = idata.posterior
    K = None
    if "gamma" in samples:
        g = samples["gamma"]
        K = g.shape[-1]
        post["gamma_sorted"] = (("chain", "draw", "h"), -np.sort(-g, axis=-1))
    if "M" in samples and "N" in samples:
        sv = theta_singular_values(samples["M"], samples["N"])
        K = sv.shape[-1]
        post["theta_sv"] = (("chain", "draw", "h"), sv)
        post["theta_fro"] = (("chain", "draw"), np.sqrt(np.sum(sv**2, axis=-1)))
        post["eff_rank"] = (("chain", "draw"), effective_rank(sv))
    if K is not None:
        post.coords["h"] = np.arange(K)
    return idata
