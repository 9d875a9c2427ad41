"""docs/clients.md's Python example is clients/python/example.py, and it runs as
written against a real batcherd."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_readme_example(batcherd, tmp_path):
    readme = (ROOT / "docs" / "clients.md").read_text()
    m = re.search(r"^```python\n(.*?)^```$", readme, re.S | re.M)
    assert m, "docs/clients.md has no Python example"
    code = m.group(1)
    example = ROOT / "clients" / "python" / "example.py"
    assert code in example.read_text(), "docs/clients.md's Python example differs from clients/python/example.py"
    assert "127.0.0.1:50051" in code
    script = tmp_path / "example.py"
    script.write_text(example.read_text().replace("127.0.0.1:50051", batcherd))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "clients" / "python"))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4 and lines[0], out.stdout
    assert sorted(line.split()[0] for line in lines[1:]) == ["r1", "r2", "r3"]
