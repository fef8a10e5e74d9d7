"""Ctrl-C of the console command: one line on stderr and exit code 130."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path


class Interrupts:
    """Ctrl-C of the console command: one line on stderr and exit code 130, whatever the
    process is doing.

    Python's own handling raises ``KeyboardInterrupt`` at the next bytecode of the main
    thread, which may be inside JAX's tracing, a garbage-collector callback of XLA (where
    the exception is printed as "ignored" and the run goes on) or code that XLA's threads
    depend on; and after it the interpreter's teardown can race XLA's compilation and
    execution threads into a segmentation fault.  So the console command
    (:func:`bmczoo.cli.main` with ``argv=None``) takes SIGINT off the main thread: Python's
    C-level handler only writes the signal to a pipe (``signal.set_wakeup_fd``; the
    Python-level handler does nothing), which a watcher thread reads at once, even while the
    main thread is inside XLA.  The watcher then either asks a checkpointed run loop holding
    unsaved work to save and stop at its next boundary between compiled calls
    (:func:`bmczoo.inference.checkpoint.request_stop`; it raises ``KeyboardInterrupt``,
    which :func:`bmczoo.cli.main` reports) or, with nothing to save (or on a second Ctrl-C),
    prints the line and ends the process with ``os._exit(130)``, after any checkpoint or
    model file being written is complete (``checkpoint.WRITE_LOCK``).  No teardown runs
    after an interrupt.  ``main(argv)`` called from Python keeps Python's
    ``KeyboardInterrupt``.
    """

    def __init__(self):
        self.installed = False
        self.count = 0
        self.args = None  # the parsed command line, for the message
        self.phase = "start"  # "start" (reading data, compiling, fitting) or "outputs"
        self.metric = ""  # the fit's result, once known

    def install(self) -> bool:
        """Take SIGINT for the rest of the process (main thread only); False if not possible."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        reader, writer = os.pipe()  # kept open for the life of the process
        os.set_blocking(writer, False)  # set_wakeup_fd needs a non-blocking descriptor
        signal.signal(signal.SIGINT, _sigint_noted)
        signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
        threading.Thread(
            target=self._watch, args=(reader,), name="bmczoo-ctrl-c", daemon=True
        ).start()
        self.installed = True
        return True

    def _watch(self, reader: int) -> None:
        while True:
            try:
                received = os.read(reader, 64)
            except OSError:
                return
            if not received:
                return
            if signal.SIGINT in received:
                self._on_sigint()

    def _on_sigint(self) -> None:
        self.count += 1
        # a run loop can be waiting only if its module was imported (never import from here)
        ck = sys.modules.get("bmczoo.inference.checkpoint")
        if self.count == 1 and ck is not None and ck.request_stop():
            return  # the loop saves, raises KeyboardInterrupt, and main() reports it
        self.exit(self.line(again=self.count > 1))

    def line(self, again: bool = False) -> str:
        """The message for an interrupt without a message of a run loop."""
        a = self.args
        if a is None or a.command != "fit":
            return "interrupted"
        if self.phase == "outputs":
            return f"interrupted while writing the outputs; the fit itself finished ({self.metric})"
        if a.checkpoint:
            path = Path(a.checkpoint).expanduser()
            if path.exists():
                lead = (
                    "interrupted again before the checkpoint was updated"
                    if again
                    else "interrupted"
                )
                return (
                    f"{lead}; {path} keeps the work saved so far: rerun the same command to resume"
                )
            return (
                f"interrupted before any work was saved in {path}; rerun the same command to "
                "start again"
            )
        if a.method in ("gibbs", "vb"):
            return (
                "interrupted; nothing was saved (run with --checkpoint FILE.npz to make a fit "
                "resumable: Ctrl-C then saves the work done, and the same command resumes it)"
            )
        return "interrupted; nothing was saved"

    def exit(self, line: str) -> None:
        """Print ``bmczoo: LINE`` and end the process with exit code 130, without the
        interpreter's teardown, once no checkpoint or model file is half-written."""
        ck = sys.modules.get("bmczoo.inference.checkpoint")
        if ck is not None:
            ck.WRITE_LOCK.acquire()  # never released: the process ends holding it
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream: the line still goes out
                pass
        newline = "\n" if _bar_showing() else ""  # below a progress bar's last line
        try:
            os.write(2, f"{newline}bmczoo: {line}\n".encode("utf-8", "replace"))
        finally:
            os._exit(130)


def _sigint_noted(signum, frame) -> None:
    """The Python-level SIGINT handler of the console command: nothing (the watcher
    thread of :class:`Interrupts` acts on the signal)."""


def _bar_showing() -> bool:
    """Whether a tqdm progress bar is displayed now (its line has no newline yet)."""
    std = sys.modules.get("tqdm.std")
    try:
        return any(
            not getattr(bar, "disable", True) for bar in list(getattr(std.tqdm, "_instances", ()))
        )
    except Exception:  # noqa: BLE001 - tqdm not imported, or its set changed meanwhile
        return False


INTERRUPTS = Interrupts()


def interrupted_line(e: KeyboardInterrupt) -> str:
    """The message of an interrupt: the run loop's (where its checkpoint is), in
    command-line terms, else the one that fits the phase of the command."""
    text = " ".join(str(e).split())
    if not text:
        return INTERRUPTS.line()
    return text.replace("call fit again with the same arguments", "rerun the same command")
