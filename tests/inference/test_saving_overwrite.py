"""Where ``fit.save`` writes, and what it refuses: an existing file only with
``overwrite=True`` (as ``bmczoo fit --save`` with ``--overwrite``), ``FileExistsError``
naming it otherwise; a folder, a missing folder or a read-only one raise the error of their
kind naming the target path, never the temporary file; the write stays atomic (a failure
leaves the earlier file whole and no temporary file behind, and a file created during the
write is never replaced without ``overwrite``)."""

from __future__ import annotations

import errno
import os
import tempfile

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.cli import main
from bmczoo.inference import saving


@pytest.fixture(scope="module")
def fits():
    """Two VB fits of one matrix with different predictions."""
    train = bmc.datasets.simulate_paper(20, rank=2, seed=0).train
    kw = dict(K=2, method="vb", max_iter=5, progress_bar=False)
    return bmc.fit(train, seed=0, **kw), bmc.fit(train, seed=1, **kw)


def _predictions(fit):
    rows, cols = np.divmod(np.arange(400), 20)
    return fit.predict(rows, cols)


def _only(folder, *names):
    """``folder`` holds exactly ``names``: no temporary file was left."""
    assert sorted(os.listdir(folder)) == sorted(names)


def test_an_existing_file_is_replaced_only_with_overwrite(fits, tmp_path):
    a, b = fits
    path = tmp_path / "fit.npz"
    a.save(path)
    before = path.read_bytes()
    for write in (lambda: b.save(path), lambda: saving.save(b, path)):
        with pytest.raises(FileExistsError, match="pass overwrite=True") as err:
            write()
        assert str(path) in str(err.value) and err.value.errno == errno.EEXIST
        assert path.read_bytes() == before  # untouched
    b.save(path, overwrite=True)
    np.testing.assert_array_equal(_predictions(bmc.load(path)), _predictions(b))
    saving.save(a, path, overwrite=True)
    np.testing.assert_array_equal(_predictions(bmc.load(path)), _predictions(a))
    _only(tmp_path, "fit.npz")


def test_overwrite_is_true_or_false(fits, tmp_path):
    with pytest.raises(TypeError, match="overwrite must be True or False"):
        fits[0].save(tmp_path / "fit.npz", overwrite="yes")
    _only(tmp_path)


def test_a_folder_or_a_missing_folder_is_named(fits, tmp_path):
    fit = fits[0]
    with pytest.raises(IsADirectoryError, match="it is a folder") as err:
        fit.save(tmp_path, overwrite=True)
    assert repr(str(tmp_path)) in str(err.value)
    target = tmp_path / "missing" / "fit.npz"
    with pytest.raises(FileNotFoundError, match="does not exist") as err:
        fit.save(target)
    assert repr(str(target)) in str(err.value) and ".tmp" not in str(err.value)
    assert not target.parent.exists()  # save does not create folders
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        fit.save(tmp_path / "file" / "fit.npz")


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes in read-only folders"
)
def test_a_read_only_folder_is_named(fits, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match="is not writable") as err:
            fits[0].save(folder / "fit.npz")
    finally:
        folder.chmod(0o755)
    assert repr(str(folder / "fit.npz")) in str(err.value) and ".tmp" not in str(err.value)


def test_a_refused_temporary_file_is_reported_as_the_target(fits, tmp_path, monkeypatch):
    """What the operating system says of the temporary file (a read-only folder, also
    for root) is reported of the target path."""

    def refused(dir, prefix, suffix):
        name = os.path.join(dir, prefix + "abcd1234" + suffix)
        raise PermissionError(errno.EACCES, "Permission denied", name)

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    path = tmp_path / "fit.npz"
    with pytest.raises(PermissionError) as err:
        fits[0].save(path)
    message = str(err.value)
    assert repr(str(path)) in message and "Permission denied" in message
    assert ".tmp" not in message and err.value.errno == errno.EACCES


def test_a_failed_write_keeps_the_earlier_file(fits, tmp_path, monkeypatch):
    a, b = fits
    path = tmp_path / "fit.npz"
    a.save(path)
    before = path.read_bytes()

    def disk_full(f, **arrays):
        f.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_full)
    with pytest.raises(OSError, match="No space left on device") as err:
        b.save(path, overwrite=True)
    assert repr(str(path)) in str(err.value) and err.value.errno == errno.ENOSPC
    assert path.read_bytes() == before
    _only(tmp_path, "fit.npz")


def test_a_file_created_during_the_write_is_not_replaced(fits, tmp_path, monkeypatch):
    path = tmp_path / "fit.npz"
    real = np.savez_compressed

    def another_writer_first(f, **arrays):
        path.write_text("another program's file")
        real(f, **arrays)

    monkeypatch.setattr(np, "savez_compressed", another_writer_first)
    with pytest.raises(FileExistsError, match="pass overwrite=True") as err:
        fits[0].save(path)
    assert repr(str(path)) in str(err.value)
    assert path.read_text() == "another program's file"
    _only(tmp_path, "fit.npz")


@pytest.mark.parametrize("exists", [False, True])
def test_without_hard_links_the_file_is_still_checked(fits, tmp_path, monkeypatch, exists):
    """A file system without hard links (``link`` fails with EPERM): the file is renamed
    into place after the check that nothing is there."""

    def no_links(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted", src, dst)

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "fit.npz"
    if exists:
        path.write_text("earlier")
        with pytest.raises(FileExistsError, match="pass overwrite=True"):
            fits[0].save(path)
        assert path.read_text() == "earlier"
    else:
        fits[0].save(path)
        np.testing.assert_array_equal(_predictions(bmc.load(path)), _predictions(fits[0]))
    _only(tmp_path, "fit.npz")


def test_the_command_line_replaces_its_model_with_overwrite(tmp_path, capsys):
    """``--save`` refuses an existing file before the fit; with ``--overwrite`` the fit
    replaces it."""
    path = tmp_path / "model.npz"
    path.write_text("an earlier file")
    args = ["fit", "--data", "sim:20", "-K", "2", "--method", "vb", "--max-iter", "5"]
    args += ["--quiet", "--save", str(path)]
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert path.read_text() == "an earlier file"
    assert main(args + ["--overwrite"]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    assert bmc.load(path).info.shape == (20, 20)
    _only(tmp_path, "model.npz")
