"""MQSC for daily administration against real instances (strmqm on two 'hosts' of this
machine, applications as separate processes), the output parsed as an MQ script parses
it: ``KEY(value)`` pairs after each AMQnnnnI header.

* DISPLAY QSTATUS TYPE(QUEUE) counts the open handles of two application processes
  (IPPROCS, OPPROCS), MSGAGE is within a second of the truth, LPUT/LGET times and QTIME
  appear once there was a put and a get; TYPE(HANDLE) names each process (PID, APPLTAG,
  CONN, USERID, open options, CONNAME); DISPLAY CONN lists them and STOP CONN ends one.
* CLEAR QLOCAL is refused while the queue is open (AMQ8148E, 2042) and while it has
  uncommitted messages (AMQ8143E, 2055), and otherwise empties it; RESET QSTATS counts.
* Aliases, models, a permanent dynamic queue, a CLEAR and ALTER QMGR survive a kill -9
  of the active instance: the standby that takes over has them.
* ``runmqsc -c`` from a third 'host' that knows nothing of the queue manager, through the
  listener with the application credential; a wrong one is refused.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from miqm.localpair import LocalPair

pytestmark = pytest.mark.integration

_PAIR_RE = re.compile(r"([A-Z][A-Z0-9]*)\(([^)]*)\)")


def blocks(out: str, header: str) -> list[dict[str, str]]:
    """Each ``header`` block of runmqsc output as {KEY: value} (blanks stripped)."""
    found: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in out.splitlines():
        if line.startswith("AMQ"):
            current = {} if line.startswith(header) else None
            if current is not None:
                found.append(current)
            continue
        if current is not None and line.startswith("   "):
            for k, v in _PAIR_RE.findall(line):
                current[k] = v.strip()
        else:
            current = None
    return found


def runmqsc(pair: LocalPair, text: str, *, host=None) -> subprocess.CompletedProcess[str]:
    return pair.run(host or pair.a, "runmqsc", pair.qmgr, stdin=text, check=False)


APP = """
import sys, time
from miqm.client import connect
qm = connect(sys.argv[1], reconnect=False)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    try:
        if cmd == "put":
            qm.put(arg, b"m", persistent=True)
        elif cmd == "putsync":
            qm.put(arg, b"m", persistent=True, syncpoint=True)
        elif cmd == "get":
            qm.get(arg)
        elif cmd == "getsync":
            qm.get(arg, syncpoint=True)
        elif cmd == "getwait":
            qm.get(arg, wait=4.0)
        elif cmd == "opendyn":
            q, _, name = arg.partition(" ")
            print("name", qm.open(q, "INPUT", dynamic=name), flush=True)
            continue
        elif cmd == "open":
            q, _, opts = arg.partition(" ")
            print("name", qm.open(q, *opts.split(), dynamic="APP.*"), flush=True)
            continue
        elif cmd == "close":
            qm.close_queue(arg)
        elif cmd == "commit":
            qm.commit()
        print("ok", time.time(), flush=True)
    except Exception as exc:
        print("error", getattr(exc, "reason", 0), exc, flush=True)
