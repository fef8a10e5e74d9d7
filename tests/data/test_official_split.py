"""``RatingData.official_split``: the MovieLens 100K folds by the rules of ``mku.sh`` and
``allbut.pl``, checked against an independent line-based transcription of those scripts on
synthetic files, against the scripts themselves where ``perl`` and ``sort`` exist, and on
the real ``u.data`` where it is available."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import OFFICIAL_FOLDS, Features, RatingData
from bmczoo.data._splits import _ML100K_PAIRS_SHA256, _official_test_mask


# --------------------------------------------------------------------------- reference
def _script_folds(
    lines: list[str], block: int, maxtest: int = 100_000
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The folds as mku.sh / allbut.pl write them, transcribed line by line: u1..u5 with
    ``head``/``tail`` blocks of ``block`` lines, ua/ub with allbut.pl's per-user running
    count; every file sorted numerically on user then movie.  Each file comes back as an
    ``(lines, 3)`` array of ``(user, movie, rating)``."""
    parsed = _parse(lines)

    def srt(a):
        return a[np.lexsort((a[:, 1], a[:, 0]))]

    out = {}
    for i in range(1, 6):
        test = parsed[block * (i - 1) : block * i]
        base = np.concatenate([parsed[: block * (i - 1)], parsed[block * i :]])
        out[f"u{i}"] = (srt(base), srt(test))
    for name, start, stop in (("ua", 1, 10), ("ub", 11, 20)):
        count: dict[str, int] = {}
        testcnt, is_test = 0, []
        for line in lines:
            (user,) = line.split()[:1]
            count[user] = count.get(user, 0) + 1
            if (testcnt < maxtest or maxtest <= 0) and start <= count[user] <= stop:
                testcnt += 1
                is_test.append(True)
            else:
                is_test.append(False)
        is_test = np.array(is_test, dtype=bool)
        out[name] = (srt(parsed[~is_test]), srt(parsed[is_test]))
    return out


def _as_lines(data: RatingData, user_ids, item_ids) -> np.ndarray:
    return np.stack([user_ids[data.rows], item_ids[data.cols], data.values], axis=1)


def _parse(lines) -> np.ndarray:
    if not lines:
        return np.zeros((0, 3))
    return np.array([s.split("\t")[:3] for s in lines], dtype=np.float64)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.array_equal(got, want))


def _synthetic_udata(
    path: Path, seed: int, n_users: int, n_items: int, n: int, min_per_user: int
) -> list[str]:
    """A u.data-like file: distinct (user, movie) pairs in random order, ids from 1, every
    user with at least ``min_per_user`` ratings; returns its lines."""
    rng = np.random.default_rng(seed)
    # the minimum per user first (distinct movies per user), then distinct other pairs
    first = np.concatenate(
        [
            u * n_items + rng.choice(n_items, size=min_per_user, replace=False)
            for u in range(n_users)
        ]
    )
    rest = np.setdiff1d(np.arange(n_users * n_items), first)
    keys = np.concatenate([first, rng.choice(rest, size=n - first.size, replace=False)])
    keys = keys[rng.permutation(n)]
    users, items = np.divmod(keys, n_items)
    ratings = rng.integers(1, 6, size=n)
    lines = [
        f"{u + 1}\t{j + 1}\t{r}\t{874000000 + k}"
        for k, (u, j, r) in enumerate(zip(users.tolist(), items.tolist(), ratings.tolist()))
    ]
    path.write_text("\n".join(lines) + "\n")
    return lines


# --------------------------------------------------------------------------- the rule, small file
@pytest.mark.parametrize("seed", [0, 1])
def test_rule_on_small_synthetic_file(tmp_path, seed):
    # 6 users with 20-27 ratings, blocks of 30 lines: every fold of the rule as the
    # scripts would cut a 150-line file
    lines = _synthetic_udata(
        tmp_path / "u.data", seed, n_users=6, n_items=40, n=150, min_per_user=20
    )
    data, users, items = bmc.datasets.load_movielens("100k", path=tmp_path, return_ids=True)
    ref = _script_folds(lines, block=30)
    for fold in OFFICIAL_FOLDS:
        test = _official_test_mask(data.rows, fold, block=30, maxtest=100_000)
        train_pos, test_pos = data._sorted_positions(~test), data._sorted_positions(test)
        assert _same(_as_lines(data.subset(test_pos), users, items), ref[fold][1]), fold
        assert _same(_as_lines(data.subset(train_pos), users, items), ref[fold][0]), fold
    # ua/ub: exactly ten test ratings per user here
    for fold in ("ua", "ub"):
        test = _official_test_mask(data.rows, fold, 30, 100_000)
        np.testing.assert_array_equal(np.bincount(data.rows[test]), np.full(6, 10))


