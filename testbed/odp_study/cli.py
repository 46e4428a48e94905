"""`testbed odp study [key=value...]`: the solver's scalability study over a grid of random instances."""
from __future__ import annotations

import sys
from typing import List

from testbed.arguments import UsageError, parse_pairs


def main(argv: List[str]) -> int:
    from testbed.odp_study.study import STUDY_KEYS, run_study_command

    try:
        opts = parse_pairs(argv, STUDY_KEYS)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_study_command(opts)
