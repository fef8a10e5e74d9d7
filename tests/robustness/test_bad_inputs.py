"""Bad-input catalogue of the public API.

Every invalid argument raises ``ValueError`` (``TypeError`` for an argument of the wrong
type, ``FileNotFoundError`` for missing files,
``OSError`` / ``KeyboardInterrupt`` passed through from a failed download) whose message
names the problem, and the MovieLens loader never leaves a half-written cache entry.

Where each item of the catalogue is covered (this file adds what the others miss):

================================================  ==========================================
RatingData: NaN/inf values, negative, out-of-     tests/data/test_ratings.py (TestValidation)
range and non-integer indices, mismatched
lengths, empty, duplicates, bad shape
priors: <= 0, NaN, inf, non-numbers, eps >= C,    tests/priors/test_priors.py; here: through
p outside (0, 1)                                  get_prior
fit: K <= 0 / K > min(m1, m2), lam <= 0,          gibbs: tests/inference/test_gibbs_kernel.py,
noise_sd <= 0, thinning/num_samples/num_chains    test_fit_arguments.py; here: every method
<= 0, unknown method, test of the wrong shape,    (vb, svi, nuts, map) and non-finite values
predict entries outside the shape
the NumPyro model's arguments                     here
simulate_paper                                    tests/datasets/test_simulate.py
load_movielens: corrupt / truncated u.data,       tests/datasets/test_movielens.py (CORRUPT);
ratings.dat, ratings.csv                          here: truncation inside a number or after a
                                                  separator, binary/gzip/non-UTF-8 bytes,
                                                  negative ids, overflowing ratings, corrupt
                                                  or truncated zip given as path
wrong checksum of a download, unsafe archive,     tests/datasets/test_movielens.py; here: an
failed fetch leaves nothing                       interrupted download (Ctrl-C) or extraction,
                                                  a short read, stale staging folders, a cache
                                                  entry without its ratings file, flags
================================================  ==========================================
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import shutil
import zipfile
from pathlib import Path
from types import MappingProxyType

import numpy as np
import numpyro
import pytest

import bmczoo as bmc
from bmczoo.datasets import _download, load_movielens, movielens
from bmczoo.models import matrix_completion
from bmczoo.priors import Discrete, get_prior

from ._helpers import paper_problem

NAN, INF = float("nan"), float("inf")
METHODS = ["gibbs", "vb", "svi", "nuts", "map"]
_QUICK = {
    "gibbs": dict(num_warmup=1, num_samples=2, thinning=1),
    "nuts": dict(num_warmup=1, num_samples=2, thinning=1),
    "vb": dict(max_iter=2),
    "svi": dict(num_steps=2),
    "map": dict(num_steps=2),
}


def quick(method) -> dict:
    """Short runs: each method's own settings only (fit rejects another method's)."""
    return dict(progress_bar=False, **_QUICK.get(method if isinstance(method, str) else "", {}))


@pytest.fixture(scope="module")
def train():
    return paper_problem(12, seed=0).train  # 12 x 12, 29 ratings


# --------------------------------------------------------------------------- bmc.fit
FIT_ARGS = [  # (keyword arguments, pattern the message must match); for every method
    (dict(K=0), "K must be a positive integer"),
    (dict(K=-3), "K must be a positive integer"),
    (dict(K=13), r"K=13 is too large for a 12 x 12 matrix \(need K <= 12\)"),
    (dict(K=2.0), "K must be a positive integer", TypeError),
    (dict(K=True), "K must be a positive integer", TypeError),
    (dict(lam=0.0), "lam must be finite and > 0"),
    (dict(lam=-1.0), "lam must be finite and > 0"),
    (dict(lam=NAN), "lam must be finite and > 0"),
    (dict(lam=INF), "lam must be finite and > 0"),
    (dict(noise_sd=0.0), "noise_sd must be finite and > 0"),
    (dict(noise_sd=-2.0), "noise_sd must be finite and > 0"),
    (dict(noise_sd=NAN), "noise_sd must be finite and > 0"),
    (dict(noise_sd=INF), "noise_sd must be finite and > 0"),
    (dict(prior="discrete"), "prior must be one of bmczoo.priors", TypeError),
    (dict(seed=-1), "seed must be a non-negative integer"),
]
FIT_ARGS = [case if len(case) == 3 else case + (ValueError,) for case in FIT_ARGS]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "kw, pattern, error",
    FIT_ARGS,
    ids=[f"{k}={v!r}" for kw, _, _ in FIT_ARGS for k, v in kw.items()],
)
def test_fit_argument_errors_for_every_method(train, method, kw, pattern, error):
    kw = {"K": 2, **kw}
    with pytest.raises(error, match=pattern):
        bmc.fit(train, method=method, **{**quick(method), **kw})


@pytest.mark.parametrize("method", ["gibbs", "nuts"])
@pytest.mark.parametrize(
    "kw, pattern",
    [
        (dict(thinning=0), "thinning must be a positive integer"),
        (dict(thinning=-2), "thinning must be a positive integer"),
        (dict(num_samples=0), "num_samples must be a positive integer"),
        (dict(num_samples=-1), "num_samples must be a positive integer"),
        (dict(num_chains=0), "num_chains must be a positive integer"),
        (dict(num_chains=-1), "num_chains must be a positive integer"),
        (dict(num_warmup=-1), "num_warmup must be a non-negative integer"),
    ],
)
def test_sampler_settings_for_mcmc_methods(train, method, kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        bmc.fit(train, 2, method=method, **{**quick(method), **kw})


@pytest.mark.parametrize("method", ["", "GIBBS", "hmc", None, 3])
def test_unknown_method(train, method):
    with pytest.raises(
        ValueError if isinstance(method, str) else TypeError,
        match=r"method must be one of \('gibbs', 'vb', 'svi', 'nuts', 'map'\)",
    ):
        bmc.fit(train, 2, method=method, **quick(method))


@pytest.mark.parametrize("method", METHODS)
def test_test_data_of_another_shape_or_type(train, method):
    bigger = bmc.RatingData([0, 12], [0, 3], [1.0, 2.0], (13, 12))  # an entry outside train's shape
    with pytest.raises(ValueError, match=r"test has shape \(13, 12\), train has \(12, 12\)"):
        bmc.fit(train, 2, method=method, test=bigger, **quick(method))
    with pytest.raises(TypeError, match="test must be a bmczoo.RatingData"):
        bmc.fit(train, 2, method=method, test=(np.array([0]), np.array([0])), **quick(method))


@pytest.mark.parametrize("method", METHODS)
def test_predict_argument_outside_the_shape(train, method):
    with pytest.raises(
        ValueError, match=r"predict rows\[1\] = 12 is out of range for a dimension of size 12"
    ):
        bmc.fit(train, 2, method=method, predict=([0, 12], [0, 0]), **quick(method))


def test_train_must_be_ratingdata():
    with pytest.raises(TypeError, match="train must be a bmczoo.RatingData"):
        bmc.fit(np.ones((4, 4)), 1)


# predict / rmse of fitted objects: the check is shared by every fit class (_FitBase.
# _check_entries); the Gibbs fit is covered in tests/inference/test_gibbs_kernel.py
@pytest.fixture(scope="module")
def fitted(train):
    return bmc.fit(train, 2, method="vb", **quick("vb"))


BAD_ENTRIES = [
    (([12], [0]), r"predict rows\[0\] = 12 is out of range for a dimension of size 12"),
    (([0], [12]), r"predict cols\[0\] = 12 is out of range"),
    (([0, -1], [0, 0]), r"predict rows must be non-negative \(0-based\); predict rows\[1\] = -1"),
    (([0.5], [0]), r"predict rows must hold integer indices; predict rows\[0\]"),
    (([NAN], [0]), "predict rows must hold integer indices"),
    (([0], [INF]), "predict cols must hold integer indices"),
    (([0, 1], [0]), "predict: rows and cols must have the same length"),
    (([[0]], [[0]]), "predict rows must be 1-D"),
    (([True], [0]), "predict rows must hold integer indices, got dtype bool"),
    ((["a"], [0]), "predict rows must hold integer indices"),
]


@pytest.mark.parametrize("entries, pattern", BAD_ENTRIES, ids=[str(e) for e, _ in BAD_ENTRIES])
def test_fitted_predict_rejects_bad_entries(fitted, entries, pattern):
    rows, cols = (np.asarray(x) for x in entries)
    with pytest.raises(ValueError, match=pattern):
        fitted.predict(rows, cols)


def test_fitted_rmse_rejects_test_of_another_shape(fitted):
    with pytest.raises(ValueError, match=r"test has shape \(12, 13\), the fit has \(12, 12\)"):
        fitted.rmse(bmc.RatingData([0], [12], [1.0], (12, 13)))
    with pytest.raises(TypeError, match="test must be a bmczoo.RatingData"):
        fitted.rmse(np.ones(3))


# --------------------------------------------------------------------------- priors by name
@pytest.mark.parametrize(
    "name, hyper, pattern",
    [
        ("discrete", dict(eps=2.0), r"need 0 < eps < C"),
        ("discrete", dict(p=1.0), r"p must be in \(0, 1\)"),
        ("discrete", dict(p=0.0), "p must be finite and > 0"),
        ("discrete", dict(C=NAN), "C must be finite and > 0"),
        ("gamma", dict(beta=-1.0), "beta must be finite and > 0"),
        ("gamma", dict(beta=INF), "beta must be finite and > 0"),
        ("inverse-gamma", dict(b=0.0), "b must be finite and > 0"),
        ("inverse-gamma", dict(a=NAN), "a must be finite and > 0"),
        ("fixed", dict(gamma=-INF), "gamma must be finite and > 0"),
    ],
)
def test_get_prior_validates_hyperparameters(name, hyper, pattern):
    with pytest.raises(ValueError, match=pattern):
        get_prior(name, **hyper)


# --------------------------------------------------------------------------- the NumPyro model
@pytest.mark.parametrize(
    "kw, pattern",
    [
        (dict(K=0), "K must be a positive integer"),
        (dict(K=13), "K=13 is too large"),
        (dict(lam=0.0), "lam must be finite and > 0"),
        (dict(lam=None, noise_sd=-1.0), "noise_sd must be finite and > 0"),
        (dict(prior="discrete"), "prior must be one of bmczoo.priors"),
        (dict(ratings=np.ones(3)), "ratings must be a bmczoo.RatingData"),
        (dict(subsample_size=0), "subsample_size must be a positive integer"),
        (dict(subsample_size=2.5), "subsample_size must be a positive integer"),
        (dict(subsample_size=30), "subsample_size=30 exceeds the number of ratings 29"),
        (dict(observed="no"), "observed must be True or False"),
        (dict(marginal=1), "marginal must be True or False"),
    ],
)
def test_model_arguments(train, kw, pattern):
    args = {"ratings": train, "K": 2, "prior": Discrete(), **kw}
    wrong_type = {"prior", "ratings", "observed", "marginal"} & set(kw) or kw.get(
        "subsample_size"
    ) == 2.5
    with pytest.raises(TypeError if wrong_type else ValueError, match=pattern):
        numpyro.handlers.trace(numpyro.handlers.seed(matrix_completion, 0)).get_trace(**args)


# --------------------------------------------------------------------------- MovieLens files
GOOD = {  # name -> (file name, two valid lines)
    "100k": ("u.data", "1\t2\t3\t881250949\n2\t2\t4\t881250950\n"),
    "1m": ("ratings.dat", "1::2::3::978300760\n2::2::4::978300761\n"),
    "25m": (
        "ratings.csv",
        "userId,movieId,rating,timestamp\n1,2,3.5,1147880044\n2,2,4.0,1147880045\n",
    ),
}

CORRUPT = [  # (name, how, transformation of the good text, pattern)
    (
        "100k",
        "cut-inside-rating",
        lambda t: t[: t.rindex("\t4\t") + 2],
        r"line 2: expected 4 fields separated by TAB, found 3",
    ),
    (
        "100k",
        "cut-after-separator",
        lambda t: t.rsplit("\t", 1)[0] + "\t",
        r"line 2, field 4: empty field",
    ),
    (
        "1m",
        "cut-inside-separator",
        lambda t: t.rsplit("::", 1)[0] + ":",
        r"line 2: expected 4 fields separated by '::'",
    ),
    (
        "1m",
        "cut-after-separator",
        lambda t: t.rsplit("::", 1)[0] + "::",
        r"line 2, field 4: empty field",
    ),
    (
        "25m",
        "cut-after-separator",
        lambda t: t.rsplit(",", 1)[0] + ",",
        r"line 3, field 4: empty field",
    ),
    (
        "25m",
        "cut-inside-rating",
        lambda t: t[: t.rindex("4.0") + 2],
        r"line 3: expected 4 fields separated by ',', found 3",
    ),
    ("25m", "cut-in-header", lambda t: "userId,movieId,rat", r"line 1: unexpected header"),
    ("100k", "negative-user", lambda t: "-" + t, r"line 1: user id must be a non-negative integer"),
    (
        "1m",
        "negative-movie",
        lambda t: t.replace("::2::4", "::-2::4"),
        r"line 2: movie id must be a non-negative integer",
    ),
    (
        "25m",
        "negative-user",
        lambda t: t.replace("\n2,", "\n-2,"),
        r"line 3: user id must be a non-negative integer",
    ),
    (
        "100k",
        "overflowing-rating",
        lambda t: t.replace("\t3\t", "\t1e400\t"),
        r"line 1: rating must be finite",
    ),
    (
        "1m",
        "nan-rating",
        lambda t: t.replace("::3::", "::nan::"),
        r"line 1: unexpected character 'n'",
    ),
    ("25m", "inf-rating", lambda t: t.replace("3.5", "inf"), r"line 2: unexpected character 'i'"),
    ("100k", "huge-id", lambda t: "1" + "0" * 30 + t, r"line 1: user id must be an integer"),
    ("1m", "binary", lambda t: "\x00\x01\x02\x03garbage", r"line 1: unexpected character '\\x00'"),
]


@pytest.mark.parametrize(
    "name, how, edit, pattern", CORRUPT, ids=[f"{n}-{h}" for n, h, _, _ in CORRUPT]
)
def test_corrupt_or_truncated_rating_files(tmp_path, name, how, edit, pattern):
    filename, text = GOOD[name]
    path = tmp_path / filename
    path.write_text(edit(text))
    with pytest.raises(ValueError, match=pattern) as err:
        load_movielens(name, path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("name", list(GOOD))
def test_cut_inside_the_last_timestamp_keeps_every_rating(tmp_path, name):
    """The one truncation a line-based format cannot see: a cut inside the last field of
    the last line (no final newline).  That field is the timestamp, which is not loaded,
    so every rating is still intact."""
    filename, text = GOOD[name]
    path = tmp_path / filename
    path.write_text(text)
    full = load_movielens(name, path)
    path.write_text(text[:-4])
    assert load_movielens(name, path) == full


@pytest.mark.parametrize("name", list(GOOD))
def test_undecoded_bytes_are_rejected(tmp_path, name):
    filename, text = GOOD[name]
    path = tmp_path / filename
    path.write_bytes(gzip.compress(text.encode()))  # a compressed file under the plain name
    with pytest.raises(ValueError, match=rf"{filename}, line 1: unexpected character"):
        load_movielens(name, path)
    path.write_bytes(text.encode().replace(b"2", b"\xe9", 1))  # latin-1, not a digit
    with pytest.raises(ValueError, match=rf"{filename}, line \d: unexpected character"):
        load_movielens(name, path)


@pytest.mark.parametrize("name", list(GOOD))
def test_corrupt_zip_given_as_path(tmp_path, name):
    filename, text = GOOD[name]
    folder = movielens.DATASETS[name].folder
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{folder}/{filename}", text * 50)
    blob = good.read_bytes()
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match=r"truncated\.zip: not a valid zip archive"):
        load_movielens(name, truncated)
    flipped = bytearray(blob)
    flipped[blob.index(text[:6].encode()) + 2] ^= 0x01  # one bit of the stored member
    bad_crc = tmp_path / "crc.zip"
    bad_crc.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"crc\.zip: not a valid zip archive \(Bad CRC-32"):
        load_movielens(name, bad_crc)
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("README", "no ratings")
    with pytest.raises(
        ValueError, match=rf"empty\.zip: the archive has no member '{folder}/{filename}'"
    ):
        load_movielens(name, empty)


@pytest.mark.parametrize("flag", ["download", "return_ids"])
@pytest.mark.parametrize("value", ["no", 0, None, "False"])
def test_loader_flags_must_be_bools(tmp_path, monkeypatch, flag, value):
    """``download="no"`` is truthy: it must not mean "go to the network"."""
    monkeypatch.setattr(_download, "_fetch", _Server({}))
    with pytest.raises(ValueError, match=f"{flag} must be True or False"):
        load_movielens("100k", cache_dir=tmp_path, **{flag: value})
    assert _download._fetch.calls == []


# --------------------------------------------------------------------------- cache and downloads
class _Server:
    """Stands in for files.grouplens.org; ``fail(dest)`` may interrupt a transfer."""

    def __init__(self, files: dict[str, bytes], fail=None):
        self.files, self.fail, self.calls = files, fail, []

    def __call__(self, url: str, dest: Path) -> None:
        self.calls.append(url)
        if url not in self.files:
            raise OSError(f"404 {url}")
        data = self.files[url]
        if self.fail is not None:
            Path(dest).write_bytes(data[: len(data) // 3])  # a third arrived, then ...
            self.fail()
        Path(dest).write_bytes(data)


def _archive(tmp_path: Path, name: str = "100k") -> bytes:
    filename, text = GOOD[name]
    path = tmp_path / "src.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{movielens.DATASETS[name].folder}/{filename}", text)
        zf.writestr(f"{movielens.DATASETS[name].folder}/README", "readme " * 1000)
    return path.read_bytes()


def _pin(monkeypatch, name: str, blob: bytes) -> movielens.MovieLensInfo:
    table = dict(movielens.DATASETS)
    table[name] = dataclasses.replace(table[name], md5=hashlib.md5(blob).hexdigest())
    monkeypatch.setattr(movielens, "DATASETS", MappingProxyType(table))
    return table[name]


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _interrupt():
    raise KeyboardInterrupt


def _connection_reset():
    raise ConnectionResetError("connection reset by peer")


@pytest.mark.parametrize(
    "fail, exc",
    [(_interrupt, KeyboardInterrupt), (_connection_reset, ConnectionResetError)],
    ids=["ctrl-c", "connection-reset"],
)
def test_interrupted_download_leaves_no_cache_entry(tmp_path, monkeypatch, fail, exc):
    blob = _archive(tmp_path)
    info = _pin(monkeypatch, "100k", blob)
    monkeypatch.setattr(_download, "_fetch", _Server({info.url: blob}, fail=fail))
    cache = tmp_path / "cache"
    with pytest.raises(exc):
        load_movielens("100k", cache_dir=cache)
    assert _listing(cache) == ["movielens"]  # no entry, no staging folder, no partial archive
    # the next call downloads afresh and succeeds
    monkeypatch.setattr(_download, "_fetch", _Server({info.url: blob}))
    assert load_movielens("100k", cache_dir=cache).n == 2
    assert _listing(cache) == [
        "movielens",
        "movielens/ml-100k",
        "movielens/ml-100k/README",
        "movielens/ml-100k/u.data",
    ]


def test_short_download_fails_the_checksum_and_leaves_nothing(tmp_path, monkeypatch):
    """A transfer that ends early without an error (a proxy closing the connection) is
    caught by the checksum."""
    blob = _archive(tmp_path)
    info = _pin(monkeypatch, "100k", blob)
    monkeypatch.setattr(_download, "_fetch", _Server({info.url: blob[:-100]}))
    cache = tmp_path / "cache"
    with pytest.raises(
        ValueError, match=f"checksum mismatch for {info.url}: expected MD5 {info.md5}"
    ):
        load_movielens("100k", cache_dir=cache)
    assert _listing(cache) == ["movielens"]


@pytest.mark.parametrize(
    "fail, exc",
    [
        (_interrupt, KeyboardInterrupt),
        (lambda: _raise(OSError(28, "No space left on device")), OSError),
    ],
    ids=["ctrl-c", "disk-full"],
)
def test_interrupted_extraction_leaves_no_cache_entry(tmp_path, monkeypatch, fail, exc):
    blob = _archive(tmp_path)
    info = _pin(monkeypatch, "100k", blob)
    monkeypatch.setattr(_download, "_fetch", _Server({info.url: blob}))
    copied = []

    def copy_then_fail(src, dst, length=0):
        if copied:  # the first member is written, the second is interrupted
            dst.write(src.read(10))
            fail()
        copied.append(1)
        shutil.copyfileobj(src, dst)

    monkeypatch.setattr(_download.shutil, "copyfileobj", copy_then_fail)
    cache = tmp_path / "cache"
    with pytest.raises(exc):
        load_movielens("100k", cache_dir=cache)
    assert copied and _listing(cache) == ["movielens"]


def _raise(err):
    raise err


def test_stale_staging_folder_is_not_a_cache_entry(tmp_path, monkeypatch):
    """A process killed mid-download (SIGKILL: no cleanup) leaves a hidden staging folder;
    it is never read as the cache entry, and the next download succeeds beside it."""
    cache = tmp_path / "cache"
    stale = cache / "movielens" / ".ml-100k-dead.partial" / "extracted" / "ml-100k"
    stale.mkdir(parents=True)
    (stale / "u.data").write_text("1\t2\t3\t4\n1\t3\t")  # half-extracted
    with pytest.raises(FileNotFoundError, match="not in the cache"):
        load_movielens("100k", cache_dir=cache, download=False)
    blob = _archive(tmp_path)
    info = _pin(monkeypatch, "100k", blob)
    monkeypatch.setattr(_download, "_fetch", _Server({info.url: blob}))
    assert load_movielens("100k", cache_dir=cache).n == 2


def test_cache_folder_without_its_ratings_file(tmp_path, monkeypatch):
    """A cache entry folder that exists but lacks the ratings file (made by hand, or by
    another tool) is not overwritten: the error says which folder to remove."""
    cache = tmp_path / "cache"
    entry = cache / "movielens" / "ml-100k"
    entry.mkdir(parents=True)
    (entry / "u.item").write_text("someone else's file")
    with pytest.raises(FileNotFoundError, match="not in the cache"):
        load_movielens("100k", cache_dir=cache, download=False)
    blob = _archive(tmp_path)
    info = _pin(monkeypatch, "100k", blob)
    monkeypatch.setattr(_download, "_fetch", _Server({info.url: blob}))
    with pytest.raises(
        FileExistsError, match=f"cannot create the cache entry {entry}.*remove that folder"
    ):
        load_movielens("100k", cache_dir=cache)
    assert _listing(cache) == ["movielens", "movielens/ml-100k", "movielens/ml-100k/u.item"]


def test_corrupted_cached_file_names_the_cache_path(tmp_path):
    cache = tmp_path / "cache"
    entry = cache / "movielens" / "ml-1m"
    entry.mkdir(parents=True)
    (entry / "ratings.dat").write_text("1::2::3::4\n1::3::")  # truncated after a download
    with pytest.raises(ValueError, match=rf"{entry / 'ratings.dat'}, line 2"):
        load_movielens("1m", cache_dir=cache, download=False)


def test_unknown_name_and_non_string_name():
    with pytest.raises(ValueError, match="name must be a string"):
        load_movielens(100, "/nonexistent")
    with pytest.raises(ValueError, match="unknown MovieLens dataset 'ml-7m'"):
        load_movielens("ml-7m")


def test_rating_data_errors_name_the_field():
    """One line per RatingData check (details in tests/data/test_ratings.py)."""
    cases = [
        (([0, 1], [0, 1], [1.0, NAN], (2, 2)), r"values must be finite; values\[1\] = nan"),
        (([0, 1], [0, 1], [INF, 1.0], (2, 2)), r"values must be finite; values\[0\] = inf"),
        (
            ([0, -1], [0, 1], [1.0, 2.0], (2, 2)),
            r"rows must be non-negative \(0-based\); rows\[1\] = -1",
        ),
        (
            ([0, 1], [0, 2], [1.0, 2.0], (2, 2)),
            r"cols\[1\] = 2 is out of range for a dimension of size 2",
        ),
        (([0, 0.5], [0, 1], [1.0, 2.0], (2, 2)), r"rows must hold integer indices; rows\[1\]"),
        (
            ([0, 1], [0], [1.0, 2.0], (2, 2)),
            "rows, cols and values must have the same length; got 2, 1, 2",
        ),
        (([], [], [], (2, 2)), "RatingData is empty"),
        (
            ([0, 1, 0], [1, 1, 1], [1.0, 2.0, 3.0], (2, 2)),
            r"duplicate \(row, col\) pair \(0, 1\) at positions 0 and 2",
        ),
    ]
    for args, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            bmc.RatingData(*args)
