"""dspmq and the other commands never import pyspark, matplotlib or pandas: only
``miqm analyze`` does, inside the command."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pyspark", "matplotlib", "pandas", "pyarrow")
CHECK = f"""
import sys
{{body}}
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})
print('HEAVY:' + ','.join(heavy))
"""


def _imported(body: str) -> str:
    out = subprocess.run([sys.executable, "-c", CHECK.format(body=body)], text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1].removeprefix("HEAVY:")


@pytest.mark.parametrize("module", [
    "miqm.cli.dspmq", "miqm.cli.strmqm", "miqm.cli.endmqm", "miqm.cli.crtmqm",
    "miqm.cli.umbrella", "miqm.ha.controller", "miqm.analysis", "miqm.analysis.generate"])
def test_module_import_pulls_in_no_heavy_package(module: str) -> None:
    assert _imported(f"import {module}") == ""


def test_dspmq_and_miqm_help_run_without_heavy_imports(tmp_path) -> None:
    # running the commands (not just importing them): dspmq with no queue managers, and the
    # umbrella's help for analyze (in the test's own directory: a mkdtemp here was left
    # behind in /tmp by every run)
    body = (f"import os\nos.environ['MIQM_DATA_ROOT'] = {str(tmp_path)!r}\n"
            "from miqm.cli import dspmq, umbrella\n"
            "for m, argv in ((dspmq, ['dspmq']), (umbrella, ['miqm', 'analyze', '--help'])):\n"
            "    sys.argv = argv\n"
            "    try:\n        m.main()\n    except SystemExit:\n        pass\n")
    assert _imported(body) == ""
