"""MovieLens loaders: formats, path forms, strict errors, cache and (fake) downloads."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import stat
import zipfile
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.datasets import DATASETS, load_movielens
from bmczoo.datasets import _download, _parse, movielens
from bmczoo.datasets.movielens import resolve_name


# (user, item, rating, timestamp) in file order; ids deliberately sparse and unsorted
RECORDS_INT = [
    (10, 7, 4, 881250949),
    (3, 7, 5, 891717742),
    (10, 200, 1, 878887116),
    (7, 3, 2, 880606923),
    (3, 200, 3, 886397596),
]
RECORDS_HALF = [
    (10, 7, 4.5, 1260759144),
    (3, 7, 0.5, 1260759179),
    (10, 200, 1.0, 1260759182),
    (7, 3, 2.5, 1260759185),
    (3, 200, 5.0, 1260759205),
]
USER_IDS, ITEM_IDS = [3, 7, 10], [3, 7, 200]

FORMATS = {  # name -> (file name, folder of the official archive, records)
    "100k": ("u.data", "ml-100k", RECORDS_INT),
    "1m": ("ratings.dat", "ml-1m", RECORDS_INT),
    "10m": ("ratings.dat", "ml-10M100K", RECORDS_HALF),
    "20m": ("ratings.csv", "ml-20m", RECORDS_HALF),
    "25m": ("ratings.csv", "ml-25m", RECORDS_HALF),
    "32m": ("ratings.csv", "ml-32m", RECORDS_HALF),
    "latest-small": ("ratings.csv", "ml-latest-small", RECORDS_HALF),
}


def _fmt(x) -> str:
    return str(int(x)) if float(x).is_integer() and not isinstance(x, float) else str(x)


def ratings_text(name: str, records, header: bool = True) -> str:
    sep = DATASETS[name].sep
    lines = [sep.join(_fmt(v) for v in rec) for rec in records]
    if DATASETS[name].header and header:
        lines.insert(0, "userId,movieId,rating,timestamp")
    return "\n".join(lines) + "\n"


def write_ratings(folder: Path, name: str, records=None, header: bool = True) -> Path:
    filename, _, default = FORMATS[name]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(ratings_text(name, default if records is None else records, header))
    return path


def check_small(data, user_ids, item_ids, records) -> None:
    assert isinstance(data, bmc.RatingData)
    assert data.n == len(records)
    assert data.shape == (3, 3)
    assert user_ids.tolist() == USER_IDS and item_ids.tolist() == ITEM_IDS
    # file order preserved, and the maps give back the original ids
    assert user_ids[data.rows].tolist() == [r[0] for r in records]
    assert item_ids[data.cols].tolist() == [r[1] for r in records]
    assert data.values.tolist() == [float(r[2]) for r in records]
    assert data.values.dtype == np.float64


# --------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def real_100k(ml100k):
    return load_movielens("100k", ml100k / "u.data", return_ids=True)


def test_real_100k(real_100k, ml100k):
    data, user_ids, item_ids = real_100k
    info = DATASETS["100k"]
    assert data.n == 100_000 == info.n_ratings
    assert data.shape == (943, 1682) == info.shape
    assert set(np.unique(data.values).tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert user_ids.tolist() == list(range(1, 944)) and item_ids.tolist() == list(range(1, 1683))
    # first line of u.data: "196\t242\t3\t881250949"
    first = (ml100k / "u.data").read_text().split("\n", 1)[0].split("\t")
    assert (user_ids[data.rows[0]], item_ids[data.cols[0]], data.values[0]) == (
        int(first[0]),
        int(first[1]),
        float(first[2]),
    )


def test_real_100k_folder_equals_file(real_100k, ml100k):
    assert load_movielens("ml-100k", ml100k) == real_100k[0]


# --------------------------------------------------------------------------- formats and paths
@pytest.mark.parametrize("name", list(FORMATS))
def test_each_format_file_and_folders(tmp_path, name):
    filename, folder, records = FORMATS[name]
    path = write_ratings(tmp_path / "x" / folder, name)
    for p in (path, path.parent, tmp_path / "x"):  # the file, its folder, the archive's parent
        check_small(*load_movielens(name, p, return_ids=True), records)
    # str paths work too, and the default return is just the RatingData
    assert load_movielens(name, str(path)) == load_movielens(name, path, return_ids=True)[0]


@pytest.mark.parametrize("name", ["1m", "10m", "latest-small"])
def test_zip_archive_as_path(tmp_path, name):
    filename, folder, records = FORMATS[name]
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{folder}/{filename}", ratings_text(name, records))
        zf.writestr(f"{folder}/README.txt", "readme")
    check_small(*load_movielens(name, archive, return_ids=True), records)


def test_csv_without_header_and_crlf(tmp_path):
    p = write_ratings(tmp_path, "latest-small", header=False)
    check_small(*load_movielens("latest-small", p, return_ids=True), RECORDS_HALF)
    p.write_bytes(ratings_text("latest-small", RECORDS_HALF).replace("\n", "\r\n").encode())
    check_small(*load_movielens("latest-small", p, return_ids=True), RECORDS_HALF)


def test_ids_are_readonly_and_sorted(tmp_path):
    _, users, items = load_movielens("1m", write_ratings(tmp_path, "1m"), return_ids=True)
    assert not users.flags.writeable and not items.flags.writeable
    assert users.dtype == np.int64


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("100k", "100k"),
        ("ML-100K", "100k"),
        ("ml_1m", "1m"),
        ("ml-10m", "10m"),
        ("ml-10M100K", "10m"),
        ("ml-20m", "20m"),
        ("25M", "25m"),
        ("ml-32m", "32m"),
        ("ml-latest-small", "latest-small"),
        ("latest_small", "latest-small"),
    ],
)
def test_name_aliases(alias, canonical):
    assert resolve_name(alias) == canonical


@pytest.mark.parametrize("bad", ["5m", "ml-latest", "", "100"])
def test_unknown_name(bad):
    with pytest.raises(ValueError, match="unknown MovieLens dataset"):
        load_movielens(bad, "/nonexistent")


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_movielens("100k", tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="u.data"):
        load_movielens("100k", tmp_path)  # a folder without the file


def test_datasets_table():
    assert list(DATASETS) == ["100k", "1m", "10m", "20m", "25m", "32m", "latest-small"]
    assert (DATASETS["100k"].n_ratings, DATASETS["100k"].shape) == (100_000, (943, 1682))
    assert (DATASETS["1m"].n_ratings, DATASETS["1m"].shape) == (1_000_209, (6040, 3706))
    assert (DATASETS["10m"].n_ratings, DATASETS["10m"].shape) == (10_000_054, (69878, 10677))
    assert DATASETS["10m"].folder == "ml-10M100K" and DATASETS["10m"].archive == "ml-10m.zip"
    for info in DATASETS.values():
        assert info.url == f"https://files.grouplens.org/datasets/movielens/{info.archive}"
        assert info.md5 is None or re.fullmatch(r"[0-9a-f]{32}", info.md5)
    with pytest.raises(TypeError):
        DATASETS["x"] = DATASETS["100k"]  # type: ignore[index]


# --------------------------------------------------------------------------- corrupt files
CORRUPT = [  # (name, text, pattern that the error message must match)
    ("100k", "1\t2\t3\t4\n1\t3\t3\t4\n2\t2\t3\n", r"u\.data, line 3: expected 4 fields.*found 3"),
    ("100k", "1\t2\t3\t4\n1\t3\t3\t4\n2\t2", r"line 3: expected 4 fields"),  # truncated file
    ("100k", "1\t2\t3\t4\n1\t3\t3\t4\t9\n", r"line 2: expected 4 fields.*found 5"),
    ("100k", "1\t2\t3\t4\n1\tabc\t3\t4\n", r"line 2: unexpected character 'a'"),
    ("100k", "1\t2\t3\t4\n1\t\t3\t4\n", r"line 2"),
    ("100k", "1\t2\t3\t4\n\n1\t3\t3\t4\n", r"line 2: expected 4 fields.*found 0"),
    ("100k", "1\t2\t3\t4\n1\t3\t3 \t4\n", r"line 2: unexpected character ' '"),
    ("100k", "1\t2\t3\t4\n1\t3\t1.2.3\t4\n", r"line 2, field 3: '1.2.3' is not a number"),
    ("100k", "1\t2\t3\t4\n1\t3\t-\t4\n", r"line 2, field 3: '-' is not a number"),
    ("100k", "1\t2\t3\t4\n1.5\t3\t3\t4\n", r"line 2: user id must be an integer"),
    (
        "100k",
        "1\t2\t3\t4\n2\t2\t3\t4\n1\t2\t5\t9\n",
        r"duplicate rating of movie 2 by user 1 on lines 1 and 3",
    ),
    ("100k", "", r"u\.data: no data lines"),
    ("100k", "\n\n", r"no data lines"),
    ("1m", "1::2::3::4\n1::3:3::4\n", r"ratings\.dat, line 2: expected 4 fields separated by '::'"),
    ("1m", "1::2::3::4\n1:::3::3::4\n", r"line 2"),
    ("1m", "1::2::3::4\n1::3::3\n", r"line 2: expected 4 fields.*found 3"),
    ("1m", "1\t2\t3\t4\n1::3::3::4\n", r"line 2: unexpected character ':'"),
    (
        "25m",
        "userId,movieId,rating,timestamp\n1,2,3.5,4\n1,3,x,4\n",
        r"ratings\.csv, line 3: unexpected character 'x'",
    ),
    ("25m", "userId,movieId,rating,timestamp\n1,2,3.5,4\n1,3,4.5\n", r"line 3: expected 4 fields"),
    ("25m", "movieId,userId,rating,timestamp\n1,2,3.5,4\n", r"line 1: unexpected header"),
    ("25m", "userId,movieId,timestamp,rating\n1,2,3,4.5\n", r"line 1: unexpected header"),
    ("25m", "userId,movieId,rating,timestamp\n", r"no data lines"),
    # NaN and infinity are numbers to float(), not ratings
    (
        "100k",
        "1\t2\t3\t4\n1\t3\tnan\t4\n",
        r"line 2: .*field 3 is 'nan', and NaN or infinity is not a valid rating",
    ),
    (
        "1m",
        "1::2::3::4\n1::3::-Inf::4\n",
        r"line 2: .*field 3 is '-Inf', and NaN or infinity is not a valid rating",
    ),
    (
        "25m",
        "userId,movieId,rating,timestamp\n1,2,3.5,4\n1,3,NaN,4\n",
        r"ratings\.csv, line 3: .*field 3 is 'NaN'",
    ),
    ("100k", "1\t2\t3\t4\n1\t3\t1e999\t4\n", r"line 2: rating must be finite"),
    ("100k", "1\t2\t3\t4\n1\t3\t" + "9" * 400 + "\t4\n", r"line 2: rating must be finite"),
]


@pytest.mark.parametrize("name, text, pattern", CORRUPT)
def test_corrupt_files_name_file_and_line(tmp_path, name, text, pattern):
    path = tmp_path / FORMATS[name][0]
    path.write_text(text)
    with pytest.raises(ValueError, match=pattern) as err:
        load_movielens(name, path)
    assert str(path) in str(err.value) or path.name in str(err.value)


def test_line_numbers_across_chunks(tmp_path, monkeypatch):
    """With tiny chunks, a corrupt line deep in the file is still located exactly."""
    monkeypatch.setattr(_parse, "_CHUNK_BYTES", 64)
    rng = np.random.default_rng(3)
    lines = [
        f"{u}::{i}::{r}::{t}"
        for u, i, r, t in zip(
            rng.integers(1, 10**6, 900),
            np.arange(900) + 1,
            rng.integers(1, 6, 900),
            rng.integers(0, 10**9, 900),
        )
    ]
    path = tmp_path / "ratings.dat"
    path.write_text("\n".join(lines) + "\n")
    data, users, items = load_movielens("1m", path, return_ids=True)
    assert users[data.rows].tolist() == [int(s.split("::")[0]) for s in lines]
    bad = list(lines)
    bad[776] = bad[776].rsplit("::", 1)[0]  # line 777 loses its timestamp
    path.write_text("\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"line 777: expected 4 fields"):
        load_movielens("1m", path)
    bad = list(lines)
    bad[512] += "x"
    path.write_text("\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"line 513: unexpected character 'x'"):
        load_movielens("1m", path)
    # exponents force the numpy.fromstring path; a malformed number is still located
    bad = list(lines)
    bad[99] = bad[99].rsplit("::", 2)[0] + "::4e0::1e9"
    data2 = load_movielens("1m", _write(path, bad))
    assert data2.values[99] == 4.0 and np.array_equal(
        np.delete(data2.values, 99), np.delete(data.values, 99)
    )
    bad[599] = bad[599].rsplit("::", 2)[0] + "::1.2.3::5"
    with pytest.raises(ValueError, match=r"line 600, field 3: '1\.2\.3' is not a number"):
        load_movielens("1m", _write(path, bad))


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_numbers_parse_exactly_like_float():
    """The vectorised decimal parser gives the same doubles as ``float(text)``."""
    rng = np.random.default_rng(0)
    texts = []
    for _ in range(4000):
        k = int(rng.integers(1, 17))
        digits = "".join(rng.choice(list("0123456789"), size=k))
        if k > 1 and rng.random() < 0.5:  # a decimal point somewhere inside
            p = int(rng.integers(1, k))
            digits = digits[:p] + "." + digits[p:]
        if rng.random() < 0.3 and len(digits) < 16:
            digits = "-" + digits
        texts.append(digits)
    texts = [t for t in texts if len(t) <= 16]
    ncols = 4
    texts = texts[: len(texts) // ncols * ncols]
    body = "\n".join(",".join(texts[i : i + ncols]) for i in range(0, len(texts), ncols))
    got = _parse.parse_numeric_table(body.encode(), b",", ncols, "t").reshape(-1)
    want = np.array([float(t) for t in texts])
    assert np.array_equal(got, want)
    # exponents and '+' signs take the numpy.fromstring path, with the same results
    other = ["1e3", "+2", "2.", ".5", "-0.25", "12345678901234567890"]
    got = _parse.parse_numeric_table(",".join(other).encode(), b",", len(other), "t").reshape(-1)
    assert got.tolist() == [float(t) for t in other]


def test_usecols_skips_conversion_but_checks_fields():
    out = _parse.parse_numeric_table(
        b"1\t2\t3.5\t99\n4\t5\t6\t100\n", b"\t", 4, "t", usecols=(0, 2)
    )
    assert out.tolist() == [[1.0, 3.5], [4.0, 6.0]]
    with pytest.raises(ValueError, match="line 2, field 4"):
        _parse.parse_numeric_table(
            b"1\t2\t3.5\t99\n4\t5\t6\t1.0.0\n", b"\t", 4, "t", usecols=(0, 2)
        )


# --------------------------------------------------------------------------- cache and downloads
def make_zip(
    path: Path, members: dict[str, str | bytes], symlinks: dict[str, str] | None = None
) -> bytes:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path.read_bytes()


class FakeServer:
    """Stands in for files.grouplens.org: ``_fetch(url, dest)`` copies from a dict."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.calls: list[str] = []

    def __call__(self, url: str, dest: Path) -> None:
        self.calls.append(url)
        if url not in self.files:
            raise OSError(f"404 {url}")
        Path(dest).write_bytes(self.files[url])


