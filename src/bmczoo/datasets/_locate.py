"""Where a MovieLens ratings file and its side files are: a given file, folder or archive,
or the cache (filled by a download)."""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

from ._download import download_into_cache
from ._releases import MovieLensInfo
from ._side_files import SideFiles


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``cache_dir``, else ``$BMCZOO_CACHE``, else
    ``$XDG_CACHE_HOME/bmczoo`` (``~/.cache/bmczoo`` by default)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("BMCZOO_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "bmczoo"


def _find_in_folder(folder: Path, info: MovieLensInfo) -> Path | None:
    for cand in (folder / info.filename, folder / info.folder / info.filename):
        if cand.is_file():
            return cand
    return None


def _read_from_zip(path: Path, info: MovieLensInfo) -> tuple[bytes, str]:
    member = f"{info.folder}/{info.filename}"
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            for cand in (member, info.filename):
                if cand in names:
                    return zf.read(cand), f"{path}!{cand}"
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{path}: not a valid zip archive ({exc})") from exc
    raise ValueError(f"{path}: the archive has no member {member!r}")


def _side_of(path: Path, source: str) -> SideFiles:
    """The side files beside the ratings read from ``path`` (as given to the loader) and
    named ``source`` in messages (``<archive>!<member>`` for a zip archive)."""
    if path.is_file() and path.suffix.lower() == ".zip":
        member = source[len(str(path)) + 1 :]
        return SideFiles(
            archive=path, prefix=member.rpartition("/")[0] + "/" if "/" in member else ""
        )
    return SideFiles(folder=Path(source).parent)


def _read_given(p: Path, info: MovieLensInfo) -> tuple[bytes, str]:
    """The bytes of the ratings file at ``p`` (the file, a folder holding it, or the
    ``.zip`` archive) and the name to use in error messages."""
    if p.is_dir():
        found = _find_in_folder(p, info)
        if found is None:
            raise FileNotFoundError(
                f"no MovieLens {info.name} ratings file in {p}: looked for {info.filename} "
                f"and {info.folder}/{info.filename}"
            )
        p = found
    elif not p.is_file():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.suffix.lower() == ".zip":
        return _read_from_zip(p, info)
    return p.read_bytes(), str(p)


def _read_cached(info: MovieLensInfo, root: Path, download: bool) -> tuple[bytes, str]:
    """The bytes of the cached ratings file under ``root`` (downloaded first when missing
    and ``download``) and its path as a string."""
    found = root / "movielens" / info.folder / info.filename
    if not found.is_file():
        if not download:
            raise FileNotFoundError(
                f"MovieLens {info.name} is not in the cache {root / 'movielens' / info.folder}; "
                f"pass path=... or download=True (fetches {info.url})"
            )
        found = download_into_cache(info, root)
    return found.read_bytes(), str(found)


def locate(info: MovieLensInfo, path, cache_dir, download: bool) -> tuple[bytes, str, SideFiles]:
    """The ratings bytes, their name for messages, and where their side files are."""
    if path is not None:
        p = Path(path).expanduser()
        data, source = _read_given(p, info)
        return data, source, _side_of(p, source)
    data, source = _read_cached(info, cache_root(cache_dir), download)
    return data, source, SideFiles(folder=Path(source).parent)


def locate_side(info: MovieLensInfo, path, cache_dir, download: bool) -> SideFiles:
    """Where the side files are (the ratings file is found as by :func:`locate`, not read)."""
    if path is None:
        found = cache_root(cache_dir) / "movielens" / info.folder / info.filename
        if not found.is_file():
            _read_cached(info, cache_root(cache_dir), download)  # the cache's error, or a download
        return SideFiles(folder=found.parent)
    p = Path(path).expanduser()
    if p.is_dir():
        found = _find_in_folder(p, info)
        if found is None:
            _read_given(p, info)  # raises the loader's error
        p = found
    elif not p.is_file():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.suffix.lower() == ".zip":
        member = f"{info.folder}/{info.filename}"
        try:
            with zipfile.ZipFile(p) as zf:
                names = set(zf.namelist())
        except (zipfile.BadZipFile, zlib.error) as exc:
            raise ValueError(f"{p}: not a valid zip archive ({exc})") from exc
        if member not in names and info.filename not in names:
            raise ValueError(f"{p}: the archive has no member {member!r}")
        return SideFiles(archive=p, prefix=f"{info.folder}/" if member in names else "")
    return SideFiles(folder=p.parent)
