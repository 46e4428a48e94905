"""The runs folder an experiment writes into: checked before any work, locked while the experiment
runs, and kept to one set of settings per workload folder, so that a summary never averages runs of
different settings and two experiments never write into one folder at once."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence

from testbed.backend_registry import backends
from testbed.config import ConfigError, ExperimentConfig, to_plain
from testbed.eventlog import EventLogError, find_runs, read_manifest

LOCK_FILE = ".testbed.lock"
# Keys that say which configurations and repetitions run, not how: runs differing only in them may
# share a folder (e.g. reps=1 then reps=3, a multirun over billing.btu_minutes with policy=btu, or a
# live run beside the same scenario simulated).
NOT_SETTINGS = ("out", "workers", "summary", "mix", "reps", "policy")


def settings_digest(cfg: ExperimentConfig) -> str:
    plain: Dict[str, Any] = to_plain(cfg)
    for key in NOT_SETTINGS:
        plain.pop(key, None)
    plain["evaluation"].pop("only", None)
    plain["evaluation"].pop("fidelity", None)  # how a profile is calibrated, not how a run runs
    plain["evaluation"]["claims"] = []  # what the report checks, not how a run runs
    plain["billing"].pop("btu_minutes", None)
    # a run of a backend that declares itself a twin sits beside its simulated twin by design (its
    # configurations are named with the backend's suffix): its settings and emission are not settings
    plain["backend"].pop("name", None)
    for twin in (b for b in backends().values() if b.twin):
        plain["backend"].pop(twin.key, None)
        for op in plain["topology"]["operators"].values():
            op.get("emission", {}).pop(twin.emission, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:16]


def prepare(out: str) -> Path:
    """Create `out` if needed and check it is a writable folder; ConfigError naming `out` otherwise."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError("out", f"{out} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("out", f"cannot create {out}: {exc.strerror}") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError("out", f"{out} is not writable")
    return path


def check_run_dirs(out: Path, run_dirs: Sequence[Path]) -> None:
    """Every run's folder below `out` can be made: no file of the user's stands where one of its
    folders goes (e.g. OUT/stepwise); ConfigError naming `out` and the file, which is left alone."""
    for run_dir in run_dirs:
        for folder in [run_dir, *run_dir.parents]:
            if folder == out or out not in folder.parents:
                break
            if folder.exists() and not folder.is_dir():
                raise ConfigError("out", f"{folder} is a file where the folder of run {run_dir.relative_to(out)} "
                                         f"goes: move it, or choose another out")


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold the folder's lock for the experiment; a second experiment into it fails at once."""
    fd = os.open(out / LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError("out", f"another experiment is writing into {out} (it holds {out / LOCK_FILE})") from None
        yield
    finally:
        os.close(fd)  # releases the lock


def check_settings(workload_dir: Path, digest: str, mix: bool) -> None:
    """Refuse to add runs to a workload folder that holds runs of other settings, unless `mix`."""
    if mix or not workload_dir.is_dir():
        return
    for run in find_runs(workload_dir):
        other = _digest_of(run)
        if other != digest:
            raise ConfigError("out",
                              f"{workload_dir} holds runs of other settings (e.g. {run.relative_to(workload_dir)}"
                                     f"{'' if other else ', written before settings were recorded'}): use another "
                                     f"out, remove them, or pass mix=true to put these runs beside them")


def _digest_of(run: Path) -> Optional[str]:
    try:
        return read_manifest(run).settings_digest or None
    except EventLogError:
        return None
