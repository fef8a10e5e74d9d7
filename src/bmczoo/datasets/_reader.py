"""Any delimited ratings file (``user item rating [more fields]`` per line) read into a
:class:`~bmczoo.data.RatingData`: the one reader behind :func:`read_ratings`,
:func:`~bmczoo.datasets.load_movielens` and ``bmczoo fit --data FILE``, so that all three
report a bad file with the same message."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple, overload

import numpy as np

from ..data import RatingData
from ._parse import parse_numeric_table

__all__ = ["read_ratings", "read_ratings_bytes", "to_ratingdata"]

#: Separators tried, in this order, on the first line when ``sep`` is not given ('::'
#: first: its lines hold no other separator; TAB before ',' and ';').
SEPARATORS = ("::", "\t", ",", ";")

_EXPECTED = "expected lines of user item rating [timestamp] separated by TAB, ',', ';' or '::'"


class _Lines(NamedTuple):
    """The text to parse (comment lines removed) and the file line number of each of its
    lines (``None``: consecutive lines from ``first``)."""

    data: bytes
    first: int
    numbers: np.ndarray | None

    def line(self, k: int) -> int:
        """File line number of line ``k`` (0-based) of ``data``."""
        return self.first + k if self.numbers is None else int(self.numbers[k])

    def drop_first(self) -> _Lines:
        rest = self.data.partition(b"\n")[2]
        if self.numbers is None:
            return _Lines(rest, self.first + 1, None)
        return _Lines(rest, self.first, self.numbers[1:])


def _strip_comments(data: bytes, comment: str | None) -> _Lines:
    """``data`` without its comment lines (those whose first non-blank characters are
    ``comment``), with the file line number of every line kept."""
    if not comment:
        return _Lines(data, 1, None)
    mark = comment.encode()
    if mark not in data:
        return _Lines(data, 1, None)
    lines = data.split(b"\n")
    kept = [k for k, line in enumerate(lines) if not line.lstrip().startswith(mark)]
    text = b"\n".join(lines[k] for k in kept)
    return _Lines(text, 1, np.asarray(kept, dtype=np.int64) + 1)


def _shown(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return text if len(text) <= 80 else text[:77] + "..."


def _name(field: bytes) -> str | None:
    """The column name ``field`` spells, or ``None`` when it is not a name: a header names
    its columns with words, so a number (``nan`` and ``inf`` included) or an empty field
    is data."""
    text = field.strip().strip(b"\"'").strip().decode("utf-8", "replace")
    if not text or not (text[0].isalpha() or text[0] == "_"):
        return None
    try:
        float(text)
    except ValueError:
        return text
    return None  # nan, inf, infinity


def _detect_sep(line: bytes) -> str | None:
    return next((s for s in SEPARATORS if s.encode() in line), None)


def _check_options(sep, header, columns, comment) -> None:
    if sep is not None and sep not in SEPARATORS:
        raise ValueError(
            f"sep must be one of {', '.join(map(repr, SEPARATORS))} or None (detected), got {sep!r}"
        )
    if header is not None and not isinstance(header, (bool, np.bool_)):
        raise ValueError(f"header must be True, False or None (detected), got {header!r}")
    if comment is not None and (not isinstance(comment, str) or not comment.strip()):
        raise ValueError(f"comment must be a non-blank string or None, got {comment!r}")
    if columns is not None:
        try:
            n = None if isinstance(columns, (str, bytes)) else len(columns)
        except TypeError:
            n = None
        if n not in (3, 4):
            raise ValueError(
                "columns must give 3 fields (user, item, rating) or 4 (user, item, rating, "
                f"timestamp) as 0-based positions or header names, got {columns!r}"
            )
        for c in columns:
            if isinstance(c, bool) or not isinstance(c, (int, np.integer, str)):
                raise ValueError(f"columns entries must be ints or names, got {c!r}")
            if isinstance(c, (int, np.integer)) and c < 0:
                raise ValueError(f"columns positions are 0-based and >= 0, got {c!r}")


def _resolve_columns(columns, names: list[str] | None, source: str, line: int) -> tuple:
    """``columns`` (positions or header names) as three or four distinct 0-based positions."""
    if columns is None:
        return (0, 1, 2)
    cols = []
    for c in columns:
        if isinstance(c, str):
            if names is None:
                raise ValueError(
                    f"{source}: columns={tuple(columns)!r} names a column, and the file has no "
                    "header line; give 0-based positions instead"
                )
            lowered = [n.lower() for n in names]
            if c.strip().lower() not in lowered:
                raise ValueError(
                    f"{source}, line {line}: no column {c!r} in the header (columns: "
                    f"{', '.join(names)})"
                )
            c = lowered.index(c.strip().lower())
        cols.append(int(c))
    if len(set(cols)) != len(cols):
        raise ValueError(
            f"columns={tuple(columns)!r}: user, item, rating (and timestamp) must be distinct "
            "fields"
        )
    return tuple(cols)


def _not_a_table(source: str, line: int, text: bytes, why: str = "") -> ValueError:
    control = next((b for b in text[:4096] if (b < 32 and b not in (9, 13)) or b == 127), None)
    if control is not None:  # a compressed or binary file, as the parser says of a field
        return ValueError(
            f"{source}, line {line}: unexpected character {chr(control)!r} (not a text file: "
            f"compressed or binary?); {_EXPECTED}"
        )
    what = f"line {line} is empty" if not text.strip() else f"line {line} is {_shown(text)!r}"
    return ValueError(f"{source}: not a ratings table: {what}{why}; {_EXPECTED}")


class _Layout(NamedTuple):
    sep: str
    ncols: int
    cols: tuple[int, ...]
    header: list[str] | None
    # the 4th field read as timestamps where its values are integers (columns not given)
    time_if_integer: bool = False


def _first_line(lines: _Lines) -> bytes:
    end = lines.data.find(b"\n")  # not partition: that would copy the rest of a large file
    return lines.data[: end if end >= 0 else len(lines.data)].rstrip(b"\r")


def _blank(data: bytes) -> bool:
    return not data or data.isspace()  # no copy of the text, unlike strip()


def _header_of(first: bytes, sep: str | None, header: bool | None) -> list[str] | None:
    """The column names of the first line, if it is a header (``header``: given, else
    detected: at least three fields, every one a name)."""
    if header is False:
        return None
    fields = first.split(sep.encode()) if sep else [first]
    if header:
        return [f.strip().strip(b"\"'").decode("utf-8", "replace") for f in fields]
    names = [_name(f) for f in fields]
    if len(names) < 3 or any(n is None for n in names):
        return None
    return names  # type: ignore[return-value]


def _layout(lines: _Lines, source: str, sep, header, columns, check_header) -> tuple:
    """Separator, header and columns of the text (detected where not given), and the
    text of its data lines."""
    if _blank(lines.data):
        raise ValueError(f"{source}: no data lines (the file holds no ratings)")
    first = _first_line(lines)
    use_sep = sep or _detect_sep(first)
    names = _header_of(first, use_sep, header)
    header_line = lines.line(0)
    if names is not None:
        if check_header is not None:
            check_header(names, header_line)
        lines = lines.drop_first()
        if _blank(lines.data):
            raise ValueError(
                f"{source}: no data lines after the header on line {header_line} (the file "
                "holds no ratings)"
            )
        first = _first_line(lines)
        use_sep = sep or _detect_sep(first)
    ncols = len(first.split(use_sep.encode())) if use_sep else 1
    if ncols < 3:
        raise _not_a_table(source, lines.line(0), first)
    if names is not None and len(names) != ncols:
        raise ValueError(
            f"{source}, line {header_line}: the header has {len(names)} fields and line "
            f"{lines.line(0)} has {ncols}: {_shown(first)!r}"
        )
    cols = _resolve_columns(columns, names, source, header_line)
    if max(cols) >= ncols:
        raise _not_a_table(
            source, lines.line(0), first, f" ({ncols} fields; columns={cols} needs {max(cols) + 1})"
        )
    if columns is None and ncols >= 4:
        return _Layout(use_sep, ncols, (0, 1, 2, 3), names, True), lines
    return _Layout(use_sep, ncols, cols, names), lines


def _renumbered(message: str, source: str, lines: _Lines) -> str:
    """A parser message about line ``k`` of the comment-free text, about the file's line."""
    prefix = f"{source}, line "
    if lines.numbers is None or not message.startswith(prefix):
        return message
    rest = message[len(prefix) :]
    digits = len(rest) - len(rest.lstrip("0123456789"))
    if not digits:
        return message
    return prefix + str(lines.line(int(rest[:digits]) - 1)) + rest[digits:]


