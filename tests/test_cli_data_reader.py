"""``bmczoo fit --data FILE`` reads with :func:`bmczoo.datasets.read_ratings` (or, for a
file with a MovieLens name, ``load_movielens``'s reading of it): a bad file gets the
library's message, after ``--data``."""

from __future__ import annotations

import pytest

from bmczoo.cli import main
from bmczoo.datasets import load_movielens, read_ratings
from test_cli_errors import FAST, no_fit, one_line_error  # noqa: F401 - fixture

BAD = [
    "1,10,4\n2,20,nan\n",
    "1\t10\t4\n1\t10\t3\n",
    "alice,10,4\nbob,20,3\n",  # string ids on the first line: data, line 1
    "1,10,4\n2.5,20,3\n",
    "1;10;4\n2;20;3,5\n",  # a decimal comma
    "# comment\n1,10,4\n",
    "user,item,rating\n",
    "1,2\n",
    "",
]


def cli_error(capsys, path) -> str:
    assert main(["fit", "--data", str(path), *FAST]) == 2
    err = one_line_error(capsys, "--data").removeprefix("bmczoo: error: --data ")
    return err.removesuffix(" (see 'bmczoo fit --help')")  # the command line's pointer


@pytest.mark.parametrize("text", BAD)
def test_cli_message_is_the_readers(tmp_path, capsys, no_fit, text):  # noqa: F811 - fixture
    path = tmp_path / "mine.txt"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        read_ratings(path)
    assert cli_error(capsys, path) == " ".join(str(err.value).split())
    assert not no_fit


@pytest.mark.parametrize("text", BAD[:5])
def test_movielens_named_file_gets_the_loaders(tmp_path, capsys, no_fit, text):  # noqa: F811
    path = tmp_path / "u.data"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_movielens("100k", path=path, side_info=False)
    assert cli_error(capsys, path) == " ".join(str(err.value).split())
    assert not no_fit


def test_string_ids_first_line_named_as_line_1(tmp_path, capsys, no_fit):  # noqa: F811 - fixture
    path = tmp_path / "s.csv"
    path.write_text("alice,10,4\nbob,20,3\n")
    assert cli_error(capsys, path).startswith(f"{path}, line 1: unexpected character 'a'")
    assert not no_fit


def test_semicolon_file_with_a_header_is_fitted(tmp_path, capsys):
    path = tmp_path / "r.csv"
    lines = [f"{u};{i};{(u * i) % 5 + 1}" for u in range(1, 11) for i in range(1, 9)]
    path.write_text("user;item;rating\n" + "\n".join(lines) + "\n")
    assert main(["fit", "--data", str(path), *FAST]) == 0
    out = capsys.readouterr().out  # 80 ratings: 64 to train, 16 to test
    assert out.startswith("data: RatingData(n=64, shape=(10, 8)") and "n=16, shape=(10, 8)" in out
