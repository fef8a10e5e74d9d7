"""``bmc.datasets.read_ratings``: any delimited ratings file, with the messages of
``load_movielens(path=...)`` (the same reader), header detection, and the one-line error
of a failed download."""

from __future__ import annotations

import pickle
import socket
import traceback
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.datasets import DownloadError, load_movielens, read_ratings
from bmczoo.datasets import _download, _reader


def write(tmp_path: Path, text: str, name: str = "r.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as err:
        fn(*args, **kwargs)
    return str(err.value)


# --------------------------------------------------------------------------- the public API
def test_public_and_same_object_as_the_loader(tmp_path):
    assert "read_ratings" in bmc.datasets.__all__ and "DownloadError" in bmc.datasets.__all__
    text = "10\t7\t4\t1\n3\t7\t5\t2\n10\t200\t1\t3\n7\t3\t2\t4\n"
    path = write(tmp_path, text, "u.data")
    data, uid, iid = read_ratings(path, return_ids=True)
    ref, ruid, riid = load_movielens("100k", path=path, return_ids=True)
    assert isinstance(data, bmc.RatingData) and data.shape == ref.shape == (3, 3)
    for a, b in ((data.rows, ref.rows), (data.cols, ref.cols), (data.values, ref.values)):
        np.testing.assert_array_equal(a, b)
    assert uid.tolist() == ruid.tolist() == [3, 7, 10] and iid.tolist() == [3, 7, 200]
    assert not uid.flags.writeable and data.values.dtype == np.float64
    assert isinstance(read_ratings(path), bmc.RatingData)


def test_real_100k_equals_the_loader(ml100k):
    data = read_ratings(ml100k / "u.data")
    ref = load_movielens("100k", path=ml100k / "u.data", side_info=False)
    assert (data.n, data.shape) == (100_000, (943, 1682))
    np.testing.assert_array_equal(data.values, ref.values)
    np.testing.assert_array_equal(data.rows, ref.rows)
    np.testing.assert_array_equal(data.cols, ref.cols)


@pytest.mark.parametrize(
    "text",
    [
        "1,10,4.5\n2,10,3\n2,20,5\n",  # csv, no header, no timestamp
        "user,item,rating\n1,10,4.5\n2,10,3\n2,20,5\n",
        "\ufeffuserId,movieId,rating,timestamp\r\n1,10,4.5,0\r\n2,10,3,0\r\n2,20,5,0\r\n",
        "1::10::4.5::0\n2::10::3::0\n2::20::5::0\n",
        "1;10;4.5\n2;10;3\n2;20;5\n",
        "1\t10\t4.5\t0\t9\n2\t10\t3\t0\t9\n2\t20\t5\t0\t9\n",  # more fields than four
    ],
)
def test_separators_headers_and_line_ends_are_detected(tmp_path, text):
    data, uid, iid = read_ratings(write(tmp_path, text), return_ids=True)
    assert data.values.tolist() == [4.5, 3.0, 5.0]
    assert uid.tolist() == [1, 2] and iid.tolist() == [10, 20]


def test_options(tmp_path):
    path = write(tmp_path, "# made by hand\nitem;rating;user\n10;4.5;1\n# a note\n10;3;2\n")
    data, uid, iid = read_ratings(
        path, comment="#", columns=("user", "ITEM", "rating"), return_ids=True
    )
    assert data.values.tolist() == [4.5, 3.0] and uid.tolist() == [1, 2] and iid.tolist() == [10]
    same = read_ratings(path, comment="#", sep=";", header=True, columns=(2, 0, 1))
    np.testing.assert_array_equal(same.values, data.values)
    # header=False: the names are data, reported on their line
    assert "r.txt, line 2: unexpected character 'i' (field 1 is 'item', not a number" in error_of(
        read_ratings, path, comment="#", header=False
    )
    # a comment line breaks a file without comment=
    assert "not a ratings table: line 1 is '# made by hand'" in error_of(read_ratings, path)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"sep": " "}, "sep must be one of"),
        ({"header": "yes"}, "header must be True, False or None"),
        ({"comment": " "}, "comment must be a non-blank string"),
        ({"columns": (0, 1)}, "columns must give 3 fields"),
        ({"columns": "abc"}, "columns must give 3 fields"),
        ({"columns": (0, 1, 1.5)}, "columns entries must be ints or names"),
        ({"columns": (0, -1, 2)}, "0-based and >= 0"),
        ({"columns": (0, 1, 1)}, "must be distinct fields"),
        ({"columns": (0, 1, 5)}, "not a ratings table: line 1 is '1,2,3' (3 fields; columns="),
        ({"columns": ("user", "item", "rating")}, "has no header line"),
        ({"return_ids": "yes"}, "return_ids must be True or False"),
    ],
)
def test_bad_options_are_named(tmp_path, kwargs, needle):
    path = write(tmp_path, "1,2,3\n")
    assert needle in error_of(read_ratings, path, **kwargs)


