"""The output paths of ``fit`` (``--out``, ``--checkpoint``, ``--save``), checked before the
data is read and the fit runs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import CLIError

# what ``fit --out DIR`` writes into DIR
_OUT_FILES = ("posterior.nc", "predictions.csv", "topn.json", "topn_per_user.csv")
_OUT_DIRS = ("report",)


def probe_writable(folder: Path, option: str, target: Path) -> None:
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


def check_out_dir(out: Path, overwrite: bool) -> None:
    """``fit --out DIR``, before the fit: DIR is or can become a writable folder, and holds
    none of the files the fit writes unless ``--overwrite``."""
    if out.exists() and not out.is_dir():
        raise CLIError(
            f"--out {out}: an existing file; --out names a folder (it is created if needed)"
        )
    probe_writable(out, "--out", out)
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


def check_checkpoint(path: Path, overwrite: bool) -> None:
    """``--checkpoint FILE``, before the fit: a bmczoo checkpoint there is resumed (the fit
    itself refuses one of a different run before it starts); any other existing file is
    an error unless ``--overwrite`` (then it is removed); the folder must be writable."""
    if path.is_dir():
        raise CLIError(f"--checkpoint {path}: an existing folder; --checkpoint names a .npz file")
    probe_writable(path.parent, "--checkpoint", path)
    if path.exists() and not is_checkpoint(path):
        if not overwrite:
            raise CLIError(
                f"--checkpoint {path}: an existing file that is not a bmczoo checkpoint; "
                "use another path or --overwrite to replace it"
            )
        path.unlink()


def check_save(path: Path, overwrite: bool) -> None:
    """``fit --save FILE``, before the fit: not a folder, not an existing file unless
    ``--overwrite``, in a writable folder."""
    if path.is_dir():
        raise CLIError(f"--save {path}: an existing folder; --save names a file (e.g. model.npz)")
    if path.exists() and not overwrite:
        raise CLIError(
            f"--save {path}: an existing file; use another path or --overwrite to replace it"
        )
    probe_writable(path.parent, "--save", path)


def is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a checkpoint that bmczoo wrote (a readable .npz of its format)."""
    import numpy as np

    from ..inference.checkpoint import FORMAT

    try:
        with np.load(path, allow_pickle=False) as f:
            return "__format__" in f.files and str(f["__format__"]) == FORMAT
    except Exception:  # noqa: BLE001 - not a readable .npz: not a checkpoint
        return False
