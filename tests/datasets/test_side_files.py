"""The MovieLens side files (users and movies) read by ``load_movielens`` into
``row_features`` / ``col_features``, and ``load_movielens_side``'s raw tables: on small
files written here in each release's format, and on the real ML-100K side files when
they are available."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.datasets import SIDE_FEATURES, load_movielens, load_movielens_side, movielens_features


def _row(x, i) -> set[str]:
    """Names of the features of row ``i`` (all values are 1 in these encodings)."""
    lo, hi = x.indptr[i], x.indptr[i + 1]
    assert np.all(x.values[lo:hi] == 1.0)
    return {x.names[j] for j in x.indices[lo:hi]}


# --------------------------------------------------------------------------- ML-100K format
U_DATA = "3\t1\t4\t881250949\n1\t2\t3\t891717742\n3\t2\t1\t878887116\n1\t4\t5\t880606923\n"
U_USER = (  # out of id order; user 2 has no ratings
    "3|23|M|writer|32067\n2|53|F|other|94043\n1|24|M|technician|85711\n"
)
FLAGS = ["0"] * 19


def _flags(*genres: int) -> str:
    f = list(FLAGS)
    for g in genres:
        f[g] = "1"
    return "|".join(f)


U_ITEM = (
    f"1|Toy Story (1995)|01-Jan-1995||http://x|{_flags(3, 4, 5)}\n"
    f"2|Caf\xe9 (1994)|01-Jan-1994||http://y|{_flags(8)}\n"
    f"3|Never rated (1990)|01-Jan-1990||http://z|{_flags(1)}\n"
    f"4|unknown||||{_flags(0)}\n"
)


def _write_100k(folder: Path, user=U_USER, item=U_ITEM, genre=True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "u.data").write_text(U_DATA)
    if user is not None:
        (folder / "u.user").write_text(user)
    if item is not None:
        (folder / "u.item").write_bytes(item.encode("latin-1"))
    if genre:
        names = [
            "unknown",
            "Action",
            "Adventure",
            "Animation",
            "Children's",
            "Comedy",
            "Crime",
            "Documentary",
            "Drama",
            "Fantasy",
            "Film-Noir",
            "Horror",
            "Musical",
            "Mystery",
            "Romance",
            "Sci-Fi",
            "Thriller",
            "War",
            "Western",
        ]
        (folder / "u.genre").write_text("".join(f"{g}|{k}\n" for k, g in enumerate(names)) + "\n")
    return folder


def test_100k_format_aligned_with_rows_and_columns(tmp_path):
    data, uid, iid = load_movielens("100k", path=_write_100k(tmp_path / "ml-100k"), return_ids=True)
    np.testing.assert_array_equal(uid, [1, 3])
    np.testing.assert_array_equal(iid, [1, 2, 4])
    rf, cf = data.row_features, data.col_features
    assert rf.n_rows == 2 and cf.n_rows == 3
    # user 2 (no ratings) is not a row, so its values make no features
    assert _row(rf, 0) == {"gender=M", "occupation=technician", "zip=8", "age=[20,25)"}
    assert _row(rf, 1) == {"gender=M", "occupation=writer", "zip=3", "age=[20,25)"}
    assert rf.names == (
        "gender=M",
        "occupation=technician",
        "occupation=writer",
        "zip=3",
        "zip=8",
        "age=[20,25)",
    )
    assert _row(cf, 0) == {"year=1995", "genres=Animation", "genres=Children's", "genres=Comedy"}
    assert _row(cf, 1) == {"year=1994", "genres=Drama"}
    assert _row(cf, 2) == {"genres=unknown"}  # no release date: no year feature
    assert [g for g, _ in cf.group_sizes()] == ["year", "genres"]


def test_100k_raw_tables(tmp_path):
    users, movies = load_movielens_side("100k", _write_100k(tmp_path / "ml-100k"))
    np.testing.assert_array_equal(users["id"], [3, 2, 1])  # file order, all lines
    np.testing.assert_array_equal(users["age"], [23, 53, 24])
    assert users["occupation"].tolist() == ["writer", "other", "technician"]
    assert users["zip"].tolist() == ["32067", "94043", "85711"]
    assert movies["title"][1] == "Caf\xe9 (1994)"  # Latin-1
    assert movies["genres"][0] == ("Animation", "Children's", "Comedy")
    assert math.isnan(movies["year"][3]) and movies["release_date"][3] == ""
    for t in (users, movies):
        assert all(not v.flags.writeable for v in t.values())
    # the default features are those of movielens_features on these tables
    data, uid, iid = load_movielens("100k", path=tmp_path / "ml-100k", return_ids=True)
    rf, cf = movielens_features("100k", users, movies, uid, iid)
    assert rf == data.row_features and cf == data.col_features
    # plain lists work too
    as_lists = {k: v.tolist() for k, v in movies.items()}
    assert movielens_features("100k", None, as_lists, uid, iid) == (None, cf)
    with pytest.raises(ValueError, match="no 'id' column"):
        movielens_features("100k", {"age": [1]}, None, uid, iid)


def test_100k_zip_and_file_paths_read_the_same_side_files(tmp_path):
    folder = _write_100k(tmp_path / "ml-100k")
    archive = tmp_path / "ml-100k.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in folder.iterdir():
            zf.write(f, f"ml-100k/{f.name}")
    ref = load_movielens("100k", path=folder)
    for p in (archive, folder / "u.data", tmp_path):
        d = load_movielens("100k", path=p)
        assert d.row_features == ref.row_features and d.col_features == ref.col_features, p
    users, _ = load_movielens_side("100k", archive)
    np.testing.assert_array_equal(users["id"], [3, 2, 1])


def test_cache_folder_side_files(tmp_path):
    _write_100k(tmp_path / "cache" / "movielens" / "ml-100k")
    d = load_movielens("100k", cache_dir=tmp_path / "cache", download=False)
    assert d.row_features.n_rows == 2
    users, movies = load_movielens_side("100k", cache_dir=tmp_path / "cache")
    assert users["id"].size == 3 and movies["id"].size == 4
    with pytest.raises(FileNotFoundError, match="not in the cache"):
        load_movielens_side("1m", cache_dir=tmp_path / "cache")


def test_absent_side_files_and_opt_out(tmp_path):
    d = load_movielens("100k", path=_write_100k(tmp_path / "a", user=None, item=None, genre=False))
    assert d.row_features is None and d.col_features is None
    d = load_movielens("100k", path=_write_100k(tmp_path / "b", user=None))
    assert d.row_features is None and d.col_features.n_rows == 3
    d = load_movielens("100k", path=_write_100k(tmp_path / "c", item=None))
    assert d.row_features.n_rows == 2 and d.col_features is None
    d = load_movielens("100k", path=_write_100k(tmp_path / "d"), side_info=False)
    assert d.row_features is None and d.col_features is None
    with pytest.raises(ValueError, match="side_info must be True or False"):
        load_movielens("100k", path=tmp_path / "d", side_info="no")
    # without u.genre the release's 19 genre names are used
    d = load_movielens("100k", path=_write_100k(tmp_path / "e", genre=False))
    assert d.col_features == load_movielens("100k", path=tmp_path / "d").col_features


@pytest.mark.parametrize(
    "user, item, match",
    [
        (
            "1|24|M|technician|85711\n",
            U_ITEM,
            r"u\.user: no line for user id 3 \(1 rated users missing\)",
        ),
        (U_USER, U_ITEM.replace("4|unknown", "5|unknown"), r"u\.item: no line for movie id 4"),
        (
            U_USER + "4|30|M|writer\n",
            U_ITEM,
            r"u\.user, line 4: expected 5 fields separated by '\|', found 4",
        ),
        (U_USER + "3|30|M|writer|1\n", U_ITEM, r"u\.user: id 3 appears on more than one line"),
        (
            "x|24|M|technician|85711\n" + U_USER,
            U_ITEM,
            r"u\.user, line 1: the id 'x' is not an integer",
        ),
        (
            "1|old|M|technician|85711\n" + U_USER[:-1],
            U_ITEM,
            r"u\.user, line 1: the age 'old' is not a number",
        ),
        (
            U_USER,
            U_ITEM.replace("|0|0|0|0\n", "|0|0|0|2\n", 1),
            r"u\.item, line 1: the genre flags must be 0 or 1",
        ),
        (U_USER, U_ITEM + "5|Short|01-Jan-1990|\n", r"u\.item, line 5: expected 24 fields"),
    ],
)
def test_bad_side_files_name_file_and_line(tmp_path, user, item, match):
    with pytest.raises(ValueError, match=match):
        load_movielens("100k", path=_write_100k(tmp_path / "ml-100k", user=user, item=item))


# --------------------------------------------------------------------------- ML-1M format
RATINGS_DAT = (
    "1::1193::5::978300760\n2::661::3::978302109\n2::1193::4::978301968\n6040::3952::1::978300275\n"
)
USERS_DAT = (
    "1::F::1::10::48067\n2::M::56::16::70072\n6040::M::25::6::11106-4567\n17::M::50::20::95350\n"
)
MOVIES_DAT = (
    "661::James and the Giant Peach (1996)::Animation|Children's|Musical\n"
    "1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n"
    "3952::Contender, The (2000)::Drama|Thriller\n"
    "3953::Not rated (1999)::Comedy\n"
    "73::Mis\xe9rables, Les (1995)::Drama|Musical\n"
)


def test_1m_format(tmp_path):
    folder = tmp_path / "ml-1m"
    folder.mkdir()
    (folder / "ratings.dat").write_text(RATINGS_DAT)
    (folder / "users.dat").write_text(USERS_DAT)
    (folder / "movies.dat").write_bytes(MOVIES_DAT.encode("latin-1"))
    data, uid, iid = load_movielens("1m", path=folder, return_ids=True)
    np.testing.assert_array_equal(uid, [1, 2, 6040])
    np.testing.assert_array_equal(iid, [661, 1193, 3952])
    rf, cf = data.row_features, data.col_features
    # ages are ML-1M's range codes, bucketed at the ranges' edges (all 7 buckets)
    assert [n for n in rf.names if n.startswith("age=")] == [
        "age=<18",
        "age=[18,25)",
        "age=[25,35)",
        "age=[35,45)",
        "age=[45,50)",
        "age=[50,56)",
        "age=>=56",
    ]
    assert _row(rf, 0) == {"gender=F", "occupation=K-12 student", "zip=4", "age=<18"}
    assert _row(rf, 1) == {"gender=M", "occupation=self-employed", "zip=7", "age=>=56"}
    assert _row(rf, 2) == {"gender=M", "occupation=doctor/health care", "zip=1", "age=[25,35)"}
    assert _row(cf, 0) == {"year=1996", "genres=Animation", "genres=Children's", "genres=Musical"}
    assert _row(cf, 2) == {"year=2000", "genres=Drama", "genres=Thriller"}
    assert SIDE_FEATURES["users-1m"]["numeric_buckets"]["age"] == (18, 25, 35, 45, 50, 56)
    users, movies = load_movielens_side("1m", folder)
    assert users["occupation"].tolist() == [
        "K-12 student",
        "self-employed",
        "doctor/health care",
        "writer",
    ]
    assert users["zip"][2] == "11106-4567"
    assert movies["title"][4] == "Mis\xe9rables, Les (1995)" and movies["year"][4] == 1995


# --------------------------------------------------------------------------- csv releases
RATINGS_CSV = (
    "userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,3,4.0,964981247\n2,1,2.5,1445714835\n"
)
MOVIES_CSV = (
    "movieId,title,genres\n"
    "1,Toy Story (1995),Adventure|Animation|Children|Comedy|Fantasy\n"
    '3,"Grumpier Old Men, The (1995)",Comedy|Romance\n'
    '5,"Father of the Bride Part II (1995)",Comedy\n'
)


@pytest.mark.parametrize("name, folder", [("latest-small", "ml-latest-small"), ("20m", "ml-20m")])
def test_movies_csv(tmp_path, name, folder):
    d = tmp_path / folder
    d.mkdir()
    (d / "ratings.csv").write_text(RATINGS_CSV)
    (d / "movies.csv").write_text(MOVIES_CSV)
    data = load_movielens(name, path=d)
    assert data.row_features is None  # no users file in these releases
    cf = data.col_features
    assert _row(cf, 0) == {
        "year=1995",
        "genres=Adventure",
        "genres=Animation",
        "genres=Children",
        "genres=Comedy",
        "genres=Fantasy",
    }
    assert _row(cf, 1) == {"year=1995", "genres=Comedy", "genres=Romance"}
    # no genres, no year in the title: no features; a title with a range of years
    (d / "movies.csv").write_text(
        MOVIES_CSV.replace(
            '3,"Grumpier Old Men, The (1995)",Comedy|Romance', "3,Untitled,(no genres listed)"
        )
        + "9,Band of Brothers (2001-2002),War\n"
    )
    data = load_movielens(name, path=d)
    assert _row(data.col_features, 1) == set()
    _, movies = load_movielens_side(name, d)
    assert movies["year"][-1] == 2001 and movies["genres"][1] == ()


def test_10m_movies_dat(tmp_path):
    d = tmp_path / "ml-10M100K"
    d.mkdir()
    (d / "ratings.dat").write_text("1::1193::5::978300760\n")
    (d / "movies.dat").write_text("1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n")
    data = load_movielens("10m", path=d)
    assert data.row_features is None and _row(data.col_features, 0) == {"year=1975", "genres=Drama"}


# --------------------------------------------------------------------------- real ML-100K
_real = pytest.mark.requires_ml100k("u.data", "u.user", "u.item", "u.occupation")


@_real
def test_real_100k_side_files(ml100k):
    data, uid, iid = load_movielens("100k", path=ml100k, return_ids=True)
    rf, cf = data.row_features, data.col_features
    assert rf.n_rows == 943 and cf.n_rows == 1682
    n_occupations = len(
        [s for s in (ml100k / "u.occupation").read_text().splitlines() if s.strip()]
    )
    sizes = dict(rf.group_sizes())
    assert sizes["occupation"] == n_occupations == 21 and sizes["gender"] == 2
    assert dict(cf.group_sizes())["genres"] == 19
    # every user has exactly one feature of each group
    d = rf.to_dense()
    for g in ("gender", "occupation", "zip", "age"):
        cols = [j for j, gg in enumerate(rf.groups) if gg == g]
        np.testing.assert_array_equal(d[:, cols].sum(axis=1), 1.0)
    # user 1: 24, M, technician, zip 85711; user 2: 53, F, other, 94043
    assert uid[0] == 1 and _row(rf, 0) == {
        "age=[20,25)",
        "gender=M",
        "occupation=technician",
        "zip=8",
    }
    assert _row(rf, 1) == {"age=[50,55)", "gender=F", "occupation=other", "zip=9"}
    # movie 1: Toy Story, 01-Jan-1995, Animation|Children's|Comedy; movie 267: no date, unknown
    assert iid[0] == 1 and _row(cf, 0) == {
        "year=1995",
        "genres=Animation",
        "genres=Children's",
        "genres=Comedy",
    }
    assert iid[266] == 267 and _row(cf, 266) == {"genres=unknown"}
    users, movies = load_movielens_side("100k", ml100k)
    assert (users["age"][0], users["gender"][0], users["occupation"][0], users["zip"][0]) == (
        24,
        "M",
        "technician",
        "85711",
    )
    assert movies["title"][0] == "Toy Story (1995)" and movies["id"].size == 1682
    # the features travel with the official folds
    train, test = data.official_split("u3")
    assert train.row_features is rf and test.col_features is cf
    assert bmc.data.implicit_features(train).shape == (943, 1682)
