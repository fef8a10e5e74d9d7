"""Plain arrays to ArviZ data, knowing nothing of the result classes.

A fit hands over its quantities as a :class:`FitArrays` (numpy arrays with leading
``(chain, draw)`` or ``(chain, iteration)`` axes, their dimension names and coordinates);
:func:`arrays_to_arviz` turns that into an ArviZ ``InferenceData`` (ArviZ 0.x) or an
``xarray.DataTree`` (ArviZ 1.x), the only place that depends on the ArviZ version.  The
rotation- and label-invariant summaries computed from draws (sorted gamma, the singular
values of ``theta = M N^T``, its effective rank, the hyper-parameters' summaries) live
here too, as functions of arrays, so that every layer above can reach them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = [
    "FitArrays",
    "DEFAULT_VARS",
    "INVARIANT_VARS",
    "arrays_to_arviz",
    "assemble",
    "theta_singular_values",
    "effective_rank",
    "entry_labels",
    "add_gamma",
    "add_factor_quantities",
    "add_hyper_summaries",
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


def add_factor_quantities(post: dict, sv: np.ndarray) -> None:
    post["theta_sv"] = sv
    post["theta_fro"] = np.sqrt(np.sum(sv**2, axis=-1))
    post["eff_rank"] = effective_rank(sv)


def add_gamma(post: dict, gamma: np.ndarray) -> None:
    post["gamma"] = gamma
    post["gamma_sorted"] = -np.sort(-gamma, axis=-1)


#: the factors' sides in the prior's state names (``mu_M``, ``Lambda_N``, ...)
SIDES = ("M", "N")


def add_hyper_summaries(
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
    lam = [(side, get(f"Lambda_{side}"), get(f"mu_{side}")) for side in SIDES]
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


#: dims of the trailing axes of the posterior variables (``i``/``j``: a row/column of Y)
DIMS = {
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
        if name not in DIMS and trail and K and all(n == K for n in trail):
            out[name] = tuple("h" if i == 0 else f"h{i + 1}" for i in range(len(trail)))
    return out


def assemble(post, stats, conv, rows, cols, attrs, K_info: int | None, coords) -> FitArrays:
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
    dims = {**DIMS, **_state_dims(post, K)}
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
