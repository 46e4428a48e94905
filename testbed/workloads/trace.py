"""Kind `trace`: replay a user's own file, CSV or Parquet (docs/workloads.md#trace).

One column holds the times (`pattern.time_column`, default the first; unit `pattern.time_unit`: s, ms,
min, h, or timestamp for dates and times), one the values (`pattern.column`, default the only other
column). A CSV file's fields are separated by a comma, semicolon, tab or pipe (`second|adCount`, as
the Daedalus authors' traces): found in its first lines, or given as `pattern.delimiter`. Times are
taken relative to the first row and must increase; values must be numbers >= 0. `pattern.value` says
what a value is:

* ``machines``: a load level, the number of active machines (data sources) in operator mode;
* ``rate``: items per second; operator mode runs ``rate / rate_per_machine`` machines (one machine of
  the PRESPS chain's source emits 1 item/s, one of the OEE topology 16 items per 480 ms, 33.3/s).

Either way `pattern.scale` multiplies the values first, machine counts are rounded to whole machines,
and job mode replays the scaled values of each second as its rates (it scales their peak to its
workers' capacity, so there only the shape counts). Between samples a value is held until the next
(`hold=step`) or interpolated (`hold=linear`). The trace covers its last time plus one sample
interval; after that its last value is held (`end=hold`) or it starts again (`end=loop`). A trace
longer than the run is cut at the run's end.

Every problem of the file is found when the settings are checked, before anything runs, and named
in one line (ValueError "<key>: <problem>", the key below `pattern.`).
"""
from __future__ import annotations

import csv
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import pandas as pd

from testbed.workloads.registry import Pattern, PatternConfig, register_workload

TIME_UNITS = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "timestamp": 1.0}
VALUES = ("machines", "rate")
HOLDS = ("step", "linear")
ENDS = ("hold", "loop")
CSV_SUFFIXES = (".csv",)
# pattern.delimiter: a character or its name (`;` and `|` need quoting on a command line); "" detects
DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|", ",": ",", ";": ";", "\t": "\t", "|": "|"}
SNIFF_BYTES = 64 * 1024
PARQUET_SUFFIXES = (".parquet", ".pq")
RATES_HORIZON_S = 7 * 24 * 3600  # job-mode rates cover at most a week, the longest run the testbed allows


@dataclass(frozen=True)
class TraceData:
    """A parsed trace: times in seconds from its first row (strictly increasing) and values >= 0."""

    times_s: np.ndarray
    values: np.ndarray
    sha256: str  # of the file's bytes

    @property
    def period_s(self) -> float:
        """What the trace covers: its last time plus its last sample interval (1 s for one row)."""
        last = float(self.times_s[-1] - self.times_s[-2]) if len(self.times_s) > 1 else 1.0
        return float(self.times_s[-1]) + last


def _delimiter(path: Path, given: str) -> str:
    """The CSV's field separator: the one given, else the one of comma, semicolon, tab and pipe that
    the file's first lines agree on (csv.Sniffer restricted to those four: unrestricted it picks a
    letter of a header like `second|adCount`); a comma when none does (a file of one column)."""
    if given:
        return DELIMITERS[given]
    with path.open(encoding="utf-8", newline="") as f:
        sample = f.read(SNIFF_BYTES)
    lines = sample.splitlines()
    if len(sample) == SNIFF_BYTES and len(lines) > 1:
        sample = "\n".join(lines[:-1])  # the last line may be cut
    try:
        return csv.Sniffer().sniff(sample, delimiters="".join(sorted(set(DELIMITERS.values())))).delimiter
    except csv.Error:
        return ","


