"""Verified downloads of the MovieLens archives into the cache, extracted safely."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from ._releases import MovieLensInfo


def _fetch(url: str, dest: Path) -> None:  # pragma: no cover - needs the network
    """Download ``url`` to the file ``dest`` (streamed, with a progress bar on a terminal)."""
    import urllib.request

    from tqdm.auto import tqdm

    req = urllib.request.Request(url, headers={"User-Agent": "bmczoo (Python urllib)"})
    with urllib.request.urlopen(req, timeout=60) as resp, open(dest, "wb") as out:
        total = resp.headers.get("Content-Length")
        with tqdm(
            total=int(total) if total else None,
            unit="B",
            unit_scale=True,
            desc=dest.name,
            disable=None,
            leave=False,
        ) as bar:
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                out.write(block)
                bar.update(len(block))


def _md5_of(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _published_md5(info: MovieLensInfo, workdir: Path) -> str:
    """Fetch and read ``<url>.md5`` (``MD5 (x.zip) = <hex>`` or ``<hex>  x.zip``)."""
    dest = workdir / (info.archive + ".md5")
    _fetch(info.url + ".md5", dest)
    text = dest.read_text(encoding="utf-8", errors="replace")
    found = {h.lower() for h in re.findall(r"\b[0-9a-fA-F]{32}\b", text)}
    if len(found) != 1:
        raise ValueError(f"could not read an MD5 sum from {info.url}.md5: {text[:200]!r}")
    return found.pop()


def _unsafe_reason(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    if not name:
        return "empty member name"
    if "\\" in name or "\x00" in name:
        return "backslash or NUL in the member name"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in PurePosixPath(name).parts:
        return "'..' in the path"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if mode and stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "special file"
    return None


def _safe_extract(archive: Path, dest: Path) -> None:
    """Extract ``archive`` into the folder ``dest``, refusing unsafe members.

    Raises
    ------
    ValueError
        For a corrupt archive, or any member with an absolute path, a ``..`` component,
        a backslash, or which is a symbolic link or special file (nothing is extracted
        in that case: all members are checked first).
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for m in members:
                reason = _unsafe_reason(m)
                if reason:
                    raise ValueError(
                        f"{archive.name}: refusing to extract member {m.filename!r} ({reason})"
                    )
            root = dest.resolve()
            for m in members:
                target = dest.joinpath(*PurePosixPath(m.filename).parts)
                if not target.resolve().is_relative_to(root):  # belt and braces
                    raise ValueError(f"{archive.name}: member {m.filename!r} would escape {dest}")
                if m.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    out = open(target, "xb")
                except FileExistsError:
                    raise ValueError(f"{archive.name}: duplicate member {m.filename!r}") from None
                with zf.open(m) as src, out:
                    shutil.copyfileobj(src, out, 1 << 20)
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{archive.name}: corrupt zip archive ({exc})") from exc


def download_into_cache(info: MovieLensInfo, root: Path) -> Path:
    """Download, verify and extract ``info``'s archive; return the cached ratings file."""
    parent = root / "movielens"
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / info.folder
    staging = Path(tempfile.mkdtemp(prefix=f".{info.folder}-", suffix=".partial", dir=parent))
    try:
        archive = staging / info.archive
        _fetch(info.url, archive)
        expected = info.md5 if info.md5 is not None else _published_md5(info, staging)
        got = _md5_of(archive)
        if got != expected.lower():
            raise ValueError(
                f"checksum mismatch for {info.url}: expected MD5 {expected}, got {got}; "
                "the download was discarded"
            )
        extracted = staging / "extracted"
        extracted.mkdir()
        _safe_extract(archive, extracted)
        if not (extracted / info.folder / info.filename).is_file():
            raise ValueError(f"{info.archive} does not contain {info.folder}/{info.filename}")
        try:
            os.rename(extracted / info.folder, final)  # atomic on one file system
        except OSError as exc:
            if not (final / info.filename).is_file():  # not a concurrent download that won
                raise FileExistsError(
                    f"cannot create the cache entry {final}: {exc}; remove that folder and retry"
                ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final / info.filename
