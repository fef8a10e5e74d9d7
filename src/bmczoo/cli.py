"""Command line: ``bmczoo fit``, ``bmczoo predict``, ``bmczoo recommend`` and ``bmczoo reproduce``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple

__all__ = ["main"]

_DEFAULT_PRIOR = "discrete"

_MOVIELENS = {
    "ml-100k": "100k",
    "ml-1m": "1m",
    "ml-10m": "10m",
    "ml-20m": "20m",
    "ml-25m": "25m",
    "ml-32m": "32m",
    "ml-latest-small": "latest-small",
}


class CLIError(Exception):
    """An error reported as one line, without a traceback."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``bmczoo: error: ...``, exit code 2)
    like every other error of the command line, instead of argparse's usage block."""

    def error(self, message):
        raise CLIError(f"{message} (see '{self.prog} --help')")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to every option's help unless the help already states its
    default, or the default is None / False / empty (nothing to show)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        # identity checks: a default of 0 is shown, False (a flag) is not
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or (isinstance(default, list) and not default)
        ):
            return text
        if not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def _priors() -> dict:
    """The zoo's priors by command-line name (:func:`bmczoo.priors.registry`)."""
    from .priors import registry

    return registry()


def _likelihoods() -> dict:
    """The likelihoods by command-line name (:func:`bmczoo.likelihoods.registry`)."""
    from .likelihoods import registry

    return registry()


def _prior_defaults(cls) -> dict:
    """The hyper-parameters ``bmczoo fit --prior NAME`` uses when no ``--hyper`` is given:
    the class's ``cli_defaults`` over its dataclass defaults (None: no default)."""
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        out[f.name] = cls.cli_defaults.get(f.name, default)
    return out


def _fmt_default(v) -> str:
    if v is None:
        return "?"
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _prior_help() -> str:
    """``--prior`` help: each prior of the registry with its default hyper-parameters."""
    parts = []
    for name, cls in sorted(_priors().items()):
        hyper = ", ".join(f"{k}={_fmt_default(v)}" for k, v in _prior_defaults(cls).items())
        parts.append(f"{name} ({hyper})" if hyper else name)
    text = (
        f"prior on the column scales gamma_h (default {_DEFAULT_PRIOR}), with its default hyper-parameters: "
        + "; ".join(parts)
    )
    return text.replace("%", "%%")  # argparse formats help strings with %


def _make_prior(name: str, hyper: dict[str, float]):
    """The prior ``name`` with its class defaults (``from_cli``) updated by ``hyper``."""
    cls = _priors()[name]
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(hyper) - set(fields))
    if unknown:
        raise CLIError(
            f"--hyper: the {name} prior has no hyper-parameter {', '.join(unknown)}; "
            f"it has {', '.join(fields)}"
        )
    return cls.from_cli(**hyper)


def _make_likelihood(name: str, settings: dict[str, float]):
    """The likelihood ``name`` of :func:`bmczoo.likelihoods.registry` with ``settings``."""
    from .likelihoods import get_likelihood

    try:
        return get_likelihood(name, **settings)
    except (TypeError, ValueError) as e:
        raise CLIError(f"--likelihood-opt: {e}") from None