def _read_table(path: Path, delimiter: str = "") -> pd.DataFrame:
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        try:
            import pyarrow  # noqa: F401  (pandas reads Parquet through it)
        except ImportError:
            raise ValueError("path: reading Parquet needs the package pyarrow (pip install pyarrow), "
                             "or give a CSV file") from None
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
            raise ValueError(f"path: '{path}' is not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if suffix not in CSV_SUFFIXES:
        raise ValueError(f"path: unsupported file type {suffix or '(none)'!r} of '{path}' "
                         f"(CSV: {', '.join(CSV_SUFFIXES)}; Parquet: {', '.join(PARQUET_SUFFIXES)})")
    try:
        return pd.read_csv(path, sep=_delimiter(path, delimiter), dtype=str, keep_default_na=False,
                           skipinitialspace=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"path: '{path}' is not a readable CSV file ({str(exc).splitlines()[0]})") from None


def _columns(table: pd.DataFrame, time_column: str, column: str) -> Tuple[str, str]:
    names = [str(c) for c in table.columns]
    listed = ", ".join(names)
    time_col = time_column or (names[0] if names else "")
    if time_col not in names:
        raise ValueError(f"time_column: column {time_col!r} not found (columns: {listed})")
    if column:
        if column not in names:
            raise ValueError(f"column: column {column!r} not found (columns: {listed})")
        return time_col, column
    others = [n for n in names if n != time_col]
    if len(others) != 1:
        what = "no value column" if not others else f"several value columns ({', '.join(others)})"
        raise ValueError(f"column: the trace has {what}: name the value column with pattern.column")
    return time_col, others[0]


def _numbers(raw: pd.Series, name: str) -> np.ndarray:
    """The column as floats; ValueError naming the first row (1 = the first data row) that is not a number."""
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        row = int(bad[0])
        raise ValueError(f"path: row {row + 1}: {name} {str(raw.iloc[row])!r} is not a number")
    return values


def _times(raw: pd.Series, name: str, unit: str) -> np.ndarray:
    if unit != "timestamp":
        if pd.api.types.is_datetime64_any_dtype(raw):
            raise ValueError(f"time_unit: column {name!r} holds timestamps: set pattern.time_unit=timestamp")
        return _numbers(raw, name) * TIME_UNITS[unit]
    stamps = pd.to_datetime(raw, errors="coerce", utc=True)
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if len(bad):
        row = int(bad[0])
        raise ValueError(f"path: row {row + 1}: {name} {str(raw.iloc[row])!r} is not a timestamp")
    return (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy(dtype=float)


def _check(times: np.ndarray, values: np.ndarray, value_name: str) -> None:
    steps = np.flatnonzero(np.diff(times) <= 0)
    if len(steps):
        row = int(steps[0]) + 1  # the first row whose time is not after the one before
        raise ValueError(f"path: row {row + 1}: times must increase, but {times[row]:g} s follows {times[row - 1]:g} s")
    negative = np.flatnonzero(values < 0)
    if len(negative):
        row = int(negative[0])
        raise ValueError(f"path: row {row + 1}: negative {value_name} {values[row]:g}")


@functools.lru_cache(maxsize=16)
def _load(path: str, stamp: Tuple[int, int], time_column: str, column: str, time_unit: str,
          delimiter: str) -> TraceData:
    file = Path(path)
    table = _read_table(file, delimiter)
    if len(table) == 0:
        raise ValueError(f"path: '{path}' has no rows (a header line, then one row per sample)")
    time_col, value_col = _columns(table, time_column, column)
    times = _times(table[time_col], time_col, time_unit)
    values = _numbers(table[value_col], value_col)
    _check(times, values, value_col)
    return TraceData(times - times[0], values, hashlib.sha256(file.read_bytes()).hexdigest())


def load_trace(path: str, time_column: str = "", column: str = "", time_unit: str = "s",
               delimiter: str = "") -> TraceData:
    """The parsed trace (cached per file state and settings); ValueError "<key>: <problem>"."""
    if not path:
        raise ValueError("path: a trace needs a file: pattern.path=<CSV or Parquet file>")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"path: no such file '{path}'")
    st = file.stat()
    return _load(str(file.resolve()), (st.st_mtime_ns, st.st_size), time_column, column, time_unit, delimiter)


@dataclass(frozen=True)
class TracePattern(Pattern):
    """A trace as a pattern: `values(t)` the scaled value at each time, `series` whole machines,
    `rates` the values of each second (job mode)."""

    name: str
    times_s: np.ndarray = field(repr=False, compare=False)
    samples: np.ndarray = field(repr=False, compare=False)  # scaled values
    period_s: float
    linear: bool
    loop: bool
    per_machine: float  # the value one machine stands for (1 for machines)
    sha256: str
    step_s: float = 1.0

    def values(self, times_s: np.ndarray) -> np.ndarray:
        t = np.maximum(np.asarray(times_s, dtype=float), 0.0)
        if self.loop:
            t = np.mod(t, self.period_s)
        if self.linear:
            return np.interp(t, self.times_s, self.samples)
        idx = np.searchsorted(self.times_s, t, side="right") - 1
        return self.samples[np.clip(idx, 0, len(self.samples) - 1)]

    def series(self, times_s: np.ndarray) -> np.ndarray:
        return np.rint(self.values(times_s) / self.per_machine).astype(np.int64)

    @functools.cached_property
    def rates(self) -> np.ndarray:
        """Items/s of each second from 0: the trace's length (job mode holds the last), a week if it loops
        (or is longer)."""
        length = max(1, int(np.ceil(self.period_s)))
        seconds = RATES_HORIZON_S if self.loop else min(length, RATES_HORIZON_S)
        return self.values(np.arange(seconds, dtype=float))


@register_workload("trace")
@dataclass
class Trace(PatternConfig):
    """A user's CSV or Parquet file (see the module's docstring for each key)."""

    kind: str = "trace"
    path: str = ""
    time_column: str = ""  # "" = the first column
    time_unit: str = "s"  # s | ms | min | h | timestamp
    column: str = ""  # the values; "" = the only column besides the time column
    delimiter: str = ""  # of a CSV: "" = found in the file (comma, semicolon, tab or pipe), or one of them
    value: str = "machines"  # machines | rate (items/s)
    scale: float = 1.0
    rate_per_machine: float = 1.0  # value=rate in operator mode: items/s one machine emits
    hold: str = "step"  # step | linear
    end: str = "hold"  # hold | loop

    gives_rates = True

    def validate(self) -> None:
        for key, allowed in (("time_unit", tuple(TIME_UNITS)), ("value", VALUES), ("hold", HOLDS), ("end", ENDS)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key}: {getattr(self, key)!r} is none of {', '.join(allowed)}")
        for key in ("scale", "rate_per_machine"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        if self.delimiter and self.delimiter not in DELIMITERS:
            raise ValueError(f"delimiter: {self.delimiter!r} is none of comma, semicolon, tab, pipe "
                             f"(or , ; |), or empty to find it in the file")
        self.data()

    def data(self) -> TraceData:
        return load_trace(self.path, self.time_column, self.column, self.time_unit, self.delimiter)

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        data = self.data()
        per_machine = self.rate_per_machine if self.value == "rate" else 1.0
        return TracePattern(self.name, data.times_s, data.values * self.scale, data.period_s,
                            self.hold == "linear", self.end == "loop", per_machine, data.sha256)