"""


class App:
    """An application process driven line by line (put Q, get Q, open Q OPTS, ...)."""

    def __init__(self, pair: LocalPair, tag: str) -> None:
        env = pair.a.env()
        env["MIQM_APPLTAG"] = tag
        self.proc = subprocess.Popen([sys.executable, "-c", APP, pair.qmgr], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def reply(self) -> list[str]:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().split()

    def do(self, line: str) -> list[str]:
        self.send(line)
        return self.reply()

    def end(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture()
def pair(tmp_path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMADM", base=str(tmp_path))
    apps: list[App] = []
    p.apps = apps  # type: ignore[attr-defined]
    try:
        yield p
    finally:
        for app in apps:
            app.end()
        p.close()


def _app(pair: LocalPair, tag: str) -> App:
    app = App(pair, tag)
    pair.apps.append(app)  # type: ignore[attr-defined]
    return app


def _qstatus(pair: LocalPair, q: str) -> dict[str, str]:
    out = runmqsc(pair, f"DISPLAY QSTATUS({q}) TYPE(QUEUE) ALL\n").stdout
    found = blocks(out, "AMQ8450I")
    assert len(found) == 1, out
    return found[0]


def _wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_qstatus_handles_conn_clear_and_reset_on_a_real_instance(pair) -> None:
    pair.create()
    pair.start(pair.a)
    assert runmqsc(pair, "DEFINE QLOCAL(ST.Q)\n").returncode == 0
    putter, getter = _app(pair, "putter"), _app(pair, "getter")
    ok = putter.do("put ST.Q")
    assert ok[0] == "ok"
    put_at = float(ok[1])
    assert getter.do("open ST.Q INPUT") == ["name", "ST.Q"]
    time.sleep(2.2)
    before = time.time()
    st = _qstatus(pair, "ST.Q")
    after = time.time()
    assert (st["CURDEPTH"], st["IPPROCS"], st["OPPROCS"], st["UNCOM"]) == ("1", "1", "1", "0")
    # the true age when the instance answered lies between these two (runmqsc's own
    # start-up is in between): MSGAGE is within a second of it
    age = int(st["MSGAGE"])
    assert before - put_at - 1.0 <= age <= after - put_at + 1.0, (age, before - put_at,
                                                                   after - put_at)
    assert st["LPUTDATE"] and st["LPUTTIME"] and not st["LGETTIME"]
    assert st["QTIME"].replace(" ", "") == ","  # no get yet: blank averages
    # DISPLAY QLOCAL counts the same handles
    ql = blocks(runmqsc(pair, "DIS QL(ST.Q) IPPROCS OPPROCS\n").stdout, "AMQ8409I")
    assert (ql[0]["IPPROCS"], ql[0]["OPPROCS"]) == ("1", "1")

    # TYPE(HANDLE): one block per process, named by PID and APPLTAG
    out = runmqsc(pair, "DISPLAY QSTATUS(ST.Q) TYPE(HANDLE)\n").stdout
    handles = {b["APPLTAG"]: b for b in blocks(out, "AMQ8450I")}
    assert set(handles) == {"putter", "getter"}
    assert handles["putter"]["PID"] == str(putter.proc.pid)
    assert handles["getter"]["PID"] == str(getter.proc.pid)
    assert (handles["putter"]["OUTPUT"], handles["putter"]["INPUT"]) == ("YES", "NO")
    assert (handles["getter"]["OUTPUT"], handles["getter"]["INPUT"]) == ("NO", "SHARED")
    for h in handles.values():
        # bindings-mode applications on the instance's host come over its local socket:
        # CONNAME is blank, as MQ shows it for a local (bindings) connection
        assert h["USERID"] == "admin" and h["CONNAME"] == ""
        assert re.fullmatch(r"[0-9A-F]{16}", h["CONN"])

    # DISPLAY CONN knows both; CLEAR is refused while the queue is open
    conns = {b.get("APPLTAG"): b for b in
             blocks(runmqsc(pair, "DISPLAY CONN(*)\n").stdout, "AMQ8276I")}
    assert conns["putter"]["CONN"] == handles["putter"]["CONN"]
    assert conns["putter"]["PID"] == str(putter.proc.pid) and conns["putter"]["CONNTIME"]
    refused = runmqsc(pair, "CLEAR QLOCAL(ST.Q)\n")
    assert refused.returncode == 10 and "AMQ8148E" in refused.stdout
    assert "MQRC 2042" in refused.stdout

    # a get: LGET time and QTIME (microseconds, at least the 2 s the message waited)
    assert getter.do("get ST.Q")[0] == "ok"
    st = _qstatus(pair, "ST.Q")
    assert st["CURDEPTH"] == "0" and st["LGETTIME"] and st["MSGAGE"] == ""
    short, long_ = (int(x) for x in st["QTIME"].split(","))
    assert short >= 2_000_000 and long_ >= 2_000_000
    # a getter waiting in MQGET has the queue open for input while it waits
    waiter = _app(pair, "waiter")
    waiter.send("getwait ST.Q")
    _wait_for(lambda: _qstatus(pair, "ST.Q")["IPPROCS"] == "2")
    assert waiter.reply()[:2] == ["error", "2033"]
    waiter.end()

    # STOP CONN ends the putter's connection: its handle goes, its next call fails
    stop = runmqsc(pair, f"STOP CONN({handles['putter']['CONN']})\n")
    assert stop.returncode == 0 and "AMQ1010I" in stop.stdout
    _wait_for(lambda: _qstatus(pair, "ST.Q")["OPPROCS"] == "0")
    assert putter.do("put ST.Q")[0] == "error"
    unknown = runmqsc(pair, "STOP CONN(0000000000000000)\n")
    assert unknown.returncode == 10 and "AMQ8147E" in unknown.stdout

    # uncommitted messages: refused with MQ's 2055 even once no handle is open
    syncer = _app(pair, "syncer")
    assert syncer.do("putsync ST.Q")[0] == "ok"
    assert syncer.do("close ST.Q")[0] == "ok"
    getter.end()
    _wait_for(lambda: _qstatus(pair, "ST.Q")["IPPROCS"] == "0")
    st = _qstatus(pair, "ST.Q")
    assert (st["OPPROCS"], st["UNCOM"]) == ("0", "1")
    refused = runmqsc(pair, "CLEAR QLOCAL(ST.Q)\n")
    assert refused.returncode == 10 and "AMQ8143E" in refused.stdout
    assert "MQRC 2055" in refused.stdout
    assert syncer.do("commit")[0] == "ok"
    assert syncer.do("close ST.Q")[0] == "ok"
    cleared = runmqsc(pair, "CLEAR QLOCAL(ST.Q)\nDIS QSTATUS(ST.Q) CURDEPTH\n")
    assert cleared.returncode == 0 and "AMQ8022I" in cleared.stdout
    assert blocks(cleared.stdout, "AMQ8450I")[0]["CURDEPTH"] == "0"

    # RESET QSTATS: 2 puts and 1 get since start (the cleared message is no get), then 0
    out = runmqsc(pair, "RESET QSTATS(ST.Q)\nRESET QSTATS(ST.Q)\n").stdout
    first, second = blocks(out, "AMQ8450I")
    assert (first["MSGSIN"], first["MSGSOUT"], first["HIGHQDPT"]) == ("2", "1", "1")
    assert (second["MSGSIN"], second["MSGSOUT"], second["HIGHQDPT"]) == ("0", "0", "0")

    # the listener and the log, as the instance knows them
    with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as fh:
        port = str(json.load(fh)["port"])
    out = runmqsc(pair, "DISPLAY LSSTATUS(*)\nDISPLAY LOG\nDISPLAY QMSTATUS ALL\n").stdout
    (ls,) = blocks(out, "AMQ8631I")
    assert (ls["STATUS"], ls["PORT"], ls["SSL"]) == ("RUNNING", port, "NO")
    assert int(ls["SESSIONS"]) >= 2  # runmqsc itself and the syncer
    (log,) = blocks(out, "AMQ1011I")
    assert log["CURRLOG"].endswith(".LOG") and log["LOGTYPE"] == "CIRCULAR"
    (qmst,) = blocks(out, "AMQ8705I")
    assert (log["CURRLOG"], log["RECLOG"]) == (qmst["CURRLOG"], qmst["RECLOG"])
    # which instance answered, since when, with how many connections, and whether a
    # standby may take over: what an administrator asks first during a failover
    active = pair.active()
    assert active is not None and qmst["INSTANCE"] == active["host"], qmst
    assert qmst["STANDBY"] == "PERMITTED" and int(qmst["CONNS"]) >= 1, qmst
    assert len(qmst["STARTDA"]) == 10 and len(qmst["STARTTI"]) == 8, qmst



def test_display_conn_uowlog_names_the_unit_that_holds_the_log(pair) -> None:
    """MiqmLogSpaceNearlyFull: which application holds the log? UOWSTATE(ACTIVE) is every
    connection inside a unit (a consumer waiting in a get under syncpoint too); UOWLOG is
    the extent of the unit's first record, RECLOG's while it holds the restart point, and
    blank without a logged unit."""
    pair.create()
    pair.start(pair.a)
    assert runmqsc(pair, "DEFINE QLOCAL(UOW.Q)\n").returncode == 0
    holder, idle = _app(pair, "holder"), _app(pair, "idle")
    assert holder.do("put UOW.Q")[0] == "ok"
    assert holder.do("getsync UOW.Q")[0] == "ok"  # a get under syncpoint is logged
    assert idle.do("put UOW.Q")[0] == "ok"  # outside syncpoint: no unit
    conns = {b.get("APPLTAG"): b for b in
             blocks(runmqsc(pair, "DISPLAY CONN(*) ALL\n").stdout, "AMQ8276I")}
    assert conns["holder"]["UOWSTATE"] == "ACTIVE"
    reclog = blocks(runmqsc(pair, "DISPLAY QMSTATUS ALL\n").stdout, "AMQ8705I")[0]["RECLOG"]
    assert re.fullmatch(r"S\d{7}\.LOG", conns["holder"]["UOWLOG"]), conns["holder"]
    assert conns["holder"]["UOWLOG"] == reclog
    assert conns["idle"]["UOWLOG"] == ""
    assert holder.do("commit")[0] == "ok"
    conns = {b.get("APPLTAG"): b for b in
             blocks(runmqsc(pair, "DISPLAY CONN(*) APPLTAG UOWLOG\n").stdout, "AMQ8276I")}
    assert conns["holder"]["UOWLOG"] == ""

def test_aliases_models_clear_and_qmgr_survive_a_failover(pair) -> None:
    pair.create()
    pair.start(pair.a)
    pair.start(pair.b)
    setup = runmqsc(pair, "\n".join([
        "DEFINE QLOCAL(T.Q)",
        "DEFINE QALIAS(A.Q) TARGET(T.Q) DESCR('to T.Q')",
        "DEFINE QALIAS(A.OFF) TARGET(T.Q) PUT(DISABLED) GET(DISABLED)",
        "DEFINE QMODEL(M.PERM) DEFTYPE(PERMDYN) MAXDEPTH(7)",
        "DEFINE QMODEL(M.TEMP)",
        "ALTER QMGR DESCR('daily admin') MAXMSGL(40000)",
        "DEFINE QLOCAL(A.Q)",          # an alias has the name: refused
        "DEFINE QALIAS(T.Q) TARGET(X)",  # a local queue has it: refused
    ]) + "\n")
    assert setup.stdout.count("AMQ8150E") == 2, setup.stdout
    app = _app(pair, "dyn")
    for _ in range(3):
        assert app.do("put A.Q")[0] == "ok"  # through the alias, to T.Q
    assert app.do("put A.OFF")[:2] == ["error", "2051"]
    assert app.do("get A.OFF")[:2] == ["error", "2016"]
    assert app.do("opendyn M.PERM BAD*NAME*")[:2] == ["error", "2011"]
    assert app.do("put NO.SUCH.Q")[:2] == ["error", "2085"]
    perm = app.do("open M.PERM OUTPUT")
    temp = app.do("open M.TEMP INPUT")
    assert perm[0] == temp[0] == "name" and perm[1].startswith("APP.")
    assert app.do(f"put {perm[1]}")[0] == "ok"
    assert app.do(f"put {temp[1]}")[:2] == ["error", "2048"]  # persistent to a TEMPDYN
    bad = app.do("open M.PERM OUTPUT BOGUS")
    assert bad[:2] == ["error", "2046"]
    st = _qstatus(pair, "T.Q")
    assert (st["CURDEPTH"], st["OPPROCS"]) == ("3", "1")  # the alias's handle is T.Q's
    app.end()
    # the temporary dynamic queue went with its connection; the permanent one stays
    out = runmqsc(pair, f"DIS QL({temp[1]})\nCLEAR QLOCAL(T.Q)\n").stdout
    assert "AMQ8147E" in out and "AMQ8022I" in out
    assert runmqsc(pair, "DIS QSTATUS(T.Q) CURDEPTH\n").stdout.count("CURDEPTH(0)") == 1
    pair.put(pair.a, "A.Q", ["after-clear"])
    missing = runmqsc(pair, "\n".join([
        "CLEAR QLOCAL(NOPE)", "DIS QSTATUS(NOPE)", "RESET QSTATS(NOPE)",
        "DIS CONN(0000000000000001)", "DIS LSSTATUS(OTHER)", "DELETE QMODEL(NOPE)",
        "ALTER QALIAS(NOPE) DESCR('x')", "DEFINE QALIAS(A.Q) TARGET(T.Q)"]) + "\n")
    assert missing.returncode == 10
    assert missing.stdout.count("AMQ8147E") == 7 and missing.stdout.count("AMQ8150E") == 1

    pair.kill_active()
    pair.wait_active(not_host="hosta", timeout=30)
    out = runmqsc(pair, "\n".join([
        "DIS QALIAS(A.Q) ALL", "DIS QMODEL(M.PERM) ALL", f"DIS QL({perm[1]}) CURDEPTH",
        "DIS QMGR DESCR MAXMSGL", "DIS QSTATUS(T.Q) CURDEPTH"]) + "\n", host=pair.b).stdout
    views = blocks(out, "AMQ8409I")
    alias = next(b for b in views if b["QUEUE"] == "A.Q")
    assert (alias["TYPE"], alias["TARGET"], alias["DESCR"]) == ("QALIAS", "T.Q", "to T.Q")
    model = next(b for b in views if b["QUEUE"] == "M.PERM")
    assert (model["DEFTYPE"], model["MAXDEPTH"]) == ("PERMDYN", "7")
    assert next(b for b in views if b["QUEUE"] == perm[1])["CURDEPTH"] == "1"
    (qmgr,) = blocks(out, "AMQ8408I")
    assert (qmgr["DESCR"], qmgr["MAXMSGL"]) == ("daily admin", "40000")
    assert blocks(out, "AMQ8450I")[0]["CURDEPTH"] == "1"  # the cleared 3 stay gone
    every = blocks(runmqsc(pair, "DIS Q(*)\n", host=pair.b).stdout, "AMQ8409I")
    types = {b["QUEUE"]: b["TYPE"] for b in every}
    assert {types["T.Q"], types["A.Q"], types["M.PERM"], types[perm[1]]} == {
        "QLOCAL", "QALIAS", "QMODEL"} and types["M.PERM"] == "QMODEL"
    # a get through the alias on the new active reaches the target's one message
    assert pair.get_all(pair.b, "A.Q") == ["after-clear"]
    gone = runmqsc(pair, "DELETE QALIAS(A.Q)\nDIS QALIAS(A.Q)\n", host=pair.b).stdout
    assert "AMQ8007I" in gone and "AMQ8147E" in gone


def test_runmqsc_c_from_another_host_with_the_application_credential(pair) -> None:
    pair.create()
    pair.start(pair.a)
    with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as fh:
        port = json.load(fh)["port"]
    with open(os.path.join(pair.data_dir(), "credentials"), encoding="utf-8") as fh:
        secret = json.load(fh)["principals"]["admin"]["secret"]
    other = os.path.join(pair.base, "third")  # a host whose mqs.ini knows nothing
    os.makedirs(other, exist_ok=True)
    env = dict(os.environ, MIQM_DATA_ROOT=other, MIQM_HOSTNAME="hostc",
               MIQM_CONNECTION=f"127.0.0.1({port})", MIQM_CREDENTIAL=f"admin:{secret}")

    def remote(text: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runmqsc", "-c", pair.qmgr], input=text, text=True,
                              capture_output=True, env={**env, **extra}, timeout=60)

    ok = remote("DEFINE QLOCAL(R.Q)\nDIS CONN(*) CONNAME USERID\n")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "AMQ8006I" in ok.stdout
    assert any(b.get("USERID") == "admin" for b in blocks(ok.stdout, "AMQ8276I"))
    wrong = remote("PING QMGR\n", MIQM_CREDENTIAL="admin:" + "0" * 64)
    assert wrong.returncode == 20 and "AMQ5534" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    # authority is checked on the alias a put names, not on its target
    line = pair.run(pair.a, "miqm", "credential", "-m", pair.qmgr, "--add", "app1").stdout
    app1 = next(x for x in line.split() if x.startswith("app1:"))
    setup = remote("\n".join([
        "DEFINE QALIAS(R.ALIAS) TARGET(R.Q)",
        "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
        "SET AUTHREC PROFILE(R.ALIAS) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(PUT)"]) + "\n")
    assert setup.returncode == 0, setup.stdout
    put = ("from miqm.client import connect, MQError\n"
           "with connect('QMADM', reconnect=False) as qm:\n"
           "    qm.put('R.ALIAS', b'via alias')\n"
           "    try:\n"
           "        qm.put('R.Q', b'direct')\n"
           "    except MQError as exc:\n"
           "        print(exc.reason)\n")
    proc = subprocess.run([sys.executable, "-c", put], text=True, capture_output=True,
                          env={**env, "MIQM_CREDENTIAL": app1}, timeout=60)
    assert proc.stdout.split() == ["2035"], proc.stdout + proc.stderr
    depth = blocks(remote("DIS QSTATUS(R.Q) CURDEPTH\n").stdout, "AMQ8450I")[0]
    assert depth["CURDEPTH"] == "1"
    # connection authentication off and on again (ALTER QMGR CONNAUTH), for new connections
    shown = blocks(remote("DIS QMGR CONNAUTH\n").stdout, "AMQ8408I")[0]
    assert shown["CONNAUTH"] == "SYSTEM.DEFAULT.AUTHINFO.IDPWOS"
    assert remote("ALTER QMGR CONNAUTH(' ')\n").returncode == 0
    anyone = remote("PING QMGR\nDIS QMGR CONNAUTH\n", MIQM_CREDENTIAL="admin:" + "0" * 64)
    assert anyone.returncode == 0 and "CONNAUTH( )" in anyone.stdout
    assert remote("ALTER QMGR CONNAUTH(SYSTEM.DEFAULT.AUTHINFO.IDPWOS)\n").returncode == 0
    again = remote("PING QMGR\n", MIQM_CREDENTIAL="admin:" + "0" * 64)
    assert again.returncode == 20 and "AMQ5534" in again.stderr
    unset = remote("PING QMGR\n", MIQM_CONNECTION="")
    assert unset.returncode == 20 and "MIQM_CONNECTION" in unset.stderr
    assert len(unset.stderr.strip().splitlines()) == 1


def test_runmqsc_driven_through_a_pipe_answers_each_command_before_the_next(pair) -> None:
    """An administrator's session as a program drives it: each command written into
    runmqsc's stdin is answered before the next is written (runmqsc read its whole input
    first), a WHERE filter shows only the queues holding messages, and DEFINE ... REPLACE
    puts an attribute the command no longer names back to its default, as MQ does."""
    pair.create()
    pair.start(pair.a)
    proc = subprocess.Popen(["runmqsc", pair.qmgr], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=pair.a.env())
    assert proc.stdin is not None and proc.stdout is not None

    def ask(command: str, until: str) -> list[str]:
        """Write one command and read its answer up to a line starting with ``until``
        (a runmqsc that waits for the end of its input never answers: readline blocks
        and the test's timeout ends it)."""
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
        lines = []
        while not lines or not lines[-1].startswith(until):
            line = proc.stdout.readline()
            assert line, lines
            lines.append(line.rstrip("\n"))
        return lines

    try:
        assert ask("DEFINE QLOCAL(W.FULL) DESCR('orders') MAXDEPTH(50)", "AMQ")[-1] == \
            "AMQ8006I: miqm queue created."
        assert ask("DEFINE QLOCAL(W.EMPTY)", "AMQ")[-1].startswith("AMQ8006I")
        pair.put(pair.a, "W.FULL", ["one", "two"])
        shown = ask("DIS QLOCAL(W.*) WHERE(CURDEPTH GT 0)", "   CURDEPTH")
        assert shown[-3:] == ["AMQ8409I: Display Queue details.",
                              "   " + "QUEUE(W.FULL)".ljust(40) + "TYPE(QLOCAL)",
                              "   CURDEPTH(2)"]
        assert ask("DEFINE QLOCAL(W.FULL) REPLACE MAXDEPTH(60)", "AMQ")[-1].startswith(
            "AMQ8006I")
        after = ask("DIS QLOCAL(W.FULL) DESCR MAXDEPTH CURDEPTH", "   MAXDEPTH")
        assert blocks("\n".join(after), "AMQ8409I")[-1] == {
            "QUEUE": "W.FULL", "TYPE": "QLOCAL", "CURDEPTH": "2", "DESCR": "",
            "MAXDEPTH": "60"}
        proc.stdin.write("END\n")
        proc.stdin.close()
        rest = proc.stdout.read().splitlines()
        assert rest[-3:] == ["5 MQSC commands read.", "No commands have a syntax error.",
                             "All valid MQSC commands were processed."]
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
