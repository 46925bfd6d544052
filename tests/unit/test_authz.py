"""Authority records: MQ's generic profile matching and precedence (miqm/authz.py), the
security MQSC syntax, the server's checks per op (miqm/net/authorize.py) against a real
store, and the records kept through the store's log and checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lockfs.posix import PosixVolume
from miqm import authz, mqsc
from miqm.net.authorize import Authorizer, mqsc_needs
from miqm.net.server import Session
from miqm.net.service import QueueService
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

SETTINGS = LogSettings(file_pages=256, primary_files=3, secondary_files=2)
TUNING = StoreTuning(checkpoint_log_recd_max=1_000_000)


# -- matching ---------------------------------------------------------------------------

@pytest.mark.parametrize("profile,name,hit", [
    ("AB.?D", "AB.CD", True), ("AB.?D", "AB.CCD", False), ("AB.?D", "AB..D", False),
    ("ABC.*.JKL", "ABC.DEF.JKL", True), ("ABC.*.JKL", "ABC.JKL", False),
    ("ABC.*.JKL", "ABC.D.E.JKL", False),
    ("ABC.DE*.JKL", "ABC.DE.JKL", True), ("ABC.DE*.JKL", "ABC.DEGH.JKL", True),
    ("ABC.DE*.JKL", "ABC.DX.JKL", False),
    ("**", "ANY.THING.AT.ALL", True), ("**", "Q", True),
    ("**.ABC", "ABC", True), ("**.ABC", "X.Y.ABC", True), ("**.ABC", "X.ABCD", False),
    ("A.**", "A", True), ("A.**", "A.B.C", True), ("A.**", "AB", False),
    ("A.**.B", "A.B", True), ("A.**.B", "A.X.Y.B", True), ("A.**.B", "A.X.C", False),
    ("APP*", "APP", True), ("APP*", "APP.IN", False), ("Q1", "Q1", True), ("Q1", "Q10", False),
])
def test_generic_profiles_match_as_mq_describes(profile: str, name: str, hit: bool) -> None:
    assert authz.matches(profile, name) is hit


@pytest.mark.parametrize("bad", ["A.**.**", "A**", "**B.C", "", "A B", "x" * 49])
def test_bad_profiles_are_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(authz.AuthzError):
        authz.check_profile(bad)


def _table(*recs: tuple[str, str, str, set[str]]) -> authz.AuthTable:
    return authz.AuthTable([authz.AuthRec(t, p, u, frozenset(a)) for t, p, u, a in recs], 1)


def test_the_most_specific_profile_wins_and_profiles_are_not_added() -> None:
    # MQ's example: AB.* gives put, AB.C* gives get: AB.CD has get only
    t = _table(("QUEUE", "AB.*", "fred", {"PUT"}), ("QUEUE", "AB.C*", "fred", {"GET"}))
    assert t.authorities("fred", "QUEUE", "AB.CD") == {"GET"}
    assert t.authorities("fred", "QUEUE", "AB.XD") == {"PUT"}


@pytest.mark.parametrize("loser,winner", [
    ("A*", "AB*"), ("A?C", "ABC"), ("A*C", "A?C"), ("**.C", "*.C"), ("**", "AB.**"),
    ("AB*", "ABC"),
])
def test_precedence_plain_over_query_over_star_over_double_star(loser: str,
                                                                winner: str) -> None:
    t = _table(("QUEUE", loser, "u", {"PUT"}), ("QUEUE", winner, "u", {"GET"}))
    name = {"A*": "ABC", "A?C": "ABC", "A*C": "ABC", "**.C": "B.C", "**": "AB.X",
            "AB*": "ABC"}[loser]
    assert t.lookup("u", "QUEUE", name) == (frozenset({"GET"}), winner)


def test_a_record_granting_nothing_hides_a_broader_profile() -> None:
    t = _table(("QUEUE", "APP.**", "u", {"PUT", "GET"}), ("QUEUE", "APP.SECRET", "u", set()))
    assert t.authorities("u", "QUEUE", "APP.OTHER") == {"PUT", "GET"}
    assert t.authorities("u", "QUEUE", "APP.SECRET") == frozenset()


def test_records_of_other_principals_and_types_do_not_apply_and_admin_has_all() -> None:
    t = _table(("QUEUE", "**", "other", {"PUT"}), ("QMGR", "self", "u", {"CONNECT"}))
    assert t.authorities("u", "QUEUE", "Q1") == frozenset()
    assert t.authorities("u", "QMGR", "self") == {"CONNECT"}
    assert t.authorities("admin", "QUEUE", "Q1") == set(authz.AUTHORITIES["QUEUE"])


def test_the_cache_is_dropped_when_the_records_change() -> None:
    t = _table(("QUEUE", "Q*", "u", {"PUT"}))
    assert t.allows("u", "QUEUE", "Q1", "PUT")
    t.load([authz.AuthRec("QUEUE", "Q*", "u", frozenset({"GET"}))], 2)
    assert not t.allows("u", "QUEUE", "Q1", "PUT") and t.allows("u", "QUEUE", "Q1", "GET")


def test_group_names_expand_per_object_type() -> None:
    assert authz.expand("QUEUE", ["ALL"]) == set(authz.AUTHORITIES["QUEUE"])
    assert authz.expand("QUEUE", ["ALLADM"]) == {"CHG", "CLR", "CRT", "DLT", "DSP"}
    assert authz.expand("QMGR", ["ALLMQI"]) == {"CONNECT", "INQ", "SET"}
    assert authz.expand("QUEUE", ["NONE"]) == frozenset()
    with pytest.raises(authz.AuthzError, match="CONNECT is not an authority of OBJTYPE"):
        authz.expand("QUEUE", ["CONNECT"])


def test_display_selection_match_profile_and_exact() -> None:
    t = _table(("QUEUE", "ABCD", "u", {"PUT"}), ("QUEUE", "ABC*", "u", {"GET"}),
               ("QUEUE", "AB*", "v", {"GET"}), ("QUEUE", "X*", "u", {"GET"}))
    assert [r.profile for r in t.select(profile="ABCD")] == ["AB*", "ABC*", "ABCD"]
    assert [r.profile for r in t.select(profile="ABCD", match="EXACT")] == ["ABCD"]
    assert [r.profile for r in t.select(principal="u")] == ["ABC*", "ABCD", "X*"]


# -- MQSC syntax ------------------------------------------------------------------------

def test_set_authrec_parses_mq_syntax() -> None:
    cmd = mqsc.parse_command("SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) "
                             "PRINCIPAL('app1') AUTHADD(PUT, GET) AUTHRMV(BROWSE)")
    assert (cmd.verb, cmd.objtype, cmd.name) == ("SET", "AUTHREC", "APP.**")
    assert cmd.attrs == {"OBJTYPE": "QUEUE", "PRINCIPAL": "app1", "AUTHADD": ["PUT", "GET"],
                         "AUTHRMV": ["BROWSE"]}
    assert mqsc.parse_command("REFRESH SECURITY TYPE(AUTHSERV)").verb == "REFRESH"
    assert mqsc.parse_command("DIS AUTHREC").verb == "DISPLAY"


@pytest.mark.parametrize("text,where", [
    ("SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) AUTHADD(PUT)", "needs PRINCIPAL"),
    ("SET AUTHREC PROFILE(Q1) PRINCIPAL('a') AUTHADD(PUT)", "needs OBJTYPE"),
    ("SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('a')", "AUTHADD"),
    ("SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('a') AUTHADD(CONNECT)",
     "not an authority"),
    ("SET AUTHREC PROFILE(Q1) OBJTYPE(CHANNEL) PRINCIPAL('a') AUTHADD(PUT)", "QUEUE or QMGR"),
    ("SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) GROUP('g') AUTHADD(PUT)", "GROUP"),
    ("SET AUTHREC PROFILE(A.**.**) OBJTYPE(QUEUE) PRINCIPAL('a') AUTHADD(PUT)", "once"),
    ("DELETE AUTHREC OBJTYPE(QUEUE) PRINCIPAL('a')", "needs PROFILE"),
    ("REFRESH QMGR", "SECURITY"),
    ("SET AUTHREC PROFILE(Q1) OBJTYPE(QUEUE) PRINCIPAL('a') AUTHADD(PUT,GET) AUTHRMV(PUT)",
     "PUT is both in AUTHADD and in AUTHRMV"),
])
def test_bad_security_commands_are_syntax_errors_naming_where(text: str, where: str) -> None:
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        mqsc.parse_command(text)
    assert where in info.value.reason
    assert text.startswith(info.value.segment)


def test_mqsc_commands_need_mq_authorities() -> None:
    def needs(text: str) -> list[tuple[str, str, str]]:
        return mqsc_needs(mqsc.parse_command(text))

    assert needs("DEFINE QLOCAL(Q1) LIKE(Q0)") == [("QUEUE", "Q1", "CRT"),
                                                  ("QUEUE", "Q0", "DSP")]
    assert needs("ALTER QLOCAL(Q1) MAXDEPTH(5)") == [("QUEUE", "Q1", "CHG")]
    assert needs("DELETE QLOCAL(Q1)") == [("QUEUE", "Q1", "DLT")]
    assert needs("DISPLAY QLOCAL(Q1)") == [("QUEUE", "Q1", "DSP")]
    assert needs("DISPLAY QLOCAL(Q*)") == []
    assert needs("DISPLAY QMGR") == [("QMGR", "self", "DSP")]
    assert needs("ALTER QMGR MAXUMSGS(5)") == [("QMGR", "self", "CHG")]
    assert needs("SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('a') AUTHADD(CONNECT)") == [
        ("QMGR", "self", "CHG")]
    assert needs("REFRESH SECURITY") == [("QMGR", "self", "CHG")]


# -- the server's checks against a real store --------------------------------------------

def _create(root: Path) -> None:
    (root / "data").mkdir(parents=True)
    (root / "log").mkdir()
    QueueManagerStore.create(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")),
                             "QM", SETTINGS)


def _open(root: Path, generation: int) -> QueueManagerStore:
    return QueueManagerStore.open(PosixVolume(str(root / "data")),
                                  PosixVolume(str(root / "log")), "QM", SETTINGS, TUNING,
                                  generation=generation, background=False)


def _session(principal: str | None) -> Session:
    s = Session("test")
    s.principal = principal
    return s


def _mqsc(service: QueueService, session: Session, text: str) -> dict[str, Any]:
    cmd = mqsc.parse_command(text)
    return service.handle({"op": "mqsc", "command": cmd.to_dict()}, session)


@pytest.fixture()
def served(tmp_path: Path):
    _create(tmp_path)
    store = _open(tmp_path, 1)
    logged: list[tuple[str, str]] = []
    service = QueueService(store, "QM", errlog=lambda n, line: logged.append((n, line)))
    yield service, logged
    store.close()


def test_every_op_of_a_principal_is_checked_and_refusals_logged(served) -> None:
    service, logged = served
    admin = _session("admin")
    assert not _mqsc(service, admin, "DEFINE QLOCAL(APP.IN)")["failed"]
    assert not _mqsc(service, admin, "DEFINE QLOCAL(APP.OUT)")["failed"]
    app = _session("app1")
    reply = service.handle({"op": "hello"}, app)
    assert reply["mqrc"] == 2035 and "CONNECT" in reply["error"]
    # and the command that grants it
    assert "'setmqaut -m QM -t qmgr -p app1 +connect'" in reply["error"], reply["error"]
    assert logged[-1][0] == "AMQ8077" and "'app1'" in logged[-1][1] \
        and "'QM'" in logged[-1][1] and "connect" in logged[-1][1]
    # a refused hello leaves the session unconnected: every later op is refused too
    assert service.handle({"op": "put", "queue": "APP.IN", "body": b"x"}, app)["mqrc"] == 2035
    for text in ("SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
                 "SET AUTHREC PROFILE(APP.*) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(PUT)",
                 "SET AUTHREC PROFILE(APP.OUT) OBJTYPE(QUEUE) PRINCIPAL('app1') "
                 "AUTHADD(GET, BROWSE)"):
        assert _mqsc(service, admin, text)["lines"] == ["AMQ8862I: miqm authority record set."]
    app = _session("app1")
    assert service.handle({"op": "hello"}, app)["ok"]
    assert service.handle({"op": "put", "queue": "APP.IN", "body": b"x"}, app)["ok"]
    refused = service.handle({"op": "get", "queue": "APP.IN"}, app)
    assert refused["mqrc"] == 2035 and "GET" in refused["error"] and "APP.IN" in refused["error"]
    assert "'setmqaut -m QM -t queue -n APP.IN -p app1 +get'" in refused["error"]
    assert "get" in logged[-1][1] and "APP.IN" in logged[-1][1]
    # APP.OUT: the exact profile wins over APP.*, which gave PUT
    assert service.handle({"op": "put", "queue": "APP.OUT", "body": b"y"}, app)["mqrc"] == 2035
    assert service.handle({"op": "get", "queue": "APP.OUT", "browse": True},
                          app)["mqrc"] == 2033
    assert service.handle({"op": "consume", "queue": "APP.IN"}, app)["mqrc"] == 2035
    assert service.handle({"op": "open", "queue": "APP.IN"}, app)["mqrc"] == 2035
    assert service.authorizer.check("open", {"queue": "APP.IN", "options": ["OUTPUT"]},
                                    app) is None
    assert service.authorizer.check("open", {"queue": "APP.IN", "options": ["OUTPUT", "INPUT"]},
                                    app)["mqrc"] == 2035
    assert service.handle({"op": "status"}, app)["mqrc"] == 2035
    assert service.handle({"op": "checkpoint"}, app)["mqrc"] == 2035
    # MQSC by authority: AMQ8135E, the command fails
    for text in ("DEFINE QLOCAL(APP.NEW)", "DELETE QLOCAL(APP.IN)", "DISPLAY QMGR",
                 "SET AUTHREC PROFILE(**) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(ALL)",
                 "REFRESH SECURITY", "DISPLAY AUTHREC"):
        reply = _mqsc(service, app, text)
        assert reply["failed"] and reply["lines"][0].startswith("AMQ8135E: Not authorized."), text
    assert logged[-1][0] == "AMQ8245"  # display refusals have MQ's display message
    # a generic display shows only the queues the principal may display
    _mqsc(service, admin, "SET AUTHREC PROFILE(APP.IN) OBJTYPE(QUEUE) PRINCIPAL('app1') "
          "AUTHADD(DSP)")
    shown = "\n".join(_mqsc(service, app, "DISPLAY QLOCAL(APP.*)")["lines"])
    assert "QUEUE(APP.IN)" in shown and "APP.OUT" not in shown
    assert service.authorizer.refusals >= 10


def test_display_delete_and_refresh(served) -> None:
    service, _ = served
    admin = _session("admin")
    _mqsc(service, admin, "SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) PRINCIPAL('app1') "
          "AUTHADD(ALLMQI)")
    lines = _mqsc(service, admin, "DISPLAY AUTHREC PROFILE(APP.Q1) OBJTYPE(QUEUE)")["lines"]
    assert lines == ["AMQ8864I: Display authority record details.",
                     "   PROFILE(APP.**)                         ENTITY(app1)",
                     "   ENTTYPE(PRINCIPAL)                      OBJTYPE(QUEUE)",
                     "   AUTHLIST(BROWSE,GET,INQ,PUT,SET)"]
    _mqsc(service, admin, "SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) PRINCIPAL('app1') "
          "AUTHRMV(SET, INQ)")
    assert _mqsc(service, admin, "DIS AUTHREC PRINCIPAL('app1')")["lines"][-1] == \
        "   AUTHLIST(BROWSE,GET,PUT)"
    assert _mqsc(service, admin, "SET AUTHREC PROFILE(OTHERQM) OBJTYPE(QMGR) "
                 "PRINCIPAL('app1') AUTHADD(CONNECT)")["failed"]
    assert _mqsc(service, admin, "SET AUTHREC PROFILE(QM) OBJTYPE(QMGR) "
                 "PRINCIPAL('app1') AUTHADD(CONNECT)")["lines"][0].startswith("AMQ8862I")
    assert "PROFILE(self)" in _mqsc(service, admin, "DIS AUTHREC OBJTYPE(QMGR)")["lines"][1]
    refreshed = []
    service.authorizer.on_refresh.append(lambda: refreshed.append(1))
    assert _mqsc(service, admin, "REFRESH SECURITY")["lines"] == [
        "AMQ8560I: miqm security cache refreshed."]
    assert refreshed == [1]
    assert _mqsc(service, admin, "DELETE AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) "
                 "PRINCIPAL('app1')")["lines"] == ["AMQ8863I: miqm authority record deleted."]
    again = _mqsc(service, admin, "DELETE AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) "
                  "PRINCIPAL('app1')")
    assert again["failed"] and again["lines"][0].startswith("AMQ1122E")
    assert _mqsc(service, admin, "DIS AUTHREC OBJTYPE(QUEUE)")["lines"] == [
        "AMQ1120I: No authority record matches the selection."]


def test_refusals_are_rate_limited_in_the_error_log() -> None:
    class Store:
        authrec_serial = 0

        def authrecs(self) -> list[dict[str, Any]]:
            return []

    clock = [0.0]
    logged: list[str] = []
    a = Authorizer(Store(), "QM", lambda n, line: logged.append(line), log_per_minute=3,
                   clock=lambda: clock[0] + 100.0)
    s = _session("u")
    for _ in range(10):
        assert a.check("hello", {}, s)["mqrc"] == 2035
    assert len(logged) == 3 and a.refusals == 10
    clock[0] += 61
    a.check("hello", {}, s)
    assert len(logged) == 4 and "7 more refusals" in logged[-1]


# -- kept by the store -----------------------------------------------------------------

def test_records_survive_a_crash_from_the_log_and_a_restart_from_the_checkpoint(
        tmp_path: Path) -> None:
    _create(tmp_path)
    store = _open(tmp_path, 1)
    store.set_authrec("QUEUE", "APP.**", "app1", ["GET", "PUT"])
    store.set_authrec("QUEUE", "APP.SECRET", "app1", [])
    store.set_authrec("QMGR", "self", "app1", ["CONNECT"])
    store.set_authrec("QUEUE", "GONE", "app1", ["PUT"])
    store.set_authrec("QUEUE", "GONE", "app1", None)
    want = store.authrecs()
    assert len(want) == 3 and {"objtype": "QUEUE", "profile": "APP.SECRET",
                               "principal": "app1", "auths": []} in want
    store.log.close()  # a crash: no shutdown checkpoint, the records are only in the log
    store = _open(tmp_path, 2)
    assert store.authrecs() == want
    store.close()  # now in the checkpoint (and the log's start moves past the records)
    store = _open(tmp_path, 3)
    assert store.authrecs() == want
    # a new active instance's service enforces what it finds in the store
    service = QueueService(store, "QM")
    app = _session("app1")
    assert service.handle({"op": "hello"}, app)["ok"]
    assert service.handle({"op": "get", "queue": "APP.X"}, app)["mqrc"] == 2085
    assert service.handle({"op": "get", "queue": "APP.SECRET"}, app)["mqrc"] == 2035
    store.close()


# -- setmqaut / dspmqaut: the command line -----------------------------------------------

@pytest.mark.parametrize("argv,code,needle", [
    (["-t", "queue", "-n", "Q", "-p", "a", "+put"], 36, "-m QMgr is required"),
    (["-m", "QM", "-n", "Q", "-p", "a", "+put"], 147, "-t ObjectType"),
    (["-m", "QM", "-t", "channel", "-n", "Q", "-p", "a", "+put"], 148, "queue or qmgr"),
    (["-m", "QM", "-t", "queue", "-n", "Q", "+put"], 149, "-p Principal"),
    (["-m", "QM", "-t", "queue", "-p", "a", "+put"], 146, "-n Name"),
    (["-m", "QM", "-t", "queue", "-n", "Q", "-p", "a"], 150, "no authorities"),
    (["-m", "QM", "-t", "queue", "-n", "Q", "-p", "a", "+connect"], 151, "connect"),
    (["-m", "QM", "-t", "queue", "-n", "Q", "-g", "grp", "+put"], 36, "groups"),
    (["-m", "QM", "-t", "queue", "-n", "A.**.**", "-p", "a", "+put"], 36, "once"),
    (["-m", "QM", "-t", "qmgr", "-p", "a", "-remove", "+connect"], 36, "-remove takes no"),
    # found by an administrator: the second -p won silently (app2 got the record, not
    # app1), and +put -put left a record without PUT that hid the broader profile
    (["-m", "QM", "-t", "queue", "-n", "Q", "-p", "app1", "-p", "app2", "+put"], 36,
     "-p is given twice"),
    (["-m", "QM", "-t", "queue", "-n", "Q", "-p", "a", "+put", "-put"], 151,
     "+put and -put"),
    (["-m", "QM", "-t", "queue", "-n", "Q", "-p", "a", "+get", "+nosuch"], 151,
     "+nosuch is not an authority of -t queue"),
])
def test_setmqaut_bad_arguments_are_one_line_and_mq_exit_codes(
        argv: list[str], code: int, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    from miqm.cli.authz import setmqaut

    with pytest.raises(SystemExit) as exit_:
        setmqaut(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == code and needle in err and err.count("\n") == 1, err


def test_dspmqaut_takes_the_most_specific_profile_of_the_display() -> None:
    from miqm.cli.authz import effective

    lines = ["AMQ8864I: Display authority record details.",
             "   PROFILE(AB.*)                           ENTITY(fred)",
             "   ENTTYPE(PRINCIPAL)                      OBJTYPE(QUEUE)",
             "   AUTHLIST(PUT)",
             "AMQ8864I: Display authority record details.",
             "   PROFILE(AB.C*)                          ENTITY(fred)",
             "   ENTTYPE(PRINCIPAL)                      OBJTYPE(QUEUE)",
             "   AUTHLIST(GET,INQ)"]
    assert effective(lines) == ("AB.C*", ["GET", "INQ"])
    assert effective(["AMQ1120I: No authority record matches the selection."]) == (None, [])


def test_the_matching_is_pure_and_the_store_does_not_interpret_records() -> None:
    import ast

    root = Path(__file__).resolve().parents[2]
    for path, banned in (("miqm/authz.py", ("miqm", "lockfs")),
                         ("miqm/store/qmstore.py", ("miqm.authz", "miqm.net")),
                         ("miqm/store/recovery.py", ("miqm.authz", "miqm.net"))):
        tree = ast.parse((root / path).read_text())
        names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names.discard("miqm.text")  # pure: how a refused name is shown on one line
        assert not [m for m in names if m.startswith(banned)], (path, names)


def test_the_listener_learns_added_and_removed_principals_from_its_source() -> None:
    from miqm.net.auth import Authenticator

    table = {"admin": "s1"}
    clock = [100.0]
    auth = Authenticator(dict(table), source=lambda: dict(table), clock=lambda: clock[0])
    table["app1"] = "s2"
    # an unknown principal: the file is read again at once (added just after the start)
    assert auth.check("app1:s2") == "app1"
    assert auth.check("admin:wrong") is None  # a known one: read less than a second ago
    table["app2"] = "s3"
    assert auth.check("app2:s3") == "app2"  # another unknown one: read again at once
    assert auth.check("app3:s4") is None  # not there: that name is not read again...
    table["app3"] = "s4"
    assert auth.check("app3:s4") is None  # ...for a second
    clock[0] += 1.5
    assert auth.check("app3:s4") == "app3"
    del table["app1"]
    assert auth.check("app1:s2") == "app1"  # read less than a second ago...
    assert auth.reload()  # ...but REFRESH SECURITY reads it
    assert auth.check("app1:s2") is None
    assert Authenticator(dict(table)).reload() is False  # no source: nothing to read


def test_a_removed_or_rotated_credential_is_refused_within_a_second() -> None:
    """A principal removed (miqm credential --remove) or given a new secret (--remove,
    --add) while the listener runs: its old credential was let in by the running listener,
    and by the standby that took over, until REFRESH SECURITY or a restart, because only a
    refused credential read the file again. A hello now reads it first when the last read
    is a second old, and a stream of good hellos reads it once a second, not each time."""
    from miqm.net.auth import Authenticator

    reads = [0]
    table = {"admin": "s1", "app1": "old", "app2": "s2"}

    def source() -> dict[str, str]:
        reads[0] += 1
        return dict(table)

    clock = [100.0]
    auth = Authenticator(dict(table), source=source, clock=lambda: clock[0])
    for _ in range(100):  # a stream of good hellos: no read within the second
        clock[0] += 0.005
        assert auth.check("app1:old") == "app1"
    assert reads[0] == 0
    table["app1"] = "new"  # rotated
    del table["app2"]  # revoked
    clock[0] += 1.0
    assert auth.check("app1:old") is None
    assert auth.check("app1:new") == "app1"
    assert auth.check("app2:s2") is None  # a name not known: read again, as before
    assert reads[0] == 2
    for _ in range(100):
        clock[0] += 0.05  # 5 s of good hellos: about five reads
        assert auth.check("admin:s1") == "admin"
    assert 4 <= reads[0] <= 7, reads[0]


def _app_that_may_put_on_app_in_only(service: Any) -> Any:
    """APP.IN and APP.OUT defined, and a session of app1, which may connect and put on
    APP.IN only, past its hello."""
    admin = _session("admin")
    for text in ("DEFINE QLOCAL(APP.IN)", "DEFINE QLOCAL(APP.OUT)",
                 "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
                 "SET AUTHREC PROFILE(APP.IN) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(PUT)"):
        assert not _mqsc(service, admin, text)["failed"], text
    app = _session("app1")
    assert service.handle({"op": "hello"}, app)["ok"]
    return app


def test_a_refused_put_with_commit_backs_the_unit_out(served) -> None:
    """A put that carries its commit (docs/protocol.md, "A unit of one put") and is not
    authorized answers what the commit after a refused pipelined put answers: 2003
    naming 2035, with any unit the session had open backed out, never left open."""
    service, _ = served
    app = _app_that_may_put_on_app_in_only(service)
    put = {"op": "put", "body": b"x", "syncpoint": True, "persistent": True}
    reply = service.handle({**put, "queue": "APP.OUT", "commit": True}, app)
    assert reply["mqrc"] == 2003 and "2035" in reply["error"]
    assert "uow" not in app.state and "uow_failed" not in app.state
    # with a unit open on the session: the refused put fails the unit, which is backed out
    assert service.handle({**put, "queue": "APP.IN", "async": 2}, app)["ok"]
    assert "uow" in app.state
    reply = service.handle({**put, "queue": "APP.OUT", "commit": True}, app)
    assert reply["mqrc"] == 2003 and "2035" in reply["error"]
    assert "uow" not in app.state and "uow_failed" not in app.state
    assert service.store.get("APP.IN") is None  # the unit's earlier put was backed out
    assert service.handle({**put, "queue": "APP.IN", "commit": True}, app)["ok"]
    assert service.store.get("APP.IN").body == b"x"


def test_a_refused_pipelined_put_is_named_by_the_commit(served) -> None:
    """An application allowed PUT on one queue and not another, two puts under
    syncpoint (pipelined: the client hears of a failure at the commit): the commit's 2003
    names the queue and the missing authority, not only 'put failed with MQRC 2035'."""
    service, _ = served
    app = _app_that_may_put_on_app_in_only(service)
    put = {"op": "put", "body": b"x", "syncpoint": True, "persistent": True, "async": 2}
    assert service.handle({**put, "queue": "APP.IN"}, app)["ok"]
    assert not service.handle({**put, "queue": "APP.OUT"}, app)["ok"]
    reply = service.handle({"op": "commit"}, app)
    assert reply["mqrc"] == 2003, reply
    assert "APP.OUT" in reply["error"] and "PUT authority" in reply["error"], reply
    assert service.store.get("APP.IN") is None  # the unit was backed out


def test_a_generic_display_shows_damaged_queues_only_to_who_may_display_them(served
                                                                             ) -> None:
    """A generic DISPLAY names a damaged queue in one AMQ7472 line: it is filtered by the
    principal's display authority as a queue's block of attributes is."""
    service, _ = served
    admin = _session("admin")
    for text in ("SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
                 "SET AUTHREC PROFILE(APP.IN) OBJTYPE(QUEUE) PRINCIPAL('app1') "
                 "AUTHADD(DSP)"):
        assert not _mqsc(service, admin, text)["failed"]
    app = _session("app1")
    assert service.handle({"op": "hello"}, app)["ok"]
    lines = ["AMQ7472E: Object APP.IN, type queue damaged: its file is missing. Delete it",
             "AMQ7472E: Object APP.OUT, type queue damaged: its file is missing. Delete it"]
    cmd = mqsc.parse_command("DISPLAY QLOCAL(APP.*)")
    assert service.authorizer.filter_display(cmd, app, lines) == lines[:1]
    assert service.authorizer.filter_display(cmd, admin, lines) == lines


# -- found by an administrator's session ------------------------------------------------

def _grant(service: QueueService, *texts: str) -> None:
    admin = _session("admin")
    for text in texts:
        assert not _mqsc(service, admin, text)["failed"], text


def test_the_connection_that_made_a_dynamic_queue_may_use_it(served) -> None:
    """A reply queue made from a model: the principal's records name the model, the
    queue manager chooses the dynamic queue's name (REPLY.<hex>). MQ gives the creator
    authority to it; here it was refused 2035 on its own reply queue."""
    service, _ = served
    _grant(service, "DEFINE QMODEL(APP.MODEL) DEFTYPE(TEMPDYN)",
           "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
           "SET AUTHREC PROFILE(APP.MODEL) OBJTYPE(QUEUE) PRINCIPAL('app1') "
           "AUTHADD(GET,PUT,INQ)")
    app = _session("app1")
    assert service.handle({"op": "hello"}, app)["ok"]
    opened = service.handle({"op": "open", "queue": "APP.MODEL", "options": ["INPUT"],
                             "dynamic": "REPLY.*"}, app)
    assert opened["ok"], opened
    reply_q = opened["queue"]
    assert reply_q.startswith("REPLY.")
    put = service.handle({"op": "put", "queue": reply_q, "body": b"answer"}, app)
    assert put["ok"], put
    got = service.handle({"op": "get", "queue": reply_q}, app)
    assert got["ok"], got
    # another connection of the same principal has no such right: the records decide
    other = _session("app1")
    assert service.handle({"op": "hello"}, other)["ok"]
    assert service.handle({"op": "put", "queue": reply_q, "body": b"x"}, other)["mqrc"] == 2035


def test_define_replace_of_an_existing_queue_needs_chg_as_alter_does(served) -> None:
    """CRT lets a principal create queues under a profile; DEFINE ... REPLACE of one that
    exists changes it, which needs CHG (it was allowed with CRT alone)."""
    service, _ = served
    _grant(service, "DEFINE QLOCAL(APP.IN) MAXDEPTH(100)",
           "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
           "SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(CRT)")
    app = _session("app1")
    refused = _mqsc(service, app, "DEFINE QLOCAL(APP.IN) REPLACE MAXDEPTH(0)")
    assert refused["failed"] and refused["lines"][0].startswith("AMQ8135E")
    assert "CHG" in refused["lines"][0]
    assert service.store.queue_attrs("APP.IN")["MAXDEPTH"] == 100
    # a new queue: CRT is enough, with or without REPLACE
    assert not _mqsc(service, app, "DEFINE QLOCAL(APP.NEW) REPLACE")["failed"]
    _grant(service, "SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) PRINCIPAL('app1') "
           "AUTHADD(CHG)")
    assert not _mqsc(service, app, "DEFINE QLOCAL(APP.IN) REPLACE MAXDEPTH(0)")["failed"]


def test_a_generic_reset_qstats_needs_authority_on_every_queue_it_reaches(served) -> None:
    """RESET QSTATS(APP.*) was checked against the string 'APP.*' taken as a queue name,
    which APP.** matches: it reset (and showed) a queue the principal's own more
    specific record closes to it."""
    service, _ = served
    _grant(service, "DEFINE QLOCAL(APP.IN)", "DEFINE QLOCAL(APP.SECRET)",
           "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
           "SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(CHG,DSP)",
           "SET AUTHREC PROFILE(APP.SECRET) OBJTYPE(QUEUE) PRINCIPAL('app1') "
           "AUTHADD(NONE)")
    app = _session("app1")
    refused = _mqsc(service, app, "RESET QSTATS(APP.*)")
    assert refused["failed"] and "APP.SECRET" in refused["lines"][0]
    assert not _mqsc(service, app, "RESET QSTATS(APP.I*)")["failed"]


def test_setmqaut_refused_at_the_connection_is_mqs_not_authorized_exit_71(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A caller without CONNECT (or with a refused credential) got exit 1; MQ's setmqaut
    and dspmqaut answer a refusal with AMQ7077 and 71."""
    from miqm.cli import authz as cli
    from miqm.errors import NetError
    from miqm.net import client

    def refused(*_a: Any, **_k: Any) -> Any:
        raise NetError("principal 'app3' lacks the CONNECT authority on qmgr 'QM' (MQRC "
                       "2035 MQRC_NOT_AUTHORIZED)", mqrc=2035, amq="AMQ5534")

    monkeypatch.setattr(client, "connect", refused)
    for run, argv in ((cli.setmqaut, ["-m", "QM", "-t", "qmgr", "-p", "app3", "+connect"]),
                      (cli.dspmqaut, ["-m", "QM", "-t", "qmgr", "-p", "app3"])):
        with pytest.raises(SystemExit) as exit_:
            run(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 71 and err.startswith("AMQ7077") and "CONNECT" in err, err
        assert err.count("\n") == 1


def test_dmpmqaut_dumps_the_records_as_mq_does(served, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """dmpmqaut (MQ's dump of the authority records, for an audit or a backup) was
    missing: an administrator had only DISPLAY AUTHREC."""
    from miqm.cli import authz as cli

    service, _ = served
    _grant(service, "SET AUTHREC OBJTYPE(QMGR) PRINCIPAL('app1') AUTHADD(CONNECT)",
           "SET AUTHREC PROFILE(APP.**) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(GET,PUT)",
           "SET AUTHREC PROFILE(APP.SECRET) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(NONE)")
    sent: list[str] = []

    def call(qmgr: str, text: str) -> tuple[bool, list[str]]:
        sent.append(text)
        reply = _mqsc(service, _session("admin"), text)
        return bool(reply["failed"]), reply["lines"]

    monkeypatch.setattr(cli, "_call", call)
    cli.dmpmqaut(["-m", "QM"])
    assert capsys.readouterr().out == (
        "profile:     self\nobject type: qmgr\nentity:      app1\n"
        "entity type: principal\nauthority:   connect\n"
        "profile:     APP.**\nobject type: queue\nentity:      app1\n"
        "entity type: principal\nauthority:   get put\n"
        "profile:     APP.SECRET\nobject type: queue\nentity:      app1\n"
        "entity type: principal\nauthority:   none\n")
    cli.dmpmqaut(["-m", "QM", "-n", "APP.SECRET", "-t", "queue", "-p", "app1"])
    assert capsys.readouterr().out.count("profile:") == 2  # both profiles apply
    cli.dmpmqaut(["-m", "QM", "-n", "APP.SECRET", "-x", "-l"])
    assert capsys.readouterr().out == "profile:     APP.SECRET, object type: queue\n"
    assert sent[-1] == "DISPLAY AUTHREC PROFILE('APP.SECRET') MATCH(EXACT)"
    for argv, code in ((["-n", "X"], 36), (["-m", "QM", "-t", "channel"], 148),
                       (["-m", "QM", "-x"], 36), (["-m", "QM", "-g", "mqm"], 36)):
        with pytest.raises(SystemExit) as exit_:
            cli.dmpmqaut(argv)
        assert exit_.value.code == code, argv
        assert capsys.readouterr().err.count("\n") == 1


def test_a_flood_of_new_names_reads_the_credentials_file_ten_times_a_second() -> None:
    """Each attempt with a name not tried before read the credentials file (on the shared
    filesystem) again: a thousand a second in a flood. Now at most ten a second."""
    from miqm.net.auth import Authenticator

    reads = [0]
    table = {"admin": "s1"}

    def source() -> dict[str, str]:
        reads[0] += 1
        return dict(table)

    clock = [100.0]
    auth = Authenticator(dict(table), source=source, clock=lambda: clock[0])
    for i in range(1000):
        clock[0] += 0.001
        assert auth.check(f"attacker{i}:x") is None
    assert reads[0] <= 11
    table["app1"] = "s2"  # added during the flood: let in a second later
    clock[0] += 1.0
    assert auth.check("app1:s2") == "app1"
