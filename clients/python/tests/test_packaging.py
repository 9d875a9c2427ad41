"""The client installs as a package: pyproject.toml ships the generated code."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_wheel_ships_generated_code(tmp_path):
    # Build from a copy so that setuptools' build/ stays out of the checkout.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", "tests"))
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w", str(out)],
        check=True,
    )
    (wheel,) = out.glob("batcher_client-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in (
        "batcher_client/__init__.py",
        "batcher_client/py.typed",
        "batcher_client/_gen/batcher/v1/batcher_pb2.py",
        "batcher_client/_gen/batcher/v1/batcher_pb2.pyi",
        "batcher_client/_gen/batcher/v1/batcher_pb2_grpc.py",
    ):
        assert want in names, f"{want} missing from {wheel.name}"

    # Installed alone (not from the checkout), it imports and builds a request.
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
    )
    code = "import batcher_client as bc; r = bc.embed('m', 'x'); print(type(r).__name__)"
    got = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(site)},
                         check=True, capture_output=True, text=True)
    assert got.stdout.strip(), got.stderr
