"""When ``.ci/run`` runs the suite against the installed wheel (``LMC_REPO`` set, tests copied out
of the source tree), the package under test must be that install, not the source tree."""

from __future__ import annotations

import json
import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from conftest import BIN, PYTHON, REPO


@pytest.mark.skipif(not os.environ.get("LMC_REPO"), reason="not testing an installed wheel (.ci/run)")
def test_the_package_under_test_is_the_installed_wheel():
    import lmc_dist
    import lmchallenge
    for module in (lmchallenge, lmc_dist):
        where = Path(module.__file__).resolve()
        source = REPO.resolve() / module.__name__
        assert where.parent != source, f"{module.__name__} imported from the source tree: {where}"
        assert "site-packages" in where.parts, where
    direct_url = metadata.distribution("lmchallenge-dist").read_text("direct_url.json")
    if direct_url:   # pip records where it installed from: a wheel file, not an editable folder
        assert not json.loads(direct_url).get("dir_info", {}).get("editable", False)


@pytest.mark.parametrize("command", [["lmc"], ["lmc-dist"], ["lmc-ngram"], ["lmc-neural"],
                                     ["-m", "lmchallenge"], ["-m", "lmc_dist"]])
def test_every_command_says_its_version(command):
    # QA: lmc-ngram and lmc-neural had no --version, and python -m lmc_dist no __main__
    argv = [str(PYTHON), *command] if command[0] == "-m" else [str(BIN / command[0])]
    result = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(f", version {metadata.version('lmchallenge-dist')}\n")
