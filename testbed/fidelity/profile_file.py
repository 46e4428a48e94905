"""Where a profile command (`calibrate`, `live-profile`, `engine-profile`) writes, checked before it
measures or searches anything: the path must be a file that can be created; an existing file is
replaced only with force=true; a profile shipped with the project (tracked by git in its checkout,
e.g. experiments/conf/profile/paper.yaml) is never replaced, force or not, since the evaluations and
their published comparisons are built on it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from testbed.arguments import ConfigError, as_bool
from testbed.config import CONF_DIR
from testbed.eventlog import PROJECT_DIR, git_output

PROFILE_DIR = CONF_DIR / "profile"


def shipped(path: Path) -> bool:
    """A file the project ships: tracked by git in the project's checkout. Without git (an unpacked
    copy) every existing profile of the project's own profile folder counts as shipped, since which
    of them a user wrote cannot be told."""
    resolved = path.resolve()
    if not resolved.is_relative_to(PROJECT_DIR):
        return False
    listed = git_output(["ls-files", "--", str(resolved)], PROJECT_DIR)
    if listed is None:
        return resolved.parent == PROFILE_DIR.resolve() and resolved.is_file()
    return bool(listed.strip())


def _nearest_existing(path: Path) -> Path:
    for parent in path.parents:
        if parent.exists():
            return parent
    return Path(path.anchor or ".")


@dataclass(frozen=True)
class ProfileTarget:
    """A file a profile command writes, and the argument that chose it (named in errors)."""

    path: Path
    key: str  # out, name: the argument to change
    force: bool = False  # replace an existing file that is not shipped

    def problem(self) -> Optional[str]:
        """Why the file cannot be written, None if it can."""
        path = self.path
        if path.is_dir():
            return f"{path} is a folder: give a file name (e.g. {path / 'NAME.yaml'})"
        base = _nearest_existing(path)
        if not base.is_dir():
            return f"{base} is a file, so {path} cannot be created below it"
        if not os.access(base, os.W_OK | os.X_OK):
            return f"{base} is not writable"
        other = "name" if self.key == "name" else "file"
        if path.exists() and shipped(path):
            return f"{path} is shipped with the project and never replaced: choose another {other}"
        if path.exists() and not self.force:
            return f"{path} exists: choose another {other}, or pass force=true to replace it"
        return None

    def check(self) -> "ProfileTarget":
        """This target; ConfigError naming the key when it cannot be written."""
        problem = self.problem()
        if problem is not None:
            raise ConfigError(self.key, problem)
        return self

    def write(self, text: str) -> Path:
        """Write the file, checked again: a long search may end after someone else wrote it."""
        self.check()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text, encoding="utf-8")
        return self.path


def force_argument(kv: Mapping[str, str]) -> bool:
    """The `force=` argument (default false); ConfigError naming it when it is no boolean."""
    try:
        return as_bool(kv.get("force", "false"))
    except ValueError as exc:
        raise ConfigError("force", str(exc)) from None


def target_argument(kv: Mapping[str, str]) -> ProfileTarget:
    """The checked file of `out=FILE`, else `name=NAME` in the project's profile folder."""
    force = force_argument(kv)
    if "out" in kv:
        return ProfileTarget(Path(kv["out"]), "out", force).check()
    return ProfileTarget(PROFILE_DIR / f"{kv['name']}.yaml", "name", force).check()
