"""The nfs4 lease anchor's cost: ``python -m miqm.bench.anchor_cost nfs4://... [N]``.

4 KiB pwrite + fdatasync through one unlocked file of the volume, N per round, with the
volume's ``lease_anchor`` set to a locked ``master`` file and without it, in 6
interleaved rounds; prints the medians (ms per write + sync) and their ratio as JSON.
Run it in a lab namespace (``ip netns exec miqm-a``) on a directory of the export.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from lockfs import LockMode, open_volume


def measure(url: str, n: int = 300) -> dict[str, object]:
    """Median ms per 4 KiB write + sync with and without the lease anchor."""
    vol = open_volume(url)
    master = vol.open("master", create=True)
    if not master.try_lock(LockMode.EXCLUSIVE):
        raise SystemExit("master is locked by someone else")
    data = vol.open("data", create=True)
    page = b"x" * 4096
    rounds: dict[str, list[float]] = {"anchor": [], "none": []}
    try:
        for rnd in range(6):
            for mode in ("none", "anchor") if rnd % 2 else ("anchor", "none"):
                vol.lease_anchor = master if mode == "anchor" else None
                t0 = time.perf_counter()
                for i in range(n):
                    data.pwrite(page, (i % 64) * 4096)
                    data.fdatasync()
                rounds[mode].append((time.perf_counter() - t0) / n * 1e3)
    finally:
        vol.lease_anchor = None
        data.close()
        master.close()
        vol.close()
    med = {k: round(statistics.median(v), 3) for k, v in rounds.items()}
    return {"ms_per_write_and_sync": med, "ratio": round(med["anchor"] / med["none"], 2)}


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300)))
