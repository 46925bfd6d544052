"""The store's side of daily administration: CLEAR QLOCAL (logged: a restart sees the
queue empty; refused with uncommitted work), queue status figures (MSGAGE, LPUT/LGET,
QTIME, RESET QSTATS) and queue manager objects (aliases, models) that survive a restart
through the log and through a checkpoint."""

from __future__ import annotations

import pytest

from miqm.errors import MessagingError, ObjectError
from miqm.store.qmstore import QueueManagerStore
from tests.unit.test_store_units import SETTINGS, Harness


class _Harness(Harness):
    """The store harness with a settable wall clock."""

    def __init__(self, tmp) -> None:
        super().__init__(tmp)
        self.now = 1_000_000.0

    def open(self) -> QueueManagerStore:
        self.gen += 1
        return QueueManagerStore.open(
            self.data, None, "QM", SETTINGS, self.tuning, generation=self.gen,
            recovery_log=self.log, background=False, wallclock=lambda: self.now)


@pytest.fixture()
def h(tmp_path) -> _Harness:
    return _Harness(tmp_path)


def test_clear_is_logged_and_refused_with_uncommitted_work(h: _Harness) -> None:
    store = h.open()
    store.define_queue("Q1")
    for i in range(3):
        store.put("Q1", b"p%d" % i, persistent=True)
    store.put("Q1", b"np", persistent=False)
    store.checkpoint()  # some messages in the queue file, one more after the checkpoint
    store.put("Q1", b"late", persistent=True)
    uow = store.begin()
    store.put("Q1", b"u", persistent=True, uow=uow)
    with pytest.raises(MessagingError) as info:
        store.clear_queue("Q1")
    assert info.value.mqrc == 2055 and "AMQ8143" in str(info.value)
    store.backout(uow)
    uow = store.begin()
    assert store.get("Q1", uow=uow) is not None  # an uncommitted get refuses it too
    with pytest.raises(MessagingError):
        store.clear_queue("Q1")
    store.backout(uow)
    assert store.clear_queue("Q1") == 5
    assert store.queue_attrs("Q1")["CURDEPTH"] == 0
    store.put("Q1", b"after", persistent=True)
    again = h.crash(store)  # no shutdown checkpoint: the log alone says the queue is empty
    msg = again.get("Q1")
    assert msg is not None and msg.body == b"after"
    assert again.get("Q1") is None


def test_queue_status_figures_and_reset(h: _Harness) -> None:
    store = h.open()
    store.define_queue("Q1")
    st = store.queue_status("Q1")
    assert st["MSGAGE"] is None and st["LPUT"] == 0 and st["QTIME"] == (None, None)
    store.put("Q1", b"a", persistent=True)
    h.now += 5
    store.put("Q1", b"b", persistent=False)
    h.now += 2
    st = store.queue_status("Q1")
    assert st["MSGAGE"] == 7 and st["LPUT"] == 1_000_005.0 and st["CURDEPTH"] == 2
    assert st["HIGHQDPT"] == 2
    store.get("Q1")
    st = store.queue_status("Q1")
    assert st["MSGAGE"] == 2 and st["LGET"] == 1_000_007.0
    assert st["QTIME"] == (7_000_000.0, 7_000_000.0)
    reset = store.reset_queue_stats("Q1")
    assert (reset["MSGSIN"], reset["MSGSOUT"], reset["HIGHQDPT"]) == (2, 1, 2)
    reset = store.reset_queue_stats("Q1")
    assert (reset["MSGSIN"], reset["MSGSOUT"], reset["HIGHQDPT"]) == (0, 0, 1)


def test_objects_survive_restart_from_the_log_and_from_a_checkpoint(h: _Harness) -> None:
    store = h.open()
    store.define_queue("Q1")
    store.set_object("QALIAS", "A1", {"TARGET": "Q1"})
    store.set_object("QMODEL", "M1", {"DEFTYPE": "PERMDYN"})
    store.set_object("QALIAS", "GONE", {"TARGET": "Q1"})
    store.set_object("QALIAS", "GONE", None)
    store.set_qmgr_attrs(DESCR="kept", MAXMSGL=40000)
    with pytest.raises(ObjectError):
        store.define_queue("A1")  # the alias has the name
    with pytest.raises(ObjectError):
        store.set_object("QMODEL", "A1", {})  # so does a model
    with pytest.raises(ObjectError):
        store.set_object("QALIAS", "Q1", {"TARGET": "X"})  # and the local queue
    with pytest.raises(MessagingError) as info:
        store.put("Q1", b"x" * 40001)
    assert info.value.mqrc == 2031  # MQRC_MSG_TOO_BIG_FOR_Q_MGR
    again = h.crash(store)  # the log alone carries them
    assert again.get_object("QALIAS", "A1") == {"TARGET": "Q1"}
    assert [n for n, _a in again.list_objects("QALIAS")] == ["A1"]
    assert again.qmgr_attrs()["DESCR"] == "kept"
    again.checkpoint()
    third = h.crash(again)  # now the checkpoint carries them
    assert third.get_object("QMODEL", "M1") == {"DEFTYPE": "PERMDYN"}
    assert third.get_object("QALIAS", "GONE") is None
    assert third.qmgr_attrs()["MAXMSGL"] == 40000


@pytest.mark.parametrize("name", ["../../y", "Q1/q", ".", ".."])
def test_a_queue_name_the_store_cannot_file_is_refused_before_anything_is_logged(
        h: _Harness, name: str) -> None:
    """Every caller of define_queue (MQSC over the wire, local scripts, dynamic queues)
    gets the refusal: the store itself names the queue's files."""
    store = h.open()
    store.define_queue("Q1")
    with pytest.raises(ObjectError, match="cannot name a queue"):
        store.define_queue(name)
    store.put("Q1", b"m", persistent=True)
    store.checkpoint()
    store.close()
    store = h.open()  # nothing of the refused definition to replay
    assert name not in store.state.queues and "Q1" in store.state.queues
    store.close()
