"""The file side of checkpoints of long Gibbs and VB runs (``.npz``, no pickle).

``bmc.fit(..., checkpoint="run.npz", checkpoint_every=100)`` writes the sampler state
(factors, gamma, PRNG keys, running sums) and everything collected so far every
``checkpoint_every`` iterations, atomically (write to a temporary file, then rename).
Calling ``fit`` again with the same arguments resumes from the file: the key stream is
part of the state, so the resumed run produces exactly the draws an uninterrupted run
would have produced.  Ctrl-C writes a checkpoint of the work done before stopping.
The run loop is :mod:`bmczoo.inference.run`; each driver names its state's arrays
(:mod:`bmczoo.inference.gibbs.driver`, :mod:`bmczoo.inference.vb.driver`); this module
writes and reads the files, checks their settings and passes the command line's stop
request to the loop.

The file also stores the run's settings (data fingerprint, prior, K, sampler settings,
...); resuming with different settings raises ``ValueError`` naming what differs.
Factors are stored without the padding rows of a sharded run, so a checkpoint can be
resumed on another number of devices.

What "exactly" means depends on the backend (:func:`resume_guarantee`): on CPU, XLA's
programs are deterministic, so the resumed run's draws equal the uninterrupted run's bit
for bit.  On other backends (GPU) the state, the key stream and the iteration counters
are restored bit for bit, so the resumed run draws the same random numbers, but the float
reductions of a sweep (the hot path's segment sums are scatter-adds with atomics,
cuSPARSE, XLA's reductions) may round differently from one run to the next: the draws
then equal the uninterrupted run's up to a float tolerance (``rtol`` of the guarantee,
relative to the largest magnitude of each array).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from .._checks import check_dtype

__all__ = [
    "WRITE_LOCK",
    "ResumeGuarantee",
    "check_settings",
    "fingerprint",
    "load_npz",
    "request_stop",
    "resume_guarantee",
    "save_npz",
    "write_npz_atomic",
]

#: the format of the files this version writes and reads
FORMAT = "bmczoo-checkpoint-2"


class ResumeGuarantee(NamedTuple):
    """How a resumed run compares with the uninterrupted one on a backend.

    ``exact``: bit for bit.  Otherwise every float array of the resumed run is within
    ``rtol * max(1, max |uninterrupted|)`` of the uninterrupted run's, element-wise
    (the key stream, iteration counters and the number of draws are equal exactly).
    """

    platform: str
    exact: bool
    rtol: float

    def check(self, expected, actual, err_msg: str = "") -> None:
        """Raise ``AssertionError`` if ``actual`` breaks the guarantee against ``expected``."""
        expected, actual = np.asarray(expected), np.asarray(actual)
        if self.exact or not np.issubdtype(expected.dtype, np.inexact):
            np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
            return
        scale = max(1.0, float(np.max(np.abs(expected), initial=0.0, where=np.isfinite(expected))))
        np.testing.assert_allclose(
            actual, expected, rtol=self.rtol, atol=self.rtol * scale, err_msg=err_msg
        )


def resume_guarantee(dtype=None, platform: str | None = None) -> ResumeGuarantee:
    """What a resumed run of float ``dtype`` (None: float32, float64 when x64 is on)
    guarantees on ``platform`` (None: ``jax.default_backend()``): bit-exact on CPU (XLA's
    CPU programs are deterministic); elsewhere equal up to ``rtol = 10 sqrt(eps)`` of the
    dtype (3.5e-3 in float32, 1.5e-7 in float64): the same draws of the random numbers,
    with the rounding of non-deterministic GPU reductions carried through the chain.

    Parameters
    ----------
    dtype : dtype, optional
        The run's float dtype.
    platform : str, optional
        ``"cpu"``, ``"gpu"``, ... (default: ``jax.default_backend()``).
    """
    platform = jax.default_backend() if platform is None else platform
    if dtype is None:
        dtype = check_dtype()
    if platform == "cpu":
        return ResumeGuarantee(platform, True, 0.0)
    return ResumeGuarantee(platform, False, 10.0 * float(np.sqrt(np.finfo(np.dtype(dtype)).eps)))


def fingerprint(*arrays) -> str:
    """SHA-1 of the bytes (and shapes, dtypes) of ``arrays``: identifies the data of a run."""
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_npz(path: str | os.PathLike, settings: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` and the JSON ``settings`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_npz_atomic(
        path,
        __format__=np.asarray(FORMAT),
        __settings__=np.asarray(json.dumps(settings, sort_keys=True)),
        **arrays,
    )


def write_npz_atomic(
    path: str | os.PathLike, /, *, compress: bool = False, overwrite: bool = True, **arrays
) -> None:
    """``np.savez(path, **arrays)`` through a temporary file in the same folder renamed
    over ``path``: a reader never sees a half-written file (checkpoints, saved fits).
    The file gets the permissions a plain ``open(path, "w")`` would give it (``0o666``
    less the umask), not ``mkstemp``'s ``0o600``; an exit of the command line on Ctrl-C
    waits for the write to end (:data:`WRITE_LOCK`).  ``compress=True``:
    ``np.savez_compressed`` (the same archive, deflated; ``np.load`` reads both).

    ``overwrite=False``: ``FileExistsError`` if ``path`` exists when the file is put in
    place, also one created during the write (never replaced).  A failure to write (a
    missing or read-only folder, a full disk) raises the ``OSError`` of its kind naming
    ``path``, not the temporary file, which is removed."""
    path = Path(path)
    with WRITE_LOCK:
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        except OSError as err:
            raise _write_error(path, err) from None
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o666 & ~current_umask())
                (np.savez_compressed if compress else np.savez)(f, **arrays)
            _put_in_place(tmp, path, overwrite)
        except BaseException as err:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(err, OSError) and not isinstance(err, FileExistsError):
                raise _write_error(path, err) from None
            raise


def _put_in_place(tmp: str, path: Path, overwrite: bool) -> None:
    """Rename the written ``tmp`` to ``path``; without ``overwrite`` by a hard link, which
    fails on an existing ``path`` (a check before a rename would let a file created in
    between be replaced), or where the file system has no hard links by a rename after
    that check."""
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, f"{str(path)!r} exists") from None
    except OSError:  # no hard links here (some network and FAT file systems)
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, f"{str(path)!r} exists") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _write_error(path: Path, err: OSError) -> OSError:
    """``err``, raised writing ``path`` through its temporary file, as an error of the same
    kind (the ``errno``) whose message names ``path`` and says why."""
    if not path.parent.is_dir():
        why = f"the folder {str(path.parent)!r} does not exist"
    elif isinstance(err, PermissionError) and not os.access(path.parent, os.W_OK):
        why = f"the folder {str(path.parent)!r} is not writable ({err.strerror})"
    elif path.is_dir():
        why = "it is a folder"
    else:
        why = err.strerror or str(err)
    message = f"cannot write {str(path)!r}: {why}"
    return OSError(err.errno, message) if err.errno is not None else OSError(message)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it
    (``/proc/self/status``; ``os.umask`` must set a mask to read one, which another
    thread creating a file at that moment would see)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Held while :func:`write_npz_atomic` writes a file and renames it into place: the
#: command line's exit on Ctrl-C takes it first, so that it never leaves a temporary file
#: behind or stops a rename half-way.
WRITE_LOCK = threading.RLock()


class _StopRequest:
    """A stop asked of the running checkpointed loop
    (:func:`bmczoo.inference.run.run_loop`) from another thread: the command line's Ctrl-C watcher.

    The command line does not let Ctrl-C raise ``KeyboardInterrupt`` wherever the main
    thread happens to be: raised inside JAX's tracing, XLA's compilation or a garbage
    collector callback, it can be swallowed ("Exception ignored in ...") or end the
    interpreter while XLA's threads still run (a segmentation fault at exit).  Its watcher
    thread asks the loop to stop instead; a loop that holds work it can save
    (:meth:`arm`) raises ``KeyboardInterrupt`` at its next boundary between two compiled
    calls (:meth:`check`, :meth:`finish`), saves its checkpoint and re-raises with the
    message that says where; with nothing to save the watcher exits at once.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._armed = False
        self._pending = False

    def request(self) -> bool:
        """Ask the armed loop to stop; False when no loop holds work to save (the caller
        exits on its own)."""
        with self._lock:
            self._pending = self._armed
            return self._armed

    def arm(self) -> None:
        """The calling loop has work a checkpoint can save: a stop request goes to it."""
        with self._lock:
            self._armed = True

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a stop was requested (a loop's boundary)."""
        if self._pending:
            raise KeyboardInterrupt

    def finish(self) -> None:
        """The loop is done: no later request goes to it; raise ``KeyboardInterrupt``
        if one came before (its checkpoint holds the finished run)."""
        with self._lock:
            pending, self._armed, self._pending = self._pending, False, False
        if pending:
            raise KeyboardInterrupt

    def disarm(self) -> None:
        with self._lock:
            self._armed = self._pending = False


#: The one stop request of the process (a command line runs one fit at a time).
STOP = _StopRequest()


def request_stop() -> bool:
    """Ask the running checkpointed loop to save its work and raise ``KeyboardInterrupt``
    at its next boundary; False when no loop holds work a checkpoint would save.  Called
    from the command line's Ctrl-C watcher thread."""
    return STOP.request()


def load_npz(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """``(settings, arrays)`` of a checkpoint written by :func:`save_npz`."""
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"checkpoint {str(path)!r} is not a readable .npz file: {err}") from None
    found = str(data.pop("__format__", ""))
    if found != FORMAT:
        if found.startswith("bmczoo-checkpoint-"):
            raise ValueError(
                f"checkpoint {str(path)!r} was written by another version of bmczoo (format {found}; "
                f"this version reads {FORMAT}): start the run again with another checkpoint path"
            )
        raise ValueError(f"checkpoint {str(path)!r} is not a bmczoo checkpoint ({FORMAT})")
    settings = json.loads(str(data.pop("__settings__")))
    return settings, data


def check_settings(path, stored: dict, current: dict) -> None:
    """Raise ``ValueError`` naming the first setting that differs (the method first: the
    other settings depend on it)."""
    for k in sorted(set(stored) | set(current), key=lambda k: (k != "method", k)):
        if stored.get(k) != current.get(k):
            raise ValueError(
                f"checkpoint {str(path)!r} was written by a different run: {k} is {stored.get(k)!r} there and "
                f"{current.get(k)!r} now; use another checkpoint path or the original arguments"
            )