def _check_ids(table: np.ndarray, source: str, lines: _Lines, labels, nonnegative: bool) -> None:
    """Ids must be integers (exact in a float64), ``nonnegative`` where asked; ratings
    finite (a number beyond the float64 range, ``1e999``, is read as infinity)."""

    def fail(mask: np.ndarray, what: str) -> None:
        k = int(np.flatnonzero(mask)[0])
        raise ValueError(f"{source}, line {lines.line(k)}: {what}, got {table[k].tolist()}")

    for col, label in ((0, f"{labels[0]} id"), (1, f"{labels[1]} id")):
        c = table[:, col]
        bad = ~np.isfinite(c) | (c != np.round(c)) | (np.abs(c) > 2.0**53)
        if bad.any():
            fail(bad, f"{label} must be an integer")
        if nonnegative and (c < 0).any():
            fail(c < 0, f"{label} must be a non-negative integer")
    bad = ~np.isfinite(table[:, 2])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source}, line {lines.line(k)}: rating must be finite, got {table[k, 2]} (a "
            "number beyond the float64 range)"
        )


def _reindex(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sorted distinct ids, index of each id among them)``: ``np.unique(ids,
    return_inverse=True)``, in O(n) through a presence table when the id range is small."""
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo > max(4 * ids.size, 1 << 20):
        uniq, inverse = np.unique(ids, return_inverse=True)
        return uniq, inverse.reshape(-1)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[ids - lo] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present) + lo, rank[ids - lo]


def to_ratingdata(
    table: np.ndarray,
    source: str,
    first_line: int = 1,
    line_numbers: np.ndarray | None = None,
    item: str = "item",
    time_if_integer: bool = False,
) -> tuple[RatingData, np.ndarray, np.ndarray]:
    """``(RatingData, user_ids, item_ids)`` of a ``(user, item, rating[, timestamp])`` table
    whose row ``k`` is line ``first_line + k`` of ``source`` (``line_numbers[k]`` where
    given); a duplicate rating names both lines (``item``: what the items are, in that
    message).  ``time_if_integer``: the 4th column is kept as timestamps only where all its
    values are integers (else no timestamps)."""
    user_ids, rows = _reindex(table[:, 0].astype(np.int64))
    item_ids, cols = _reindex(table[:, 1].astype(np.int64))
    shape = (len(user_ids), len(item_ids))
    times = table[:, 3] if table.shape[1] > 3 else None
    if times is not None and time_if_integer and not np.all(times == np.round(times)):
        times = None
    try:
        data = RatingData(rows, cols, table[:, 2].copy(), shape, timestamps=times)
    except ValueError as exc:
        key = rows.astype(np.int64) * shape[1] + cols
        order = np.argsort(key, kind="stable")
        dup = np.flatnonzero(key[order][1:] == key[order][:-1])
        if not dup.size:
            raise ValueError(f"{source}: {exc}") from None
        a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        la, lb = (
            (first_line + a, first_line + b)
            if line_numbers is None
            else (int(line_numbers[a]), int(line_numbers[b]))
        )
        raise ValueError(
            f"{source}: duplicate rating of {item} {int(item_ids[cols[b]])} by user "
            f"{int(user_ids[rows[b]])} on lines {la} and {lb} (each (user, {item}) pair may be "
            "rated once)"
        ) from None
    user_ids.setflags(write=False)
    item_ids.setflags(write=False)
    return data, user_ids, item_ids


def read_ratings_bytes(
    data: bytes,
    source: str,
    *,
    sep: str | None = None,
    header: bool | None = None,
    columns: Sequence[int | str] | None = None,
    comment: str | None = None,
    labels: tuple[str, str] = ("user", "item"),
    nonnegative_ids: bool = False,
    check_header: Callable[[list[str], int], None] | None = None,
) -> tuple[RatingData, np.ndarray, np.ndarray]:
    """:func:`read_ratings` of the bytes of a file named ``source`` in messages; returns
    ``(RatingData, user_ids, item_ids)``.  ``labels`` name the ids in messages,
    ``nonnegative_ids`` refuses negative ids, ``check_header(names, line)`` may refuse a
    header line (the MovieLens loaders check their column order)."""
    _check_options(sep, header, columns, comment)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = _strip_comments(data, comment)
    layout, lines = _layout(lines, source, sep, header, columns, check_header)
    try:
        table = parse_numeric_table(
            lines.data, layout.sep.encode(), layout.ncols, source, lines.first, layout.cols
        )
    except ValueError as e:
        if lines.numbers is None:
            raise
        raise ValueError(_renumbered(str(e), source, lines)) from None
    _check_ids(table, source, lines, labels, nonnegative_ids)
    return to_ratingdata(
        table, source, lines.first, lines.numbers, labels[1], layout.time_if_integer
    )


@overload
def read_ratings(
    path: str | os.PathLike,
    *,
    sep: str | None = ...,
    header: bool | None = ...,
    columns: Sequence[int | str] | None = ...,
    comment: str | None = ...,
    return_ids: Literal[False] = ...,
) -> RatingData: ...


@overload
def read_ratings(
    path: str | os.PathLike,
    *,
    sep: str | None = ...,
    header: bool | None = ...,
    columns: Sequence[int | str] | None = ...,
    comment: str | None = ...,
    return_ids: Literal[True],
) -> tuple[RatingData, np.ndarray, np.ndarray]: ...


def read_ratings(
    path: str | os.PathLike,
    *,
    sep: str | None = None,
    header: bool | None = None,
    columns: Sequence[int | str] | None = None,
    comment: str | None = None,
    return_ids: bool = False,
) -> RatingData | tuple[RatingData, np.ndarray, np.ndarray]:
    """Read a delimited ratings file, one ``user item rating [more fields]`` line per rating.

    The file's users become the rows and its items the columns, re-indexed to contiguous
    0-based indices in increasing order of their ids, the ratings in file order: the
    :class:`~bmczoo.data.RatingData` that :func:`load_movielens` gives.  It is the reader
    of :func:`load_movielens` (``path=``) and of ``bmczoo fit --data FILE``, with the same
    messages.

    Parameters
    ----------
    path : str or os.PathLike
        The ratings file (plain text, UTF-8 or ASCII; ``\\r\\n`` line ends accepted).
    sep : {None, "\\t", ",", ";", "::"}
        Field separator; ``None`` detects it from the first line (the first of ``'::'``,
        TAB, ``','``, ``';'`` found on it).
    header : bool or None
        Whether the first line (after comment lines) is a header of column names;
        ``None`` detects it: the first line is a header when *every* field on it is a
        name (a word starting with a letter or ``_``, not a number, ``nan`` or ``inf``).
        A line holding a number in any field is data, so a first line with string ids
        and a numeric rating is read as data and reported as line 1.
    columns : sequence of 3 or 4 ints or names, optional
        The user, item, rating (and timestamp: integers) fields, as 0-based positions or
        header names (case-insensitive; needs a header).  Default ``(0, 1, 2)`` and a 4th
        field of integers as the timestamps (MovieLens's ``user item rating timestamp``).
        Other fields are not returned, but must be numbers too.
    comment : str, optional
        Lines whose first non-blank characters are ``comment`` (e.g. ``"#"``) are
        skipped; line numbers in messages stay those of the file.
    return_ids : bool
        Also return the original ids.

    Returns
    -------
    RatingData
        Users as rows, items as columns, ``shape = (distinct users, distinct items)``,
        float64 ratings in file order.
    user_ids, item_ids : numpy.ndarray of int64
        Only with ``return_ids=True``: ``user_ids[i]`` is the id of row ``i``,
        ``item_ids[j]`` that of column ``j`` (sorted, read-only).

    Raises
    ------
    ValueError
        A bad option; a file that is not a table of at least three fields; a line with
        another number of fields than the first, an empty or non-numeric field, NaN or
        infinity, an id that is not an integer, a rating beyond the float64 range, or the
        same (user, item) pair rated twice.  The message names the file and the line (both
        lines of a duplicate).
    FileNotFoundError
        ``path`` does not exist.

    Examples
    --------
    >>> from pathlib import Path
    >>> _ = Path("ratings.csv").write_text("user,item,rating\\n7,1,4.5\\n3,1,2\\n7,2,5\\n")
    >>> data, user_ids, item_ids = read_ratings("ratings.csv", return_ids=True)
    >>> data.shape, user_ids.tolist(), data.values.tolist()
    ((2, 2), [3, 7], [4.5, 2.0, 5.0])
    """
    if not isinstance(return_ids, (bool, np.bool_)):
        raise ValueError(f"return_ids must be True or False, got {return_ids!r}")
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(
            f"{p}: no such file" if not p.exists() else f"{p}: not a file (give the ratings file)"
        )
    data, user_ids, item_ids = read_ratings_bytes(
        p.read_bytes(), str(p), sep=sep, header=header, columns=columns, comment=comment
    )
    return (data, user_ids, item_ids) if return_ids else data
