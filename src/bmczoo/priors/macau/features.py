"""A side's feature table: the prior's specification (``row_features=``, ``col_features=``,
``implicit=``) checked and turned into a :class:`~bmczoo.data.Features` of the data."""

from __future__ import annotations


class FeatureTable:
    """A :class:`~bmczoo.data.Features` held by a prior (hashed and compared by identity,
    so the prior stays a valid static argument of jitted functions; the table's arrays
    never enter traced code through the prior)."""

    __slots__ = ("features",)

    def __init__(self, features):
        self.features = features

    def __hash__(self) -> int:
        return id(self.features)

    def __eq__(self, other) -> bool:
        return isinstance(other, FeatureTable) and other.features is self.features

    def __repr__(self) -> str:
        return repr(self.features)


def check_spec(owner: str, name: str, value):
    """A side's feature specification: None/False (no features), True (the data's), or a
    :class:`~bmczoo.data.Features` (kept as a :class:`FeatureTable`)."""
    from ...data import Features

    if value is None or value is False or value is True:
        return None if value is False else value
    if isinstance(value, FeatureTable):
        return value
    if isinstance(value, Features):
        return FeatureTable(value)
    raise ValueError(
        f"{owner}: {name} must be None, True (the data's {name}) or a bmczoo.data.Features, "
        f"got {type(value).__name__}"
    )


def check_implicit(owner: str, value):
    """``implicit``: False, True (both sides), ``"rows"`` or ``"cols"``."""
    if value is False or value is None:
        return False
    if value is True or value in ("rows", "cols"):
        return value
    raise ValueError(f"{owner}: implicit must be False, True, 'rows' or 'cols', got {value!r}")


def side_features(spec, implicit, ratings, axis: str, owner: str = "NormalWishart"):
    """The feature table of one side (``axis`` ``"rows"`` for ``M``, ``"cols"`` for
    ``N``) of ``ratings``: the explicit features of ``spec`` (True: the data's), then the
    implicit-feedback features of the pairs of ``ratings`` when ``implicit`` covers this
    side (:func:`bmczoo.data.implicit_features`); None when the side has none.  ``owner``
    names the component in the error messages."""
    from ...data import hstack_features, implicit_features

    name = "row_features" if axis == "rows" else "col_features"
    m = ratings.shape[0 if axis == "rows" else 1]
    parts = []
    if spec is True:
        X = getattr(ratings, name, None)
        if X is None:
            raise ValueError(
                f"{owner}({name}=True): the data has no {name} (the MovieLens loaders attach "
                f"the side files found beside the ratings; or pass a bmczoo.data.Features)"
            )
        parts.append(X)
    elif isinstance(spec, FeatureTable):
        parts.append(spec.features)
    for X in parts:
        if X.n_rows != m:
            raise ValueError(f"{owner}: {name} has {X.n_rows} rows, the data has {m} {axis}")
    if implicit is True or implicit == axis:
        parts.append(implicit_features(ratings, axis))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else hstack_features(*parts)
