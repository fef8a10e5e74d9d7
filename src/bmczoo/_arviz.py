"""Plain arrays to ArviZ data, knowing nothing of the result classes.

A fit hands over its quantities as a :class:`FitArrays` (numpy arrays with leading
``(chain, draw)`` or ``(chain, iteration)`` axes, their dimension names and coordinates);
:func:`arrays_to_arviz` turns that into an ArviZ ``InferenceData`` (ArviZ 0.x) or an
``xarray.DataTree`` (ArviZ 1.x).  This module is the only place that depends on the ArviZ
version: the containers (:func:`make_data`, :func:`group`), the statistics the package
reads (:func:`summary_table`, :func:`ess`, :func:`rhat`, :func:`autocorr`, :func:`kde`,
:func:`compare`) and the plots drawn into given axes (:func:`plot_trace`,
:func:`plot_autocorr`, :func:`plot_ppc`; ArviZ 1.x's plots make their own figures, so
there they are drawn with Matplotlib from ArviZ's statistics).  The
rotation- and label-invariant summaries computed from draws (sorted gamma, the singular
values of ``theta = M N^T``, its effective rank, the hyper-parameters' summaries) live
here too, as functions of arrays, so that every layer above can reach them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "FitArrays",
    "DEFAULT_VARS",
    "INVARIANT_VARS",
    "arrays_to_arviz",
    "arviz_major",
    "make_data",
    "group",
    "group_names",
    "replace_group",
    "summary_table",
    "ess",
    "rhat",
    "autocorr",
    "kde",
    "compare",
    "Loo",
    "loo",
    "from_numpyro",
    "plot_trace",
    "plot_autocorr",
    "plot_ppc",
    "scalar_labels",
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
    "context_lam": ("context_group",),
    "context_w": ("context_feature",),
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


@functools.cache
def arviz_major() -> int:
    """The major version of the installed ArviZ (0 or 1): the one switch of this module."""
    import arviz as az

    try:
        return int(str(az.__version__).split(".")[0])
    except ValueError:  # pragma: no cover - unusual version strings
        return 0


def make_data(datasets: dict):
    """ArviZ data of ``{group: xarray.Dataset}``: ``InferenceData`` (ArviZ 0.x) or
    ``xarray.DataTree`` (ArviZ >= 1)."""
    if arviz_major() >= 1:
        import xarray as xr

        return xr.DataTree.from_dict(datasets)
    import warnings

    import arviz as az

    with warnings.catch_warnings():
        # ArviZ < 0.20 warns on groups outside its scheme (``convergence`` is bmczoo's own)
        warnings.filterwarnings("ignore", message=".* group is not defined in the InferenceData")
        return az.InferenceData(**datasets)


def group(data, name: str = "posterior"):
    """A group of ArviZ data as an ``xarray.Dataset`` (``None`` when absent), whichever
    the container: ``InferenceData``, ``DataTree`` or already a ``Dataset`` (the posterior)."""
    import xarray as xr

    if isinstance(data, xr.Dataset):
        return data if name == "posterior" else None
    if isinstance(data, getattr(xr, "DataTree", ())):
        return data[name].to_dataset() if name in data.children else None
    return getattr(data, name, None)


def group_names(data) -> list[str]:
    """The names of the groups of ArviZ data (``InferenceData.groups()``, the children of
    a ``DataTree``)."""
    import xarray as xr

    if isinstance(data, getattr(xr, "DataTree", ())):
        return list(data.children)
    return list(data.groups())


def replace_group(data, name: str, ds):
    """``data`` with its group ``name`` set to the Dataset ``ds`` (in place where the
    container allows it; the data is returned)."""
    import xarray as xr

    if isinstance(data, getattr(xr, "DataTree", ())):
        data[name] = xr.DataTree(ds)
        return data
    setattr(data, name, ds)
    return data


def arrays_to_arviz(fa: FitArrays):
    """Convert :class:`FitArrays` into ArviZ data: ``InferenceData`` with ArviZ 0.x,
    ``xarray.DataTree`` with ArviZ >= 1.  The one converter of the package: every fit's
    ArviZ data (``fit.to_arviz``, the diagnostics) is made here."""
    import xarray as xr

    datasets = {}
    for grp, variables in fa.groups.items():
        lead = _LEAD.get(grp, ("chain", "draw"))
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
        ds = xr.Dataset(data_vars, coords=coords, attrs={**fa.attrs, **fa.group_attrs.get(grp, {})})
        for name, vattrs in fa.var_attrs.items():
            if name in ds.data_vars:
                ds[name].attrs.update(vattrs)
        datasets[grp] = ds
    return make_data(datasets)


# ------------------------------------------------------------------ statistics
#: the columns of ``summary_table`` (ArviZ 0.x's names and order, whatever the version)
SUMMARY_STATS = ("mean", "sd", "hdi_3%", "hdi_97%")
SUMMARY_DIAGNOSTICS = ("mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat")


def summary_table(post, var_names, kind: str = "all"):
    """``az.summary`` of the posterior Dataset ``post`` (unrounded): one row per scalar,
    labelled ``var[coord,...]`` by ArviZ, with ArviZ 0.x's columns (mean, sd, hdi_3%,
    hdi_97% of the 94% HDI, mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat) under either
    version.  Coordinates that are not dimensions (``row``, ``col`` on ``entry``) are
    dropped first: ArviZ 1.x refuses those not shared by every variable."""
    import arviz as az

    if kind not in ("all", "stats", "diagnostics"):
        raise ValueError(f"kind must be 'all', 'stats' or 'diagnostics', not {kind!r}")
    post = post[list(var_names)]
    post = post.drop_vars([c for c in post.coords if c not in post.dims])
    data = make_data({"posterior": post})
    if arviz_major() < 1:
        return az.summary(data, var_names=list(var_names), kind=kind, round_to="none")
    table = az.summary(
        data,
        var_names=list(var_names),
        kind=kind,
        ci_kind="hdi",
        ci_prob=0.94,
        round_to="none",
    )
    table = table.rename(columns={"hdi94_lb": "hdi_3%", "hdi94_ub": "hdi_97%"})
    cols = {"all": SUMMARY_STATS + SUMMARY_DIAGNOSTICS, "stats": SUMMARY_STATS}.get(
        kind, SUMMARY_DIAGNOSTICS
    )
    return table[[c for c in cols if c in table.columns]]


def _chain_draw(x):
    """A (chain, draw) array as ArviZ reads it: an array for ArviZ 0.x; a DataArray for
    ArviZ 1.x, whose array path has no default tail probability (its DataArray path takes
    the one its ``summary`` uses)."""
    x = np.asarray(x, np.float64)
    if arviz_major() < 1:
        return x
    import xarray as xr

    return xr.DataArray(x, dims=("chain", "draw"))


def ess(x, method: str = "bulk") -> float:
    """ArviZ's effective sample size of a (chain, draw) array."""
    import arviz as az

    return float(np.asarray(az.ess(_chain_draw(x), method=method)))


