"""``report(fit, path)``: the figures and the summary table of one fit, written to a folder."""

from __future__ import annotations

import math
import pathlib
import warnings

import numpy as np

from ..inference.results.arrays import offset_of, setting
from .convert import arrays_to_arviz, fit_arrays
from .plots import describe_fit, plot_acf, plot_convergence, plot_gamma, plot_rmse_trace, plot_trace
from .stats import RankMixingWarning, gamma_threshold, rank_mixing, rank_posterior, summary

__all__ = ["report"]


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}"
    return str(v)


def _markdown_table(df, index_name: str = "") -> str:
    cols = [index_name] + [str(c) for c in df.columns]
    lines = [
        "| " + " | ".join(cols) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(df.columns)) + "|",
    ]
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
    table = ax.table(
        cellText=cells,
        rowLabels=[str(i) for i in df.index],
        colLabels=[str(c) for c in df.columns],
        cellLoc="right",
        bbox=[0.0, 0.0, 1.0, 1.0],
    )
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (r, _c), cell in table.get_celld().items():
        if r == 0:
            cell.set_facecolor("0.9")
    ax.set_title(title, fontsize="medium")
    return fig


def _figures(fit, fa, idata, threshold, num_draws: int, seed: int):
    """The figures that apply to the fit (``{name: Figure}``, in report order) and, where
    gamma is available, the rank posterior and its threshold (else None, None)."""
    post = fa.groups["posterior"]
    figures: dict[str, object] = {}
    try:
        figures["rmse_trace"] = plot_rmse_trace(fit)
    except ValueError:  # no RMSE trace recorded (no test set, or a family without one)
        pass
    if fa.num_chains * fa.num_draws >= 4:
        figures["trace"] = plot_trace(fit, idata=idata)
        if fit.has_chains and "theta" in post:
            figures["acf"] = plot_acf(fit, idata=idata)
    rank = thr = None
    if "gamma_sorted" in post:  # a prior with column scales, gamma drawn
        thr = gamma_threshold(fit) if threshold is None else float(threshold)
        with warnings.catch_warnings():
            # the report's "Rank mixing" section says whether the chains disagree
            warnings.simplefilter("ignore", RankMixingWarning)
            rank = rank_posterior(fit, thr, num_draws=num_draws, seed=seed)
        figures["gamma"] = plot_gamma(fit, threshold=thr, num_draws=num_draws, seed=seed)
    if fit.has_q:
        figures["convergence"] = plot_convergence({describe_fit(fit): fit})
    return figures, rank, thr


def _likelihood_settings(likelihood, tau) -> dict[str, object]:
    """The likelihood and its noise as ``summary.md`` lists them: a learned noise has its
    posterior in the summary table (``noise_sd``, data scale); a fixed one its ``lam``,
    precision ``tau`` and sd ``1/sqrt(tau)``; a latent (probit) likelihood none."""
    out: dict[str, object] = {"likelihood": repr(likelihood)}
    if likelihood.learned:
        out["noise sd"] = (
            "learned: its posterior is the noise_sd row of the summary table (data scale)"
        )
    elif not likelihood.latent and tau is not None:
        lam = likelihood.describe().get("lam")
        if lam is not None:
            out["lam"] = lam
        out["tau"] = tau
        out["noise sd"] = 1.0 / math.sqrt(float(tau))
    return out


def _fit_settings(fit, fa) -> dict[str, object]:
    """The settings listed in ``summary.md``, read from the fit's typed info (method,
    prior and its hyper-parameters, K, likelihood and its noise, biases, offset, the
    method's settings, seed) and the conversion's representation."""
    info = fit.info
    out: dict[str, object] = {"method": info.method}
    if info.prior is not None:
        out["prior_name"] = info.prior.name
        out["hyperparameters"] = info.prior.hyperparameters()
    out["K"] = int(info.K)
    out.update(_likelihood_settings(info.likelihood, info.tau))
    out["biases"] = repr(info.biases) if info.biases is not None else "none"
    out["offset"] = offset_of(fit)
    for k in ("num_warmup", "num_samples", "thinning", "num_chains"):
        if setting(fit, k) is not None:
            out[k] = setting(fit, k)
    if "num_iter" in fit.run_stats():
        out["num_iter"] = fit.run_stats()["num_iter"]
    if setting(fit, "num_steps") is not None:
        out["num_steps"] = setting(fit, "num_steps")
    out["seed"] = info.seed
    out["representation"] = fa.attrs.get("representation")
    if "num_variational_draws" in fa.attrs:
        out["variational draws"] = (
            f"{fa.attrs['num_variational_draws']} (seed {fa.attrs['seed']}), "
            f"{fa.attrs['vb_covariance']} covariances"
        )
    return out


_RANK_ROWS = (("num_active", "number of active columns"), ("eff_rank", "effective rank of theta"))