def test_unknown_column_name_and_missing_file(tmp_path):
    path = write(tmp_path, "user,item,rating\n1,2,3\n")
    assert "line 1: no column 'score' in the header (columns: user, item, rating)" in error_of(
        read_ratings, path, columns=("user", "item", "score")
    )
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_ratings(tmp_path / "absent.csv")
    with pytest.raises(FileNotFoundError, match="not a file"):
        read_ratings(tmp_path)


# --------------------------------------------------------------------------- precise messages
BAD = [  # (text, the message after the file name)
    ("1,10,4\n2,20,nan\n", ", line 2: unexpected character 'n' (field 3 is 'nan', and NaN"),
    ("1,10,4\n1,10,3\n", ": duplicate rating of {item} 10 by user 1 on lines 1 and 2"),
    ("1,10,4\nbob,20,3\n", ", line 2: unexpected character 'b' (field 1 is 'bob', not a number"),
    ("1,10,4\n2,20,four\n", ", line 2: unexpected character 'f' (field 3 is 'four'"),
    ("1,10,4\n2.5,20,3\n", ", line 2: user id must be an integer, got [2.5, 20.0, 3.0]"),
    ("1,10,4\n2,20,1e999\n", ", line 2: rating must be finite, got inf"),
    ("1,10,4\n2,20\n", ", line 2: expected 3 fields separated by ',', found 2"),
    ("1,10,4\n2,20,\n", ", line 2, field 3: empty field"),
    ("1,2\n", ": not a ratings table: line 1 is '1,2'"),
    ("", ": no data lines (the file holds no ratings)"),
    ("user,item,rating\n", ": no data lines after the header on line 1"),
    ("user,item,rating,timestamp\n1,2,3\n", ", line 1: the header has 4 fields and line 2 has 3"),
    ("\x1f\x8b\x08\x00binary", ", line 1: unexpected character '\\x1f' (not a text file"),
]


@pytest.mark.parametrize("text, needle", BAD)
def test_messages_name_the_file_line_and_problem(tmp_path, text, needle):
    path = write(tmp_path, text, "mine.csv")
    assert str(path) + needle.format(item="item") in error_of(read_ratings, path)


@pytest.mark.parametrize("text, needle", [b for b in BAD if "header" not in b[1]])
def test_movielens_loader_reports_exactly_the_same(tmp_path, text, needle):
    """``load_movielens(name, path=...)`` reads with the same reader, whatever the release's
    separator: a CSV given as "100k" gets the NaN message, not a TAB complaint."""
    path = write(tmp_path, text, "nan.csv")
    generic = error_of(read_ratings, path)  # MovieLens calls its items movies
    expected = generic.replace("of item ", "of movie ").replace("(user, item)", "(user, movie)")
    for name in ("100k", "1m", "latest-small"):
        assert error_of(load_movielens, name, path=path, side_info=False) == expected


def test_comment_lines_keep_the_file_line_numbers(tmp_path):
    text = "# ratings\n1,10,4\n#\n  # indented\n1,20,3\n# again\n2,20,x\n"
    path = write(tmp_path, text)
    assert ", line 7: unexpected character 'x'" in error_of(read_ratings, path, comment="#")
    dup = write(tmp_path, "# c\n1,10,4\n# c\n1,10,3\n", "dup.csv")
    assert "duplicate rating of item 10 by user 1 on lines 2 and 4" in error_of(
        read_ratings, dup, comment="#"
    )
    short = write(tmp_path, "%\n1,10,4\n%\n2,20\n", "short.csv")
    assert ", line 4: expected 3 fields" in error_of(read_ratings, short, comment="%")