def rhat(x) -> float:
    """ArviZ's rank-normalised R-hat of a (chain, draw) array."""
    import arviz as az

    return float(np.asarray(az.rhat(_chain_draw(x))))


def autocorr(x) -> np.ndarray:
    """ArviZ's autocorrelation of a 1-D array, by lag (lag 0 first)."""
    x = np.asarray(x, np.float64)
    if arviz_major() >= 1:
        from arviz_stats.base import array_stats

        return np.asarray(array_stats.autocorr(x))
    import arviz as az

    return np.asarray(az.autocorr(x))


def kde(x) -> tuple[np.ndarray, np.ndarray]:
    """ArviZ's kernel density estimate of a 1-D array: (grid, density)."""
    x = np.asarray(x, np.float64).ravel()
    if arviz_major() >= 1:
        from arviz_stats.base import array_stats

        grid, pdf, _ = array_stats.kde(x)
    else:
        from arviz.stats.density_utils import kde as _kde

        grid, pdf = _kde(x)
    return np.asarray(grid), np.asarray(pdf)


def compare(datas: dict):
    """``az.compare`` of ``{name: ArviZ data}`` by PSIS-LOO, with ArviZ 0.x's columns
    (``rank``, ``elpd_loo``, ``p_loo``, ``elpd_diff`` >= 0 from the best, ``weight``,
    ``se``, ``dse``, then the version's others) under either version (ArviZ 1.x says
    ``elpd`` and ``p``, and counts ``elpd_diff`` <= 0), unrounded."""
    import arviz as az

    if arviz_major() < 1:
        import warnings

        with warnings.catch_warnings():
            # ArviZ 0.23 sorts in place, which pandas >= 3.1 deprecates
            warnings.filterwarnings("ignore", message="The inplace keyword in DataFrame.sort")
            return az.compare(datas)
    table = az.compare(datas, round_to="none").rename(columns={"elpd": "elpd_loo", "p": "p_loo"})
    # ArviZ 1.x's difference is to the best model (<= 0); ArviZ 0.x's is from it (>= 0)
    table["elpd_diff"] = -table["elpd_diff"]
    first = ["rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse"]
    return table[first + [c for c in table.columns if c not in first]]