def use_md5(monkeypatch, name: str, md5: str | None) -> movielens.MovieLensInfo:
    """Swap the pinned checksum of ``name`` (the fake archive is not the real one)."""
    table = dict(movielens.DATASETS)
    table[name] = dataclasses.replace(table[name], md5=md5)
    monkeypatch.setattr(movielens, "DATASETS", MappingProxyType(table))
    return table[name]


def cache_listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def fake_archive(tmp_path: Path, name: str) -> bytes:
    filename, folder, records = FORMATS[name]
    return make_zip(
        tmp_path / "src.zip",
        {f"{folder}/{filename}": ratings_text(name, records), f"{folder}/README": "readme"},
    )


def test_download_verify_extract_then_cache(tmp_path, monkeypatch):
    blob = fake_archive(tmp_path, "1m")
    info = use_md5(monkeypatch, "1m", hashlib.md5(blob).hexdigest())
    server = FakeServer({info.url: blob})
    monkeypatch.setattr(_download, "_fetch", server)
    cache = tmp_path / "cache"
    check_small(*load_movielens("ml-1m", cache_dir=cache, return_ids=True), RECORDS_INT)
    assert server.calls == [info.url]
    assert (cache / "movielens/ml-1m/ratings.dat").is_file()
    assert not [
        p for p in (cache / "movielens").iterdir() if p.name.startswith(".")
    ]  # no staging left
    # second call: served from the cache, no network
    monkeypatch.setattr(_download, "_fetch", FakeServer({}))
    check_small(
        *load_movielens("1m", cache_dir=cache, return_ids=True, download=False), RECORDS_INT
    )


