"""A script written for IBM MQ, as a Windows editor saves it (byte-order mark, CRLF line
ends, a description in ISO-8859-1), fed to runmqsc against a real queue manager (crtmqm,
strmqm, runmqsc as separate processes): the commands MQ takes run, the one miqm cannot
read and the one setting an MQ attribute miqm does not keep are each one syntax error
saying what to do, and runmqsc goes on to the end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from miqm.localpair import LocalPair, command_path

pytestmark = pytest.mark.integration

SCRIPT = (
    b"\xef\xbb\xbf* payroll queues, as MQ's AutoConfig has them\r\n"
    b"DEFINE QLOCAL(PAY.IN) LIKE(SYSTEM.DEFAULT.LOCAL.QUEUE) +\r\n"
    b"       DESCR('Payroll ''in'' queue') MAXDEPTH(20000) REPLACE\r\n"
    b"DEFINE QLOCAL(PAY.OLD) DESCR('caf\xe9') REPLACE\r\n"
    b"define qalias(PAY.ALIAS) target(PAY.IN) like(SYSTEM.DEFAULT.ALIAS.QUEUE)\r\n"
    b"DEFINE QLOCAL(PAY.BO) BOTHRESH(3) BOQNAME(PAY.BACKOUT) TRIGGER\r\n"
    b"DISPLAY QLOCAL(PAY.*) MAXDEPTH DESCR\r\n"
    b"EXIT\r\n"
    b"DEFINE QLOCAL(AFTER.EXIT)\r\n"
)


@pytest.fixture()
def pair(tmp_path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMMIG", base=str(tmp_path))
    try:
        p.create()
        p.start(p.a)
        yield p
    finally:
        p.close()


def test_an_mq_script_saved_on_windows_runs_to_its_end(pair: LocalPair) -> None:
    proc = subprocess.run([command_path("runmqsc"), pair.qmgr], input=SCRIPT,
                          capture_output=True, env=pair.a.env(), timeout=120)
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 10, out + proc.stderr.decode(errors="replace")
    assert proc.stderr == b""  # no AMQ6184 internal error
    lines = out.splitlines()
    # the BOM and the CRLFs are not part of the commands; LIKE(SYSTEM.DEFAULT...) works
    i = lines.index("     1 : DEFINE QLOCAL(PAY.IN) LIKE(SYSTEM.DEFAULT.LOCAL.QUEUE) "
                    "DESCR('Payroll ''in'' queue') MAXDEPTH(20000) REPLACE")
    assert lines[i + 1] == "AMQ8006I: miqm queue created."
    # the ISO-8859-1 byte: a syntax error at it, saying what to do
    i = lines.index("     2 : DEFINE QLOCAL(PAY.OLD) DESCR('caf\\xe9') REPLACE")
    assert lines[i + 1].startswith("AMQ8405I")
    assert lines[i + 3].startswith("(the byte \\xe9 is not UTF-8") and "iconv" in lines[i + 3]
    i = lines.index("     3 : define qalias(PAY.ALIAS) target(PAY.IN) "
                    "like(SYSTEM.DEFAULT.ALIAS.QUEUE)")
    assert lines[i + 1] == "AMQ8006I: miqm queue created."
    # BOTHRESH and BOQNAME are kept (for the applications, as MQ keeps them); TRIGGER is
    # MQ's and not miqm's: one syntax error naming it as such
    i = lines.index("     4 : DEFINE QLOCAL(PAY.BO) BOTHRESH(3) BOQNAME(PAY.BACKOUT) TRIGGER")
    assert lines[i + 3].startswith("(TRIGGER is an MQ queue attribute miqm does not have")
    assert "   QUEUE(PAY.IN)                           TYPE(QLOCAL)" in lines
    assert "   DESCR(Payroll 'in' queue)               MAXDEPTH(20000)" in lines
    assert "PAY.OLD" not in "\n".join(lines[lines.index("     5 : DISPLAY QLOCAL(PAY.*) "
                                                        "MAXDEPTH DESCR"):])
    assert "     6 : EXIT" in lines and "AFTER.EXIT" not in out
    assert lines[-3:] == ["5 MQSC commands read.", "2 commands have a syntax error.",
                          "All valid MQSC commands were processed."]
