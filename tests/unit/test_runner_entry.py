"""``python -m operators.runner``: configuration errors end it with status 2 and a message naming
the variable; the runner's modules import without the testbed's heavy dependencies."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import guarded

ROOT = Path(__file__).resolve().parents[2]


def run_module(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPERATOR", "RUN_PREFIX", "PREFETCH")}
    return guarded.run([sys.executable, "-m", "operators.runner"], cwd=ROOT, env={**clean, **env}, cpu_s=120)


def test_a_configuration_error_exits_2_naming_the_variable():
    done = run_module({"OPERATOR": "O3", "RUN_PREFIX": "r", "PREFETCH": "many"})
    assert done.returncode == 2
    assert "PREFETCH: expected an integer, got 'many'" in done.stderr


def test_an_unloadable_factory_exits_2():
    done = run_module({"OPERATOR": "O3", "RUN_PREFIX": "r", "OPERATOR_FACTORY": "no.such.module:make"})
    assert done.returncode == 2 and "OPERATOR_FACTORY: cannot load" in done.stderr


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'testbed', 'data_provider', 'pandas', 'hydra', 'omegaconf', 'pyspark', 'numpy'}:
            raise ImportError('blocked in the slim image: ' + name)
sys.meta_path.insert(0, Block())
import operators.runner, operators.sources, operators.metrics, operators.transports, operators.runner_config
print('ok')
"""


def test_runner_imports_without_testbed_pandas_or_hydra():
    done = guarded.run([sys.executable, "-c", BLOCK], cwd=ROOT, cpu_s=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
