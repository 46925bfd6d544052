"""``amqmfsck [-v] [-w | -c | -a | -i | --lease [-m QMgr]] [-f] [-p Pages] [-x] [--json]
Directory``: validate a directory for multi-instance queue managers.

Directory is a local path (a kernel mount) or an ``nfs4://server[:port]/export/path`` URL.
Success prints ``The tests on the directory completed successfully.`` and exits 0; a failed
test is named with its reason and likely cause (one line each) and the exit code is 1;
a command that cannot run at all exits 2; Ctrl-C ends a run with one line and exit code
130. See docs/fsck.md.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from fsck.meet import note_resumes
from fsck.report import FsckError, Report, TestResult
from miqm.cli.common import Stopped, make_app, run_typer, unwind_on_stop_signals
from miqm.errors import MiqmError

#: seconds -w, -c, --lease and -x wait for the other process when --wait is not given
DEFAULT_WAIT = 120.0

app = make_app("Validate a (shared) directory for multi-instance queue managers.")


def _stall_budget(qmgr: str | None) -> tuple[float, float, str]:
    """(VerifyInterval + MonitorStall, MonitorStall, where from) for -m QMgr or defaults."""
    from miqm.config import HATuning

    if not qmgr:
        d = HATuning()
        return d.verify_interval + d.monitor_stall, d.monitor_stall, "defaults"
    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm import paths
    from miqm.config import parse_qm_ini

    entry = paths.find(qmgr)
    try:
        vol = open_volume(entry.data_path)
        try:
            text = vol.read_bytes("qm.ini").decode("utf-8", "replace")
        finally:
            vol.close()
    except LockFsError as exc:
        raise FsckError(f"cannot read qm.ini of queue manager '{qmgr}' ({entry.data_path}): "
                        f"{exc}") from None
    ha = parse_qm_ini(text, f"{entry.data_path}/qm.ini").ha
    return ha.verify_interval + ha.monitor_stall, ha.monitor_stall, f"qm.ini of {qmgr}"


@app.command()
def main(
    directory: Annotated[str, typer.Argument(help="Directory: a path or nfs4://server/export/dir")],
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Explain every step.")] = False,
    wait_test: Annotated[bool, typer.Option("-w", help="Waiting for and releasing locks "
                                            "(two processes at once).")] = False,
    concurrent: Annotated[bool, typer.Option("-c", help="Concurrent writes under locks "
                                             "(two processes at once).")] = False,
    analyse_write: Annotated[bool, typer.Option("-a", help="Integrity: write as the logger "
                                                "does until stopped (two at once).")] = False,
    integrity: Annotated[bool, typer.Option("-i", help="Integrity: analyse the test file "
                                            "written by -a.")] = False,
    format_file: Annotated[bool, typer.Option("-f", help="Integrity: format the test file "
                                              "of -p pages.")] = False,
    pages: Annotated[int | None, typer.Option("-p", help="Pages of 4 KiB in the -f test "
                                              "file (rounded up to a multiple of 16; "
                                              "default 262144).")] = None,
    delete: Annotated[bool, typer.Option("-x", help="Delete the test files.")] = False,
    lease: Annotated[bool, typer.Option("--lease", help="Measure how long a silent "
                                        "holder's lock stays held (two processes).")] = False,
    qmgr: Annotated[str | None, typer.Option("-m", help="Queue manager whose qm.ini gives "
                                             "VerifyInterval and MonitorStall.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print every test as JSON.")] = False,
    wait: Annotated[float | None, typer.Option(
        "--wait", help="Seconds to wait for the other process (default 120; -a waits for "
        "the lock until it is stopped).")] = None,
    hold: Annotated[float | None, typer.Option("--hold", help="-w: seconds the first "
                                               "process holds the lock after the second "
                                               "arrived (default 3).")] = None,
    handoff_limit: Annotated[float | None, typer.Option(
        "--handoff-limit", help="-w: seconds a dead holder's lock may stay held "
        "(default: lease + half, or 100).")] = None,
    count: Annotated[int | None, typer.Option("--count", help="-c: records each process "
                                              "writes (default 200).")] = None,
) -> None:
    """Run the chosen test on DIRECTORY."""
    try:
        code = _main(directory, verbose=verbose, wait_test=wait_test, concurrent=concurrent,
                     analyse_write=analyse_write, integrity=integrity,
                     format_file=format_file, pages=pages, delete=delete, lease=lease,
                     qmgr=qmgr, as_json=as_json, wait=wait, hold=hold,
                     handoff_limit=handoff_limit, count=count)
    except MiqmError as exc:  # FsckError, and -m's unknown queue manager (AMQ7048)
        if as_json:  # a program reading stdout gets a document for this too
            mode = next((m for m, on in (("-w", wait_test), ("-c", concurrent),
                                         ("-a", analyse_write), ("-i", integrity),
                                         ("--lease", lease), ("-f", format_file),
                                         ("-x", delete)) if on), "plain")
            sys.stdout.write(json.dumps({"directory": directory, "mode": mode, "ok": False,
                                         "message": None, "error": exc.user_line(),
                                         "exit_code": exc.exit_code, "tests": [],
                                         "notes": []}, indent=2) + "\n")
        raise
    sys.exit(code)


def _main(directory: str, *, verbose: bool, wait_test: bool, concurrent: bool,
          analyse_write: bool, integrity: bool, format_file: bool, pages: int | None,
          delete: bool, lease: bool, qmgr: str | None, as_json: bool, wait: float | None,
          hold: float | None, handoff_limit: float | None, count: int | None) -> int:
    """Check the options and the Directory, then run: the exit code."""
    modes = [m for m, on in (("-w", wait_test), ("-c", concurrent), ("-a", analyse_write),
                             ("-i", integrity), ("--lease", lease)) if on]
    if len(modes) > 1:
        raise FsckError(f"choose one of -w, -c, -a, -i, --lease (given {' '.join(modes)})")
    if qmgr and not (lease or concurrent):
        raise FsckError("-m names the queue manager whose timings --lease and -c check")
    if pages is not None and (pages < 1 or pages > 1 << 26):
        raise FsckError(f"-p {pages}: give a number of 4 KiB pages from 1 to {1 << 26}")
    for what, value in (("--wait", wait), ("--hold", hold), ("--handoff-limit", handoff_limit)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise FsckError(f"{what} {value:g}: give a number of seconds, 0 or more")
    if count is not None and count < 1:
        raise FsckError(f"--count {count}: give a positive number of records")
    # an option the chosen test does not use was silently ignored: '-p 4096' alone ran
    # the plain tests and said they completed, with no test file formatted
    for flag, given, belongs, where in (
            ("-p", pages is not None, format_file, "gives the size of the test file that "
             "-f formats (amqmfsck -f -p Pages Directory)"),
            # --lease shares -w's meeting and took them (scripts pass --hold there)
            ("--hold", hold is not None, wait_test or lease, "belongs to -w (amqmfsck -w "
             "--hold S Directory)"),
            ("--handoff-limit", handoff_limit is not None, wait_test or lease,
             "belongs to -w (amqmfsck -w --handoff-limit S Directory)"),
            ("--count", count is not None, concurrent, "belongs to -c (amqmfsck -c --count "
             "N Directory)")):
        if given and not belongs:
            raise FsckError(f"{flag} {where}")
    if not directory.startswith("nfs4://"):
        check_local_directory(directory)
    return run(directory, modes[0] if modes else "", verbose=verbose, as_json=as_json,
               format_file=format_file, pages=262144 if pages is None else pages,
               delete=delete, qmgr=qmgr, wait=wait, hold=3.0 if hold is None else hold,
               handoff_limit=handoff_limit, count=200 if count is None else count)


def check_local_directory(directory: str) -> None:
    """FsckError unless ``directory`` is an existing directory (saying what it is)."""
    if not directory:
        raise FsckError("no Directory given: name the directory to check (amqmfsck "
                        "/shared/qmdata)")
    # a line break (or another control character) in the name would split the one line
    shown = directory if directory.isprintable() else repr(directory)
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise FsckError(f"the directory {shown} does not exist: create it (and mount "
                        "the shared filesystem on it)") from None
    except NotADirectoryError:
        raise FsckError(f"{shown} is not a directory: a part of the path is a file"
                        ) from None
    except OSError as exc:
        raise FsckError(f"cannot reach the directory {shown}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise FsckError(f"{shown} is a file, not a directory: give the directory the "
                        "queue manager's data will be in")


def run(directory: str, mode: str, **kw: Any) -> int:
    """Run the tests and print the report; the exit code. Ctrl-C (SIGINT) ends the run
    with one line and exit code 130 (``-a`` takes it as its signal to stop writing)."""
    # SIGTERM (kill, timeout, systemd) and SIGHUP (the administrator's ssh session
    # dropped) ended the run at once: no word, the state files left behind and half a
    # test file from -f; now they unwind through the same cleanup as Ctrl-C
    old = unwind_on_stop_signals()
    resumes = note_resumes()
    if resumes is not None:
        old[signal.SIGCONT] = resumes
    try:
        return _run(directory, mode, **kw)
    except KeyboardInterrupt:
        raise FsckError(f"interrupted (Ctrl-C): the tests on {directory} did not complete",
                        exit_code=130) from None
    except Stopped as exc:
        raise FsckError(f"stopped by {signal.Signals(exc.signum).name}: the tests on "
                        f"{directory} did not complete", exit_code=128 + exc.signum) from None
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _run(directory: str, mode: str, *, verbose: bool = False, as_json: bool = False,
         format_file: bool = False, pages: int = 262144, delete: bool = False,
         qmgr: str | None = None, wait: float | None = None, hold: float = 3.0,
         handoff_limit: float | None = None, count: int = 200) -> int:
    from fsck import basic, mounts
    from lockfs import open_volume
    from lockfs.errors import BadLocation

    try:
        vol = open_volume(directory)
    except BadLocation as exc:  # also urlsplit's own refusal ('nfs4://[::1/x')
        raise FsckError(f"bad Directory {directory!r}: {exc}; give a path or "
                        "nfs4://server[:port]/export/path") from None
    label = mode or ("-f" if format_file else "-x" if delete else "plain")
    writer_wait = wait  # -a: None = until stopped
    wait = DEFAULT_WAIT if wait is None else wait
    report = Report(directory, label)
    results: list[TestResult] = report.tests
    quiet = as_json
    try:
        if not directory.startswith("nfs4://"):
            mounts.check_mount(directory, results)
        elif hasattr(vol, "describe"):
            report.notes.append(f"{vol.describe()}: reached through the built-in NFSv4 "
                                "client (no kernel mount options to audit)")
        if not basic.check_access(vol, results):
            return report.emit(verbose, as_json)
        if mode == "":
            if format_file or delete:
                pass
            else:
                basic.check_files(vol, results)
                basic.check_locks(vol, results)
        elif mode in ("-w", "--lease"):
            from fsck.meet import MeetOptions, run_meet

            opts = MeetOptions(wait=wait, hold=hold, handoff_limit=handoff_limit,
                               lease_mode=mode == "--lease", quiet=quiet)
            if mode == "--lease":
                budget, _, src = _stall_budget(qmgr)
                opts.stall_budget = budget
                report.notes.append(f"VerifyInterval + MonitorStall = {budget:g} s ({src})")
            run_meet(vol, results, opts)
        elif mode == "-c":
            from fsck.concurrent import run_concurrent

            _, stall, src = _stall_budget(qmgr)
            run_concurrent(vol, results, count=count, wait=wait, monitor_stall=stall,
                           stall_source=src, quiet=quiet)
        if format_file:
            from fsck.integrity import run_format

            run_format(vol, results, pages, quiet=quiet)
        if mode == "-a":
            from fsck.integrity import run_writer

            run_writer(vol, results, wait=writer_wait, quiet=quiet)
        elif mode == "-i":
            from fsck.integrity import run_analyse

            run_analyse(vol, results)
        if delete:
            from fsck.integrity import delete_files

            delete_files(vol, results, wait=wait, quiet=quiet)
        return report.emit(verbose, as_json)
    finally:
        vol.close()


def old_page_count(argv: list[str]) -> str | None:
    """The refusal for ``-f NumberOfPages`` (the older MQ syntax, and the MQ slides':
    ``amqmfsck [-f NumberOfPages] -i DIR``) or None: here -f is a flag and -p gives the
    pages, so ``-f 4096 DIR`` was 'Got unexpected extra argument(s) (DIR)'."""
    for i, arg in enumerate(argv[:-1]):
        # another positional argument after it: '-f 4096 DIR' (a Directory named 4096 is
        # still '-f 4096')
        if arg == "-f" and argv[i + 1].isdigit() and any(
                not a.startswith("-") for a in argv[i + 2:]):
            return (f"amqmfsck: -f takes no number here: it formats the test file, and -p "
                    f"gives its pages (amqmfsck -f -p {argv[i + 1]} Directory; then -a on "
                    "two hosts, then -i)")
    return None


def _usage_document(argv: list[str]) -> Callable[[str, int], None] | None:
    """With ``--json`` in ``argv``: what writes the document docs/fsck.md promises for a
    command that cannot run (exit 2) when the command line itself is refused, before
    any option was taken; else None."""
    if "--json" not in argv:
        return None

    def write(line: str, exit_code: int) -> None:
        positional = [a for a in argv if not a.startswith("-")]
        sys.stdout.write(json.dumps({
            "directory": positional[-1] if positional else None, "mode": None,
            "ok": False, "message": None, "error": line, "exit_code": exit_code,
            "tests": [], "notes": []}, indent=2) + "\n")
    return write


def entry() -> None:
    """Console script ``amqmfsck``."""
    usage_document = _usage_document(sys.argv[1:])
    refused = old_page_count(sys.argv[1:])
    if refused:
        if usage_document is not None:
            usage_document(refused, 2)
        sys.stderr.write(refused + "\n")
        sys.exit(2)
    run_typer(app, "amqmfsck", on_usage_error=usage_document)
