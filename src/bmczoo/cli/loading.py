"""``fit --data SPEC``: the simulator, a MovieLens name, a ratings file, a folder or an
official archive, read into training and test data."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .errors import CLIError, is_network_error

MOVIELENS = {
    "ml-100k": "100k",
    "ml-1m": "1m",
    "ml-10m": "10m",
    "ml-20m": "20m",
    "ml-25m": "25m",
    "ml-32m": "32m",
    "ml-latest-small": "latest-small",
}


class Loaded(NamedTuple):
    """What ``bmczoo fit --data SPEC`` fits: the training data, the test data (None for the
    simulator), the simulation (None for rating files), the dataset's own ids of the rows
    and columns (None for the simulator): ``user_ids[i]`` is the id of row ``i``, and with
    ``--context`` the :class:`~bmczoo.data.TimeEncoder` of the time features (saved with
    the model, so that ``bmczoo predict`` encodes new ratings in the same columns); with
    ``--time-bins`` (train and test then :class:`~bmczoo.data.TensorData`, user x item x
    time bin) the bins' inner edges (saved with the model: ``bmczoo predict`` bins new
    timestamps by them)."""

    train: object
    test: object
    sim: object
    user_ids: object = None
    item_ids: object = None
    time: object = None
    time_edges: object = None


class Split(NamedTuple):
    """How ``fit`` holds out its test pairs: ``--split``, ``--test-fraction``,
    ``--test-count`` and ``--split-seed``.

    ``per_user`` False: ``fraction`` of all the ratings
    (:meth:`~bmczoo.data.RatingData.split`); True: ``fraction`` (or ``count``) of each
    user's pairs, at most all but one (:meth:`~bmczoo.data.RatingData.split_per_user`, the
    split of top-N evaluation).  ``seed`` seeds the choice."""

    fraction: float = 0.2
    per_user: bool = False
    count: int | None = None
    seed: int = 0

    def apply(self, data):
        """``(train, test)`` of ``data``; a per-user split that holds out nothing is a
        ``CLIError``.

        Parameters
        ----------
        data : RatingData
            The ratings to split.
        """
        if not self.per_user:
            return data.split(self.fraction, seed=self.seed)
        try:
            return data.split_per_user(self.fraction, seed=self.seed, test_count=self.count)
        except ValueError as e:  # every user too small: nothing held out
            raise CLIError(
                f"--split per-user: {self.describe()} holds out no pair ({e}; each user keeps "
                "one pair for training)"
            ) from None

    def describe(self) -> str:
        """The split in words, for the ``data:`` line."""
        if self.count is not None:
            share = f"{self.count} of each user's pairs"
        elif self.per_user:
            share = f"{self.fraction:g} of each user's pairs"
        else:
            share = f"{self.fraction:g} of the ratings"
        return f"{share} held out, split seed {self.seed}"


def load(
    spec: str,
    seed: int,
    split: Split = Split(),
    side_info: bool = False,
    context: tuple[str, ...] = (),
    time_bins: int | None = None,
) -> Loaded:
    """The data of ``--data SPEC``: ``sim:M``, a MovieLens name, or a path to a ratings file
    (judged by its content, whatever its name), a folder holding one, or an official .zip.
    ``side_info`` (``--features``): a MovieLens ratings file given by path (``u.data``,
    ``ratings.dat``, ``ratings.csv``, or a folder holding one) is read by
    :func:`bmczoo.datasets.load_movielens` with the side files beside it (names and official
    archives get them anyway).  ``context`` (``--context``): the time groups of
    :func:`bmczoo.data.time_features` built from the ratings' timestamps before the split.
    ``time_bins`` (``--time-bins B``): the ratings as a user x item x time-bin
    :class:`~bmczoo.data.TensorData` (the timestamps cut into ``B`` equal-count bins, as
    :meth:`~bmczoo.data.TensorData.from_ratings`), split at the same positions.
    ``split`` (:class:`Split`): how the test pairs are held out.  ``seed``: the
    simulator's."""
    from .. import datasets

    if time_bins is not None:
        _check_time_bins(spec, time_bins, context, split)
    if spec.startswith("sim:"):
        try:
            m = int(spec[4:])
        except ValueError:
            raise CLIError(f"--data sim:M needs an integer M, got {spec!r}") from None
        sim = datasets.simulate_paper(m, seed=seed)
        return Loaded(sim.train, None, sim)
    name = MOVIELENS.get(spec, spec if spec in datasets.DATASETS else None)
    if name is not None:
        data, user_ids, item_ids = _download(name)
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            raise CLIError(
                f"--data {spec}: no such file or folder (or MovieLens name: {', '.join(MOVIELENS)})"
            )
        if path.is_dir():
            data, user_ids, item_ids = _load_folder(path, side_info)
        else:
            data, user_ids, item_ids = _load_file(path, side_info)
    time = edges = None
    if context:
        data, time = _with_time(data, context, spec)
    if time_bins is not None:
        data, edges = _as_tensor(data, time_bins, spec)
    train, test = split.apply(data)
    return Loaded(train, test, None, user_ids, item_ids, time, edges)


