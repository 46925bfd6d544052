"""The sample programs' pure parts: amqsbcg's hex dump, in MQ's layout."""

from __future__ import annotations

from miqm.cli.samples import hex_dump


def test_hex_dump_has_mqs_layout() -> None:
    assert hex_dump(b"") == []
    assert hex_dump(b"ABCDEFGHIJKLMNOPQR\n\x00\xff") == [
        "00000000:  4142 4344 4546 4748 494A 4B4C 4D4E 4F50 'ABCDEFGHIJKLMNOP'",
        "00000010:  5152 0A00 FF                            'QR...           '",
    ]
    assert hex_dump(b"x" * 33)[2].startswith("00000020:  78 ")