def test_checksum_mismatch_leaves_no_cache_entry(tmp_path, monkeypatch):
    info = DATASETS["100k"]  # the real pinned MD5: the fake archive cannot match it
    server = FakeServer({info.url: fake_archive(tmp_path, "100k")})
    monkeypatch.setattr(_download, "_fetch", server)
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=f"checksum mismatch.*expected MD5 {info.md5}"):
        load_movielens("100k", cache_dir=cache)
    assert cache_listing(cache) == ["movielens"]


def test_companion_md5_file_for_unpinned_archive(tmp_path, monkeypatch):
    assert DATASETS["latest-small"].md5 is None
    info = DATASETS["latest-small"]
    blob = fake_archive(tmp_path, "latest-small")
    good = hashlib.md5(blob).hexdigest()
    monkeypatch.setattr(
        _download,
        "_fetch",
        FakeServer(
            {info.url: blob, info.url + ".md5": f"MD5 (ml-latest-small.zip) = {good}\n".encode()}
        ),
    )
    data = load_movielens("latest-small", cache_dir=tmp_path / "a")
    assert data.n == len(RECORDS_HALF)
    # GNU-style companion file, upper case
    monkeypatch.setattr(
        _download,
        "_fetch",
        FakeServer(
            {info.url: blob, info.url + ".md5": f"{good.upper()}  ml-latest-small.zip\n".encode()}
        ),
    )
    assert load_movielens("latest-small", cache_dir=tmp_path / "b") == data
    # a companion that disagrees with the archive
    monkeypatch.setattr(
        _download,
        "_fetch",
        FakeServer(
            {info.url: blob, info.url + ".md5": b"MD5 (ml-latest-small.zip) = " + b"0" * 32}
        ),
    )
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_movielens("latest-small", cache_dir=tmp_path / "c")
    assert cache_listing(tmp_path / "c") == ["movielens"]
    # an unreadable companion
    monkeypatch.setattr(
        _download, "_fetch", FakeServer({info.url: blob, info.url + ".md5": b"<html>"})
    )
    with pytest.raises(ValueError, match="could not read an MD5"):
        load_movielens("latest-small", cache_dir=tmp_path / "d")


