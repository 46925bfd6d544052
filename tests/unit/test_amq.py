"""The one table of messages (miqm/amq.py): every number used is defined once, texts name
this product where MQ names itself, errors take their exit codes from it, and
docs/messages.md is the table as generated."""

from __future__ import annotations

import ast
import os
import re

import pytest

from miqm import amq
from miqm.errors import ConfigError, MiqmError, QMgrNotFound, StoreError, UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUMBER = re.compile(r"\bAMQ(\d{4})")
SOURCES = ("miqm", "lockfs", "fsck")


def _py_files() -> list[str]:
    out = []
    for top in SOURCES:
        for base, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
            out += [os.path.join(base, f) for f in files if f.endswith(".py")]
    return out


def test_every_number_is_defined_once_in_the_table() -> None:
    path = os.path.join(ROOT, "miqm", "amq.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    keys: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MESSAGES":
            assert isinstance(node.value, ast.Dict)
            keys = [k.value for k in node.value.keys]  # type: ignore[union-attr]
    assert keys, "MESSAGES not found in miqm/amq.py"
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    assert not dupes, f"defined more than once: {dupes}"
    assert all(re.fullmatch(r"AMQ\d{4}", k) for k in keys)


def test_every_number_used_in_the_code_is_in_the_table() -> None:
    missing: dict[str, list[str]] = {}
    for path in _py_files():
        if path.endswith(os.path.join("miqm", "amq.py")):
            continue
        for n in NUMBER.findall(open(path, encoding="utf-8").read()):
            if f"AMQ{n}" not in amq.MESSAGES:
                missing.setdefault(f"AMQ{n}", []).append(os.path.relpath(path, ROOT))
    assert not missing, f"AMQ numbers used but not in miqm/amq.py MESSAGES: {missing}"


def test_texts_name_this_product_and_its_version() -> None:
    for number in amq.MESSAGES:
        text = amq.message(number).text
        assert "IBM" not in text and "WebSphere" not in text, number
        assert not re.search(r"\bV?9\.\d\.\d", text), number
        assert amq.message(number).severity in "IWES", number
    # where MQ's own text names MQ, ours names miqm
    for number in ("AMQ8001", "AMQ8002", "AMQ8003", "AMQ8004", "AMQ8005", "AMQ8006",
                   "AMQ8007", "AMQ8008", "AMQ8101", "AMQ8110", "AMQ8143", "AMQ8146",
                   "AMQ8147", "AMQ8148", "AMQ8150", "AMQ8415", "AMQ7279", "AMQ7280",
                   "AMQ6119", "AMQ6184"):
        assert amq.text(number).startswith(amq.PRODUCT) or f" {amq.PRODUCT} " in \
            amq.text(number), number
    started = amq.text("AMQ8003", qmgr="QM1")
    assert started == f"miqm queue manager 'QM1' started using V{amq.VERSION}."
    assert amq.VERSION and amq.VERSION[0].isdigit()


def test_no_source_claims_to_be_ibm_mq() -> None:
    claims = re.compile(r"IBM MQ (queue|object|error|configuration|Queue Manager)|V9\.\d\.\d")
    bad = [os.path.relpath(p, ROOT) for p in _py_files()
           if claims.search(open(p, encoding="utf-8").read())]
    assert not bad, f"these still name IBM MQ as the product: {bad}"


def test_old_style_entries_and_unknown_numbers_still_work(monkeypatch) -> None:
    monkeypatch.setitem(amq.MESSAGES, "AMQ1999", "plain {what} entry")
    assert amq.text("AMQ1999", what="string") == "plain string entry"
    assert amq.exit_code("AMQ1999") == 0 and amq.severity("AMQ1999") == "I"
    assert amq.text("AMQ0000", detail="only the detail") == "only the detail"
    assert amq.text("AMQ7048") == "The queue manager name '?' is either not valid or not known."
    assert amq.line("AMQ8006", severity=True) == "AMQ8006I: miqm queue created."
    assert amq.line("AMQ8146", qmgr="QM1") == "AMQ8146: miqm queue manager 'QM1' not available."


@pytest.mark.parametrize("err, code", [
    (QMgrNotFound("x"), 72),                      # AMQ7048 from the table
    (UsageError("bad name", amq="AMQ7048"), 72),  # an invalid name: 72 as MQ
    (UsageError("bad flag"), 2),                  # no number: the subsystem's default
    (ConfigError("bad ini"), 71),                 # AMQ7880
    (StoreError("gone", amq="AMQ8147"), 10),
    (MiqmError("exists", amq="AMQ8110"), 8),
    (MiqmError("explicit", amq="AMQ8110", exit_code=3), 3),
])
def test_errors_take_their_exit_code_from_the_table(err: MiqmError, code: int) -> None:
    assert err.exit_code == code


def test_the_same_situation_exits_the_same_way() -> None:
    # endmqm and endmqm -x on a stopped queue manager both end on AMQ8146
    assert amq.exit_code("AMQ8146") == 40
    assert amq.exit_code("AMQ7048") == 72


def test_docs_messages_md_is_the_table() -> None:
    path = os.path.join(ROOT, "docs", "messages.md")
    assert open(path, encoding="utf-8").read() == amq.markdown(), (
        "docs/messages.md is out of date: python -m miqm.amq > docs/messages.md")
    for number in amq.MESSAGES:
        assert f"| {number} |" in amq.markdown()


def test_fields_names_what_a_message_needs_filled() -> None:
    """A fatal stop fills only qmgr and detail: a message with other fields (AMQ6767's
    file) read 'Log file ? could not be opened' in the error log; the controller now
    writes its detail alone for those."""
    from miqm import amq

    assert amq.fields("AMQ6767") == {"file", "detail"}
    assert amq.fields("AMQ7017") == {"qmgr", "detail"}
    assert "?" in amq.text("AMQ6767", detail="x")  # what the controller no longer writes
