"""The mutation check of the safety guards: every guard on the list must be killed.

For each entry of ``tests/mutation/guards.toml`` (the guards that keep two instances of
a queue manager from both writing) this replaces one exact piece of source with a broken
version, runs the entry's tests (``pytest -x``: stops at the first failure), and puts the
file back. The check fails unless every mutation makes at least one of its tests fail:
a guard no test notices when broken is a promise nobody proves.

The source is restored in a ``finally`` (and on SIGTERM/SIGINT) from a copy kept next to
it (``<file>.mutation-backup``); a run that was killed outright leaves that copy, and the
next run restores it before anything else. Bytecode caches of a mutated module are
removed after each mutation and each restore, so no process ever runs a stale mutant.

    python -m tests.mutation.run            # all entries
    python -m tests.mutation.run -k liveness  # entries whose name contains "liveness"
    python -m tests.mutation.run --list     # the table: guard -> tests, no run

Exit 0 when every mutation was killed; 1 when one survived (or its source text was not
found: the list must follow the code); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUARDS = Path(__file__).with_name("guards.toml")
BACKUP = ".mutation-backup"


@dataclass
class Mutation:
    """One guard, how to break it, and the tests that must notice."""

    name: str
    guard: str
    file: str
    old: str
    new: str
    tests: list[str]


@dataclass
class Outcome:
    """What happened to one mutation."""

    name: str
    killed: bool
    killer: str
    seconds: float
    detail: str = ""


def load(path: Path = GUARDS) -> list[Mutation]:
    """The list, checked: every key present, every source text found exactly once."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    out = []
    for i, d in enumerate(raw.get("mutation", [])):
        missing = {"name", "guard", "file", "old", "new", "tests"} - set(d)
        if missing:
            raise SystemExit(f"{path}: entry {i + 1} lacks {sorted(missing)}")
        out.append(Mutation(d["name"], d["guard"], d["file"], d["old"], d["new"],
                            list(d["tests"])))
    return out


def restore_leftovers() -> list[Path]:
    """Put back any source a killed run left mutated (its backup is next to it)."""
    restored = []
    for backup in ROOT.rglob(f"*{BACKUP}"):
        target = backup.with_name(backup.name[: -len(BACKUP)])
        os.replace(backup, target)
        _drop_bytecode(target)
        restored.append(target)
    return restored


def _drop_bytecode(source: Path) -> None:
    cache = source.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{source.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


class _Interrupted(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise _Interrupted(f"signal {signum}")


def run_one(m: Mutation, timeout: float) -> Outcome:
    """Apply ``m``, run its tests, restore the file whatever happens."""
    path = ROOT / m.file
    original = path.read_bytes()
    text = original.decode()
    count = text.count(m.old)
    if count != 1:
        return Outcome(m.name, False, "", 0.0,
                       f"the source text to mutate is found {count} times in {m.file} "
                       "(must be exactly once): update tests/mutation/guards.toml")
    backup = path.with_name(path.name + BACKUP)
    backup.write_bytes(original)
    t0 = time.monotonic()
    try:
        path.write_text(text.replace(m.old, m.new))
        _drop_bytecode(path)
        for test in m.tests:
            env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MIQM_MUTATION=m.name)
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider",
                 "--timeout", str(int(timeout)), test],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout + 60)
            failed = [ln.removeprefix("FAILED ").split(" - ")[0]
                      for ln in proc.stdout.splitlines() if ln.startswith("FAILED ")]
            if proc.returncode == 1 and failed:  # a test failed: the mutant is killed
                return Outcome(m.name, True, failed[0], time.monotonic() - t0)
            if proc.returncode != 0:  # collection error, timeout, the skip policy...
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
                return Outcome(m.name, False, "", time.monotonic() - t0,
                               f"{test}: pytest exit {proc.returncode} (not a test "
                               f"failure): {' | '.join(tail)}")
        return Outcome(m.name, False, "", time.monotonic() - t0,
                       f"survived: {', '.join(m.tests)} all passed with the guard broken")
    finally:
        path.write_bytes(original)
        backup.unlink(missing_ok=True)
        _drop_bytecode(path)


def main(argv: list[str] | None = None) -> int:
    """Run the check; print one line per mutation and the table."""
    ap = argparse.ArgumentParser(prog="python -m tests.mutation.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only entries whose name contains this")
    ap.add_argument("--list", action="store_true", help="print the table, run nothing")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per test run (default 120)")
    ap.add_argument("--json", action="store_true", help="one JSON result line at the end")
    ap.add_argument("--guards", type=Path, default=GUARDS,
                    help="the list (default tests/mutation/guards.toml)")
    args = ap.parse_args(argv)
    mutations = [m for m in load(args.guards) if args.k in m.name]
    if not mutations:
        print(f"no mutation matches -k {args.k!r}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutations:
            print(f"{m.name:30s} {m.file:24s} -> {', '.join(m.tests)}")
        return 0
    for path in restore_leftovers():
        print(f"restored {path.relative_to(ROOT)} (left mutated by a killed run)")
    old_term = signal.signal(signal.SIGTERM, _on_signal)
    outcomes: list[Outcome] = []
    t0 = time.monotonic()
    try:
        for m in mutations:
            out = run_one(m, args.timeout)
            outcomes.append(out)
            verdict = f"killed by {out.killer}" if out.killed else f"NOT KILLED: {out.detail}"
            print(f"{m.name:30s} {out.seconds:6.1f}s  {verdict}", flush=True)
    except (_Interrupted, KeyboardInterrupt):
        print("interrupted: every mutated file was restored", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, old_term)
    total = time.monotonic() - t0
    survivors = [o for o in outcomes if not o.killed]
    print(f"mutation check: {len(outcomes) - len(survivors)}/{len(outcomes)} guards killed "
          f"in {total:.1f}s")
    if args.json:
        print(json.dumps({"total_s": round(total, 1), "killed": len(outcomes) - len(survivors),
                          "mutations": [o.__dict__ for o in outcomes]}))
    if survivors:
        print("mutation check FAILED: a broken guard went unnoticed by its tests "
              f"({', '.join(o.name for o in survivors)}); see tests/mutation/guards.toml",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