@pytest.mark.parametrize(
    "members, symlinks, reason",
    [
        ({"ml-100k/u.data": "1\t1\t1\t1\n", "../evil.txt": "pwned"}, None, r"'\.\.'"),
        ({"ml-100k/u.data": "1\t1\t1\t1\n", "ml-100k/../../evil.txt": "pwned"}, None, r"'\.\.'"),
        ({"ml-100k/u.data": "1\t1\t1\t1\n", "/tmp/evil.txt": "pwned"}, None, "absolute path"),
        (
            {"ml-100k/u.data": "1\t1\t1\t1\n", "ml-100k\\..\\..\\evil.txt": "pwned"},
            None,
            "backslash",
        ),
        ({"ml-100k/u.data": "1\t1\t1\t1\n"}, {"ml-100k/link": "/etc/passwd"}, "symbolic link"),
    ],
)
def test_unsafe_archives_are_rejected(tmp_path, monkeypatch, members, symlinks, reason):
    blob = make_zip(tmp_path / "evil.zip", members, symlinks)
    info = use_md5(monkeypatch, "100k", hashlib.md5(blob).hexdigest())
    monkeypatch.setattr(_download, "_fetch", FakeServer({info.url: blob}))
    cache = tmp_path / "deep" / "cache"
    with pytest.raises(ValueError, match=f"refusing to extract.*{reason}"):
        load_movielens("100k", cache_dir=cache)
    assert cache_listing(cache) == ["movielens"]
    assert not list(tmp_path.rglob("evil.txt"))


