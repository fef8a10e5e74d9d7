"""``bmczoo predict`` and ``bmczoo recommend``: a model saved by ``bmczoo fit --save``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from .errors import CLIError
from .outputs import proba_columns
from .paths import probe_writable


class _Model(NamedTuple):
    fit: object
    user_ids: object  # user_ids[i]: the dataset's id of row i
    item_ids: object
    time: object = None  # the TimeEncoder of a model fitted with --context
    time_edges: object = None  # the time bins' edges of a model fitted with --time-bins


def _load_model(spec: str) -> _Model:
    """``--model FILE``: a fit saved by ``bmczoo fit --save`` (or ``fit.save``: then the
    ids are the 0-based row and column indices)."""
    import numpy as np

    from ..inference.saving import load, load_extra

    path = Path(spec).expanduser()
    if not path.is_file():
        raise CLIError(f"--model {spec}: no such file (write one with bmczoo fit ... --save FILE)")
    try:
        fit = load(path)
        extra = load_extra(path)
    except ValueError as e:
        raise CLIError(f"--model {e}") from None
    m1, m2 = fit.shape[:2]
    users = np.asarray(extra.get("user_ids", np.arange(m1)))
    items = np.asarray(extra.get("item_ids", np.arange(m2)))
    if users.shape != (m1,) or items.shape != (m2,):
        raise CLIError(f"--model {spec}: its id maps do not fit its {m1} x {m2} shape")
    time = None
    if "time_encoder" in extra:
        import json

        from ..data import TimeEncoder

        time = TimeEncoder.from_dict(json.loads(str(extra["time_encoder"])))
    edges = extra.get("time_bin_edges")
    return _Model(fit, users, items, time, None if edges is None else np.asarray(edges))


def _index_of(ids, wanted, what: str, where=None):
    """Positions of ``wanted`` ids among ``ids``; an unknown id is one ``CLIError``."""
    import numpy as np

    ids = np.asarray(ids)
    wanted = np.asarray(wanted)
    order = np.argsort(ids, kind="stable")
    pos = np.clip(np.searchsorted(ids[order], wanted), 0, ids.size - 1)
    found = ids[order][pos] == wanted
    if not np.all(found):
        k = int(np.flatnonzero(~found)[0])
        shown = wanted[k].item() if hasattr(wanted[k], "item") else wanted[k]
        place = f" ({where(k)})" if where is not None else ""
        raise CLIError(
            f"unknown {what} id {shown}{place}: the model knows {ids.size} {what}s "
            f"(ids {ids.min()}..{ids.max()})"
        )
    return order[pos]


def _read_pairs(spec: str, timed: bool | str = False):
    """``--entries FILE``: lines ``user item`` (TAB, ',', '::' or spaces between; extra
    fields ignored; an optional header line) -> (users, items); ``timed``: lines ``user
    item timestamp`` or ``user item rating timestamp`` -> (users, items, timestamps) (a
    string: the option the model was fitted with, for the message)."""
    import numpy as np

    path = Path(spec).expanduser()
    if not path.is_file():
        raise CLIError(f"--entries {spec}: no such file")
    users, items, times = [], [], []
    first = None
    for lineno, raw in enumerate(
        path.read_text(encoding="utf-8-sig", errors="replace").splitlines(), 1
    ):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = (line.replace("::", ",").replace("\t", ",").replace(",", " ")).split()
        try:
            u, i = (int(float(x)) if float(x) == int(float(x)) else None for x in parts[:2])
            if len(parts) < 2 or u is None or i is None:
                raise ValueError
        except (ValueError, OverflowError):
            if first is None and not users:  # a header line
                first = lineno + 1
                continue
            raise CLIError(
                f"--entries {spec}, line {lineno}: expected 'user_id item_id', got {line[:80]!r}"
            ) from None
        users.append(u)
        items.append(i)
        if timed:
            flag = timed if isinstance(timed, str) else "--context"
            times.append(_timestamp(parts, spec, lineno, line, flag))
    if not users:
        raise CLIError(f"--entries {spec}: no 'user_id item_id' lines")
    pairs = np.asarray(users, np.int64), np.asarray(items, np.int64)
    return (*pairs, np.asarray(times, np.int64)) if timed else pairs


def _timestamp(parts: list, spec: str, lineno: int, line: str, flag: str = "--context") -> int:
    """The timestamp of an entry of a model fitted with ``--context`` (or ``flag``): the
    third field of ``user item timestamp``, the fourth of ``user item rating timestamp``."""
    field = parts[3] if len(parts) >= 4 else parts[2] if len(parts) == 3 else None
    if field is None or not field.lstrip("-").isdigit():
        raise CLIError(
            f"--entries {spec}, line {lineno}: this model was fitted with {flag}, so each "
            "entry needs its time: 'user_id item_id timestamp' (or 'user_id item_id rating "
            f"timestamp'; integer seconds since the epoch), got {line[:80]!r}"
        )
    return int(field)


def _check_prob(prob: float) -> float:
    if not 0.0 < prob < 1.0:
        raise CLIError(f"--prob must be in (0, 1), got {prob:g}")
    return prob


def cmd_predict(args) -> int:
    """Run ``bmczoo predict``: mean, sd and interval at the pairs of ``--entries``."""
    import numpy as np

    prob = _check_prob(args.prob)
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:
        if out.is_dir():
            raise CLIError(f"--out {out}: an existing folder; --out names a .csv file")
        if out.exists() and not args.overwrite:
            raise CLIError(
                f"--out {out}: an existing file; use another path or --overwrite to replace it"
            )
        probe_writable(out.parent, "--out", out)
    model = _load_model(args.model)
    timed = "--time-bins" if model.time_edges is not None else model.time is not None
    users, items, *times = _read_pairs(args.entries, timed=timed)
    rows = _index_of(model.user_ids, users, "user", lambda k: f"entry {k + 1} of {args.entries}")
    cols = _index_of(model.item_ids, items, "item", lambda k: f"entry {k + 1} of {args.entries}")
    kw, index = {}, (rows, cols)
    if model.time_edges is not None:  # --time-bins: each entry's time bin is its third index
        from .loading import time_bin_of

        index = (rows, cols, time_bin_of(model.time_edges, times[0]))
    elif times:
        kw["context"] = model.time.encode(rows, cols, times[0])
    try:
        mean, sd = model.fit.predict(*index, return_std=True, **kw)
        lo, hi = model.fit.predictive_interval(*index, prob=prob, **kw)
        names, probs = proba_columns(model.fit, rows, cols, **kw)
    except ValueError as e:
        if "no factor draws were stored" not in str(e):
            raise
        raise CLIError(
            f"--model {args.model}: new entries of a model fitted with --context are predicted "
            "from its factor draws, which it does not hold: refit with --store-factors yes"
        ) from None
    pct = f"{100 * prob:g}"
    header = ",".join([f"user_id,item_id,mean,sd,lo{pct},hi{pct}"] + names)
    table = np.column_stack([users, items, mean, sd, lo, hi] + ([probs] if names else []))
    fmt = ["%d", "%d", "%.6f", "%.6f", "%.6f", "%.6f"] + ["%.6f"] * len(names)
    if out is None:
        np.savetxt(sys.stdout, table, delimiter=",", header=header, comments="", fmt=fmt)
    else:
        np.savetxt(out, table, delimiter=",", header=header, comments="", fmt=fmt)
        print(f"wrote {out} ({len(users)} entries)")
    return 0


def cmd_recommend(args) -> int:
    """Run ``bmczoo recommend``: the top ``-n`` items of each ``--user``."""
    import numpy as np

    prob = _check_prob(args.prob)
    if args.n < 1:
        raise CLIError(f"-n must be at least 1, got {args.n}")
    if args.num_draws < 1:
        raise CLIError(f"--num-draws must be at least 1, got {args.num_draws}")
    model = _load_model(args.model)
    m2 = model.fit.shape[1]
    if args.n > m2:
        raise CLIError(f"-n {args.n}: the model has {m2} items")
    users = np.asarray(args.user, np.int64)
    rows = _index_of(model.user_ids, users, "user")
    try:
        items, scores = model.fit.recommend(
            rows,
            n=args.n,
            exclude_seen=not args.include_seen,
            by=args.by,
            prob=prob,
            seed=args.seed,
            num_draws=args.num_draws,
        )
    except ValueError as e:
        if "factor draws" in str(e):
            raise CLIError(f"{' '.join(str(e).split())} (bmczoo fit --store-factors)") from None
        raise
    print("user_id,rank,item_id,score")
    for u, its, scs in zip(users, np.asarray(items), np.asarray(scores)):
        for rank, (i, sc) in enumerate(zip(its, scs), 1):
            if i < 0:  # fewer than n unseen items
                break
            print(f"{int(u)},{rank},{int(model.item_ids[i])},{sc:.6f}")
    return 0
