"""``report(fit, path)``: the figures and the summary table of one fit, written to a folder."""

from __future__ import annotations

import math
import pathlib

import numpy as np

from .convert import _meta, arrays_to_arviz, fit_arrays, fit_kind
from .plots import _describe, plot_acf, plot_convergence, plot_gamma, plot_rmse_trace, plot_trace
from .stats import gamma_threshold, rank_posterior, summary

__all__ = ["report"]


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}"
    return str(v)


def _markdown_table(df, index_name: str = "") -> str:
    cols = [index_name] + [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * len(df.columns)) + "|"]
    for idx, row in df.iterrows():
        lines.append("| " + " | ".join([f"`{idx}`"] + [_fmt(v) for v in row.tolist()]) + " |")
    return "\n".join(lines)


def _table_figure(df, title: str):
    from matplotlib.figure import Figure

    nrows = len(df) + 1
    ncols = len(df.columns) + 1
    fig = Figure(figsize=(max(6.0, 1.05 * ncols + 1.0), 0.26 * nrows + 0.5), layout="constrained")
    ax = fig.add_subplot()
    ax.axis("off")
    cells = [[_fmt(v) for v in row] for row in df.itertuples(index=False)]
    table = ax.table(cellText=cells, rowLabels=[str(i) for i in df.index], colLabels=[str(c) for c in df.columns],
                     cellLoc="right", bbox=[0.0, 0.0, 1.0, 1.0])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (r, _c), cell in table.get_celld().items():
        if r == 0:
            cell.set_facecolor("0.9")
    ax.set_title(title, fontsize="medium")
    return fig


def report(fit, path, *, entries=None, num_draws: int = 500, seed: int = 0, threshold: float | None = None,
           dpi: int = 110) -> list[pathlib.Path]:
    """Write the diagnostics of one fit into the folder ``path`` (created if needed).

    Files: ``summary.csv``, ``summary.md`` (fit settings, the summary table, the rank
    posterior, links to the figures), ``summary.png`` (the table), ``rank_posterior.csv``
    (where gamma is available) and the figures that apply: ``rmse_trace.png`` (test data
    given), ``trace.png``, ``acf.png`` (MCMC), ``gamma.png``, ``convergence.png`` (VB).

    Returns the paths written, in that order (summary files first).
    """
    out = pathlib.Path(path)
    out.mkdir(parents=True, exist_ok=True)
    kind = fit_kind(fit)
    fa = fit_arrays(fit, entries=entries, num_draws=num_draws, seed=seed)
    idata = arrays_to_arviz(fa)
    post = fa.groups["posterior"]
    written: list[pathlib.Path] = []
    figures: dict[str, object] = {}

    if kind in ("mcmc", "vb"):
        try:
            figures["rmse_trace"] = plot_rmse_trace(fit)
        except ValueError:
            pass
    if fa.num_chains * fa.num_draws >= 4:
        figures["trace"] = plot_trace(fit, idata=idata)
        if kind == "mcmc" and "theta" in post:
            figures["acf"] = plot_acf(fit, idata=idata)
    rank = None
    if "gamma_sorted" in post:
        thr = gamma_threshold(fit) if threshold is None else float(threshold)
        rank = rank_posterior(fit, thr, num_draws=num_draws, seed=seed)
        figures["gamma"] = plot_gamma(fit, threshold=thr, num_draws=num_draws, seed=seed)
    if kind == "vb":
        figures["convergence"] = plot_convergence({_describe(fit): fit})

    table = summary(idata)
    csv = out / "summary.csv"
    table.to_csv(csv)
    written.append(csv)

    meta = _meta(fit)
    lines = [f"# Diagnostics — {_describe(fit)}", ""]
    settings = {k: meta[k] for k in ("method", "prior_name", "hyperparameters", "K", "lam", "tau", "offset",
                                     "num_warmup", "num_samples", "thinning", "num_chains", "num_iter",
                                     "num_steps", "seed") if k in meta}
    settings["representation"] = fa.attrs.get("representation")
    if kind == "vb":
        settings["variational draws"] = f"{fa.attrs['num_variational_draws']} (seed {fa.attrs['seed']}), "\
            f"{fa.attrs['vb_covariance']} covariances"
    lines += [f"- **{k}**: {_fmt(v)}" for k, v in settings.items()]
    lines += ["", "## Summary (rotation- and label-invariant quantities)", "", _markdown_table(table), ""]
    if rank is not None:
        rp = out / "rank_posterior.csv"
        rp.write_text("rank,probability\n" + "".join(f"{r},{p:.6g}\n" for r, p in enumerate(rank)))
        lines += [f"## Rank posterior (threshold {thr:.4g})", "",
                  "| rank | " + " | ".join(str(r) for r in range(rank.size)) + " |",
                  "|---|" + "---:|" * rank.size,
                  "| P | " + " | ".join(f"{p:.3f}" for p in rank) + " |", ""]
    if figures:
        lines += ["## Figures", ""] + [f"![{name}]({name}.png)" for name in figures] + [""]
    md = out / "summary.md"
    md.write_text("\n".join(lines))
    written.append(md)

    png = out / "summary.png"
    _table_figure(table, f"Summary — {_describe(fit)}").savefig(png, dpi=dpi)
    written.append(png)
    if rank is not None:
        written.append(out / "rank_posterior.csv")
    for name, fig in figures.items():
        p = out / f"{name}.png"
        fig.savefig(p, dpi=dpi)
        written.append(p)
    return written