def test_archive_without_ratings_or_corrupt(tmp_path, monkeypatch):
    blob = make_zip(tmp_path / "x.zip", {"ml-100k/README": "no ratings here"})
    info = use_md5(monkeypatch, "100k", hashlib.md5(blob).hexdigest())
    monkeypatch.setattr(_download, "_fetch", FakeServer({info.url: blob}))
    with pytest.raises(ValueError, match="does not contain ml-100k/u.data"):
        load_movielens("100k", cache_dir=tmp_path / "c1")
    assert cache_listing(tmp_path / "c1") == ["movielens"]
    junk = b"this is not a zip archive" * 10
    info = use_md5(monkeypatch, "100k", hashlib.md5(junk).hexdigest())
    monkeypatch.setattr(_download, "_fetch", FakeServer({info.url: junk}))
    with pytest.raises(ValueError, match="corrupt zip"):
        load_movielens("100k", cache_dir=tmp_path / "c2")
    assert cache_listing(tmp_path / "c2") == ["movielens"]


def test_failed_fetch_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(_download, "_fetch", FakeServer({}))
    with pytest.raises(OSError, match="404"):
        load_movielens("10m", cache_dir=tmp_path)
    assert cache_listing(tmp_path) == ["movielens"]


def test_no_download_without_permission(tmp_path, monkeypatch):
    server = FakeServer({})
    monkeypatch.setattr(_download, "_fetch", server)
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_movielens("1m", cache_dir=tmp_path, download=False)
    assert server.calls == []


