"""Verified downloads of the MovieLens archives into the cache, extracted safely."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import urllib.error
import zipfile
import zlib
from functools import cache
from pathlib import Path, PurePosixPath

from ._releases import MovieLensInfo


class DownloadError(urllib.error.URLError):
    """A MovieLens archive could not be downloaded (no network, a refused connection, an
    HTTP error, a connection lost during the transfer).

    The message says from where, why (``reason``: the text of the underlying error) and
    how to load a local copy instead.  The instance also belongs to the underlying error's
    class (``ConnectionResetError``, ``TimeoutError``...), so that handlers written for
    that class still catch it.

    Parameters
    ----------
    message : str
        The whole message (what ``str()`` gives).
    reason : str
        What went wrong, in the words of the underlying error.
    url : str
        The address that failed.

    Attributes
    ----------
    message, reason, url : str
        As given.
    """

    def __init__(self, message: str, *, reason: str = "", url: str = ""):
        super().__init__(reason or message)
        self.args = (message,)
        self.message, self.url = message, url

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (_rebuild, (self.message, self.reason, self.url))


def _rebuild(message: str, reason: str, url: str) -> DownloadError:
    return DownloadError(message, reason=reason, url=url)


@cache
def _download_error_class(cause: type[BaseException]) -> type[DownloadError]:
    """:class:`DownloadError`, also a ``cause`` where that is an ``OSError`` other than
    urllib's (whose subclasses, such as ``HTTPError``, take other arguments)."""
    if not issubclass(cause, OSError) or issubclass(cause, urllib.error.URLError):
        return DownloadError
    return type("DownloadError", (DownloadError, cause), {"__module__": __name__})


def is_download_failure(e: BaseException) -> bool:
    """Whether ``e`` is a failed transfer (not, e.g., a full disk or a bad checksum)."""
    import http.client

    return isinstance(
        e, (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)
    )


def download_error(
    e: BaseException, info: MovieLensInfo, url: str, cache_folder: Path
) -> DownloadError:
    """The :class:`DownloadError` for the failure ``e`` of fetching ``url``: one line saying
    from where, why, and how to load a local copy instead."""
    reason = " ".join(str(getattr(e, "reason", None) or e or type(e).__name__).split())
    message = (
        f"MovieLens {info.name} could not be downloaded from {url} ({reason}). Without network "
        f"access, download {info.archive} elsewhere and pass path= to it, to the folder it "
        f"unpacks to or to its {info.filename}: load_movielens({info.name!r}, "
        f"path='{info.folder}/'); or unpack it into the cache folder {cache_folder}"
    )
    return _download_error_class(type(e))(message, reason=reason, url=url)


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


def _get(info: MovieLensInfo, url: str, dest: Path) -> None:
    """``_fetch(url, dest)``; a failed transfer raises one :class:`DownloadError` that says
    how to load a local copy instead, without the chain of urllib's errors behind it."""
    try:
        _fetch(url, dest)
    except Exception as e:  # noqa: BLE001 - filtered: only failed transfers are explained
        if not is_download_failure(e):
            raise
        # dest is <cache>/movielens/<staging folder>/<file>
        raise download_error(e, info, url, dest.parent.parent) from None


def _published_md5(info: MovieLensInfo, workdir: Path) -> str:
    """Fetch and read ``<url>.md5`` (``MD5 (x.zip) = <hex>`` or ``<hex>  x.zip``)."""
    dest = workdir / (info.archive + ".md5")
    _get(info, info.url + ".md5", dest)
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
        _get(info, info.url, archive)
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
