"""The paper's figures and trace/gamma plots (matplotlib; each returns its ``Figure``).

Figures are built on :class:`matplotlib.figure.Figure` objects, not through ``pyplot``:
nothing is shown, no global figure state is touched, and they render on any backend
(headless included); save them with ``fig.savefig(path)``.  In Jupyter a returned
figure displays as the cell's value.  ArviZ's trace and autocorrelation plots draw into
axes created here (:mod:`bmczoo._arviz`, under ArviZ 0.x and 1.x alike).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping

import numpy as np

from .. import _arviz
from ..inference.results.arrays import offset_of, prior_of, require_column_scales, setting
from .convert import INVARIANT_VARS, default_entries, fit_arrays, to_arviz, vb_theta_moments
from .stats import (
    RankMixingWarning,
    _loglik_data,
    autocorrelation,
    gamma_threshold,
    rank_posterior,
)

__all__ = [
    "plot_rmse_trace",
    "plot_acf",
    "plot_trace",
    "plot_posterior_compare",
    "plot_convergence",
    "plot_gamma",
    "plot_ppc",
]

_VAR_LABELS = {
    "theta": "θ entries",
    "gamma_sorted": "sorted γ",
    "gamma": "γ",
    "theta_fro": "‖θ‖_F",
    "eff_rank": "effective rank of θ",
    "theta_sv": "singular values of θ",
    "noise_sd": "noise sd",
    "bias_var": "bias variances (row, col)",
    "cov_eig": "eigenvalues of Λ⁻¹ (M, N)",
    "mu_norm": "‖μ‖ (M, N)",
    "cuts": "cut points",
}


@contextlib.contextmanager
def _quiet_arviz_plots():
    """Silence, by their exact messages, a deprecation that ArviZ 0.23 triggers in
    Matplotlib >= 3.11 and ArviZ's notice on the density of a constant quantity (a sorted
    gamma of the discrete prior that never leaves the slab), so that the plots also run
    under ``-W error``."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message="Passing a dict or None as alias_mapping to normalize_kwargs is deprecated",
        )
        warnings.filterwarnings(
            "ignore", message="Your data appears to have a single value or no finite values"
        )
        yield


