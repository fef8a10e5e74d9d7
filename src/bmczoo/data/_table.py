"""Feature tables from user or item tables: one-hot categories, string prefixes, bucketed
numbers, multi-label sets and raw numbers (:func:`features_from_table`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .features import Features

__all__ = ["features_from_table"]


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return bool(np.isnan(v))
    if isinstance(v, (str, np.str_)):
        return v.strip() == ""
    return False


def _plain(v: Any) -> Any:
    """NumPy scalars to Python scalars; strings stripped."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, str):
        v = v.strip()
    return v


def _sort_key(v: Any) -> tuple:
    if isinstance(v, bool):
        return (1, str(v))
    if isinstance(v, (int, float)):
        return (0, v)
    return (1, str(v))


def _label(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _column(table, name: str, n: int | None) -> list:
    try:
        col = table[name]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"the table has no column {name!r}") from None
    values = list(col.tolist() if hasattr(col, "tolist") else col)
    if n is not None and len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values, expected {n} (one per row)")
    return values


def _one_hot(
    name: str, labels: list, *, categories: list | None = None
) -> tuple[list[list[int]], list[str]]:
    """Per-row feature index lists and the feature names of a one-hot group (``None`` =
    missing: no feature)."""
    if categories is None:
        categories = sorted({v for v in labels if v is not None}, key=_sort_key)
    where = {c: k for k, c in enumerate(categories)}
    rows = [[] if v is None else [where[v]] for v in labels]
    return rows, [f"{name}={_label(c)}" for c in categories]


def _bucket_labels(name: str, values: list, spec) -> tuple[list, list]:
    """The bucket of each value as ``(order, label)`` (``None`` when missing) and the
    buckets that get a feature, in order: those present for a width, all of them for
    explicit edges."""
    nums: list[float | None] = []
    for k, v in enumerate(values):
        if _is_missing(v):
            nums.append(None)
            continue
        try:
            x = float(_plain(v))
        except (TypeError, ValueError):
            raise ValueError(f"column {name!r}, row {k}: {v!r} is not a number") from None
        if not math.isfinite(x):
            raise ValueError(f"column {name!r}, row {k}: {v!r} is not finite")
        nums.append(x)
    if isinstance(spec, (int, float, np.integer, np.floating)) and not isinstance(
        spec, (bool, np.bool_)
    ):
        width = float(spec)
        if not width > 0:
            raise ValueError(
                f"numeric_buckets[{name!r}]: a bucket width must be positive, got {spec!r}"
            )
        labels = []
        for x in nums:
            if x is None:
                labels.append(None)
                continue
            b = math.floor(x / width)
            # width 1 buckets of whole numbers (years) are named by the number
            label = f"{b:g}" if width == 1 else f"[{b * width:g},{(b + 1) * width:g})"
            labels.append((b, label))
        return labels, sorted({t for t in labels if t is not None})
    try:
        edges = [float(e) for e in spec]
    except (TypeError, ValueError):
        raise ValueError(
            f"numeric_buckets[{name!r}] must be a width or a sequence of edges, got {spec!r}"
        ) from None
    if (
        not edges
        or any(not math.isfinite(e) for e in edges)
        or any(b <= a for a, b in zip(edges, edges[1:]))
    ):
        raise ValueError(
            f"numeric_buckets[{name!r}]: edges must be finite and strictly increasing, got {spec!r}"
        )
    buckets = list(
        enumerate(
            [f"<{edges[0]:g}"]
            + [f"[{a:g},{b:g})" for a, b in zip(edges, edges[1:])]
            + [f">={edges[-1]:g}"]
        )
    )
    labels = [
        None if x is None else buckets[int(np.searchsorted(edges, x, side="right"))] for x in nums
    ]
    return labels, buckets


def _check_columns(
    categorical: list,
    prefix: dict,
    numeric_buckets: dict,
    multilabel: dict,
    numeric: list,
    n_rows: int | None,
) -> list:
    """The columns encoded, in the order of their groups; each may be used once, and with
    none ``n_rows`` must be given."""
    for arg, name in ((categorical, "categorical"), (numeric, "numeric")):
        if any(not isinstance(c, str) for c in arg):
            raise ValueError(f"{name} must be a sequence of column names")
    used = categorical + list(prefix) + list(numeric_buckets) + list(multilabel) + numeric
    dup = {c for c in used if used.count(c) > 1}
    if dup:
        raise ValueError(f"column(s) {sorted(dup)} used more than once")
    if n_rows is None and not used:
        raise ValueError("no columns to encode: pass n_rows for an empty feature table")
    return used