class Loo(NamedTuple):
    """PSIS-LOO of ArviZ data, named alike under ArviZ 0.x and 1.x.

    Attributes
    ----------
    elpd_loo, se, p_loo : float
        The expected log pointwise predictive density, its standard error and the
        effective number of parameters.
    loo_i, pareto_k : numpy.ndarray or None
        Pointwise values (``pointwise=True``).
    result : object
        ArviZ's own result (``ELPDData``).
    """

    elpd_loo: float
    se: float
    p_loo: float
    loo_i: np.ndarray | None
    pareto_k: np.ndarray | None
    result: Any


def loo(data, *, pointwise: bool = False) -> Loo:
    """``az.loo`` of ArviZ data with a ``log_likelihood`` group, as a :class:`Loo`."""
    import arviz as az

    res = az.loo(data, pointwise=pointwise)
    new = arviz_major() >= 1
    elpd = float(res.elpd if new else res.elpd_loo)
    p = float(res.p if new else res.p_loo)
    loo_i = k = None
    if pointwise:
        loo_i = np.asarray(res.elpd_i if new else res.loo_i).ravel()
        k = np.asarray(res.pareto_k).ravel()
    return Loo(elpd, float(res.se), p, loo_i, k, res)


def from_numpyro(mcmc, **kwargs):
    """``az.from_numpyro`` (ArviZ 0.x) or ``arviz_base.from_numpyro`` (ArviZ 1.x)."""
    import arviz as az

    return az.from_numpyro(mcmc, **kwargs)


def loggers() -> list:
    """The loggers ArviZ writes its notices to (ArviZ 0.x logs through its own Logger
    instance ``arviz._log``)."""
    import logging

    import arviz as az

    out = [logging.getLogger("arviz"), logging.getLogger("arviz_stats")]
    return out + [lg for lg in [getattr(az, "_log", None)] if lg is not None]


# ------------------------------------------------------------------ plots
def scalar_labels(da) -> list[str]:
    """``"0,1"``-style labels of the scalars of a DataArray, in C order over its dims other
    than ``chain`` and ``draw`` (the coordinates ``az.summary`` puts in its row labels;
    ``[""]`` for a scalar quantity)."""
    trail = [d for d in da.dims if d not in ("chain", "draw")]
    return [
        ",".join(str(da[d].values[i]) for d, i in zip(trail, idx))
        for idx in np.ndindex(*[da.sizes[d] for d in trail])
    ]


def plot_trace(post, *, var_names, compact: bool, axes, legend: bool) -> None:
    """``az.plot_trace`` into ``axes`` (rows x 2: marginal density, trace).  ArviZ 1.x
    draws its own figures (arviz-plots): there the same panels are drawn with Matplotlib
    from ArviZ's KDE (a histogram for integer draws), with ArviZ 0.x's titles (the
    variable; ``var`` and the coordinates on two lines per scalar without ``compact``) and chain legend."""
    if arviz_major() < 1:
        import arviz as az

        az.plot_trace(
            post, var_names=var_names, compact=compact, axes=axes, legend=legend, show=False
        )
        return
    styles = ("-", "--", ":", "-.")
    row = 0
    for v in var_names:
        da = post[v]
        C, D = da.sizes["chain"], da.sizes["draw"]
        x = np.asarray(da.values).reshape(C, D, -1)
        labels = scalar_labels(da)
        chain_ls = [styles[c % len(styles)] if compact else "-" for c in range(C)]
        groups = [list(range(x.shape[2]))] if compact else [[k] for k in range(x.shape[2])]
        for members in groups:
            left, right = axes[row, 0], axes[row, 1]
            for k in members:
                for c in range(C):
                    colour = f"C{k % 10}" if compact else f"C{c % 10}"
                    ls = chain_ls[c]
                    _density(left, x[c, :, k], colour, ls, np.issubdtype(da.dtype, np.integer))
                    right.plot(np.arange(D), x[c, :, k], color=colour, ls=ls, lw=0.8, alpha=0.7)
            title = v if compact or not labels[members[0]] else f"{v}\n{labels[members[0]]}"
            left.set_title(title)
            right.set_title(title)
            left.set_yticks([])
            if legend and C > 1 and row == 0:
                from matplotlib.lines import Line2D

                handles = [
                    Line2D([], [], color="0.3" if compact else f"C{c % 10}", ls=chain_ls[c])
                    for c in range(C)
                ]
                left.legend(handles, [str(c) for c in range(C)], title="chain")
            row += 1


