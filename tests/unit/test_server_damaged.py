"""A damaged queue (its file gone while the queue manager was down) against the real
store behind the real listener: DISPLAY says so, and with linear logging a generic
rcrmqobj recreates it from its media image (the generic name matches damaged queues)."""

from __future__ import annotations

import os
import shutil

from miqm.cli import media, runmqsc, samples
from tests.unit.test_cli_mqadmin import run
from tests.unit.test_net_store import Served, pytestmark, served  # noqa: F401


def test_a_generic_rcrmqobj_recreates_a_damaged_queue(served: Served,  # noqa: F811
                                                       capsys, monkeypatch) -> None:
    rc, out, err = run(runmqsc.main, ["runmqsc", "QMS"], capsys, monkeypatch,
                       stdin="DEFINE QLOCAL(QA1)\nDEFINE QLOCAL(QA2)\n")
    assert rc == 0, out + err
    rc, _, err = run(samples.amqsput_main, ["amqsput", "QMS", "QA1"], capsys, monkeypatch,
                     stdin="m1\nm2\n")
    assert rc == 0, err
    rc, out, err = run(media.rcdmqimg_main, ["rcdmqimg", "-m", "QMS", "-t", "queue", "QA*"],
                       capsys, monkeypatch)
    assert rc == 0, out + err
    served.stop()
    qdir = os.path.join(served.root, "qmgrs", "QMS", "queues", "QA1")
    for name in os.listdir(qdir):  # the queue's files; its media image stays
        if not name.startswith("img"):
            path = os.path.join(qdir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    served.start()
    rc, out, err = run(runmqsc.main, ["runmqsc", "QMS"], capsys, monkeypatch,
                       stdin="DISPLAY QLOCAL(QA1)\n")
    assert rc != 0 and "AMQ7472E: Object QA1, type queue damaged" in out, out + err
    rc, out, err = run(media.rcrmqobj_main, ["rcrmqobj", "-m", "QMS", "-t", "queue", "QA*"],
                       capsys, monkeypatch)
    assert rc == 0 and "Object QA1, type queue recreated" in out, out + err
    rc, out, err = run(samples.amqsget_main, ["amqsget", "QMS", "QA1", "--wait", "0"],
                       capsys, monkeypatch)
    assert rc == 0 and out == "m1\nm2\n", out + err