class _Encoder:
    """The groups of :func:`features_from_table` as they are encoded: per group, the per-row
    ``[(feature, value)]`` lists and the feature names; and the number of rows, fixed by
    the first column read (or ``n_rows``)."""

    def __init__(self, table, n: int | None):
        self.table, self.n = table, n
        self.blocks: list[tuple[list, list[str]]] = []

    def column(self, name: str) -> list:
        """The values of column ``name`` (as many as the columns read before)."""
        col = _column(self.table, name, self.n)
        self.n = len(col)
        return col

    def add(self, rows: list, names: list[str]) -> None:
        """A group: its per-row ``[(feature, value)]`` lists and its feature names."""
        self.blocks.append((rows, names))

    def one_hot(self, name: str, labels: list, categories: list | None = None) -> None:
        """A one-hot group of ``labels`` (``None``: missing, no feature)."""
        rows, names = _one_hot(name, labels, categories=categories)
        self.add([[(j, 1.0) for j in r] for r in rows], names)

    def prefix(self, name: str, k) -> None:
        """A one-hot group of the first ``k`` characters of column ``name``."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"prefix[{name!r}] must be a positive integer, got {k!r}")
        col = self.column(name)
        self.one_hot(name, [None if _is_missing(v) else str(_plain(v))[: int(k)] for v in col])

    def buckets(self, name: str, spec) -> None:
        """A one-hot group of the buckets of the numbers of column ``name``."""
        labels, buckets = _bucket_labels(name, self.column(name), spec)
        rows, _ = _one_hot(name, labels, categories=buckets)
        self.add([[(j, 1.0) for j in r] for r in rows], [f"{name}={b[1]}" for b in buckets])

    def features(self, groups: list[str]) -> Features:
        """The groups side by side; ``groups`` names the group of each block."""
        n = self.n
        assert n is not None
        names: list[str] = []
        group_of: list[str] = []
        per_row: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for (rows, bnames), gname in zip(self.blocks, groups):
            off = len(names)
            for i, r in enumerate(rows):
                per_row[i].extend((off + j, v) for j, v in r)
            names.extend(bnames)
            group_of.extend([gname] * len(bnames))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(r) for r in per_row], out=indptr[1:])
        count = int(indptr[-1])
        idx = np.fromiter((j for r in per_row for j, _ in r), dtype=np.int64, count=count)
        val = np.fromiter((v for r in per_row for _, v in r), dtype=np.float64, count=count)
        return Features(indptr, idx, val, names, group_of)


def _multilabel_block(name: str, col: list, sep: str | None) -> tuple[list, list[str]]:
    """The group of a multi-label column: one feature per distinct label (sorted)."""
    sets: list[list] = []
    for k, v in enumerate(col):
        if _is_missing(v):
            sets.append([])
        elif isinstance(v, (str, np.str_)):
            if sep is None:
                raise ValueError(f"multilabel[{name!r}]: row {k} is a string; give a separator")
            sets.append([s.strip() for s in str(v).split(sep) if s.strip()])
        elif isinstance(v, Iterable):
            sets.append([_plain(s) for s in v if not _is_missing(s)])
        else:
            raise ValueError(
                f"column {name!r}, row {k}: {v!r} is neither a string nor a sequence of labels"
            )
    labels = sorted({s for row in sets for s in row}, key=_sort_key)
    where = {s: j for j, s in enumerate(labels)}
    return (
        [sorted({(where[s], 1.0) for s in row}) for row in sets],
        [f"{name}={_label(s)}" for s in labels],
    )


def _numeric_block(name: str, col: list, n: int) -> tuple[list, list[str]]:
    """The group of a numeric column: one real feature (a zero is no entry)."""
    x = np.empty(n, dtype=np.float64)
    for k, v in enumerate(col):
        try:
            x[k] = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"column {name!r}, row {k}: {v!r} is not a number") from None
        if not math.isfinite(x[k]):
            raise ValueError(
                f"column {name!r}, row {k}: {v!r} is not finite (numeric features cannot be "
                "missing)"
            )
    return [[(0, float(v))] if v != 0 else [] for v in x], [name]


def features_from_table(
    table,
    *,
    categorical: Sequence[str] = (),
    prefix: Mapping[str, int] | None = None,
    numeric_buckets: Mapping[str, float | Sequence[float]] | None = None,
    multilabel: Mapping[str, str | None] | None = None,
    numeric: Sequence[str] = (),
    n_rows: int | None = None,
) -> Features:
    """Encode columns of a user or item table as sparse features.

    Parameters
    ----------
    table : mapping of column name to column
        Anything indexable by column name giving equal-length sequences: a dict of lists
        or arrays, a pandas DataFrame.  Row ``i`` of the table becomes row ``i`` of the
        result (align it with the matrix first, e.g. ``features.take(...)``).
    categorical : sequence of str
        Columns one-hot encoded, one feature per distinct value (sorted), named
        ``"column=value"``.
    prefix : mapping of column name to int, optional
        One-hot of the first ``k`` characters of a string column (``{"zip": 1}``: the
        zip-code region), named ``"column=prefix"``.
    numeric_buckets : mapping of column name to a width or to bucket edges, optional
        A number ``w`` one-hot encodes ``floor(x / w) * w`` (``{"age": 5}``: five-year
        buckets, one feature per bucket present, named ``"age=[20,25)"``; width 1 names
        the bucket by its number: ``"year=1995"``); a sequence of
        strictly increasing edges ``e`` gives the ``len(e) + 1`` buckets ``x < e[0]``,
        ``e[k] <= x < e[k+1]``, ``x >= e[-1]`` (named ``"age=<18"``, ``"age=[18,25)"``,
        ``"age=>=56"``), all of them present even when empty.
    multilabel : mapping of column name to separator, optional
        Columns holding sets of labels, either as strings split on the separator
        (``{"genres": "|"}``) or as sequences of labels (separator ``None``): one feature
        per distinct label, 1 for each label of the row.
    numeric : sequence of str
        Columns kept as real-valued features (named by the column; must be finite).
    n_rows : int, optional
        Number of rows; inferred from the columns if omitted (needed when no column is
        encoded).

    Returns
    -------
    Features
        The groups in the order categorical, prefix, numeric_buckets, multilabel, numeric
        (each in the order given); every feature's group is its column name.  A missing
        value (``None``, NaN or an empty string) gives the row no feature of that group.

    Raises
    ------
    ValueError
        A missing column, columns of different lengths, a non-numeric value in a
        numeric column, bad bucket edges, or a column used twice.

    Examples
    --------
    >>> users = {"age": [24, 53, 23], "gender": ["M", "F", "M"], "zip": ["85711", "94043", "32067"]}
    >>> kinds = dict(categorical=["gender"], prefix={"zip": 1}, numeric_buckets={"age": 10})
    >>> x = features_from_table(users, **kinds)
    >>> x.names
    ('gender=F', 'gender=M', 'zip=3', 'zip=8', 'zip=9', 'age=[20,30)', 'age=[50,60)')
    """
    prefix = dict(prefix or {})
    numeric_buckets = dict(numeric_buckets or {})
    multilabel = dict(multilabel or {})
    categorical, numeric = list(categorical), list(numeric)
    used = _check_columns(categorical, prefix, numeric_buckets, multilabel, numeric, n_rows)
    enc = _Encoder(table, n_rows)
    for name in categorical:
        enc.one_hot(name, [None if _is_missing(v) else _plain(v) for v in enc.column(name)])
    for name, k in prefix.items():
        enc.prefix(name, k)
    for name, spec in numeric_buckets.items():
        enc.buckets(name, spec)
    for name, sep in multilabel.items():
        enc.add(*_multilabel_block(name, enc.column(name), sep))
    for name in numeric:
        enc.add(*_numeric_block(name, enc.column(name), enc.n))
    return enc.features(used)