def test_allbut_maxtest_limit():
    # allbut.pl stops taking test lines after maxtest of them (maxtest <= 0: no limit)
    rows = np.array([0, 1, 0, 1, 0, 1, 2, 2])
    lines = [f"{r + 1}\t{k + 1}\t3\t0" for k, r in enumerate(rows)]
    for maxtest in (0, 1, 3, 100):
        ref = _script_folds(lines, block=2, maxtest=maxtest)["ua"][1]
        got = _official_test_mask(rows, "ua", 2, maxtest)
        mine = _parse([lines[k] for k in np.flatnonzero(got)])
        assert _same(mine[np.lexsort((mine[:, 1], mine[:, 0]))], ref)
        assert got.sum() == (min(maxtest, 8) if maxtest > 0 else 8)  # all 8 lines are 1st-10th


# --------------------------------------------------------------------------- full-size synthetic
@pytest.fixture(scope="module")
def synthetic_100k(tmp_path_factory):
    """A synthetic u.data of the ML-100K shape (943 users with >= 20 ratings, 1682 movies,
    100,000 lines in random order)."""
    folder = tmp_path_factory.mktemp("synthetic-ml-100k")
    lines = _synthetic_udata(
        folder / "u.data", 7, n_users=943, n_items=1682, n=100_000, min_per_user=20
    )
    data, users, items = bmc.datasets.load_movielens("100k", path=folder, return_ids=True)
    assert data.shape == (943, 1682)
    return folder, lines, data, users, items


def test_synthetic_100k_all_folds(synthetic_100k):
    _, lines, data, users, items = synthetic_100k
    ref = _script_folds(lines, block=20_000)
    for fold in OFFICIAL_FOLDS:
        train, test = data.official_split(fold, check_order=False)
        assert _same(_as_lines(test, users, items), ref[fold][1]), fold
        assert _same(_as_lines(train, users, items), ref[fold][0]), fold
        assert train.shape == test.shape == data.shape


def _run_mku(folder: Path, udata: Path, scripts: Path) -> dict[str, tuple[list, list]]:
    """Run the released mku.sh (and allbut.pl through perl), read from the folder
    ``scripts``, on ``udata`` in ``folder``."""
    work = folder / "scripts"
    work.mkdir()
    shutil.copy(udata, work / "u.data")
    shutil.copy(scripts / "mku.sh", work / "mku.sh")
    shutil.copy(scripts / "allbut.pl", work / "allbut_real.pl")
    wrapper = work / "allbut.pl"  # its #! line names /usr/local/bin/perl
    wrapper.write_text(f'#!/bin/sh\nexec perl "{work / "allbut_real.pl"}" "$@"\n')
    wrapper.chmod(0o755)
    env = {"PATH": f"{work}:/usr/bin:/bin", "LC_ALL": "C"}
    subprocess.run(
        ["sh", "mku.sh"], cwd=work, env=env, check=True, capture_output=True, timeout=120
    )
    return {
        f: (
            _parse((work / f"{f}.base").read_text().splitlines()),
            _parse((work / f"{f}.test").read_text().splitlines()),
        )
        for f in OFFICIAL_FOLDS
    }


def _scripts(test):
    """The released mku.sh and allbut.pl (beside MovieLens 100K), perl and sort."""
    tools = pytest.mark.skipif(
        shutil.which("perl") is None or shutil.which("sort") is None, reason="needs perl and sort"
    )
    return pytest.mark.requires_ml100k("mku.sh", "allbut.pl")(tools(test))


@pytest.mark.slow
@_scripts
def test_synthetic_100k_against_the_released_scripts(synthetic_100k, tmp_path, ml100k):
    folder, lines, data, users, items = synthetic_100k
    ref = _run_mku(tmp_path, folder / "u.data", ml100k)
    mine = _script_folds(lines, block=20_000)  # the transcription is the scripts' rule
    assert all(_same(ref[f][k], mine[f][k]) for f in OFFICIAL_FOLDS for k in (0, 1))
    for fold in OFFICIAL_FOLDS:
        train, test = data.official_split(fold, check_order=False)
        assert _same(_as_lines(test, users, items), ref[fold][1]), fold
        assert _same(_as_lines(train, users, items), ref[fold][0]), fold