def test_cache_location_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BMCZOO_CACHE", str(tmp_path / "envcache"))
    assert movielens.cache_root() == tmp_path / "envcache"
    assert movielens.cache_root(tmp_path / "explicit") == tmp_path / "explicit"
    write_ratings(tmp_path / "envcache" / "movielens" / "ml-10M100K", "10m")
    monkeypatch.setattr(_download, "_fetch", FakeServer({}))
    check_small(*load_movielens("10m", download=False, return_ids=True), RECORDS_HALF)
    monkeypatch.delenv("BMCZOO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert movielens.cache_root() == tmp_path / "xdg" / "bmczoo"


def test_time_bins_give_a_user_item_time_array(real_100k, ml100k):
    from bmczoo.data import time_bins as bmc_time_bins

    """``time_bins=B``: the ratings as user x item x time bin (equal-count bins of the
    timestamps), the same entries and values in the same order."""
    ratings = real_100k[0]
    t, uid, iid = load_movielens("100k", ml100k, return_ids=True, time_bins=20)
    assert t.shape == (*ratings.shape, 20) and t.modes == ("user", "item", "time")
    np.testing.assert_array_equal(t.index[:, 0], ratings.rows)
    np.testing.assert_array_equal(t.index[:, 1], ratings.cols)
    np.testing.assert_array_equal(t.values, ratings.values)
    # equal counts up to the ties of the timestamps
    np.testing.assert_array_equal(t.index[:, 2], bmc_time_bins(ratings.timestamps, 20)[0])
    np.testing.assert_array_equal(uid, real_100k[1])
