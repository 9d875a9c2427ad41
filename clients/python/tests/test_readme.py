"""docs/clients.md's Python example is clients/python/example.py, and it runs as
written against a real batcherd whose address it is given."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_readme_example(batcherd):
    readme = (ROOT / "docs" / "clients.md").read_text()
    m = re.search(r"^```python\n(.*?)^```$", readme, re.S | re.M)
    assert m, "docs/clients.md has no Python example"
    code = m.group(1)
    example = ROOT / "clients" / "python" / "example.py"
    assert code in example.read_text(), "docs/clients.md's Python example differs from clients/python/example.py"
    # The address comes from the first argument, ahead of $BATCHER_ADDR.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "clients" / "python"), BATCHER_ADDR="127.0.0.1:1")
    out = subprocess.run([sys.executable, str(example), batcherd], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4 and lines[0], out.stdout
    assert sorted(line.split()[0] for line in lines[1:]) == ["r1", "r2", "r3"]