def _parse_hyper(items: list[str], option: str = "--hyper") -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CLIError(f"{option} expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise CLIError(f"{option} {name}: {value!r} is not a number") from None
    return out


class _Loaded(NamedTuple):
    """What ``bmczoo fit --data SPEC`` fits: the training data, the test data (None for the
    simulator), the simulation (None for rating files) and the dataset's own ids of the rows
    and columns (None for the simulator): ``user_ids[i]`` is the id of row ``i``."""

    train: object
    test: object
    sim: object
    user_ids: object = None
    item_ids: object = None


# the exceptions of a failed download (urllib's URLError and HTTPError are OSErrors)
def _is_network_error(e: BaseException) -> bool:
    import http.client
    import socket
    import urllib.error

    return isinstance(
        e,
        (
            urllib.error.URLError,
            http.client.HTTPException,
            socket.gaierror,
            socket.timeout,
            ConnectionError,
            TimeoutError,
        ),
    )


def _load(spec: str, seed: int, test_fraction: float = 0.2, side_info: bool = False) -> _Loaded:
    """The data of ``--data SPEC``: ``sim:M``, a MovieLens name, or a path to a ratings file
    (judged by its content, whatever its name), a folder holding one, or an official .zip.
    ``side_info`` (``--features``): a MovieLens ratings file given by path (``u.data``,
    ``ratings.dat``, ``ratings.csv``, or a folder holding one) is read by
    :func:`bmczoo.datasets.load_movielens` with the side files beside it (names and official
    archives get them anyway)."""
    from . import datasets

    if spec.startswith("sim:"):
        try:
            m = int(spec[4:])
        except ValueError:
            raise CLIError(f"--data sim:M needs an integer M, got {spec!r}") from None
        sim = datasets.simulate_paper(m, seed=seed)
        return _Loaded(sim.train, None, sim)
    name = _MOVIELENS.get(spec, spec if spec in datasets.DATASETS else None)
    if name is not None:
        data, user_ids, item_ids = _download(name)
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            raise CLIError(
                f"--data {spec}: no such file or folder (or MovieLens name: {', '.join(_MOVIELENS)})"
            )
        if path.is_dir():
            data, user_ids, item_ids = _load_folder(path, side_info)
        else:
            data, user_ids, item_ids = _load_file(path, side_info)
    train, test = data.split(test_fraction, seed=0)
    return _Loaded(train, test, None, user_ids, item_ids)


def _download(name: str):
    """``load_movielens(name)`` from the cache or a download; a failed download is one
    ``CLIError`` saying how to give a local copy instead."""
    from . import datasets

    info = datasets.DATASETS[name]
    try:
        return datasets.load_movielens(name, return_ids=True)
    except Exception as e:  # noqa: BLE001 - any failure of the download is reported the same way
        if not (
            _is_network_error(e)
            or (isinstance(e, OSError) and not isinstance(e, FileNotFoundError))
        ):
            raise
        reason = " ".join(str(getattr(e, "reason", None) or e or type(e).__name__).split())
        local = (
            f"pass --data PATH to {info.archive}, to the folder it unpacks to, or to its {info.filename} "
            "(any ratings file is accepted)"
        )
        if not _is_network_error(e):  # the download worked, the cache could not be written
            raise CLIError(
                f"MovieLens {name} could not be stored in the cache {datasets.cache_root()} ({reason}); "
                f"set BMCZOO_CACHE to a writable folder, or {local}"
            ) from e
        raise CLIError(
            f"MovieLens {name} could not be downloaded from {info.url} ({reason}); without network "
            f"access, download {info.archive} elsewhere and {local}, or unpack it into "
            f"{datasets.cache_root() / 'movielens'}"
        ) from e


def _load_folder(path: Path, side_info: bool = False):
    from . import datasets

    for fname, name in (("u.data", "100k"), ("ratings.dat", "1m"), ("ratings.csv", "latest-small")):
        for cand in (path / fname, path / datasets.DATASETS[name].folder / fname):
            if cand.is_file():
                return _load_file(cand, side_info)
    raise CLIError(
        f"--data {path}: no u.data, ratings.dat or ratings.csv in this folder; "
        "give the ratings file itself (any name)"
    )


def _movielens_release(path: Path) -> str | None:
    """The MovieLens release whose ratings file ``path`` is, by its name and the side files
    beside it (None: not a MovieLens file name)."""
    if path.name == "u.data":
        return "100k"
    if path.name == "ratings.dat":
        return "1m" if (path.parent / "users.dat").is_file() else "10m"
    if path.name == "ratings.csv":
        return "latest-small"
    return None


def _load_file(path: Path, side_info: bool = False):
    """``(RatingData, user_ids, item_ids)`` of a ratings file, judged by its content: an
    official MovieLens .zip archive, or a table of ``user item rating [timestamp]`` lines
    separated by TAB, ',' or '::' (an optional header line), whatever the file's name.
    ``side_info``: a MovieLens ratings file (by name) is read with its side files."""
    import zipfile

    from . import datasets

    release = _movielens_release(path) if side_info else None
    if release is not None:
        try:
            return datasets.load_movielens(release, path=path, return_ids=True)
        except ValueError as e:
            raise CLIError(f"--data {path}: {' '.join(str(e).split())}") from None

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
        for info in datasets.DATASETS.values():
            if f"{info.folder}/{info.filename}" in names or info.filename in names:
                return datasets.load_movielens(info.name, path=path, return_ids=True)
        raise CLIError(
            f"--data {path}: a zip archive without a MovieLens ratings file "
            "(u.data, ratings.dat or ratings.csv)"
        )
    return _read_ratings_table(path.read_bytes(), str(path))


_NUMBER_START = b"0123456789+-."


def _read_ratings_table(data: bytes, source: str):
    """Parse ``user item rating [timestamp]`` lines (TAB, ',' or '::' between fields, an
    optional header line) into ``(RatingData, user_ids, item_ids)``, users as rows and items
    as columns, both in increasing order of their ids (as :func:`bmczoo.datasets.load_movielens`)."""
    import numpy as np

    from .datasets._parse import parse_numeric_table
    from .datasets.movielens import _to_ratingdata

    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]

    def fields(line: bytes):
        """The separator and number of fields of a line (None, 1 without a separator)."""
        sep = next((s for s in (b"::", b"\t", b",") if s in line), None)
        return sep, len(line.split(sep)) if sep else 1

    def not_a_table(lineno: int, line: bytes) -> CLIError:
        shown = line.decode("utf-8", "replace")[:80]
        return CLIError(
            f"--data {source}: not a ratings table: line {lineno} is {shown!r}; expected lines of "
            "user item rating [timestamp] separated by TAB, ',' or '::'"
        )

    first_line = 1
    head = data.partition(b"\n")[0].strip()
    if head and head[:1] not in _NUMBER_START:  # a header line (userId,movieId,rating,...)?
        if fields(head)[1] not in (3, 4):
            raise not_a_table(1, head)
        data, first_line = data.partition(b"\n")[2], 2
        head = data.partition(b"\n")[0].strip()
    if not head:
        raise CLIError(
            f"--data {source}: no ratings on line {first_line}: expected lines of "
            "user item rating [timestamp] separated by TAB, ',' or '::'"
        )
    sep, ncols = fields(head)
    if ncols not in (3, 4):
        raise not_a_table(first_line, head)
    try:
        table = parse_numeric_table(data, sep, ncols, source, first_line, usecols=(0, 1, 2))
    except ValueError as e:
        raise CLIError(f"--data {e}") from None
    for col, label in ((0, "user id"), (1, "item id")):
        c = table[:, col]
        bad = ~np.isfinite(c) | (c != np.round(c)) | (np.abs(c) > 2.0**53)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise CLIError(
                f"--data {source}, line {first_line + k}: {label} must be an integer, "
                f"got {table[k].tolist()}"
            )
    bad = ~np.isfinite(table[:, 2])  # a number too large for a float64 (1e999) is read as infinity
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise CLIError(
            f"--data {source}, line {first_line + k}: rating must be finite, got {table[k, 2]} (a number "
            "beyond the float64 range)"
        )
    try:
        return _to_ratingdata(table, source, first_line)
    except ValueError as e:  # a duplicate rating
        raise CLIError(f"--data {e}") from None


# --------------------------------------------------------------------------- output paths
# what ``fit --out DIR`` writes into DIR
_OUT_FILES = ("posterior.nc", "predictions.csv")
_OUT_DIRS = ("report",)