def _check_time_bins(spec: str, time_bins: int, context: tuple, split: Split) -> None:
    """``--time-bins B``: a positive count, ratings with timestamps, not with ``--context``
    nor a per-user split."""
    if time_bins < 1:
        raise CLIError(f"--time-bins must be at least 1, got {time_bins}")
    if split.per_user:
        raise CLIError(
            "--split per-user (top-N evaluation of a matrix fit) is not implemented for a "
            "tensor (--time-bins): use the default uniform split"
        )
    if spec.startswith("sim:"):
        raise CLIError("--time-bins needs ratings with timestamps; the simulator has none")
    if context:
        raise CLIError(
            "--time-bins (time as a mode of a tensor) and --context (time effects of the "
            "matrix model): choose one"
        )


def _as_tensor(data, time_bins: int, spec: str):
    """The ratings as a user x item x time-bin array and the bins' inner edges."""
    from ..data import TensorData
    from ..data._time import _bin_rule

    if data.timestamps is None:
        raise CLIError(
            f"--time-bins needs the ratings' timestamps: {spec} has none (a 4th column of "
            "integers: seconds since the epoch)"
        )
    edges = _bin_rule(data.timestamps, int(time_bins), "count")[1]
    return TensorData.from_ratings(data, time_bins=int(time_bins)), edges


def time_bin_of(edges, timestamps):
    """The time bin of each timestamp by the saved ``edges`` of ``--time-bins`` (a time
    outside the fitted range is in the first or the last bin)."""
    import numpy as np

    return np.searchsorted(np.asarray(edges), np.asarray(timestamps), side="right")


def _with_time(data, groups: tuple[str, ...], spec: str):
    """The data with the time features of ``groups`` as its per-rating context, and
    their encoder."""
    from ..data import TimeEncoder

    if data.timestamps is None:
        raise CLIError(
            f"--context needs the ratings' timestamps: {spec} has none (a 4th column of "
            "integers: seconds since the epoch)"
        )
    time = TimeEncoder.fit(data, groups)
    return data.with_context(time.table), time


