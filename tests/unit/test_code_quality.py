"""The code checks: ruff (lint and import order) over the repository and mypy over the production
packages, both configured in pyproject.toml, run on the tree this file sits in. The tools come with
the `test` extra; without them the test fails and says so."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests import guarded

ROOT = Path(__file__).resolve().parents[2]


def _run(tool: str, args: List[str]) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed in {sys.prefix}; install the test extra: pip install -e '.[test]'",
                    pytrace=False)
    # PYTHONPATH: this tree's packages, also where an installed copy of the project lives elsewhere
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return guarded.run([sys.executable, "-m", tool, *args], cwd=ROOT, env=env, cpu_s=1800)


def _check(result: subprocess.CompletedProcess, command: str) -> None:
    if result.returncode != 0:
        pytest.fail(f"{command} reported (exit code {result.returncode}):\n{result.stdout}{result.stderr}",
                    pytrace=False)


@pytest.mark.slow
def test_ruff_finds_nothing():
    _check(_run("ruff", ["check", "--no-cache", "."]), "ruff check")


@pytest.mark.slow
def test_mypy_finds_nothing():
    # the packages and settings come from pyproject.toml ([tool.mypy])
    _check(_run("mypy", []), "mypy")
