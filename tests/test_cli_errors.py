"""``bmczoo fit`` never loses a fit and never ends in a traceback.

Each failure a new user met on a fresh clone: an offline MovieLens download, an existing
or unwritable output path (checked *before* the fit), a valid ratings file refused for
its name, hidden defaults in ``--help``, no ``--dtype`` / ``--test-fraction``, and
0-based indices instead of the dataset's ids in ``predictions.csv``.
"""

from __future__ import annotations

import csv
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import bmczoo
from bmczoo.cli import build_parser, main

FAST = ["-K", "2", "--method", "vb", "--max-iter", "3", "--quiet"]


def one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("bmczoo: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def no_fit(monkeypatch):
    """Records calls of ``bmczoo.fit``: an error must come before the fit runs."""
    calls = []
    monkeypatch.setattr(bmczoo, "fit", lambda *a, **k: calls.append((a, k)))
    return calls


def write_ratings(
    path: Path,
    sep: str = "\t",
    timestamp: bool = True,
    header: str | None = None,
    n_users: int = 30,
    n_items: int = 20,
    n: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """A small ratings table with ids that are not 0-based indices (user 1000 + 7u, item 50 + 3i)."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(n_users * n_items, size=n, replace=False)
    users, items = 1000 + 7 * (keys // n_items), 50 + 3 * (keys % n_items)
    ratings = rng.integers(1, 6, size=n)
    lines = [header] if header else []
    for u, i, r in zip(users, items, ratings):
        fields = [str(u), str(i), str(r)] + ([str(881250949 + u)] if timestamp else [])
        lines.append(sep.join(fields))
    path.write_text("\n".join(lines) + "\n")
    return np.column_stack([users, items, ratings])


# --------------------------------------------------------------------------- offline download
def test_offline_download_is_one_line_error(tmp_path, monkeypatch, capsys, no_fit):
    """No network: a MovieLens name ends in one line saying the data could not be downloaded
    and how to give a local file, not in a urllib traceback."""
    monkeypatch.setenv("BMCZOO_CACHE", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert main(["fit", "--data", "ml-100k", "--quiet"]) == 2
    one_line_error(
        capsys, "could not be downloaded", "ml-100k.zip", "--data PATH", "Temporary failure"
    )
    assert not no_fit


# --------------------------------------------------------------------------- output paths
@pytest.mark.parametrize(
    "case",
    ["out-is-a-file", "out-holds-a-fit", "checkpoint-not-a-checkpoint", "checkpoint-is-a-folder"],
)
def test_existing_output_refused_before_the_fit(case, tmp_path, capsys, no_fit):
    """An existing output is refused before the fit runs (bmczoo.fit is never called)."""
    existing = tmp_path / "existing"
    if case == "out-is-a-file":
        existing.write_text("not a folder")
        argv, needles = ["--out", str(existing)], ("--out", "an existing file")
    elif case == "out-holds-a-fit":
        existing.mkdir()
        (existing / "posterior.nc").write_bytes(b"an earlier fit")
        argv, needles = ["--out", str(existing)], ("posterior.nc", "--overwrite")
    elif case == "checkpoint-not-a-checkpoint":
        existing.write_text("some other file")
        argv, needles = ["--checkpoint", str(existing)], ("not a bmczoo checkpoint", "--overwrite")
    else:
        existing.mkdir()
        argv, needles = ["--checkpoint", str(existing)], ("--checkpoint", "folder")
    assert main(["fit", "--data", "sim:20", *FAST, *argv]) == 2
    one_line_error(capsys, *needles)
    assert not no_fit
    assert existing.exists()  # nothing was removed


def _read_only_dir(tmp_path: Path) -> Path:
    """A folder where no file can be created: chmod 555, or /sys for root (who ignores modes)."""
    if os.geteuid() != 0:
        d = tmp_path / "read-only"
        d.mkdir()
        d.chmod(0o555)
        return d
    sys_dir = Path("/sys")
    if sys_dir.is_dir() and not os.access(sys_dir, os.W_OK):
        return sys_dir
    try:
        os.close(os.open(sys_dir / ".bmczoo-probe", os.O_CREAT | os.O_WRONLY))
    except OSError:
        return sys_dir
    os.unlink(sys_dir / ".bmczoo-probe")
    pytest.skip("no read-only folder available (running as root)")


@pytest.mark.parametrize("option", ["--out", "--checkpoint"])
@pytest.mark.parametrize("where", ["read-only-folder", "under-a-file"])
def test_unwritable_output_refused_before_the_fit(option, where, tmp_path, capsys, no_fit):
    if where == "read-only-folder":
        target = _read_only_dir(tmp_path) / "bmczoo-test" / "run.npz"
        needles = ("cannot write in",)
    else:
        (tmp_path / "a-file").write_text("x")
        target = tmp_path / "a-file" / "sub" / "run.npz"
        needles = ("is a file, not a folder",)
    try:
        assert main(["fit", "--data", "sim:20", *FAST, option, str(target)]) == 2
    finally:
        if where == "read-only-folder" and os.geteuid() != 0:
            (tmp_path / "read-only").chmod(0o755)
    one_line_error(capsys, option, *needles)
    assert not no_fit


def test_overwrite_replaces_an_earlier_fit(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "posterior.nc").write_bytes(b"an earlier fit")
    (out / "predictions.csv").write_text("stale")  # a sim fit writes none: removed
    assert main(["fit", "--data", "sim:20", *FAST, "--out", str(out), "--overwrite"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("theta_rmse=")
    assert (out / "posterior.nc").stat().st_size > 100 and not (out / "predictions.csv").exists()


def test_overwrite_replaces_a_file_that_is_not_a_checkpoint(tmp_path, capsys):
    ck = tmp_path / "run.npz"
    ck.write_text("some other file")
    assert main(["fit", "--data", "sim:20", *FAST, "--checkpoint", str(ck), "--overwrite"]) == 0
    from bmczoo.cli.paths import is_checkpoint

    assert is_checkpoint(ck)


# --------------------------------------------------------------------------- data files by content
@pytest.mark.parametrize(
    "name, sep, timestamp, header",
    [
        ("u1.base", "\t", True, None),
        ("small.data", "\t", True, None),
        ("ratings-excerpt.dat", "::", True, None),
        ("my ratings.txt", ",", False, "user,item,rating"),
        ("ratings.csv", ",", True, "userId,movieId,rating,timestamp"),
    ],
)
def test_ratings_file_accepted_whatever_its_name(name, sep, timestamp, header, tmp_path, capsys):
    path = tmp_path / name
    write_ratings(path, sep=sep, timestamp=timestamp, header=header)
    assert main(["fit", "--data", str(path), *FAST]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("data: RatingData(n=160, shape=(30, 20)") and out[-1].startswith(
        "test_rmse="
    )


def test_predictions_have_the_dataset_ids(tmp_path, capsys):
    path = tmp_path / "u1.base"
    table = write_ratings(path)
    out = tmp_path / "out"
    assert (
        main(["fit", "--data", str(path), *FAST, "--test-fraction", "0.25", "--out", str(out)]) == 0
    )
    with open(out / "predictions.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["user_id", "item_id", "rating", "prediction"]
    assert len(rows) - 1 == 50  # --test-fraction 0.25 of 200 ratings
    observed = {(int(u), int(i)): float(r) for u, i, r in table}
    for u, i, r, pred in rows[1:]:
        assert observed[int(u), int(i)] == float(r)  # ids of the file, not 0-based indices
        assert 0.5 <= float(pred) <= 5.5


@pytest.mark.parametrize(
    "content, needle",
    [
        ("hello\n", "not a ratings table: line 1 is 'hello'"),
        ("1|2|3\n", "not a ratings table"),
        ("1,2\n", "not a ratings table"),
        ("1,2,3\n1,2\n", "line 2"),
        ("1,2,3\n1,2,4\n", "duplicate rating"),
        ("1.5,2,3\n", "user id must be an integer"),
        ("", "no ratings"),
    ],
)
def test_bad_ratings_file_is_one_line_error(content, needle, tmp_path, capsys, no_fit):
    path = tmp_path / "data.txt"
    path.write_text(content)
    assert main(["fit", "--data", str(path), *FAST]) == 2
    one_line_error(capsys, "--data", needle)
    assert not no_fit


# --------------------------------------------------------------------------- options
def test_help_of_every_subcommand_shows_defaults():
    parser = build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        formatter = sub._get_formatter()
        for action in sub._actions:
            if (
                not action.option_strings or action.nargs == 0 or action.required
            ):  # positionals, flags,
                continue  # --help and required options (no default to show)
            text = formatter._get_help_string(action)
            assert "default" in text.lower(), f"{name} {action.option_strings[0]}: {text!r}"
    fit_help = " ".join(parser._subparsers._group_actions[0].choices["fit"].format_help().split())
    assert (
        "--test-fraction F ratings data: fraction of the ratings held out as the test set, in (0, 1) "
        "(default: 0.2)" in fit_help
    )
    assert "--seed N seed of the simulation and of the fit (default: 0)" in fit_help


def test_dtype_and_test_fraction_reach_the_fit(tmp_path, monkeypatch, capsys):
    seen = {}
    real_fit = bmczoo.fit

    def recording_fit(train, **kwargs):
        seen.update(kwargs, n=train.n, n_test=kwargs["test"].n)
        return real_fit(train, **kwargs)

    monkeypatch.setattr(bmczoo, "fit", recording_fit)
    path = tmp_path / "small.data"
    write_ratings(path)
    assert (
        main(["fit", "--data", str(path), *FAST, "--dtype", "float64", "--test-fraction", "0.1"])
        == 0
    )
    assert seen["dtype"] == "float64" and (seen["n"], seen["n_test"]) == (180, 20)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--dtype", "float16"], "invalid choice: 'float16'"),
        (["--test-fraction", "1"], "--test-fraction must be in (0, 1)"),
        (["--test-fraction", "x"], "--test-fraction"),
        (["--no-such-option"], "unrecognized arguments"),
    ],
)
def test_usage_errors_are_one_line(argv, needle, capsys, no_fit):
    assert main(["fit", "--data", "sim:20", *FAST, *argv]) == 2
    one_line_error(capsys, needle)
    assert not no_fit


def test_float32_failure_points_to_the_dtype_option(monkeypatch, capsys):
    def failing_fit(*args, **kwargs):
        raise FloatingPointError(
            "Gibbs sweep 3, chain 0: non-finite draw of row 2 of M (...) in float32; "
            "rerun with dtype=jnp.float64"
        )

    monkeypatch.setattr(bmczoo, "fit", failing_fit)
    assert main(["fit", "--data", "sim:20", *FAST]) == 2
    one_line_error(capsys, "rerun with --dtype float64")


def test_unexpected_error_is_one_line_unless_debug(monkeypatch, capsys):
    def broken_fit(*args, **kwargs):
        raise RuntimeError("something broke\nwith a second line")

    monkeypatch.setattr(bmczoo, "fit", broken_fit)
    assert main(["fit", "--data", "sim:20", *FAST]) == 2
    one_line_error(capsys, "RuntimeError: something broke", "--debug")
    with pytest.raises(RuntimeError, match="something broke"):
        main(["fit", "--data", "sim:20", *FAST, "--debug"])
    monkeypatch.setenv("BMCZOO_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["fit", "--data", "sim:20", *FAST])


def test_a_failed_output_keeps_the_fit_result(tmp_path, monkeypatch, capsys):
    """A failure while writing --out after the fit (here: the report) is one line that
    still gives the fit's result, and the outputs written before it are kept."""
    from bmczoo import diagnostics

    def broken_report(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(diagnostics, "report", broken_report)
    out = tmp_path / "out"
    assert main(["fit", "--data", "sim:20", *FAST, "--out", str(out)]) == 2
    err = one_line_error(
        capsys, "could not write", "report", "No space left on device", "theta_rmse="
    )
    assert "--help" not in err  # an error after the fit is not about the arguments
    assert (out / "posterior.nc").stat().st_size > 100


def test_movielens_zip_accepted_whatever_its_name(tmp_path, capsys):
    import zipfile

    write_ratings(tmp_path / "u.data")
    archive = tmp_path / "downloaded-archive.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(tmp_path / "u.data", "ml-100k/u.data")
    assert main(["fit", "--data", str(archive), *FAST]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("data: RatingData(n=160, shape=(30, 20)") and out[-1].startswith(
        "test_rmse="
    )


# --------------------------------------------------------------------------- checked before the data is read
@pytest.fixture
def no_load(monkeypatch):
    """Records reads of ``--data``: a cheap argument's error must come before the data is read."""
    from bmczoo.cli import loading

    calls = []
    monkeypatch.setattr(loading, "load", lambda *a, **k: calls.append(a))
    return calls


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["-K", "0"], "-K (the latent dimension) must be at least 1, got 0"),
        (["-K", "-3"], "-K (the latent dimension) must be at least 1, got -3"),
        (["-K", "abc"], "argument -K: invalid int value: 'abc'"),
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--binarize", "nan"], "--binarize THRESHOLD must be a finite number"),
        (["--method", "gibbs", "--num-samples", "0"], "--num-samples must be"),
        (
            ["--method", "gibbs", "--thinning", "10", "--num-samples", "5"],
            "--thinning 10 > --num-samples 5",
        ),
        (["--method", "gibbs", "--overrelax", "1.5"], "--overrelax must be in (-1, 1)"),
        (
            ["--method", "gibbs", "--max-iter", "5"],
            "--max-iter applies to --method vb, not to --method gibbs",
        ),
        (
            ["--method", "svi", "--chains", "2"],
            "--chains applies to --method gibbs or vb or nuts, not to --method svi",
        ),
        (
            ["--method", "nuts", "--checkpoint", "run.npz"],
            "--checkpoint applies to --method gibbs or vb",
        ),
        (["--method", "vb", "--tol", "-1"], "--tol"),
        (["--method", "vb", "--checkpoint-every", "0"], "--checkpoint-every must be"),
    ],
)
def test_cheap_arguments_checked_before_the_data(
    argv, needle, tmp_path, monkeypatch, capsys, no_load, no_fit
):
    """``bmczoo fit --data BIG -K 0`` fails at once: every argument that needs no data is
    checked before the data is read, named as the command line spells it."""
    monkeypatch.chdir(tmp_path)
    big = tmp_path / "big.data"
    write_ratings(big)
    assert main(["fit", "--data", str(big), "--quiet", *argv]) == 2
    err = one_line_error(capsys, needle)
    assert "num_" not in err and "whose arguments" not in err, err  # bmc.fit's names stay out of it
    assert not no_load and not no_fit


def test_tol_reaches_vb(monkeypatch, capsys):
    seen = {}
    real_fit = bmczoo.fit

    def recording_fit(train, **kwargs):
        seen.update(kwargs)
        return real_fit(train, **kwargs)

    monkeypatch.setattr(bmczoo, "fit", recording_fit)
    assert main(["fit", "--data", "sim:20", *FAST, "--tol", "0"]) == 0
    assert seen["tol"] == 0.0 and seen["max_iter"] == 3


# --------------------------------------------------------------------------- Ctrl-C (in process; tests/test_cli_interrupt.py sends real signals)
def _interrupting_fit(message: str = ""):
    def fit(*args, **kwargs):
        raise KeyboardInterrupt(message) if message else KeyboardInterrupt

    return fit


@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_interrupted_without_checkpoint_names_the_option(method, monkeypatch, capsys):
    """Without --checkpoint an interrupted fit says that nothing was saved and how to make a
    run resumable; exit code 130."""
    monkeypatch.setattr(bmczoo, "fit", _interrupting_fit())
    assert main(["fit", "--data", "sim:20", "--method", method, "--quiet"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err], err
    assert (
        err.startswith("bmczoo: interrupted; nothing was saved") and "--checkpoint FILE.npz" in err
    ), err


def test_interrupted_with_checkpoint_says_how_to_resume(tmp_path, monkeypatch, capsys):
    """The run loop's message (where its work is) in command-line terms."""
    ckpt = tmp_path / "run.npz"
    monkeypatch.setattr(
        bmczoo,
        "fit",
        _interrupting_fit(
            f"interrupted after 40 of 1000 sweeps; the work done is saved in {str(ckpt)!r}: call fit again with the "
            "same arguments to resume"
        ),
    )
    assert main(["fit", "--data", "sim:20", "--checkpoint", str(ckpt), "--quiet"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        f"bmczoo: interrupted after 40 of 1000 sweeps; the work done is saved in {str(ckpt)!r}: rerun "
        "the same command to resume"
    ), err


def test_interrupted_before_the_first_checkpoint(tmp_path, monkeypatch, capsys):
    ckpt = tmp_path / "run.npz"
    monkeypatch.setattr(bmczoo, "fit", _interrupting_fit())
    assert main(["fit", "--data", "sim:20", "--checkpoint", str(ckpt), "--quiet"]) == 130
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"bmczoo: interrupted before any work was saved in {ckpt}; rerun the same command to start again"
    )


def test_interrupted_while_writing_outputs_keeps_the_result(tmp_path, monkeypatch, capsys):
    from bmczoo.cli import outputs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs, "write_outputs", interrupted)
    assert main(["fit", "--data", "sim:20", *FAST, "--out", str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "bmczoo: interrupted while writing the outputs; the fit itself finished (theta_rmse="
    ), err


def test_python_keeps_its_sigint_handler(capsys):
    """``main(argv)`` from Python (a notebook, these tests) leaves SIGINT to Python: Ctrl-C
    in ``bmc.fit`` stays a KeyboardInterrupt."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    assert main(["fit", "--data", "sim:20", *FAST]) == 0
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.set_wakeup_fd(-1) == -1  # no wake-up descriptor installed either


# --------------------------------------------------------------------------- NaN ratings, file modes
@pytest.mark.parametrize(
    "bad, shown",
    [("nan", "'nan'"), ("NaN", "'NaN'"), ("-inf", "'-inf'"), ("Infinity", "'Infinity'")],
)
def test_nan_rating_is_named_as_such(bad, shown, tmp_path, capsys, no_fit):
    path = tmp_path / "ratings.csv"
    path.write_text(f"1,2,3\n2,3,4\n3,4,{bad}\n")
    assert main(["fit", "--data", str(path), *FAST]) == 2
    one_line_error(capsys, "line 3", f"field 3 is {shown}", "NaN or infinity is not a valid rating")


def test_overflowing_rating_is_named_as_such(tmp_path, capsys, no_fit):
    path = tmp_path / "ratings.csv"
    path.write_text("1,2,3\n2,3,1e999\n")
    assert main(["fit", "--data", str(path), *FAST]) == 2
    one_line_error(capsys, "line 2: rating must be finite")


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_checkpoint_honours_the_umask(umask, tmp_path):
    """A checkpoint (and a saved fit written the same way) gets 0o666 less the umask,
    like any file the user writes, not mkstemp's 0o600."""
    from bmczoo.inference import checkpoint as ck

    old = os.umask(umask)
    try:
        assert ck.current_umask() == umask
        ck.save_npz(tmp_path / "run.npz", {"a": 1}, {"x": np.arange(3)})
    finally:
        os.umask(old)
    assert (tmp_path / "run.npz").stat().st_mode & 0o777 == 0o666 & ~umask
    assert ck.load_npz(tmp_path / "run.npz")[0] == {"a": 1}


def test_experiment_cache_honours_the_umask(tmp_path):
    from bmczoo.experiments import execute
    from bmczoo.experiments.tasks import FitTask

    class Task:  # what _write_cached reads of a FitTask
        key = {"a": 1}
        key_json = '{"a": 1}'

    assert hasattr(FitTask, "key_json")
    old = os.umask(0o002)
    try:
        execute._write_cached(tmp_path, Task(), 0.5)
    finally:
        os.umask(old)
    (path,) = tmp_path.glob("*.json")
    assert path.stat().st_mode & 0o777 == 0o664
    assert execute.read_cached(tmp_path, Task()) == 0.5


# --------------------------------------------------------------------------- settings errors by their fields
def _raise_from_mcmc_check(param, reason, others):
    """A stand-in for the settings' MCMC check that words its error otherwise."""
    from bmczoo.inference.errors import SettingsValueError

    def check(s):
        raise SettingsValueError(
            param,
            getattr(s, param),
            reason,
            others=None if others is None else {k: getattr(s, k) for k in others},
            message="another wording altogether: num_samples= thinning= method='vb'",
        )

    return check


@pytest.mark.parametrize(
    "param, reason, others, line",
    [
        (
            "num_warmup",
            "is reworded: num_samples= thinning=",
            None,
            "--num-warmup is reworded: num_samples= thinning=, got 7",
        ),
        ("num_chains", "needs more", None, "--chains needs more, got 4"),
        (
            "thinning",
            "{names[thinning]} may not exceed {num_samples} (reworded)",
            ("num_samples",),
            "--thinning may not exceed --num-samples 900 (reworded)",
        ),
    ],
)
def test_a_settings_error_is_named_by_its_field_not_its_wording(
    param, reason, others, line, monkeypatch, capsys, no_load, no_fit
):
    """Rewording a settings message cannot change the option the command line names: the
    flag comes from the error's ``param`` (METHOD_OPTIONS), the rest from its fields, and
    the message itself is never read."""
    from bmczoo.inference import settings as st

    monkeypatch.setattr(st, "check_mcmc", _raise_from_mcmc_check(param, reason, others))
    assert main(["fit", "--data", "sim:20", "--quiet", "--num-warmup", "7"]) == 2
    err = one_line_error(capsys)
    assert err == f"bmczoo: error: {line} (see 'bmczoo fit --help')", err


def test_an_argument_of_another_method_is_named_by_its_fields(monkeypatch, capsys, no_load):
    from bmczoo.inference import settings as st
    from bmczoo.inference.errors import WrongMethodError

    def settings_for(method, **kwargs):
        raise WrongMethodError(
            "num_chains", 2, method=method, methods=("vb",), accepted=("max_iter",)
        )

    monkeypatch.setattr(st, "settings_for", settings_for)
    assert main(["fit", "--data", "sim:20", "--quiet", "--chains", "2"]) == 2
    err = one_line_error(capsys)
    assert err == (
        "bmczoo: error: --chains applies to --method vb, not to --method gibbs "
        "(see 'bmczoo fit --help')"
    ), err


def test_a_settings_error_of_the_fit_itself_names_the_option(monkeypatch, capsys):
    """A setting that only the fit can check (here a stand-in) is named as the command line
    spells it too."""
    from bmczoo.inference.errors import SettingsValueError

    def fit(*args, **kwargs):
        raise SettingsValueError("anneal_every", 3, "is too small for this data")

    monkeypatch.setattr(bmczoo, "fit", fit)
    assert main(["fit", "--data", "sim:20", *FAST]) == 2
    one_line_error(capsys, "--anneal-every is too small for this data, got 3", "bmczoo fit --help")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--prior", "fixed", "--column-moves"], "(--column-moves needs a prior with column"),
        (["--prior", "gamma", "--anneal-steps", "3"], "(--anneal-steps > 0 needs the discrete"),
    ],
)
def test_options_the_prior_cannot_honour_are_checked_before_the_data(
    argv, needle, capsys, no_load, no_fit
):
    assert main(["fit", "--data", "sim:20", "--quiet", *argv]) == 2
    err = one_line_error(capsys, needle)
    assert "column_moves" not in err and "anneal_steps" not in err
    assert not no_load and not no_fit