def _download(name: str):
    """``load_movielens(name)`` from the cache or a download; a failed download is one
    ``CLIError`` saying how to give a local copy instead."""
    from .. import datasets

    info = datasets.DATASETS[name]
    try:
        return datasets.load_movielens(name, return_ids=True)
    except Exception as e:  # noqa: BLE001 - any failure of the download is reported the same way
        if not (
            is_network_error(e) or (isinstance(e, OSError) and not isinstance(e, FileNotFoundError))
        ):
            raise
        reason = " ".join(str(getattr(e, "reason", None) or e or type(e).__name__).split())
        local = (
            f"pass --data PATH to {info.archive}, to the folder it unpacks to, or to its "
            f"{info.filename} (any ratings file is accepted)"
        )
        if not is_network_error(e):  # the download worked, the cache could not be written
            raise CLIError(
                f"MovieLens {name} could not be stored in the cache {datasets.cache_root()} "
                f"({reason}); set BMCZOO_CACHE to a writable folder, or {local}"
            ) from e
        url = getattr(e, "url", None) or info.url  # a DownloadError names the file that failed
        raise CLIError(
            f"MovieLens {name} could not be downloaded from {url} ({reason}); without network "
            f"access, download {info.archive} elsewhere and {local}, or unpack it into "
            f"{datasets.cache_root() / 'movielens'}"
        ) from e


def _load_folder(path: Path, side_info: bool = False):
    from .. import datasets

    for fname, name in (("u.data", "100k"), ("ratings.dat", "1m"), ("ratings.csv", "latest-small")):
        for cand in (path / fname, path / datasets.DATASETS[name].folder / fname):
            if cand.is_file():
                return _load_file(cand, side_info)
    raise CLIError(
        f"--data {path}: no u.data, ratings.dat or ratings.csv in this folder; "
        "give the ratings file itself (any name)"
    )


def _movielens_release(path: Path) -> str | None:
    """The MovieLens release whose ratings file ``path`` is, by its name and the side files
    beside it (None: not a MovieLens file name)."""
    if path.name == "u.data":
        return "100k"
    if path.name == "ratings.dat":
        return "1m" if (path.parent / "users.dat").is_file() else "10m"
    if path.name == "ratings.csv":
        return "latest-small"
    return None


def _load_file(path: Path, side_info: bool = False):
    """``(RatingData, user_ids, item_ids)`` of a ratings file, judged by its content: an
    official MovieLens .zip archive, or a table of ``user item rating [timestamp]`` lines
    separated by TAB, ',', ';' or '::' (an optional header line), whatever the file's name.
    ``side_info``: a MovieLens ratings file (by name) is read with its side files."""
    import zipfile

    from .. import datasets

    release = _movielens_release(path) if side_info else None
    if release is not None:
        try:
            return datasets.load_movielens(release, path=path, return_ids=True)
        except ValueError as e:  # the message starts with the file it is about
            raise CLIError(f"--data {' '.join(str(e).split())}") from None

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
        for info in datasets.DATASETS.values():
            if f"{info.folder}/{info.filename}" in names or info.filename in names:
                return datasets.load_movielens(info.name, path=path, return_ids=True)
        raise CLIError(
            f"--data {path}: a zip archive without a MovieLens ratings file "
            "(u.data, ratings.dat or ratings.csv)"
        )
    return _read_ratings_table(path.read_bytes(), str(path), _movielens_release(path))


def _read_ratings_table(data: bytes, source: str, release: str | None = None):
    """``(RatingData, user_ids, item_ids)`` of ``user item rating [timestamp]`` lines (TAB,
    ',', ';' or '::' between fields, an optional header line), users as rows and items as
    columns in increasing order of their ids: :func:`bmczoo.datasets.read_ratings`, or for a
    MovieLens file (``release``, by its name) :func:`bmczoo.datasets.load_movielens`'s
    reading of it, whose message a bad file gets, after ``--data``."""
    from .. import datasets
    from ..datasets._ratings import load_bytes
    from ..datasets._reader import read_ratings_bytes

    try:
        if release is not None:
            return load_bytes(data, datasets.DATASETS[release], source)
        return read_ratings_bytes(data, source)
    except ValueError as e:
        raise CLIError(f"--data {e}") from None


def binarize(data, threshold: float):
    """``data`` with values ``>= threshold`` set to 1 and the others to 0."""
    import numpy as np

    if data is None:
        return None
    return data.with_values((np.asarray(data.values) >= threshold).astype(np.float64))