# --------------------------------------------------------------------------- errors, features
def test_unknown_fold_and_wrong_data(synthetic_100k):
    _, _, data, _, _ = synthetic_100k
    for bad in ("u6", "u0", "uc", "", 3, None):
        with pytest.raises(ValueError, match="unknown MovieLens 100K fold"):
            data.official_split(bad, check_order=False)
    # other shapes / sizes: not ML-100K
    small = RatingData([0, 1, 2], [0, 1, 2], [1.0, 2.0, 3.0])
    with pytest.raises(
        ValueError, match=r"100000 ratings of a 943 x 1682 matrix.*got 3 ratings of a 3 x 3"
    ):
        small.official_split("u1")
    with pytest.raises(ValueError, match="got 99999 ratings"):
        data.subset(np.arange(99_999)).official_split("u1", check_order=False)
    # the right size and shape in another order: refused unless asked for
    with pytest.raises(ValueError, match="not the MovieLens 100K .* pairs in u.data's line order"):
        data.official_split("u3")
    shuffled = data.subset(np.random.default_rng(0).permutation(data.n))
    with pytest.raises(ValueError, match="check_order=False"):
        shuffled.official_split("ua")
    with pytest.raises(ValueError, match="check_order must be True or False"):
        data.official_split("u1", check_order="no")


def test_fold_names_case_insensitive_and_features_kept(synthetic_100k):
    _, _, data, _, _ = synthetic_100k
    rf = Features.from_dense(np.eye(943)[:, :5])
    cf = Features.from_dense(np.ones((1682, 1)), names=["one"])
    d = data.with_features(rf, cf)
    train, test = d.official_split(" U2 ", check_order=False)
    assert train == data.official_split("u2", check_order=False)[0]
    for part in (train, test):
        assert part.row_features is rf and part.col_features is cf


# --------------------------------------------------------------------------- the real file
_real = pytest.mark.requires_ml100k("u.data")


@pytest.fixture(scope="module")
def real_100k(ml100k):
    return bmc.datasets.load_movielens("100k", path=ml100k, return_ids=True)


@_real
def test_real_fingerprint(real_100k, ml100k):
    # the pinned digest is that of the file's (user - 1, movie - 1) pairs in line order
    table = np.loadtxt(ml100k / "u.data", dtype=np.int64, delimiter="\t")
    h = hashlib.sha256(
        (table[:, 0] - 1).astype("<i4").tobytes() + (table[:, 1] - 1).astype("<i4").tobytes()
    )
    assert h.hexdigest() == _ML100K_PAIRS_SHA256


@_real
def test_real_u3_and_sizes(real_100k, ml100k):
    data, users, items = real_100k
    lines = (ml100k / "u.data").read_text().splitlines()
    train, test = data.official_split("u3")
    third = _parse(lines[40_000:60_000])
    assert _same(_as_lines(test, users, items), third[np.lexsort((third[:, 1], third[:, 0]))])
    sizes = {f: tuple(p.n for p in data.official_split(f)) for f in OFFICIAL_FOLDS}
    assert sizes == {
        **{f"u{i}": (80_000, 20_000) for i in range(1, 6)},
        "ua": (90_570, 9_430),
        "ub": (90_570, 9_430),
    }
    # a user-built RatingData from the file, in file order, passes the order check
    table = np.loadtxt(ml100k / "u.data", dtype=np.int64, delimiter="\t")
    own = RatingData(table[:, 0] - 1, table[:, 1] - 1, table[:, 2].astype(float))
    assert own.official_split("ub")[1] == data.official_split("ub")[1]
    # centring keeps the pairs, hence the order check
    assert data.centered()[0].official_split("u1")[1].n == 20_000


@pytest.mark.slow
@_real
@_scripts
def test_real_against_the_released_scripts(real_100k, tmp_path, ml100k):
    data, users, items = real_100k
    ref = _run_mku(tmp_path, ml100k / "u.data", ml100k)
    for fold in OFFICIAL_FOLDS:
        train, test = data.official_split(fold)
        assert _same(_as_lines(test, users, items), ref[fold][1]), fold
        assert _same(_as_lines(train, users, items), ref[fold][0]), fold