def _probe_writable(folder: Path, option: str, target: Path) -> None:
    """Raise ``CLIError`` unless a file can be created in ``folder`` (or, when it does not
    exist yet, in its nearest existing ancestor, which must be a folder)."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise CLIError(f"{option} {target}: cannot create it, {probe} is a file, not a folder")
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".bmczoo-write-test-")
    except OSError as e:
        raise CLIError(f"{option} {target}: cannot write in {probe} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(tmp)


def _check_out_dir(out: Path, overwrite: bool) -> None:
    """``fit --out DIR``, before the fit: DIR is or can become a writable folder, and holds
    none of the files the fit writes unless ``--overwrite``."""
    if out.exists() and not out.is_dir():
        raise CLIError(
            f"--out {out}: an existing file; --out names a folder (it is created if needed)"
        )
    _probe_writable(out, "--out", out)
    if out.is_dir():
        found = [n for n in _OUT_FILES + _OUT_DIRS if (out / n).exists()]
        if found and not overwrite:
            raise CLIError(
                f"--out {out}: already holds {', '.join(found)} of an earlier fit; "
                "use another folder or --overwrite to replace them"
            )
        for n in _OUT_FILES + _OUT_DIRS:
            if (out / n).exists() and (out / n).is_dir() != (n in _OUT_DIRS):
                kind = "folder" if (out / n).is_dir() else "file"
                raise CLIError(
                    f"--out {out}: {n} there is a {kind}; remove it or use another folder"
                )


def _check_checkpoint(path: Path, overwrite: bool) -> None:
    """``--checkpoint FILE``, before the fit: a bmczoo checkpoint there is resumed (the fit
    itself refuses one of a different run before it starts); any other existing file is
    an error unless ``--overwrite`` (then it is removed); the folder must be writable."""
    if path.is_dir():
        raise CLIError(f"--checkpoint {path}: an existing folder; --checkpoint names a .npz file")
    _probe_writable(path.parent, "--checkpoint", path)
    if path.exists() and not _is_checkpoint(path):
        if not overwrite:
            raise CLIError(
                f"--checkpoint {path}: an existing file that is not a bmczoo checkpoint; "
                "use another path or --overwrite to replace it"
            )
        path.unlink()


def _check_save(path: Path, overwrite: bool) -> None:
    """``fit --save FILE``, before the fit: not a folder, not an existing file unless
    ``--overwrite``, in a writable folder."""
    if path.is_dir():
        raise CLIError(f"--save {path}: an existing folder; --save names a file (e.g. model.npz)")
    if path.exists() and not overwrite:
        raise CLIError(
            f"--save {path}: an existing file; use another path or --overwrite to replace it"
        )
    _probe_writable(path.parent, "--save", path)


def _save_model(fit, path: Path, loaded: _Loaded, metric: str) -> None:
    """``fit.save`` with the dataset's own ids of the rows and columns beside it (the
    0-based indices for the simulator), so that ``predict``/``recommend`` speak them."""
    import numpy as np

    from .inference.saving import save

    m1, m2 = fit.shape
    users = np.arange(m1) if loaded.user_ids is None else np.asarray(loaded.user_ids)
    items = np.arange(m2) if loaded.item_ids is None else np.asarray(loaded.item_ids)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save(fit, path, extra={"user_ids": users, "item_ids": items})
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise CLIError(
            f"could not write {path}: {' '.join(str(e).split())}; the fit itself finished ({metric})"
        ) from e


def _is_checkpoint(path: Path) -> bool:
    import numpy as np

    from .inference.checkpoint import FORMAT

    try:
        with np.load(path, allow_pickle=False) as f:
            return "__format__" in f.files and str(f["__format__"]) == FORMAT
    except Exception:  # noqa: BLE001 - not a readable .npz: not a checkpoint
        return False


def _proba_columns(fit, rows, cols):
    """Probit / ordered-probit fits: ``(names, probs (P, k))``, the predictive level
    probabilities at the entries (``p1`` = P(1) for probit, ``p_LEVEL`` per level for
    ordered probit); ``([], None)`` for a Gaussian fit."""
    import numpy as np

    lik = fit.info.likelihood
    if not lik.latent:
        return [], None
    probs = np.asarray(fit.predict_proba(rows, cols), np.float64)
    if probs.ndim == 1:
        return ["p1"], probs[:, None]
    return [f"p_{v:g}" for v in lik.level_values], probs


def _binarize(data, threshold: float):
    """``data`` with values ``>= threshold`` set to 1 and the others to 0."""
    import numpy as np

    from .data import RatingData

    if data is None:
        return None
    values = (np.asarray(data.values) >= threshold).astype(np.float64)
    return RatingData(
        data.rows,
        data.cols,
        values,
        data.shape,
        row_features=data.row_features,
        col_features=data.col_features,
    )


def _write_outputs(fit, out: Path, test, loaded: _Loaded, metric: str) -> None:
    """Write ``--out``: predictions.csv first (cheap), then posterior.nc, then report/, so
    that a failure of a later one keeps the earlier ones.  A failure (a full disk, a
    plotting error, ...) names the file and keeps the fit's result in the message."""
    import numpy as np

    from . import diagnostics

    def failed(what, e):
        return CLIError(
            f"could not write {what}: {' '.join(str(e).split())}; the fit itself finished ({metric})"
        )

    try:
        out.mkdir(parents=True, exist_ok=True)
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out, e) from e
    pred = out / "predictions.csv"
    try:
        if test is not None:
            # the dataset's own ids (rows and columns are indices among the sorted distinct ids)
            users = (
                np.asarray(loaded.user_ids)[test.rows] if loaded.user_ids is not None else test.rows
            )
            items = (
                np.asarray(loaded.item_ids)[test.cols] if loaded.item_ids is not None else test.cols
            )
            names, probs = _proba_columns(fit, test.rows, test.cols)
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
        fit.to_arviz().to_netcdf(out / "posterior.nc")
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out / "posterior.nc", e) from e
    try:
        diagnostics.report(fit, out / "report")
    except Exception as e:  # noqa: BLE001 - reported with the fit's result
        raise failed(out / "report", e) from e


def _print_level_metrics(fit, test) -> None:
    """Probit: test log-loss, AUC and accuracy (at P = 0.5) of ``P(1)``; ordered probit:
    test log-loss of the levels (``-log P(Y = y)``, natural log).  Nothing for a Gaussian."""
    from .inference.results.levels import classification_metrics

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


_FEATURE_SIDES = {
    "rows": ("row_features",),
    "cols": ("col_features",),
    "both": ("row_features", "col_features"),
}


def _check_link_options(args, prior) -> None:
    """``--features`` / ``--implicit`` need the Normal-Wishart prior (the link is one of its
    components); checked before the data is read."""
    if args.features is None and args.implicit is None:
        return
    if prior.name != "normal-wishart":
        given = " and ".join(
            f"--{o}" for o in ("features", "implicit") if getattr(args, o) is not None
        )
        raise CLIError(
            f"{given} need --prior normal-wishart (the feature link of its rows' prior mean, "
            f"see the documentation's Priors page, 'Side information, implicit "
            f"feedback and cold start'), got --prior {args.prior}"
        )


def _link_prior(args, prior, train):
    """``prior`` with the feature links of ``--features`` (the data's side tables) and
    ``--implicit``; ``CLIError`` when a requested side has no table."""
    if args.features is None and args.implicit is None:
        return prior
    kw = {}
    if args.features is not None:
        names = {"row_features": "rows (users)", "col_features": "columns (items)"}
        if args.features == "auto":
            sides = tuple(n for n in names if getattr(train, n) is not None)
            if not sides:
                raise CLIError(
                    "--features: the data has no feature tables (the MovieLens loaders read the side "
                    "files beside the ratings: u.user/u.item, users.dat/movies.dat, movies.csv); "
                    "for implicit feedback only, use --implicit"
                )
        else:
            sides = _FEATURE_SIDES[args.features]
            missing = [names[n] for n in sides if getattr(train, n) is None]
            if missing:
                have = [
                    a
                    for a, n in (("rows", "row_features"), ("cols", "col_features"))
                    if getattr(train, n) is not None
                ]
                raise CLIError(
                    f"--features {args.features}: the data has no feature table for its "
                    f"{' and '.join(missing)}"
                    + (
                        f"; it has one for its {', '.join(have)}: --features {' '.join(have)}"
                        if have
                        else ""
                    )
                )
        kw.update({n: True for n in sides})
    if args.implicit is not None:
        kw["implicit"] = True if args.implicit == "both" else args.implicit
    return dataclasses.replace(prior, **kw)