def _figure(nrows: int, ncols: int, figsize, **subplot_kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    return fig, axes


def describe_fit(fit, method: bool = True) -> str:
    """A short label of a fit for titles: its method, prior and K."""
    name = str(fit.info.method)
    parts = (
        [name.upper() if name in ("vb", "svi", "map", "nuts") else name.capitalize()]
        if method
        else []
    )
    prior = prior_of(fit)
    if prior is not None and prior.name:
        parts.append(f"{prior.name} prior")
    parts.append(f"K={int(fit.info.K)}")
    return ", ".join(parts)


def _grid(n: int, ncols: int) -> tuple[int, int]:
    ncols = max(1, min(int(ncols), n))
    return -(-n // ncols), ncols


def _drop_unused(fig, axes, n: int):
    flat = axes.ravel()
    for ax in flat[n:]:
        fig.delaxes(ax)
    return flat[:n]


# --------------------------------------------------------------------------- Fig. 1
def plot_rmse_trace(
    fit,
    *,
    ax=None,
    figsize=(7.0, 4.0),
    title: str | None = None,
    logy: bool = False,
    show_draws: bool = True,
):
    """Paper Fig. 1: test RMSE by iteration.

    Gibbs: the RMSE of each sweep's draw (thin lines) and of the running posterior mean
    (thick lines; from the first kept draw on), one colour per chain, warm-up marked.
    VB: the RMSE of ``m_i . n_j`` after each iteration.  Needs ``fit(..., test=...)``.
    """
    draw, mean = fit._rmse_traces()
    chains = fit.has_chains
    if ax is None:
        fig, axes = _figure(1, 1, figsize)
        ax = axes[0, 0]
    else:
        fig = ax.figure
    T = mean.shape[1]
    it = np.arange(1, T + 1)
    colors = [f"C{c % 10}" for c in range(mean.shape[0])]
    multi = mean.shape[0] > 1
    for c in range(mean.shape[0]):
        suffix = f" (chain {c})" if multi else ""
        if draw is not None and show_draws:
            ax.plot(it, draw[c], color=colors[c], lw=0.8, alpha=0.45, label=f"draw{suffix}")
        label = ("running posterior mean" if chains else "VB mean m_i·n_j") + suffix
        ax.plot(
            it,
            mean[c],
            color=colors[c],
            lw=2.0,
            label=label,
            marker="o" if not chains and T <= 60 else None,
            ms=3,
        )
    if chains and setting(fit, "num_warmup"):
        ax.axvline(
            setting(fit, "num_warmup") + 0.5, color="0.4", ls="--", lw=1, label="end of warm-up"
        )
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("iteration" + (" (sweep)" if chains else ""))
    ax.set_ylabel("test RMSE")
    ax.set_xlim(0.5, T + 0.5)
    finite = np.concatenate(
        [mean[np.isfinite(mean)]]
        + ([draw[np.isfinite(draw)]] if draw is not None and show_draws else [])
    )
    if finite.size and not logy:
        lo, hi = float(np.min(finite)), float(np.quantile(finite, 0.98))
        # the first sweeps start far away: keep the converged range readable
        ax.set_ylim(max(0.0, lo - 0.1 * (hi - lo)), hi + 0.1 * (hi - lo) + 1e-12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2 if multi else 1)
    ax.set_title(title if title is not None else f"RMSE by iteration — {describe_fit(fit)}")
    return fig


# --------------------------------------------------------------------------- Fig. 2
def _tidy_arviz_titles(axes):
    for ax in np.ravel(axes):
        parts = ax.get_title().split("\n")
        if parts and parts[0] in _VAR_LABELS and len(parts) > 1:
            name = "θ" if parts[0] == "theta" else parts[0]
            idx = ", ".join(", ".join(p.split(",")) for p in parts[1:])
            ax.set_title(f"{name}[{idx}]", fontsize="medium")


def plot_acf(
    fit,
    *,
    entries=None,
    max_lag: int = 20,
    combined: bool = True,
    ncols: int = 4,
    figsize=None,
    reference: float | None = 0.1,
    idata=None,
):
    """Paper Fig. 2: autocorrelation of ``theta`` at the tracked entries, through
    ``az.plot_autocorr`` (one panel per entry; per entry and chain with
    ``combined=False``).  Lags count kept draws; ``reference`` draws dashed lines at
    ``+-reference``.  ``idata`` reuses data from :func:`~bmczoo.diagnostics.to_arviz`."""
    idata = to_arviz(fit, entries=entries) if idata is None else idata
    post = _arviz.group(idata)
    if "theta" not in post:
        raise ValueError(
            "no theta entries to plot: track entries (fit(..., track=...)) or store factors"
        )
    E, C, D = post.sizes["entry"], post.sizes["chain"], post.sizes["draw"]
    if D < 2:
        raise ValueError("the ACF needs at least 2 draws")
    max_lag = max(1, min(int(max_lag), D - 1))
    n = E if combined else E * C
    nrows, ncols = _grid(n, ncols)
    if figsize is None:
        figsize = (2.6 * ncols + 0.4, 2.2 * nrows + 0.6)
    fig, axes = _figure(nrows, ncols, figsize, sharex=True, sharey=True)
    used = _drop_unused(fig, axes, n)
    with _quiet_arviz_plots():
        _arviz.plot_autocorr(post, var_name="theta", max_lag=max_lag, combined=combined, axes=used)
    _tidy_arviz_titles(used)
    for k, ax in enumerate(used):
        if reference:
            for y in (reference, -reference):
                ax.axhline(
                    y,
                    color="C3",
                    ls="--",
                    lw=0.8,
                    label=f"±{reference:g}" if k == 0 and y > 0 else None,
                )
        ax.axhline(0.0, color="0.3", lw=0.6)
        ax.grid(alpha=0.3)
    # ArviZ shows -1..1; MCMC autocorrelations live in the upper part: zoom there
    lowest = float(np.nanmin(autocorrelation(idata, max_lag=max_lag)))
    used[0].set_ylim(min(-0.25, lowest - 0.05), 1.05)
    for ax in axes[-1, :]:
        if ax in used:
            ax.set_xlabel("lag")
    for ax in axes[:, 0]:
        ax.set_ylabel("ACF")
    if reference:
        used[0].legend(fontsize="x-small", loc="upper right")
    thin = post.attrs.get("thinning")
    extra = f", lags in kept draws (thinning {thin})" if thin else ""
    fig.suptitle(f"Autocorrelation of θ entries — {describe_fit(fit)}{extra}")
    return fig


# --------------------------------------------------------------------------- traces
def _compact_legends(axes) -> None:
    """ArviZ's legends, redrawn small."""
    for ax in axes.ravel():
        leg = ax.get_legend()
        if leg is not None:
            handles, labels = leg.legend_handles, [t.get_text() for t in leg.get_texts()]
            ax.legend(
                handles,
                labels,
                title=leg.get_title().get_text(),
                fontsize="x-small",
                title_fontsize="x-small",
                ncol=2 if len(labels) > 4 else 1,
                loc="best",
                framealpha=0.7,
            )


def plot_trace(
    fit, *, var_names=None, entries=None, compact: bool = True, figsize=None, idata=None
):
    """``az.plot_trace`` of the invariant quantities (``theta`` entries, sorted gamma,
    ``||theta||_F``, effective rank, the learned noise sd, where available): one row per
    variable with its marginal density (left) and trace (right).  ``theta`` is drawn on
    the data's scale (the centring offset added), as :func:`~bmczoo.diagnostics.summary`
    reports it."""
    idata = to_arviz(fit, entries=entries) if idata is None else idata
    post = _arviz.group(idata)
    constant = []
    if var_names is None:
        var_names = [v for v in INVARIANT_VARS if v in post.data_vars]
        # a quantity constant over all draws (the discrete prior's sorted gamma staying in
        # the slab) has no density to draw: name it in the title instead
        for v in list(var_names):
            x = post[v].values
            if x.size and np.all(x == x.reshape(-1)[0]):
                var_names.remove(v)
                constant.append(f"{_VAR_LABELS.get(v, v)} = {x.reshape(-1)[0]:.4g}")
    var_names = list(var_names)
    if not var_names:
        raise ValueError("nothing to plot")
    if compact:
        nrows = len(var_names)
    else:
        nrows = sum(
            int(np.prod([post.sizes[d] for d in post[v].dims[2:]], dtype=int)) for v in var_names
        )
    if figsize is None:
        figsize = (11.0, 2.3 * nrows + 0.6)
    fig, axes = _figure(nrows, 2, figsize)
    legend = post.sizes["chain"] > 1
    offset = float(post.attrs.get("theta_offset", 0.0) or 0.0)
    data = post
    if offset != 0.0 and "theta" in var_names:
        data = post.assign(theta=post["theta"] + offset)
    with _quiet_arviz_plots():
        _arviz.plot_trace(data, var_names=var_names, compact=compact, axes=axes, legend=legend)
    notes = {
        "theta": " (one colour per entry)",
        "gamma_sorted": " (one colour per rank order)",
        "theta_sv": " (one colour per rank order)",
    }
    for ax in axes[:, 0]:
        t = ax.get_title().split("\n")[0]
        ax.set_title(
            _VAR_LABELS.get(t, t) + (notes.get(t, "") if compact else ""), fontsize="medium"
        )
        ax.set_ylabel("density")
    for ax in axes[:, 1]:
        t = ax.get_title().split("\n")[0]
        ax.set_title(_VAR_LABELS.get(t, t), fontsize="medium")
    axes[-1, 1].set_xlabel("draw")
    _compact_legends(axes)
    rep = post.attrs.get("representation", "")
    title = f"Posterior traces — {describe_fit(fit)}"
    if "variational" in rep or "guide" in rep:
        title += f" ({rep})"
    if constant:
        title += "\nconstant over all draws: " + ", ".join(constant)
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- Fig. 3
def _kde(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian KDE with Silverman's bandwidth."""
    x = np.asarray(x, np.float64).ravel()
    sd = np.std(x)
    iqr = np.subtract(*np.quantile(x, [0.75, 0.25]))
    spread = min(sd, iqr / 1.349) if iqr > 0 else sd
    h = 0.9 * spread * x.size ** (-0.2) if spread > 0 else 1e-3 * (abs(float(np.mean(x))) + 1.0)
    z = (grid[:, None] - x[None, :]) / h
    return np.exp(-0.5 * z**2).sum(axis=1) / (x.size * h * np.sqrt(2 * np.pi))


def _compare_panel(ax, x, gauss, q_draws) -> None:
    """One entry of :func:`plot_posterior_compare`: the KDE of the Gibbs draws ``x``, the
    VB Gaussian ``gauss = (mean, sd, label)`` and the KDE of the q draws (or None)."""
    mu, sd, vb_label = gauss
    lo = min(np.quantile(x, 0.002), mu - 4 * sd)
    hi = max(np.quantile(x, 0.998), mu + 4 * sd)
    pad = 0.05 * (hi - lo + 1e-12)
    grid = np.linspace(lo - pad, hi + pad, 400)
    dens = _kde(x, grid)
    ax.fill_between(grid, dens, color="C0", alpha=0.25, lw=0)
    ax.plot(grid, dens, color="C0", lw=1.8, label=f"Gibbs (KDE, {x.size} draws)")
    if sd > 0:
        g = np.exp(-0.5 * ((grid - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi))
        ax.plot(grid, g, color="C1", lw=1.8, ls="--", label=vb_label)
    else:
        ax.axvline(mu, color="C1", lw=1.8, ls="--", label=vb_label)
    if q_draws is not None:
        ax.plot(
            grid,
            _kde(q_draws, grid),
            color="C2",
            lw=1.2,
            ls=":",
            label=f"VB (q draws, {q_draws.size})",
        )
    ax.set_yticks([])
    ax.grid(alpha=0.3)


def plot_posterior_compare(
    gibbs_fit,
    vb_fit,
    entries=None,
    *,
    max_entries: int = 6,
    ncols: int = 3,
    figsize=None,
    original_scale: bool = True,
    vb_draws: int = 0,
    seed: int = 0,
):
    """Paper Fig. 3: posterior densities of ``theta_ij`` from Gibbs (KDE of the draws, all
    chains) and VB (the Gaussian with the mean ``m_i . n_j`` and variance
    ``m_i^T W_j m_i + n_j^T V_i n_j + tr(V_i W_j)`` of ``M_i . N_j`` under q; full
    covariances when the VB fit keeps its state, else the diagonal formula).

    ``entries``: (rows, cols) or (i, j) pairs (default: Gibbs' tracked entries, at most
    ``max_entries``); they must be tracked by the Gibbs fit or its factors stored.
    ``original_scale`` adds each fit's centring offset.  ``vb_draws > 0`` also draws the
    KDE of that many draws of ``M_i . N_j`` from q (the exact q law, not Gaussian).
    """
    if not gibbs_fit.has_chains:
        raise TypeError("gibbs_fit must be an MCMC fit (method 'gibbs' or 'nuts')")
    if not vb_fit.has_q:
        raise TypeError("vb_fit must be a VB fit (method 'vb')")
    if tuple(gibbs_fit.shape) != tuple(vb_fit.shape):
        raise ValueError(f"the fits have different shapes {gibbs_fit.shape} and {vb_fit.shape}")
    if entries is None:
        r, c = default_entries(gibbs_fit)
        entries = (r[:max_entries], c[:max_entries])
    fa = fit_arrays(gibbs_fit, entries=entries)
    draws = fa.groups["posterior"]["theta"]  # (chain, draw, entry)
    rows, cols = fa.coords["row"][1], fa.coords["col"][1]
    E = rows.size
    mean, var, full = vb_theta_moments(vb_fit, rows, cols)
    sd = np.sqrt(np.maximum(var, 0.0))
    off_g = offset_of(gibbs_fit) if original_scale else 0.0
    off_v = offset_of(vb_fit) if original_scale else 0.0
    qd = None
    if vb_draws:
        qd = fit_arrays(vb_fit, entries=(rows, cols), num_draws=vb_draws, seed=seed).groups[
            "posterior"
        ]["theta"][0]
    nrows, ncols = _grid(E, ncols)
    if figsize is None:
        figsize = (3.4 * ncols + 0.4, 2.7 * nrows + 0.7)
    fig, axes = _figure(nrows, ncols, figsize)
    used = _drop_unused(fig, axes, E)
    vb_label = "VB (Gaussian" + ("" if full else ", diagonal V, W") + ")"
    for e, ax in enumerate(used):
        _compare_panel(
            ax,
            draws[..., e].ravel() + off_g,
            (mean[e] + off_v, sd[e], vb_label),
            None if qd is None else qd[:, e] + off_v,
        )
        ax.set_title(f"θ[{rows[e]}, {cols[e]}]", fontsize="medium")
    for ax in axes[-1, :]:
        if ax in used:
            ax.set_xlabel(
                "θ_ij" + (" (original scale)" if original_scale and (off_g or off_v) else "")
            )
    for ax in axes[:, 0]:
        ax.set_ylabel("density")
    used[0].legend(fontsize="x-small", loc="upper left")
    fig.suptitle(f"Posterior of θ entries: Gibbs vs VB — {describe_fit(vb_fit, method=False)}")
    return fig


# --------------------------------------------------------------------------- Fig. 4
def plot_convergence(fits, *, figsize=None, tol: float | None = None):
    """Paper Fig. 4: VB convergence for several datasets (``{name: vb_fit}``, a sequence,
    or one fit).  Left: relative ELBO change ``|ELBO_t - ELBO_(t-1)| / |ELBO_t|`` by
    iteration (log scale; dashed: the stopping tolerance); right (when any fit has a
    test set): test RMSE by iteration.  The ELBOs of different datasets live on different
    scales, hence the relative change."""
    if not isinstance(fits, Mapping):
        fits = [fits] if hasattr(fits, "elbo") else list(fits)
        fits = {f"fit {k}": f for k, f in enumerate(fits)}
    if not fits:
        raise ValueError("no fit to plot")
    for name, f in fits.items():
        if not hasattr(f, "elbo"):
            raise TypeError(f"{name!r} is not a VB fit (it has no ELBO trace)")
    has_rmse = any(np.asarray(getattr(f, "rmse_trace", [])).size for f in fits.values())
    ncols = 2 if has_rmse else 1
    if figsize is None:
        figsize = (5.5 * ncols + 0.5, 4.0)
    fig, axes = _figure(1, ncols, figsize)
    ax_e = axes[0, 0]
    tols = set()
    for k, (name, f) in enumerate(fits.items()):
        e = np.asarray(f.elbo, np.float64)
        color = f"C{k % 10}"
        if e.size > 1:
            rel = np.abs(np.diff(e)) / np.maximum(np.abs(e[1:]), 1e-300)
            rel = np.where(rel > 0, rel, np.nan)
            ax_e.plot(
                np.arange(2, e.size + 1),
                rel,
                color=color,
                marker="o",
                ms=3,
                lw=1.5,
                label=f"{name} ({e.size} it.)",
            )
        if setting(f, "tol") is not None:
            tols.add(float(setting(f, "tol")))
        if has_rmse:
            r = np.asarray(getattr(f, "rmse_trace", []), np.float64)
            if r.size:
                axes[0, 1].plot(
                    np.arange(1, r.size + 1),
                    r,
                    color=color,
                    marker="o",
                    ms=3,
                    lw=1.5,
                    label=f"{name} (final {r[-1]:.3f})",
                )
    tol = tol if tol is not None else (tols.pop() if len(tols) == 1 else None)
    if tol:
        ax_e.axhline(tol, color="0.3", ls="--", lw=1, label=f"tolerance {tol:g}")
    ax_e.set_yscale("log")
    ax_e.set_xlabel("iteration")
    ax_e.set_ylabel("|ΔELBO| / |ELBO|")
    ax_e.set_title("ELBO: relative change per iteration")
    ax_e.grid(alpha=0.3, which="both")
    ax_e.legend(fontsize="small")
    if has_rmse:
        ax = axes[0, 1]
        ax.set_xlabel("iteration")
        ax.set_ylabel("test RMSE")
        ax.set_title("Test RMSE by iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("Convergence of VB")
    return fig


# --------------------------------------------------------------------------- gamma
def _sorted_gamma_panel(ax, g, threshold: float, max_points: int) -> None:
    """The draws of the sorted gamma (S, K): jittered points (at most ``max_points``
    draws), the median, the threshold; log scale when they span more than a factor 20."""
    K = g.shape[1]
    rng = np.random.default_rng(0)
    take = g if g.shape[0] <= max_points else g[rng.choice(g.shape[0], max_points, replace=False)]
    for h in range(K):
        xs = h + 1 + rng.uniform(-0.25, 0.25, size=take.shape[0])
        ax.scatter(
            xs, take[:, h], s=6, alpha=0.25, color="C0", lw=0, label="draws" if h == 0 else None
        )
    ax.scatter(
        np.arange(1, K + 1),
        np.median(g, axis=0),
        marker="_",
        s=400,
        color="C3",
        lw=2,
        label="median",
        zorder=3,
    )
    pos = g[g > 0]
    if pos.size and pos.max() / pos.min() > 20:
        ax.set_yscale("log")
    ax.axhline(threshold, color="0.3", ls="--", lw=1, label=f"threshold {threshold:.3g}")
    ax.set_xticks(np.arange(1, K + 1))
    ax.set_xlabel("rank order (1 = largest γ)")
    ax.set_ylabel("γ (sorted)")
    ax.set_title("Sorted γ")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def plot_gamma(
    fit,
    *,
    threshold: float | None = None,
    num_draws: int = 500,
    seed: int = 0,
    figsize=(10.0, 4.0),
    max_points: int = 400,
):
    """Posterior of gamma and of the rank.

    Left: the draws of the sorted ``gamma`` (largest first; jittered points and the
    median), log scale when they span more than a factor 20, the threshold dashed.
    Right: ``P(#{h: gamma_h > threshold} = r)`` for r = 0..K (:func:`rank_posterior`).
    ``threshold`` defaults to :func:`~bmczoo.diagnostics.gamma_threshold`.  VB: draws
    from q (``num_draws``, ``seed``) on the left, exact probabilities on the right.
    """
    require_column_scales(fit, "plot_gamma")
    fa = fit_arrays(fit, num_draws=num_draws, seed=seed)
    post = fa.groups["posterior"]
    if "gamma_sorted" not in post:
        raise ValueError(
            "this fit has no gamma (a MAP fit, or a guide that integrates gamma out, keeps no "
            "draws of it)"
        )
    g = post["gamma_sorted"].reshape(-1, post["gamma_sorted"].shape[-1])
    K = g.shape[1]
    threshold = gamma_threshold(fit) if threshold is None else float(threshold)
    with warnings.catch_warnings(record=True) as caught:
        # the figure says it in the panel's title instead of a warning in the middle of a plot
        warnings.simplefilter("always", RankMixingWarning)
        probs = rank_posterior(fit, threshold, num_draws=num_draws, seed=seed)
    disagree = any(issubclass(w.category, RankMixingWarning) for w in caught)
    for w in caught:
        if not issubclass(w.category, RankMixingWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    fig, axes = _figure(1, 2, figsize)
    _sorted_gamma_panel(axes[0, 0], g, threshold, max_points)
    ax = axes[0, 1]
    r = np.arange(K + 1)
    ax.bar(r, probs, color="C0", alpha=0.8)
    for x, p in zip(r, probs):
        if p > 0:
            ax.text(x, p, f"{p:.2f}", ha="center", va="bottom", fontsize="small")
    ax.set_xticks(r)
    ax.set_ylim(0, min(1.12, max(probs.max() * 1.15, 0.1)))
    ax.set_xlabel(f"rank  r = #{{h: γ_h > {threshold:.3g}}}")
    ax.set_ylabel("posterior probability")
    ax.set_title(
        "Posterior of the rank" + ("\n(chains disagree: see rank_mixing)" if disagree else "")
    )
    ax.grid(alpha=0.3, axis="y")
    rep = "q draws" if fit.has_q else "draws"
    fig.suptitle(f"γ and rank — {describe_fit(fit)} ({g.shape[0]} {rep})")
    return fig


# --------------------------------------------------------------------------- PPC
def plot_ppc(fit_or_data, *, num_pp_samples: int = 50, seed: int = 0, ax=None, figsize=(6.0, 3.5)):
    """Posterior predictive check (``az.plot_ppc``): the density of the observed ratings
    against those of ``num_pp_samples`` replicated data sets (chosen with
    ``default_rng(seed)``) and of all replicates pooled, under ArviZ 0.x or 1.x.

    Parameters
    ----------
    fit_or_data : FitResult or ArviZ data
        A fit (converted with ``to_arviz(log_likelihood=True, seed=seed)``: its training
        ratings) or data with ``posterior_predictive`` and ``observed_data`` groups.
    num_pp_samples, seed : int
        Replicates drawn and their seed.
    ax : matplotlib Axes, optional
        Draw there (default: a new figure).
    figsize : tuple
        Size of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fit_or_data = _loglik_data(fit_or_data, seed=seed)
    if ax is None:
        fig, axes = _figure(1, 1, figsize)
        ax = axes[0, 0]
    else:
        fig = ax.figure
    with _quiet_arviz_plots():
        _arviz.plot_ppc(fit_or_data, ax=ax, num_pp_samples=num_pp_samples, seed=seed)
    return fig
