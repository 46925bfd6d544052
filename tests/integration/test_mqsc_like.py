"""DEFINE QALIAS/QMODEL ... LIKE(another one) on a real instance: the new object takes the
other's attributes, then the command's; a LIKE object that does not exist is AMQ8147.
BOTHRESH and BOQNAME, as scripts brought from MQ set them, are kept and shown, and an
application reads them as MQ's read them with MQINQ."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from miqm.localpair import LocalPair
from tests.integration.test_mqsc_admin import blocks, runmqsc

pytestmark = pytest.mark.integration


@pytest.fixture()
def pair(tmp_path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMLIKE", base=str(tmp_path / "pair"))
    p.create()
    p.start(p.a)
    try:
        yield p
    finally:
        p.close()


def test_define_like_copies_an_alias_and_a_model(pair) -> None:
    out = runmqsc(pair, "\n".join([
        "DEFINE QLOCAL(T.Q)",
        "DEFINE QALIAS(A.ONE) TARGET(T.Q) PUT(DISABLED) DESCR('first')",
        "DEFINE QALIAS(A.TWO) LIKE(A.ONE) DESCR('second')",
        "DEFINE QMODEL(M.ONE) DEFTYPE(PERMDYN) MAXDEPTH(7) DEFPSIST(YES)",
        "DEFINE QMODEL(M.TWO) LIKE(M.ONE) MAXDEPTH(9)",
        "DEFINE QMODEL(M.THREE) LIKE(NO.SUCH.MODEL)",
        "DIS QALIAS(A.TWO) ALL", "DIS QMODEL(M.TWO) ALL", "DIS QMODEL(M.THREE)",
    ]) + "\n").stdout
    shown = {b["QUEUE"]: b for b in blocks(out, "AMQ8409I")}
    alias = shown["A.TWO"]
    assert (alias["TARGET"], alias["PUT"], alias["DESCR"]) == ("T.Q", "DISABLED", "second")
    model = shown["M.TWO"]
    assert (model["DEFTYPE"], model["MAXDEPTH"], model["DEFPSIST"]) == ("PERMDYN", "9", "YES")
    assert out.count("AMQ8147") == 2, out  # the LIKE, then the DISPLAY of what was not made


def test_backout_threshold_and_queue_are_kept_for_the_applications(pair) -> None:
    from miqm.client import connect

    out = runmqsc(pair, "\n".join([
        "DEFINE QLOCAL(APP.IN) BOTHRESH(3) BOQNAME(APP.IN.BACKOUT) MAXDEPTH(100)",
        "DEFINE QLOCAL(APP.PLAIN)",
        "DEFINE QMODEL(APP.MODEL) BOTHRESH(5) BOQNAME('Poison.Q')",
        "DIS QLOCAL(APP.*) BOTHRESH BOQNAME", "DIS QMODEL(APP.MODEL) ALL",
    ]) + "\n")
    assert out.returncode == 0, out.stdout + out.stderr
    shown = {b["QUEUE"]: b for b in blocks(out.stdout, "AMQ8409I")}
    assert (shown["APP.IN"]["BOTHRESH"], shown["APP.IN"]["BOQNAME"]) == ("3", "APP.IN.BACKOUT")
    assert (shown["APP.PLAIN"]["BOTHRESH"], shown["APP.PLAIN"]["BOQNAME"]) == ("0", "")
    assert shown["APP.MODEL"]["BOQNAME"] == "Poison.Q"
    with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as f:
        rec = json.load(f)
    admin = pair.run(pair.a, "miqm", "credential", "-m", pair.qmgr, "--show"
                     ).stdout.strip().splitlines()[-1]
    with connect(pair.qmgr, conname=f"{rec['host']}({rec['port']})", credential=admin,
                 reconnect=False) as qm:
        attrs = qm.inquire("APP.IN")
    assert (attrs["BOTHRESH"], attrs["BOQNAME"]) == (3, "APP.IN.BACKOUT")
