"""``amqldmpa -m QMgr [-c H] [-f File]``: dump the logger's state, in the layout of MQ's
service aid (see the logger seed): log files in use, write sizes and times (µs), and the
write-time high-water marks, overall (with its time) and for each of the last 8 files."""

from __future__ import annotations

from typing import Any

import typer

from miqm.cli.common import fail, make_app, run_typer

app = make_app("Dump the recovery logger's state.")

#: Fields in the order MQ prints them; anything else the store reports follows.
ORDER = ("logactive", "loginactive", "FileCount", "filenum", "logBufSz", "WriteSizeShort",
         "WriteSizeLong", "WriteSizeMax", "WriteTimeShort", "WriteTimeLong",
         "WriteTimeShortMax", "WriteTimeLongMax", "WriteTimeMax")


def _filenum(values: list[Any]) -> list[str]:
    """``filenum [4,5,6,...]`` wrapped eight to a line as MQ prints it."""
    items = [str(v) for v in values]
    if not items:
        return ["filenum\t[]"]
    chunks = [",".join(items[i:i + 8]) for i in range(0, len(items), 8)]
    lines = []
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        text = chunk + ("]" if last else ",")
        lines.append(("filenum\t[" if i == 0 else "\t") + text)
    return lines


def format_dump(qmgr: str, dump: dict[str, Any]) -> list[str]:
    """The dump as text lines (pure, for tests)."""
    lines = [f"Logger dump of queue manager {qmgr}", ""]
    d = {k: v for k, v in dump.items() if k != "current_extent"}
    per_file = d.pop("WriteTimeMaxFiles", None)
    if per_file is None:
        per_file = [d.pop(f"WriteTimeMax[{i}]") for i in range(8) if f"WriteTimeMax[{i}]" in d]
    at = d.pop("WriteTimeMaxAt", None) or d.pop("WriteTimeMaxTime", None)
    keys = [k for k in ORDER if k in d] + sorted(k for k in d if k not in ORDER)
    for key in keys:
        value = d[key]
        if key == "filenum" and isinstance(value, (list, tuple)):
            lines += _filenum(list(value))
        elif key == "WriteTimeMax":
            lines.append(f"WriteTimeMax :\t{value}" + (f" at {at}" if at else ""))
            for i, v in enumerate(per_file or []):
                lines.append(f"WriteTimeMax[{i}]:\t{v}")
        else:
            lines.append(f"{key}:\t{value}")
    return lines


@app.command()
def amqldmpa(
    qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager name"),
    component: str = typer.Option("H", "-c", help="component to dump (H: the logger)"),
    out_file: str = typer.Option(None, "-f", metavar="File", help="write to this file"),
) -> None:
    """Dump the logger's state."""
    from miqm.net.client import connect

    if component.upper() != "H":
        fail(f"amqldmpa: -c {component} is not supported: only -c H (the logger).", 2)
    with connect(qmgr) as conn:
        dump = conn.call("logger_dump")["logger"]
    text = "\n".join(format_dump(qmgr, dump)) + "\n"
    if out_file:
        try:
            with open(out_file, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            fail(f"amqldmpa: cannot write {out_file}: {exc.strerror}.", 71)
    else:
        typer.echo(text, nl=False)


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "amqldmpa")
