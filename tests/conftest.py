"""Shared test fixtures: paths of the real corpora, the toy model, the reference install."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DATA = SHARED_DATA if SHARED_DATA.is_dir() else REPO / "data"
TOY_MODEL = REPO / "tests" / "models" / "toy_model.py"
REFERENCE_VENV = Path(os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref"))
REFERENCE_LMC = REFERENCE_VENV / "bin" / "lmc"
PYTHON = sys.executable
BIN = Path(sys.executable).parent


def toy_model_command(*args: str) -> str:
    """The shell command of the toy protocol model (tests/models/toy_model.py)."""
    return " ".join([PYTHON, str(TOY_MODEL), *args])


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