def _cmd_fit(args) -> int:
    import numpy as np

    import bmczoo as bmc

    prior = _make_prior(args.prior, _parse_hyper(args.hyper))
    _check_link_options(args, prior)
    likelihood = _make_likelihood(
        args.likelihood, _parse_hyper(args.likelihood_opt, option="--likelihood-opt")
    )
    # every cheap argument is checked before the data is read
    if not 0.0 < args.test_fraction < 1.0:
        raise CLIError(f"--test-fraction must be in (0, 1), got {args.test_fraction:g}")
    if args.K < 1:
        raise CLIError(f"-K (the latent dimension) must be at least 1, got {args.K}")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    if args.binarize is not None and not np.isfinite(args.binarize):
        raise CLIError(f"--binarize THRESHOLD must be a finite number, got {args.binarize:g}")
    given = _method_settings(args)
    # every output path is checked before the data is read and the fit runs
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:
        _check_out_dir(out, args.overwrite)
    if args.checkpoint:
        _check_checkpoint(Path(args.checkpoint).expanduser(), args.overwrite)
    save_path = Path(args.save).expanduser() if args.save else None
    if save_path is not None:
        _check_save(save_path, args.overwrite)
    loaded = _load(args.data, args.seed, args.test_fraction, side_info=args.features is not None)
    if args.binarize is not None:
        loaded = loaded._replace(
            train=_binarize(loaded.train, args.binarize), test=_binarize(loaded.test, args.binarize)
        )
    train, test, sim = loaded.train, loaded.test, loaded.sim
    prior = _link_prior(args, prior, train)
    if likelihood.binary:
        vals = np.asarray(train.values)
        if not np.all((vals == 0) | (vals == 1)):
            raise CLIError(
                "--likelihood probit needs binary ratings 0/1; add --binarize THRESHOLD (e.g. "
                "--binarize 4: ratings >= 4 become 1, the others 0)"
            )
    print(f"data: {train!r} train" + (f", {test!r} test" if test is not None else ""))
    model = "".join(
        [
            f", likelihood: {likelihood.name}" if args.likelihood != "tempered" else "",
            ", biases" if args.biases else "",
        ]
    )
    print(
        f"prior: {prior}, K={args.K}, method={args.method}{model}"
        + (f", binarized at >= {args.binarize:g}" if args.binarize is not None else "")
    )
    predict = None
    if sim is not None:
        m = sim.theta.shape[0]
        predict = np.divmod(np.arange(m * m), m)
    fit = bmc.fit(
        train,
        K=args.K,
        prior=prior,
        method=args.method,
        seed=args.seed,
        test=test,
        predict=predict,
        progress_bar=not args.quiet,
        dtype=args.dtype,
        likelihood=likelihood,
        biases=args.biases,
        **given,
    )
    if sim is not None:
        metric = f"theta_rmse={fit.rmse_theta(sim.theta):.4f}"
    else:
        _print_level_metrics(fit, test)
        metric = f"test_rmse={fit.rmse(test):.4f}"
    _INTERRUPTS.phase, _INTERRUPTS.metric = "outputs", metric
    if save_path is not None:  # first: the fit itself is what a later failure must not lose
        _save_model(fit, save_path, loaded, metric)
        print(f"wrote {save_path}")
    if out is not None:
        _write_outputs(fit, out, test, loaded, metric)
        print(f"wrote {out}/")
    print(metric)
    return 0


# --------------------------------------------------------------------------- saved models
class _Model(NamedTuple):
    fit: object
    user_ids: object  # user_ids[i]: the dataset's id of row i
    item_ids: object


def _load_model(spec: str) -> _Model:
    """``--model FILE``: a fit saved by ``bmczoo fit --save`` (or ``fit.save``: then the
    ids are the 0-based row and column indices)."""
    import numpy as np

    from .inference.saving import load, load_extra

    path = Path(spec).expanduser()
    if not path.is_file():
        raise CLIError(f"--model {spec}: no such file (write one with bmczoo fit ... --save FILE)")
    try:
        fit = load(path)
        extra = load_extra(path)
    except ValueError as e:
        raise CLIError(f"--model {e}") from None
    m1, m2 = fit.shape
    users = np.asarray(extra.get("user_ids", np.arange(m1)))
    items = np.asarray(extra.get("item_ids", np.arange(m2)))
    if users.shape != (m1,) or items.shape != (m2,):
        raise CLIError(f"--model {spec}: its id maps do not fit its {m1} x {m2} shape")
    return _Model(fit, users, items)


def _index_of(ids, wanted, what: str, where=None):
    """Positions of ``wanted`` ids among ``ids``; an unknown id is one ``CLIError``."""
    import numpy as np

    ids = np.asarray(ids)
    wanted = np.asarray(wanted)
    order = np.argsort(ids, kind="stable")
    pos = np.clip(np.searchsorted(ids[order], wanted), 0, ids.size - 1)
    found = ids[order][pos] == wanted
    if not np.all(found):
        k = int(np.flatnonzero(~found)[0])
        shown = wanted[k].item() if hasattr(wanted[k], "item") else wanted[k]
        place = f" ({where(k)})" if where is not None else ""
        raise CLIError(
            f"unknown {what} id {shown}{place}: the model knows {ids.size} {what}s "
            f"(ids {ids.min()}..{ids.max()})"
        )
    return order[pos]


def _read_pairs(spec: str):
    """``--entries FILE``: lines ``user item`` (TAB, ',', '::' or spaces between; extra
    fields ignored; an optional header line) -> (users, items, first line number)."""
    import numpy as np

    path = Path(spec).expanduser()
    if not path.is_file():
        raise CLIError(f"--entries {spec}: no such file")
    users, items = [], []
    first = None
    for lineno, raw in enumerate(
        path.read_text(encoding="utf-8-sig", errors="replace").splitlines(), 1
    ):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = (line.replace("::", ",").replace("\t", ",").replace(",", " ")).split()
        try:
            u, i = (int(float(x)) if float(x) == int(float(x)) else None for x in parts[:2])
            if len(parts) < 2 or u is None or i is None:
                raise ValueError
        except (ValueError, OverflowError):
            if first is None and not users:  # a header line
                first = lineno + 1
                continue
            raise CLIError(
                f"--entries {spec}, line {lineno}: expected 'user_id item_id', got {line[:80]!r}"
            ) from None
        users.append(u)
        items.append(i)
    if not users:
        raise CLIError(f"--entries {spec}: no 'user_id item_id' lines")
    return np.asarray(users, np.int64), np.asarray(items, np.int64)


def _check_prob(prob: float) -> float:
    if not 0.0 < prob < 1.0:
        raise CLIError(f"--prob must be in (0, 1), got {prob:g}")
    return prob


