"""amqmfsck's arguments in MQ's older form, and the local filesystem's note."""

from __future__ import annotations

import subprocess

from fsck.cli import old_page_count
from fsck.mounts import Mount, audit
from fsck.report import TestResult as Result
from tests import fsckutil as fu


def test_f_with_a_page_count_is_told_to_use_p() -> None:
    # MQ's slides: 'amqmfsck [-f NumberOfPages] -i /shared/qmdata'; here -f is a flag
    line = old_page_count(["-f", "4096", "-i", "/shared/qmdata"])
    assert line is not None and "-f -p 4096" in line
    assert old_page_count(["-f", "4096", "/shared"]) is not None
    assert old_page_count(["-f", "-p", "4096", "/shared"]) is None
    assert old_page_count(["-f", "4096"]) is None  # a Directory named 4096
    assert old_page_count(["-f", "4096", "-v"]) is None


def test_f_with_a_page_count_is_one_line_exit_2(tmp_path: object) -> None:
    res = subprocess.run(fu.argv("-f", "4096", "-i", str(tmp_path)), capture_output=True,
                         text=True, env=fu.env(), timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "-f -p 4096" in res.stderr, res.stderr


def test_local_filesystem_note_does_not_say_it_passes() -> None:
    # the note is printed over a failed run too (a read-only ext4: 'it passes, but...'
    # above 'test access failed')
    res = Result("mount options")
    audit(Mount("/", "ext4", "/dev/vda", {"rw": ""}), res)
    assert res.ok and "cannot be shared" in res.notes[0]
    assert "passes" not in res.notes[0]


def test_i_without_a_test_file_names_the_three_phases(tmp_path: object) -> None:
    # it said only 'format one first with amqmfsck -f': -i after -f alone then found a
    # file no writer wrote; the phases are -f, -a on two hosts, then -i
    res = subprocess.run(fu.argv("-i", str(tmp_path)), capture_output=True, text=True,
                         env=fu.env(), timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "amqmfsck -f" in res.stderr and "amqmfsck -a (on two hosts" in res.stderr
