"""``strmqm [-x] --foreground QMgr``: the execution controller in the foreground.

For containers and systemd. ``strmqm --foreground`` replaces itself (``exec``, same pid)
with ``python -m miqm.ha.controller QMgr [-x] --foreground``, so the process a supervisor
started *is* the instance. In that mode:

* every error-log entry is also printed to stdout (one line, ``AMQnnnn: text``), and the
  lines ``strmqm`` would print (started / standby / why not) go to stdout or stderr;
* SIGTERM (and SIGINT) end the instance as ``endmqm -i`` would; a standby just leaves;
* under systemd (``NOTIFY_SOCKET`` set) it says ``READY=1`` once it runs as the active or
  the standby instance, and ``STOPPING=1`` when it ends (``Type=notify`` units);
* the exit code tells a restart policy what happened (:data:`EXIT_CODES`).
"""

from __future__ import annotations

import os
import socket
import sys

#: the exit codes of the foreground mode, for restart policies (docs/ha.md)
EXIT_CODES: dict[int, str] = {
    0: "ended on request (endmqm, SIGTERM/SIGINT), or a standby that ended by itself "
       "because the active instance ended without permitting switchover: do not restart",
    5: "the queue manager runs elsewhere and -x was not given, or an instance already "
       "runs on this host: do not restart",
    43: "a standby is not permitted: the active instance was started without -x "
        "(AMQ1102): do not restart",
    47: "the queue manager already has an active and a standby instance (AMQ1103), e.g. "
        "this host's own dead instance still holds the NFSv4 lock until its lease runs "
        "out: restart after a pause",
    70: "stopped itself after losing (or possibly losing) ownership of the data: restart "
        "with -x, it comes back as the standby",
    71: "could not start or failed (configuration, shared filesystem, store, internal "
        "error): restart after a pause; the line before says why",
    72: "the queue manager is not defined on this host (addmqinf / crtmqm first): "
        "do not restart",
}

#: exit codes after which a restart cannot help (systemd RestartPreventExitStatus=)
NO_RESTART = (5, 43, 72)


def notify(state: str) -> None:
    """Send ``state`` (e.g. ``READY=1``) to systemd when it asked (``NOTIFY_SOCKET``)."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(path)
            sock.sendall(state.encode())
    except OSError:
        pass  # systemd went away or did not ask after all: nothing to tell


class Console:
    """Prints to stdout what the error log gets, and the verdict lines not yet printed."""

    def __init__(self) -> None:
        self.printed: set[str] = set()

    def echo(self, amq: str, text: str) -> None:
        """One error-log entry as one stdout line."""
        line = text if text.startswith(amq) else f"{amq}: {text}"
        self.printed.add(text)
        self.printed.add(line)
        _write(sys.stdout, line)


    def announce(self, line: str) -> None:
        """A verdict line printed now, in its place among the error-log entries (the
        verdict prints only what was not printed)."""
        self.printed.add(line)
        _write(sys.stdout, line)


class ConsoleVerdict:
    """The controller's first verdict, for a supervisor: printed, and told to systemd."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.sent = False
        self.fd = None
        self.mode = ""

    def send(self, ok: bool, lines: list[str], code: int = 0, mode: str = "") -> None:
        """Print ``lines`` not already printed from the error log (stderr if not ok). A
        later verdict (a standby that took over) only updates systemd's status line."""
        status = "Running as standby" if mode == "standby" else "Running"
        if self.sent:
            if ok and mode and mode != self.mode:
                self.mode = mode
                notify(f"STATUS={status}")  # systemctl status: no longer "as standby"
            return
        self.sent = True
        for line in lines:
            if line not in self.console.printed:
                _write(sys.stdout if ok else sys.stderr, line)
        if ok and mode:
            self.mode = mode
            notify(f"READY=1\nSTATUS={status}")


def _write(stream: object, line: str) -> None:
    try:
        stream.write(line + "\n")  # type: ignore[attr-defined]
        stream.flush()  # type: ignore[attr-defined]
    except (OSError, ValueError):
        pass  # a closed stdout must not stop the queue manager


def exec_controller(qmgr: str, standby: bool) -> None:
    """Replace this process with the controller in the foreground (never returns)."""
    argv = [sys.executable, "-m", "miqm.ha.controller", qmgr, "--foreground"]
    if standby:
        argv.append("-x")
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    os.execv(sys.executable, argv)