def _cmd_predict(args) -> int:
    import numpy as np

    prob = _check_prob(args.prob)
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:
        if out.is_dir():
            raise CLIError(f"--out {out}: an existing folder; --out names a .csv file")
        if out.exists() and not args.overwrite:
            raise CLIError(
                f"--out {out}: an existing file; use another path or --overwrite to replace it"
            )
        _probe_writable(out.parent, "--out", out)
    model = _load_model(args.model)
    users, items = _read_pairs(args.entries)
    rows = _index_of(model.user_ids, users, "user", lambda k: f"entry {k + 1} of {args.entries}")
    cols = _index_of(model.item_ids, items, "item", lambda k: f"entry {k + 1} of {args.entries}")
    mean, sd = model.fit.predict(rows, cols, return_std=True)
    lo, hi = model.fit.predictive_interval(rows, cols, prob=prob)
    pct = f"{100 * prob:g}"
    names, probs = _proba_columns(model.fit, rows, cols)
    header = ",".join([f"user_id,item_id,mean,sd,lo{pct},hi{pct}"] + names)
    table = np.column_stack([users, items, mean, sd, lo, hi] + ([probs] if names else []))
    fmt = ["%d", "%d", "%.6f", "%.6f", "%.6f", "%.6f"] + ["%.6f"] * len(names)
    if out is None:
        np.savetxt(sys.stdout, table, delimiter=",", header=header, comments="", fmt=fmt)
    else:
        np.savetxt(out, table, delimiter=",", header=header, comments="", fmt=fmt)
        print(f"wrote {out} ({len(users)} entries)")
    return 0


def _cmd_recommend(args) -> int:
    import numpy as np

    prob = _check_prob(args.prob)
    if args.n < 1:
        raise CLIError(f"-n must be at least 1, got {args.n}")
    model = _load_model(args.model)
    m2 = model.fit.shape[1]
    if args.n > m2:
        raise CLIError(f"-n {args.n}: the model has {m2} items")
    users = np.asarray(args.user, np.int64)
    rows = _index_of(model.user_ids, users, "user")
    try:
        items, scores = model.fit.recommend(
            rows,
            n=args.n,
            exclude_seen=not args.include_seen,
            by=args.by,
            prob=prob,
            seed=args.seed,
        )
    except ValueError as e:
        if "factor draws" in str(e):
            raise CLIError(f"{' '.join(str(e).split())} (bmczoo fit --store-factors)") from None
        raise
    print("user_id,rank,item_id,score")
    for u, its, scs in zip(users, np.asarray(items), np.asarray(scores)):
        for rank, (i, sc) in enumerate(zip(its, scs), 1):
            if i < 0:  # fewer than n unseen items
                break
            print(f"{int(u)},{rank},{int(model.item_ids[i])},{sc:.6f}")
    return 0


def _method_settings(args) -> dict:
    """``bmc.fit``'s method options given on the command line (those left out keep the
    method's defaults), checked before the data is read: an option of another method or
    a bad value is one ``CLIError`` naming the option as the command line spells it."""
    from .inference.settings import settings_for

    given = {
        name: getattr(args, dest)
        for name, dest in _METHOD_OPTIONS.items()
        if getattr(args, dest) is not None
    }
    if "store_factors" in given:
        given["store_factors"] = {"auto": "auto", "yes": True, "no": False}[given["store_factors"]]
    try:
        settings_for(args.method, **given)
    except (TypeError, ValueError) as e:
        # the names of bmc.fit's arguments (num_warmup=) as the options that set them (--num-warmup)
        names = sorted(_METHOD_OPTIONS, key=len, reverse=True)
        text = re.sub(
            r"\s*\(whose arguments are [^)]*\)", "", str(e)
        )  # bmc.fit's names, not options
        pattern = r"\b(" + "|".join(names) + r")\b(=?)"
        text = re.sub(
            pattern, lambda m: _option_flag(m.group(1)) + (" " if m.group(2) else ""), text
        )
        text = re.sub(
            r"\bmethod=('\w+'(?: or '\w+')*)",
            lambda m: "--method " + m.group(1).replace("'", ""),
            text,
        )
        raise CLIError(" ".join(text.split())) from None
    return given


def _option_flag(name: str) -> str:
    """The command-line option of ``bmc.fit``'s argument ``name`` (``num_chains`` -> ``--chains``)."""
    return "--" + _METHOD_OPTIONS[name].replace("_", "-")


# bmc.fit's name of each method-specific option -> argparse dest
_METHOD_OPTIONS = {
    "num_warmup": "num_warmup",
    "num_samples": "num_samples",
    "thinning": "thinning",
    "num_chains": "chains",
    "max_iter": "max_iter",
    "tol": "tol",
    "num_steps": "num_steps",
    "overrelax": "overrelax",
    "checkpoint": "checkpoint",
    "checkpoint_every": "checkpoint_every",
    "store_factors": "store_factors",
    "column_moves": "column_moves",
    "column_moves_every": "column_moves_every",
    "anneal_steps": "anneal_steps",
    "anneal_every": "anneal_every",
}


def _cmd_reproduce(args) -> int:
    from .experiments import format_table, run_experiment

    if args.jobs < 1:
        raise CLIError(f"--jobs must be at least 1, got {args.jobs}")
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:  # a cache folder: its finished fits are reused, never overwritten
        if out.exists() and not out.is_dir():
            raise CLIError(f"--out {out}: an existing file; --out names the cache folder")
        _probe_writable(out, "--out", out)
    print(
        f"reproducing {args.experiment}"
        + (" (quick)" if args.quick else "")
        + "; each finished fit is cached, "
        "a rerun resumes",
        flush=True,
    )
    settings = None
    if not args.column_moves:
        from .experiments.tasks import FULL, QUICK

        settings = dataclasses.replace(QUICK if args.quick else FULL, column_moves=False)
    priors = [p.strip() for p in args.priors.split(",")] if args.priors else None
    # a bad --priors is the runner's ValueError (it names the rows there are): one line
    rows = run_experiment(
        args.experiment,
        quick=args.quick,
        out=out,
        progress=not args.quiet,
        data_dir=args.data_dir,
        jobs=args.jobs,
        settings=settings,
        priors=priors,
    )
    print()
    print(format_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="bmczoo",
        description="Bayesian low-rank matrix completion (Alquier, Cottet, Chopin, Rousseau priors) "
        "with conjugate Gibbs sampling on JAX.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_fit, _add_predict, _add_recommend, _add_reproduce):
        add(sub)
    return p


def _add_debug_option(parser) -> None:
    """``--debug`` and ``--no-compilation-cache``, which every subcommand takes."""
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the Python traceback of an error (also BMCZOO_DEBUG=1)",
    )
    parser.add_argument(
        "--no-compilation-cache",
        dest="compilation_cache",
        action="store_false",
        help="do not use JAX's persistent compilation cache (default: on, in ~/.cache/bmczoo/jax "
        "or $BMCZOO_CACHE/jax, unless JAX_COMPILATION_CACHE_DIR names another folder)",
    )


def _enable_compilation_cache(args) -> None:
    """The persistent compilation cache for this command, unless turned off or configured
    already (JAX_COMPILATION_CACHE_DIR / ``jax.config``: that folder is kept)."""
    if not getattr(args, "compilation_cache", False):
        return
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    from ._cache import enable_compilation_cache

    try:
        enable_compilation_cache()
    except OSError as e:  # an unwritable cache folder costs time, not the run
        print(f"bmczoo: note: compilation cache off ({e})", file=sys.stderr)


