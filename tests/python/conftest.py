"""Shared setup for the Python tests.

``yali`` is imported from the environment (pip install, or PYTHONPATH=python); failing that, from
this checkout's python/ directory. libyali is located as ``yali`` does (YALI_LIBRARY, the package,
build/src); tests that need it skip without it, or fail when YALI_REQUIRE_LIB=1 (CI sets it).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("yali") is None:
    sys.path.insert(0, str(REPO / "python"))


@pytest.fixture(scope="session")
def header_text():
    return (REPO / "include" / "yali" / "yali.h").read_text()
