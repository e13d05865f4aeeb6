"""Shared test fixtures: paths of the real corpora, the toy model, the reference install.

``LMC_REPO`` names the source tree when the tests run from a copy of ``tests/`` against an
installed wheel (``.ci/run``): the source tree is then not importable, and the tests find the
repository's files (README, data, pyproject.toml) through it."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("LMC_REPO") or Path(__file__).resolve().parents[1])
SHARED_DATA = REPO.parent / "shared" / "data"
DATA = SHARED_DATA if SHARED_DATA.is_dir() else REPO / "data"
TOY_MODEL = Path(__file__).resolve().parent / "models" / "toy_model.py"
REFERENCE_VENV = Path(os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref"))
REFERENCE_LMC = REFERENCE_VENV / "bin" / "lmc"
PYTHON = sys.executable
BIN = Path(sys.executable).parent


def toy_model_command(*args: str) -> str:
    """The shell command of the toy protocol model (tests/models/toy_model.py)."""
    return " ".join([PYTHON, str(TOY_MODEL), *args])


def free_port() -> int:
    """A loopback TCP port nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment_of(record: Path) -> dict[str, str]:
    """The variables in a file ``env`` wrote (a model's environment: ``sh -c 'env > FILE;
    exec MODEL'``)."""
    return dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)


def lmc_command() -> list[str]:
    """argv prefix of our ``lmc`` (the console script of this venv)."""
    return [str(BIN / "lmc")]


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def reference_lmc() -> Path:
    if not REFERENCE_LMC.exists():
        pytest.skip(f"reference lmchallenge==5.2 not installed at {REFERENCE_VENV} "
                    "(.ci/run installs it; set LMC_REFERENCE_VENV)")
    return REFERENCE_LMC
