"""The service's side of ALTER QMGR CONNAUTH: it switches the listener's credential check
for new connections, and is refused (AMQ1110E) where there are no credentials to check."""

from __future__ import annotations

from typing import Any

from miqm import mqsc
from miqm.net.auth import Authenticator
from miqm.net.service import DEFAULT_CONNAUTH, QueueService


class _Store:
    def __init__(self) -> None:
        self.qmgr: dict[str, Any] = {}

    def list_queues(self, pattern: str = "*") -> list[dict[str, Any]]:
        return []

    def qmgr_attrs(self) -> dict[str, Any]:
        return {"QMNAME": "QM", **self.qmgr}

    def set_qmgr_attrs(self, **attrs: Any) -> None:
        self.qmgr.update(attrs)


class _Listener:
    def __init__(self, principals: dict[str, str] | None) -> None:
        self.authenticator = Authenticator(principals)


def _run(service: QueueService, text: str) -> list[str]:
    return service._execute(mqsc.parse_command(text))


def test_connauth_switches_the_credential_check() -> None:
    service = QueueService(_Store(), "QM")
    listener = _Listener({"admin": "s3cret"})
    service.listener = listener
    assert f"CONNAUTH({DEFAULT_CONNAUTH})" in "\n".join(_run(service, "DIS QMGR CONNAUTH"))
    assert _run(service, "ALTER QMGR CONNAUTH(' ')") == [mqsc.MSG_QMGR_CHANGED]
    assert listener.authenticator.check("admin:wrong") == "admin"  # off: anyone is admin
    assert "CONNAUTH( )" in "\n".join(_run(service, "DIS QMGR"))
    _run(service, f"ALTER QMGR CONNAUTH({DEFAULT_CONNAUTH})")
    assert listener.authenticator.check("admin:wrong") is None
    # a new active instance applies what the queue manager says when it gets its listener
    service.store.qmgr["CONNAUTH"] = ""
    again = QueueService(service.store, "QM")
    again.listener = _Listener({"admin": "s3cret"})
    assert again.listener.authenticator.required is False


def test_connauth_refused_without_credentials() -> None:
    service = QueueService(_Store(), "QM")
    service.listener = _Listener(None)
    lines = _run(service, "ALTER QMGR CONNAUTH(SYSTEM.DEFAULT.AUTHINFO.IDPWOS)")
    assert lines[0].startswith("AMQ1110E:") and "miqm credential -m QM" in lines[0]
    assert "CONNAUTH( )" in "\n".join(_run(service, "DIS QMGR"))