def _density(ax, x, colour, ls, discrete: bool) -> None:
    x = np.asarray(x)
    if discrete or np.ptp(x) == 0:
        values, counts = np.unique(x, return_counts=True)
        ax.vlines(values, 0, counts / x.size, color=colour, ls=ls)
        return
    grid, pdf = kde(x)
    ax.plot(grid, pdf, color=colour, ls=ls, lw=1.0)


def plot_autocorr(post, *, var_name: str, max_lag: int, combined: bool, axes) -> None:
    """``az.plot_autocorr`` of ``var_name`` into ``axes`` (one per scalar; per scalar and
    chain without ``combined``).  ArviZ 1.x: the same bars drawn with Matplotlib from
    ArviZ's autocorrelation, titled like ArviZ 0.x (the variable, then the coordinates, on two lines)."""
    if arviz_major() < 1:
        import arviz as az

        az.plot_autocorr(
            post, var_names=[var_name], max_lag=max_lag, combined=combined, ax=axes, show=False
        )
        return
    da = post[var_name]
    C, D = da.sizes["chain"], da.sizes["draw"]
    x = np.asarray(da.values, np.float64).reshape(C, D, -1)
    labels = scalar_labels(da)
    panels = []
    for k, lab in enumerate(labels):
        if combined:
            panels.append((x[:, :, k].ravel(), f"{var_name}\n{lab}"))
        else:
            panels.extend((x[c, :, k], f"{var_name}\n{c}\n{lab}") for c in range(C))
    band = 2.0 / np.sqrt(C * D if combined else D)
    for ax, (series, title) in zip(np.ravel(axes), panels):
        acf = autocorr(series)[: max_lag + 1]
        ax.vlines(np.arange(acf.size), 0, acf, color="C0")
        ax.fill_between([0, max_lag], -band, band, color="0.8", alpha=0.5, lw=0)
        ax.set_xlim(-0.5, max_lag + 0.5)
        ax.set_title(title)


def plot_ppc(data, *, ax, num_pp_samples: int = 50, seed: int = 0) -> None:
    """``az.plot_ppc`` of the ``y`` replicates into ``ax``: the density of the observed
    ratings, of ``num_pp_samples`` replicates (chosen with ``default_rng(seed)``) and of
    all replicates pooled.  ArviZ 1.x (whose ``plot_ppc_dist`` draws its own figure): the
    same curves with Matplotlib from ArviZ's KDE."""
    if arviz_major() < 1:
        import arviz as az

        az.plot_ppc(data, num_pp_samples=num_pp_samples, ax=ax, random_seed=seed)
        return
    pp = group(data, "posterior_predictive")
    obs = group(data, "observed_data")
    if pp is None or obs is None:
        raise ValueError(
            "no posterior_predictive / observed_data groups: convert with log_likelihood=True"
        )
    reps = np.asarray(pp["y"].values, np.float64)
    reps = reps.reshape(-1, reps.shape[-1])
    pick = np.random.default_rng(seed).choice(
        reps.shape[0], size=min(num_pp_samples, reps.shape[0]), replace=False
    )
    for n, s in enumerate(pick):
        grid, pdf = kde(reps[s])
        ax.plot(
            grid,
            pdf,
            color="C0",
            alpha=0.2,
            lw=0.8,
            label="posterior predictive" if n == 0 else None,
        )
    grid, pdf = kde(np.asarray(obs["y"].values))
    ax.plot(grid, pdf, color="k", lw=1.5, label="observed")
    grid, pdf = kde(reps.ravel())
    ax.plot(grid, pdf, color="C1", ls="--", lw=1.2, label="posterior predictive mean")
    ax.set_xlabel("y")
    ax.set_yticks([])
    ax.legend()