def _rank_mixing_markdown(table, mix) -> list[str]:
    """The "Rank mixing" section: ESS and R-hat of the number of active columns and of
    the effective rank (rows of the summary table), each chain's most frequent count, and
    a warning when the chains disagree."""
    rows = [(name, label) for name, label in _RANK_ROWS if name in table.index]
    if not rows and mix is None:
        return []
    lines = ["## Rank mixing", ""]
    if rows:
        cols = [c for c in ("ess_bulk", "ess_tail", "r_hat") if c in table.columns]
        lines += ["| quantity | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        lines += [
            f"| {label} | " + " | ".join(_fmt(table.loc[name, c]) for c in cols) + " |"
            for name, label in rows
        ]
        lines.append("")
    if mix is not None:
        lines.append(
            f"Most frequent number of active columns per chain: {mix['chain_modes']} "
            f"(chain means {', '.join(f'{v:.2f}' for v in mix['chain_means'])})."
        )
        if mix["disagree"]:
            lines.append("")
            lines.append(
                "**Warning: the chains disagree on the number of active columns** (R-hat "
                f"{_fmt(mix['r_hat'])}): the rank posterior reflects the starting points."
            )
        if mix["drifts"]:
            lines.append("")
            lines.append(
                "**Warning: the number of active columns drifts within the chain** (split R-hat "
                f"{_fmt(mix['r_hat'])}): run longer."
            )
        lines.append("")
    return lines


def _summary_markdown(fit, settings: dict, table, rank, thr, figure_names, mix=None) -> str:
    """The text of ``summary.md``: settings, the summary table, the rank mixing
    diagnostics and the rank posterior (where available) and links to the figures."""
    lines = [f"# Diagnostics — {describe_fit(fit)}", ""]
    lines += [f"- **{k}**: {_fmt(v)}" for k, v in settings.items()]
    lines += [
        "",
        "## Summary (rotation- and label-invariant quantities)",
        "",
        _markdown_table(table),
        "",
    ]
    if table.attrs.get("r_hat"):  # one MCMC chain: its split R-hat
        lines += [f"R-hat: {table.attrs['r_hat']}.", ""]
    lines += _rank_mixing_markdown(table, mix)
    if rank is not None:
        lines += [
            f"## Rank posterior (threshold {thr:.4g})",
            "",
            "| rank | " + " | ".join(str(r) for r in range(rank.size)) + " |",
            "|---|" + "---:|" * rank.size,
            "| P | " + " | ".join(f"{p:.3f}" for p in rank) + " |",
            "",
        ]
    if figure_names:
        lines += ["## Figures", ""] + [f"![{name}]({name}.png)" for name in figure_names] + [""]
    return "\n".join(lines)


def report(
    fit,
    path,
    *,
    entries=None,
    num_draws: int = 500,
    seed: int = 0,
    threshold: float | None = None,
    dpi: int = 110,
) -> list[pathlib.Path]:
    """Write the diagnostics of one fit into the folder ``path`` (created if needed).

    Files: ``summary.csv``, ``summary.md`` (fit settings, the summary table, ESS and
    R-hat of the number of active columns and of the effective rank with a warning when
    the chains disagree, the rank posterior, links to the figures), ``summary.png`` (the table), ``rank_posterior.csv``
    (where gamma is available) and the figures that apply: ``rmse_trace.png`` (test data
    given), ``trace.png``, ``acf.png`` (MCMC), ``gamma.png``, ``convergence.png`` (VB).
    A prior without column scales (e.g. normal-wishart) has no gamma: the rank posterior
    and ``gamma.png`` are left out.

    Returns the paths written, in that order (summary files first).

    Parameters
    ----------
    fit : FitResult
        The fit.
    path : str or os.PathLike
        The folder.
    entries : optional
        The theta entries shown (default: the fit's tracked entries).
    num_draws, seed : int
        Draws from ``q`` for VB and SVI fits, and their seed.
    threshold : float, optional
        Threshold of the active columns (default: the prior's).
    dpi : int
        Resolution of the figures.
    """
    out = pathlib.Path(path)
    out.mkdir(parents=True, exist_ok=True)
    fa = fit_arrays(fit, entries=entries, num_draws=num_draws, seed=seed)
    idata = arrays_to_arviz(fa)
    figures, rank, thr = _figures(fit, fa, idata, threshold, num_draws, seed)
    table = summary(idata)
    written = [out / "summary.csv", out / "summary.md", out / "summary.png"]
    table.to_csv(written[0])
    if rank is not None:
        rp = out / "rank_posterior.csv"
        rp.write_text("rank,probability\n" + "".join(f"{r},{p:.6g}\n" for r, p in enumerate(rank)))
    mix = rank_mixing(fit, thr) if rank is not None else None
    written[1].write_text(
        _summary_markdown(fit, _fit_settings(fit, fa), table, rank, thr, list(figures), mix)
    )
    _table_figure(table, f"Summary — {describe_fit(fit)}").savefig(written[2], dpi=dpi)
    if rank is not None:
        written.append(rp)
    for name, fig in figures.items():
        written.append(out / f"{name}.png")
        fig.savefig(written[-1], dpi=dpi)
    return written