def _add_fit(sub) -> None:
    """The ``fit`` subcommand."""
    f = sub.add_parser(
        "fit",
        help="fit a model and print the RMSE",
        description="Fit the low-rank model. With MovieLens data or a ratings file the ratings are split "
        "into train and test (--test-fraction, numpy default_rng(0)) and the last line is test_rmse=<float>; "
        "with the simulator (sim:M) the last line is theta_rmse=<float> over all M^2 entries. Every output "
        "path is checked before the fit starts; an error is one line on stderr and exit code 2.",
        formatter_class=_HelpFormatter,
    )
    f.add_argument(
        "--data",
        default="sim:100",
        help="ml-100k | ml-1m | ... (downloaded once into the cache) | PATH to a ratings file of any "
        "name whose lines are user item rating [timestamp] separated by TAB, ',' or '::' (u.data, "
        "u1.base, ratings.dat, ratings.csv, ...; an optional header line), a folder holding u.data / "
        "ratings.dat / ratings.csv, or an official MovieLens .zip | sim:M (the paper's simulation "
        "with an M x M matrix) (default: sim:100)",
    )
    f.add_argument("--prior", default=_DEFAULT_PRIOR, choices=sorted(_priors()), help=_prior_help())
    f.add_argument(
        "--hyper",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a hyper-parameter of the prior, repeatable; the others keep the prior's defaults "
        "(listed under --prior: the paper's values)",
    )
    f.add_argument(
        "--features",
        nargs="?",
        const="auto",
        default=None,
        choices=["rows", "cols", "both", "auto"],
        help="normal-wishart prior: link the rows' (users') and/or columns' (items') prior means to "
        "the data's side tables (Macau); auto (also the flag alone): every side the data has a table "
        "for. MovieLens data "
        "gets them from the side files beside the ratings (ML-100K u.user/u.item, ML-1M "
        "users.dat/movies.dat, movies.csv/movies.dat of the other releases); default: no features",
    )
    f.add_argument(
        "--implicit",
        default=None,
        choices=["rows", "cols", "both"],
        help="normal-wishart prior: implicit-feedback features of the same link (SVD++): for a row "
        "the items it rated in the training data, for a column the users who rated it, "
        "normalised by |R|^-1/2; default: none",
    )
    f.add_argument(
        "--likelihood",
        default="tempered",
        choices=sorted(_likelihoods()),
        help="observation model: tempered (the paper's Gaussian, fixed noise; its lam/noise_sd via "
        "--likelihood-opt), learned (Gaussian with tau ~ Gamma(a, b) learned; a, b, temper), probit "
        "(binary 0/1 ratings, e.g. with --binarize 4; P(1) = Phi(theta - threshold), threshold read "
        "from the data unless given) or ordered-probit (ordinal levels read from the data, e.g. 1-5 "
        "stars, with learned cut points of prior scale cut_scale=2); probit prints test log-loss, AUC "
        "and accuracy, ordered-probit the test log-loss of the levels, before test_rmse (of P(1), or "
        "of the expected level)",
    )
    f.add_argument(
        "--likelihood-opt",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the likelihood, repeatable (e.g. noise_sd=0.9, a=2 for learned, threshold=0 "
        "for probit, cut_scale=1 for ordered-probit); default: the likelihood's own defaults",
    )
    f.add_argument(
        "--binarize",
        type=float,
        default=None,
        metavar="THRESHOLD",
        help="replace every rating by 1 if >= THRESHOLD, else 0 (train and test), for --likelihood "
        "probit (default: none, ratings as given)",
    )
    f.add_argument(
        "--biases",
        action="store_true",
        help="add row and column biases b_i + c_j with inverse-gamma variances",
    )
    f.add_argument(
        "--method",
        default="gibbs",
        choices=["gibbs", "vb", "svi", "map", "nuts"],
        help="gibbs (default), vb (closed-form variational Bayes), svi (NumPyro AutoNormal), "
        "map (AutoDelta), nuts (NumPyro NUTS: small problems only)",
    )
    f.add_argument("-K", type=int, default=5, help="latent dimension (default 5)")
    # method-specific options default to the method's own settings (bmc.inference.settings)
    f.add_argument(
        "--num-warmup", type=int, default=None, help="gibbs/nuts: warm-up sweeps (default 100)"
    )
    f.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="gibbs/nuts: sweeps after warm-up (default 900)",
    )
    f.add_argument(
        "--thinning", type=int, default=None, help="gibbs/nuts: keep every N-th draw (default 10)"
    )
    f.add_argument(
        "--chains",
        type=int,
        default=None,
        help="gibbs/nuts: chains advanced side by side (default 4); vb: random starts, the best "
        "ELBO kept (default 1)",
    )
    f.add_argument(
        "--max-iter", type=int, default=None, help="vb: maximum iterations (default 200)"
    )
    f.add_argument(
        "--tol",
        type=float,
        default=None,
        help="vb: stop when the relative change of the ELBO is below TOL (default 1e-4; 0: run "
        "--max-iter iterations)",
    )
    f.add_argument(
        "--num-steps", type=int, default=None, help="svi/map: optimisation steps (default 2000)"
    )
    f.add_argument("--seed", type=int, default=0, help="seed of the simulation and of the fit")
    f.add_argument(
        "--overrelax",
        type=float,
        default=None,
        metavar="RHO",
        help="gibbs: over-relaxed row updates, RHO in (-1, 1) (default 0: plain Gibbs; -0.7 mixes "
        "faster)",
    )
    f.add_argument(
        "--column-moves",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="gibbs: end each sweep with the moves that change gamma_h together with its column (the "
        "discrete prior's aimed spike/slab flip, the continuous priors' scale walk); "
        "--no-column-moves: the paper's plain sweep (default: the moves wherever the prior has one)",
    )
    f.add_argument(
        "--column-moves-every",
        type=int,
        default=None,
        metavar="S",
        help="gibbs: run the column moves every S sweeps (default 1: every sweep)",
    )
    f.add_argument(
        "--anneal-steps",
        type=int,
        default=None,
        metavar="T",
        help="gibbs, discrete prior: every --anneal-every sweeps, switch one column between spike and "
        "slab along a path of T steps (Metropolis-Hastings on the work; default 0: none)",
    )
    f.add_argument(
        "--anneal-every",
        type=int,
        default=None,
        metavar="S",
        help="gibbs: sweeps between two annealed switches (default 50)",
    )
    f.add_argument(
        "--checkpoint",
        default=None,
        metavar="FILE.npz",
        help="gibbs/vb: save the state there every --checkpoint-every iterations and on Ctrl-C; "
        "rerun the same command to resume (an existing file that is not a bmczoo checkpoint is an "
        "error unless --overwrite) (default: none)",
    )
    f.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="N",
        help="gibbs/vb: iterations between checkpoints (default 100)",
    )
    f.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="folder for posterior.nc (ArviZ), predictions.csv (ratings data: the test ratings as "
        "user_id,item_id,rating,prediction with the dataset's own ids; probit adds p1, ordered-probit p_LEVEL "
        "per level) and report/ (diagnostics "
        "figures and summary tables); checked before the fit (default: none, nothing written)",
    )
    f.add_argument(
        "--save",
        default=None,
        metavar="FILE.npz",
        help="save the fitted model there (fit.save: .npz + JSON, no pickle, with the dataset's ids) for "
        "bmczoo predict / recommend; checked before the fit (default: none)",
    )
    f.add_argument(
        "--store-factors",
        choices=["auto", "yes", "no"],
        default=None,
        help="gibbs/nuts: keep the factor draws M, N (needed by recommend, fold-in and predictions at "
        "new entries from a saved model; default auto: when they take < 256 MiB)",
    )
    f.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the outputs of an earlier fit in --out, an existing --save file, and a "
        "--checkpoint file that is not a bmczoo checkpoint (a checkpoint is always resumed)",
    )
    f.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        metavar="F",
        help="ratings data: fraction of the ratings held out as the test set, in (0, 1)",
    )
    f.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default=None,
        help="floating-point precision of the fit (default: float32, or float64 when JAX_ENABLE_X64 "
        "is set); float64 is slower but avoids the failed Cholesky factorisations float32 can hit",
    )
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_debug_option(f)
    f.set_defaults(func=_cmd_fit)


