"""What ``fit`` writes and prints after the fit: the saved model, ``--out``'s files and the
level metrics of a latent likelihood."""

from __future__ import annotations

from pathlib import Path

from .errors import CLIError
from .loading import Loaded


def save_model(fit, path: Path, loaded: Loaded, metric: str) -> None:
    """``fit.save`` with the dataset's own ids of the rows and columns beside it (the
    0-based indices for the simulator), so that ``predict``/``recommend`` speak them, and
    the time features' encoder (JSON) of a fit with ``--context``."""
    import json

    import numpy as np

    from ..inference.saving import save

    m1, m2 = fit.shape[:2]
    users = np.arange(m1) if loaded.user_ids is None else np.asarray(loaded.user_ids)
    items = np.arange(m2) if loaded.item_ids is None else np.asarray(loaded.item_ids)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # check_save refused an existing file before the fit unless --overwrite was given
        extra = {"user_ids": users, "item_ids": items}
        if loaded.time is not None:
            extra["time_encoder"] = np.array(json.dumps(loaded.time.to_dict()))
        if getattr(loaded, "time_edges", None) is not None:  # --time-bins
            extra["time_bin_edges"] = np.asarray(loaded.time_edges)
        save(fit, path, extra=extra, overwrite=True)
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise CLIError(
            f"could not write {path}: {' '.join(str(e).split())}; the fit itself finished "
            f"({metric})"
        ) from e


def proba_columns(fit, rows, cols, context=None):
    """Probit / ordered-probit fits: ``(names, probs (P, k))``, the predictive level
    probabilities at the entries (``p1`` = P(1) for probit, ``p_LEVEL`` per level for
    ordered probit; ``context``: the entries' per-rating table); ``([], None)`` for a
    Gaussian fit."""
    import numpy as np

    lik = fit.info.likelihood
    if not lik.latent:
        return [], None
    probs = np.asarray(fit.predict_proba(rows, cols, context=context), np.float64)
    if probs.ndim == 1:
        return ["p1"], probs[:, None]
    return [f"p_{v:g}" for v in lik.level_values], probs


def write_outputs(fit, out: Path, loaded: Loaded, metric: str, ranking=None, split=None) -> None:
    """Write ``--out``: predictions.csv first (cheap), then the top-N files
    (``ranking``, :func:`bmczoo.cli.topn.write`, with the test ``split``), then
    posterior.nc, then report/, so that a failure of a later one keeps the earlier ones.
    A failure (a full disk, a plotting error, ...) names the file and keeps the fit's
    result in the message."""
    import numpy as np

    from .. import diagnostics
    from . import topn

    test = loaded.test

    def failed(what, e):
        return CLIError(
            f"could not write {what}: {' '.join(str(e).split())}; the fit itself finished "
            f"({metric})"
        )

    try:
        out.mkdir(parents=True, exist_ok=True)
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out, e) from e
    pred = out / "predictions.csv"
    if getattr(test, "ndim", 2) != 2:  # --time-bins: a TensorFit
        return _write_tensor_outputs(fit, out, test, loaded, failed)
    try:
        if test is not None:
            # the dataset's own ids (rows and columns are indices among the sorted distinct ids)
            users = (
                np.asarray(loaded.user_ids)[test.rows] if loaded.user_ids is not None else test.rows
            )
            items = (
                np.asarray(loaded.item_ids)[test.cols] if loaded.item_ids is not None else test.cols
            )
            names, probs = proba_columns(fit, test.rows, test.cols)
            table = [users, items, test.values, fit.predict(test.rows, test.cols)] + (
                [probs] if names else []
            )
            np.savetxt(
                pred,
                np.column_stack(table),
                delimiter=",",
                header=",".join(["user_id", "item_id", "rating", "prediction"] + names),
                comments="",
                fmt=["%d", "%d", "%.10g", "%.6f"] + ["%.6f"] * len(names),
            )
        elif pred.is_file():  # --overwrite: no stale predictions of an earlier fit
            pred.unlink()
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(pred, e) from e
    try:
        topn.write(out, ranking, loaded.user_ids, split)
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out / topn.FILES[0], e) from e
    try:
        fit.to_arviz().to_netcdf(out / "posterior.nc")
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out / "posterior.nc", e) from e
    try:
        diagnostics.report(fit, out / "report")
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out / "report", e) from e


def _write_tensor_outputs(fit, out: Path, test, loaded: Loaded, failed) -> None:
    """``--out`` of a fit with ``--time-bins``: predictions.csv (the test entries with their
    time bin) and posterior.nc (the report's figures are the matrix fits' for now)."""
    import numpy as np

    users, items, bins = test.indices.T
    if loaded.user_ids is not None:
        users, items = np.asarray(loaded.user_ids)[users], np.asarray(loaded.item_ids)[items]
    pred = out / "predictions.csv"
    try:
        np.savetxt(
            pred,
            np.column_stack([users, items, bins, test.values, fit.predict(test.indices)]),
            delimiter=",",
            header="user_id,item_id,time_bin,rating,prediction",
            comments="",
            fmt=["%d", "%d", "%d", "%.10g", "%.6f"],
        )
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(pred, e) from e
    try:
        fit.to_arviz().to_netcdf(out / "posterior.nc")
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out / "posterior.nc", e) from e


def print_level_metrics(fit, test) -> None:
    """Probit: test log-loss, AUC and accuracy (at P = 0.5) of ``P(1)``; ordered probit:
    test log-loss of the levels (``-log P(Y = y)``, natural log).  Nothing for a Gaussian."""
    from ..inference.results.levels import classification_metrics

    lik = fit.info.likelihood
    if not lik.latent:
        return
    if lik.binary:
        m = classification_metrics(test.values, fit.predict_proba(test.rows, test.cols))
        print(f"test_log_loss={m['log_loss']:.4f}")
        print(f"test_auc={m['auc']:.4f}")
        print(f"test_accuracy={m['accuracy']:.4f}")
    else:
        print(f"test_level_log_loss={-fit.log_predictive_density(test):.4f}")
