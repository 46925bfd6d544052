"""``python -m fsck.probe URL NAME MODE``: try one lock once, print ``{"granted": bool}``.

The second process of plain mode's ``second process`` and ``close trap`` tests.
"""

from __future__ import annotations

import json
import sys

from lockfs import LockMode, open_volume
from lockfs.errors import LockFsError


def main(argv: list[str]) -> int:
    """Open the volume, try the lock, report, release (by closing)."""
    url, name, mode = argv
    try:
        vol = open_volume(url)
        try:
            with vol.open(name) as f:
                lm = LockMode.EXCLUSIVE if mode == "exclusive" else LockMode.SHARED
                print(json.dumps({"granted": f.try_lock(lm)}), flush=True)
        finally:
            vol.close()
    except LockFsError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
