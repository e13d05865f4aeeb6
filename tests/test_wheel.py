"""The wheel is what users install: it must hold every file the packages read, and the
commands that read them must work from it (not only from the source tree)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(out), str(REPO)], check=True, capture_output=True)
    (found,) = out.glob("*.whl")
    return found


def test_wheel_holds_every_package_file(wheel: Path):
    tracked = subprocess.run(["git", "ls-files", "lmchallenge", "lmc_dist"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in tracked if f not in names]
    assert missing == []


def test_html_pages_from_the_installed_wheel(wheel: Path, tmp_path: Path):
    """``lmc pretty -o html`` reads its page assets from the installed package."""
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    deps = sysconfig.get_paths()["purelib"]
    code = ("import sys; sys.path[:0] = [sys.argv.pop(1)]; sys.path.append(sys.argv.pop(1)); "
            "import lmchallenge; assert lmchallenge.__file__.startswith(sys.path[0]), "
            "lmchallenge.__file__; from lmchallenge.cli import main; main()")
    log = REPO / "tests" / "data" / "pretty" / "kjv.o2.wc.jsonl"
    result = subprocess.run([sys.executable, "-c", code, str(target), deps, "pretty", "-o",
                             "html", str(log)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("<!DOCTYPE html>") and "</html>" in result.stdout