def _add_predict(sub) -> None:
    """The ``predict`` subcommand."""
    pr = sub.add_parser(
        "predict",
        help="predict entries with a saved model: mean, sd and interval",
        description="Posterior predictive mean, sd and central --prob interval at the (user, item) pairs of "
        "--entries, with a model written by 'bmczoo fit --save', in the dataset's own ids. Output: CSV "
        "user_id,item_id,mean,sd,loP,hiP on stdout (or --out); a probit model adds p1 = P(1), an ordered-probit "
        "model one column p_LEVEL per level (its predictive level probabilities). An error is one line on "
        "stderr and exit code 2.",
        formatter_class=_HelpFormatter,
    )
    pr.add_argument(
        "--model", required=True, metavar="FILE.npz", help="a model saved by bmczoo fit --save"
    )
    pr.add_argument(
        "--entries",
        required=True,
        metavar="PAIRS.csv",
        help="lines 'user_id item_id' (TAB, ',' or spaces between; an optional header line; further "
        "fields ignored)",
    )
    pr.add_argument(
        "--prob", type=float, default=0.9, help="probability of the central predictive interval"
    )
    pr.add_argument(
        "--out", default=None, metavar="FILE.csv", help="write the CSV there (default: stdout)"
    )
    pr.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    _add_debug_option(pr)
    pr.set_defaults(func=_cmd_predict)


def _add_recommend(sub) -> None:
    """The ``recommend`` subcommand."""
    rc = sub.add_parser(
        "recommend",
        help="top-N items of users with a saved model",
        description="The top -n items of each --user (dataset ids in and out), by posterior mean, upper "
        "credible bound (--by upper) or one posterior draw (--by thompson), leaving out the items the user rated "
        "in training. Output: CSV user_id,rank,item_id,score (score on the data scale, unclipped). Needs the factor "
        "draws for Gibbs/NUTS models (fit with --store-factors yes on large data).",
        formatter_class=_HelpFormatter,
    )
    rc.add_argument(
        "--model", required=True, metavar="FILE.npz", help="a model saved by bmczoo fit --save"
    )
    rc.add_argument(
        "--user",
        required=True,
        type=int,
        action="append",
        metavar="ID",
        help="a user id of the dataset, repeatable",
    )
    rc.add_argument("-n", type=int, default=10, help="number of items per user")
    rc.add_argument(
        "--by", choices=["mean", "upper", "thompson"], default="mean", help="ranking score"
    )
    rc.add_argument(
        "--prob", type=float, default=0.9, help="--by upper: probability of the central interval"
    )
    rc.add_argument("--seed", type=int, default=0, help="--by thompson: seed of the posterior draw")
    rc.add_argument(
        "--include-seen", action="store_true", help="also rank the items the user rated in training"
    )
    _add_debug_option(rc)
    rc.set_defaults(func=_cmd_recommend)


def _add_reproduce(sub) -> None:
    """The ``reproduce`` subcommand."""
    r = sub.add_parser(
        "reproduce",
        help="rerun one of the paper's experiments and print its table beside ours",
        description="Rerun an experiment of the paper: simulation-m (Tables 2-3), simulation-K (Tables 4-5) "
        "or movielens (Table 6, plus rows the paper does not have: the Normal-Wishart prior alone and with learned "
        "noise and biases, '—' in the paper column). Hyper-parameters are chosen on a validation split of the "
        "training data "
        "(grid x1/2, x1, x2 around the paper's value; for the discrete prior also the Gibbs start, slab or "
        "spike); the paper's own values are run too. Results are cached per fit, so an interrupted run resumes.",
        formatter_class=_HelpFormatter,
    )
    r.add_argument("experiment", choices=["simulation-m", "simulation-K", "movielens"])
    r.add_argument(
        "--quick", action="store_true", help="small version: one dataset, short chains (minutes)"
    )
    r.add_argument("--out", default=None, help="cache folder (default ~/.cache/bmczoo/experiments)")
    r.add_argument(
        "--data-dir",
        default=None,
        help="movielens: folder with the extracted archives (ml-100k/u.data, ml-1m/ratings.dat, ...) "
        "(default: none, the archives are downloaded once into the cache)",
    )
    r.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run N fits at a time in separate processes (default 1; same results for any N)",
    )
    r.add_argument("--quiet", action="store_true", help="print only the final table")
    r.add_argument(
        "--priors",
        default=None,
        metavar="NAMES",
        help="simulation-m / simulation-K: only these priors' rows, comma-separated, e.g. discrete "
        "(default: all rows)",
    )
    r.add_argument(
        "--column-moves",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the Gibbs fits of the discrete, inverse-gamma and gamma priors end each sweep with the "
        "column moves (bmc.fit's default); --no-column-moves: the paper's plain sweep for every prior, "
        "cached apart from the runs with the moves",
    )
    _add_debug_option(r)
    r.set_defaults(func=_cmd_reproduce)