# --------------------------------------------------------------------------- header detection
@pytest.mark.parametrize(
    "first, is_header",
    [
        (b"userId,movieId,rating,timestamp", True),
        (b'"user","item","rating"', True),
        (b"_u,_i,_r", True),
        (b"alice,10,4.5", False),  # string ids beside a numeric rating: data
        (b"alice,bob,4", False),
        (b"alice,10,four", False),  # a number in any field: data
        (b"1,10,nan", False),
        (b"nan,inf,infinity", False),
        (b"user,item,", False),  # an empty field is not a name
        (b"user,item", False),  # fewer than three fields
        (b"user,item,5stars", False),
    ],
)
def test_header_detection(first, is_header):
    assert (_reader._header_of(first, ",", None) is not None) == is_header


def test_string_ids_on_the_first_line_are_data_on_line_1(tmp_path):
    """A first line of data with string ids is not taken for a header (issue 54, item 10)."""
    path = write(tmp_path, "alice,10,4\nbob,20,3\n", "s.csv")
    message = error_of(read_ratings, path)
    assert message.startswith(f"{path}, line 1: unexpected character 'a' (field 1 is 'alice'")
    assert error_of(load_movielens, "latest-small", path=path) == message


# --------------------------------------------------------------------------- MovieLens headers
@pytest.mark.parametrize(
    "head", ["", "userId,movieId,rating,timestamp\n", "user_id,item_id,rating,timestamp\n"]
)
def test_latest_small_with_or_without_its_header(tmp_path, head):
    folder = tmp_path / "ml-latest-small"
    folder.mkdir()
    write(folder, head + "1,10,4.5,964982703\n2,10,3.0,964982224\n", "ratings.csv")
    data = load_movielens("latest-small", path=folder)
    assert data.values.tolist() == [4.5, 3.0] and data.shape == (2, 1)


def test_movielens_header_in_another_order_is_refused(tmp_path):
    path = write(tmp_path, "movieId,userId,rating,timestamp\n10,1,4.5,0\n", "ratings.csv")
    message = error_of(load_movielens, "latest-small", path=path)
    assert "line 1: unexpected header 'movieId,userId,rating,timestamp'" in message
    assert "read_ratings(path, columns=...)" in message
    data = read_ratings(path, columns=("userId", "movieId", "rating"), return_ids=True)
    assert data[1].tolist() == [1] and data[2].tolist() == [10]


# --------------------------------------------------------------------------- failed downloads
def test_offline_download_is_one_exception_naming_path(tmp_path, monkeypatch):
    """The quick start offline: one exception whose message says what failed, from where,
    and how to pass a local copy; no chain of urllib errors (issue 54, item 2)."""
    monkeypatch.setenv("BMCZOO_CACHE", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DownloadError) as err:
        load_movielens("100k", return_ids=True)
    e = err.value
    info = bmc.datasets.DATASETS["100k"]
    text = str(e)
    assert text.startswith(f"MovieLens 100k could not be downloaded from {info.url} (")
    for needle in ("Temporary failure in name resolution", "path=", "u.data", "ml-100k.zip"):
        assert needle in text, text
    assert str(tmp_path / "cache" / "movielens") in text
    assert e.__cause__ is None and e.__suppress_context__
    shown = "".join(traceback.format_exception(e))
    assert "During handling" not in shown and "direct cause" not in shown
    assert shown.count("Error") == 1  # the last line only: one exception, not a chain
    assert isinstance(e, urllib.error.URLError) and e.url == info.url
    assert e.reason == "[Errno -3] Temporary failure in name resolution"
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == text and back.reason == e.reason and back.url == e.url
    assert not (tmp_path / "cache" / "movielens" / "ml-100k").exists()


def test_lost_connection_keeps_its_class(tmp_path, monkeypatch):
    def reset(url, dest):
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(_download, "_fetch", reset)
    with pytest.raises(
        ConnectionResetError, match="could not be downloaded.*Connection reset"
    ) as err:
        load_movielens("1m", cache_dir=tmp_path)
    assert isinstance(err.value, DownloadError) and "path=" in str(err.value)


def test_other_failures_are_not_dressed_as_downloads(tmp_path, monkeypatch):
    def disk_full(url, dest):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_download, "_fetch", disk_full)
    with pytest.raises(OSError, match="No space left") as err:
        load_movielens("1m", cache_dir=tmp_path)
    assert not isinstance(err.value, DownloadError)