def _error_line(e: BaseException) -> str:
    """The one line printed for an error: the message of an expected error, the first line
    of an unexpected one with its type."""
    if _is_network_error(e):
        reason = " ".join(str(getattr(e, "reason", None) or e).split())
        return (
            f"a download failed ({reason}); without network access give local files "
            "(fit: --data PATH; reproduce movielens: --data-dir FOLDER)"
        )
    text = str(e)
    if isinstance(e, FloatingPointError):  # the library's hint, in command-line terms
        text = text.replace("dtype=jnp.float64", "--dtype float64")
    if isinstance(e, (CLIError, ValueError, OSError, FloatingPointError)):
        return " ".join(text.split()) or type(e).__name__
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (
        f"{type(e).__name__}: {first} (rerun with --debug for the traceback)"
        if first
        else f"{type(e).__name__} (rerun with --debug for the traceback)"
    )


# --------------------------------------------------------------------------- Ctrl-C
class _Interrupts:
    """Ctrl-C of the console command: one line on stderr and exit code 130, whatever the
    process is doing.

    Python's own handling raises ``KeyboardInterrupt`` at the next bytecode of the main
    thread, which may be inside JAX's tracing, a garbage-collector callback of XLA (where
    the exception is printed as "ignored" and the run goes on) or code that XLA's threads
    depend on; and after it the interpreter's teardown can race XLA's compilation and
    execution threads into a segmentation fault.  So the console command (:func:`main`
    with ``argv=None``) takes SIGINT off the main thread: Python's C-level handler only
    writes the signal to a pipe (``signal.set_wakeup_fd``; the Python-level handler does
    nothing), which a watcher thread reads at once, even while the main thread is inside
    XLA.  The watcher then either asks a checkpointed run loop holding unsaved work to
    save and stop at its next boundary between compiled calls
    (:func:`bmczoo.inference.checkpoint.request_stop`; it raises ``KeyboardInterrupt``,
    which :func:`main` reports) or, with nothing to save (or on a second Ctrl-C), prints
    the line and ends the process with ``os._exit(130)``, after any checkpoint or model
    file being written is complete (``checkpoint.WRITE_LOCK``).  No teardown runs after
    an interrupt.  ``main(argv)`` called from Python keeps Python's ``KeyboardInterrupt``.
    """

    def __init__(self):
        self.installed = False
        self.count = 0
        self.args = None  # the parsed command line, for the message
        self.phase = "start"  # "start" (reading data, compiling, fitting) or "outputs"
        self.metric = ""  # the fit's result, once known

    def install(self) -> bool:
        """Take SIGINT for the rest of the process (main thread only); False if not possible."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        reader, writer = os.pipe()  # kept open for the life of the process
        os.set_blocking(writer, False)  # set_wakeup_fd needs a non-blocking descriptor
        signal.signal(signal.SIGINT, _sigint_noted)
        signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
        threading.Thread(
            target=self._watch, args=(reader,), name="bmczoo-ctrl-c", daemon=True
        ).start()
        self.installed = True
        return True

    def _watch(self, reader: int) -> None:
        while True:
            try:
                received = os.read(reader, 64)
            except OSError:
                return
            if not received:
                return
            if signal.SIGINT in received:
                self._on_sigint()

    def _on_sigint(self) -> None:
        self.count += 1
        # a run loop can be waiting only if its module was imported (never import from here)
        ck = sys.modules.get("bmczoo.inference.checkpoint")
        if self.count == 1 and ck is not None and ck.request_stop():
            return  # the loop saves, raises KeyboardInterrupt, and main() reports it
        self.exit(self.line(again=self.count > 1))

    def line(self, again: bool = False) -> str:
        """The message for an interrupt without a message of a run loop."""
        a = self.args
        if a is None or a.command != "fit":
            return "interrupted"
        if self.phase == "outputs":
            return f"interrupted while writing the outputs; the fit itself finished ({self.metric})"
        if a.checkpoint:
            path = Path(a.checkpoint).expanduser()
            if path.exists():
                lead = (
                    "interrupted again before the checkpoint was updated"
                    if again
                    else "interrupted"
                )
                return (
                    f"{lead}; {path} keeps the work saved so far: rerun the same command to resume"
                )
            return f"interrupted before any work was saved in {path}; rerun the same command to start again"
        if a.method in ("gibbs", "vb"):
            return (
                "interrupted; nothing was saved (run with --checkpoint FILE.npz to make a fit resumable: "
                "Ctrl-C then saves the work done, and the same command resumes it)"
            )
        return "interrupted; nothing was saved"

    def exit(self, line: str) -> None:
        """Print ``bmczoo: LINE`` and end the process with exit code 130, without the
        interpreter's teardown, once no checkpoint or model file is half-written."""
        ck = sys.modules.get("bmczoo.inference.checkpoint")
        if ck is not None:
            ck.WRITE_LOCK.acquire()  # never released: the process ends holding it
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream: the line still goes out
                pass
        newline = "\n" if _bar_showing() else ""  # below a progress bar's last line
        try:
            os.write(2, f"{newline}bmczoo: {line}\n".encode("utf-8", "replace"))
        finally:
            os._exit(130)


def _sigint_noted(signum, frame) -> None:
    """The Python-level SIGINT handler of the console command: nothing (the watcher
    thread of :class:`_Interrupts` acts on the signal)."""


def _bar_showing() -> bool:
    """Whether a tqdm progress bar is displayed now (its line has no newline yet)."""
    std = sys.modules.get("tqdm.std")
    try:
        return any(
            not getattr(bar, "disable", True) for bar in list(getattr(std.tqdm, "_instances", ()))
        )
    except Exception:  # noqa: BLE001 - tqdm not imported, or its set changed meanwhile
        return False


_INTERRUPTS = _Interrupts()


def _interrupted_line(e: KeyboardInterrupt) -> str:
    """The message of an interrupt: the run loop's (where its checkpoint is), in
    command-line terms, else the one that fits the phase of the command."""
    text = " ".join(str(e).split())
    if not text:
        return _INTERRUPTS.line()
    return text.replace("call fit again with the same arguments", "rerun the same command")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0, 2 on any error, 130 on Ctrl-C).

    Every error is one line on stderr, ``bmczoo: error: ...``, without a traceback, unless
    ``--debug`` is given or ``BMCZOO_DEBUG`` is set to a non-empty value other than 0.
    Called without ``argv`` (the console command), Ctrl-C ends the process from a watcher
    thread (:class:`_Interrupts`): one line and exit code 130 at any moment."""
    debug = os.environ.get("BMCZOO_DEBUG", "") not in ("", "0")
    if argv is None:
        _INTERRUPTS.install()
    _INTERRUPTS.args, _INTERRUPTS.phase, _INTERRUPTS.metric = None, "start", ""
    try:
        args = build_parser().parse_args(argv)
        _INTERRUPTS.args = args
        debug = debug or getattr(args, "debug", False)
        _enable_compilation_cache(args)
        return args.func(args)
    except KeyboardInterrupt as e:
        line = _interrupted_line(e)
        if _INTERRUPTS.installed:  # no teardown racing XLA's threads
            _INTERRUPTS.exit(line)
        print(f"bmczoo: {line}", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the command line never ends in a traceback
        if debug:
            raise
        print(f"bmczoo: error: {_error_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
