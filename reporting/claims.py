"""A paper's claims as data, checked by one engine.

A claim (an entry of `evaluation.claims` in experiments/conf/evaluation/<name>.yaml, typed by
`ClaimSpec`) names the metrics, the configurations it is about (`configs`), the configuration they
are compared with (`against`) and how they compare (`compare`, one of `KINDS`). It is checked per
pattern on two tables of the same long format, the paper's and the measured one, and gives one row
of claims.csv: holds, does not hold, or not evaluable (a value it needs is missing, listed).

Configurations are named as in paper_comparison.csv's `config` column: `btu-10` for an approach
billed by its own BTU, `threshold` for a re-billed approach's BTU-free values and `threshold@60` for
its values billed under 60-minute BTUs; `{btu}` in `against` is the BTU length of the configuration
it is set against (`threshold@{btu}`). A run on another backend counts as its simulated twin's: the
table's `backend` column says which backend added what to a name (`btu-10-live` on `docker`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, Dict, List, Mapping, NamedTuple, Sequence, Tuple

import pandas as pd

from testbed.claim_spec import EACH, KIND_NAMES, ClaimSpec, validate

HOLDS, FAILS, NOT_EVALUABLE = "holds", "does not hold", "not evaluable"
CLAIM_COLUMNS = ["pattern", "claim", "text", "paper", "paper_detail", "measured", "measured_detail"]
EVALUATIONS = Path(__file__).resolve().parent.parent / "experiments" / "conf" / "evaluation"

Values = Mapping[Tuple[str, str], float]  # (configuration, metric) -> mean of one pattern


class Verdict(NamedTuple):
    status: str  # HOLDS, FAILS or NOT_EVALUABLE
    detail: str


def _num(v: float, spec: ClaimSpec) -> str:
    return f"{v:.{spec.decimals}f}"


def _btu_of(config: str) -> str:
    match = re.search(r"(\d+)$", config)
    return match.group(1) if match else ""


def _against(spec: ClaimSpec, config: str) -> str:
    return spec.against.replace("{btu}", _btu_of(config))


def _label(spec: ClaimSpec, metric: str) -> str:
    return spec.labels.get(metric, metric)


def _missing(names: Sequence[str]) -> Verdict:
    return Verdict(NOT_EVALUABLE, "missing: " + ", ".join(dict.fromkeys(names)))


def _pairs(spec: ClaimSpec) -> List[Tuple[str, str, str]]:
    """(config, against, metric) in the order the claim lists them: metric by metric."""
    return [(c, _against(spec, c), m) for m in spec.metrics for c in spec.configs]


def _one_pair(spec: ClaimSpec, v: Values, better: Callable[[float, float], bool], word: str) -> Verdict:
    (config, against, metric), = _pairs(spec)
    a, b = v.get((config, metric)), v.get((against, metric))
    if a is None or b is None:
        return _missing([f"{n} {metric}" for n, x in ((config, a), (against, b)) if x is None])
    if not better(a, b):
        return Verdict(FAILS, f"{_num(a, spec)} {'>=' if word == 'lower' else '<='} {_num(b, spec)}")
    if _below_floor(spec, a):
        return Verdict(FAILS, f"{_num(a, spec)} below {spec.at_least:g}")
    change = 100.0 * abs(b - a) / b if b else float("nan")
    return Verdict(HOLDS, f"{_num(a, spec)} vs {_num(b, spec)} ({change:.0f} % {word})")


def _below_floor(spec: ClaimSpec, a: float) -> bool:
    return spec.at_least is not None and a < spec.at_least


def _ordered(spec: ClaimSpec, v: Values, better: Callable[[float, float], bool], sign: str) -> Verdict:
    """Every configuration better than `against` on every metric; one pair: its numbers."""
    if len(_pairs(spec)) == 1:
        return _one_pair(spec, v, better, "higher" if sign == "<=" else "lower")
    fails, missing = [], []
    for config, against, metric in _pairs(spec):
        b = v.get((against, metric))
        if b is None:
            missing.append(f"{against} {metric}")
            continue
        a = v.get((config, metric))
        if a is None:
            missing.append(f"{config} {metric}")
        elif not better(a, b):
            fails.append(f"{config} {_label(spec, metric)} {_num(a, spec)} {sign} {_num(b, spec)}")
        elif _below_floor(spec, a):
            fails.append(f"{config} {_label(spec, metric)} {_num(a, spec)} below {spec.at_least:g}")
    if missing:
        return _missing(missing)
    return Verdict(FAILS, "; ".join(fails)) if fails else Verdict(HOLDS, spec.holds)


def greater(spec: ClaimSpec, v: Values) -> Verdict:
    return _ordered(spec, v, lambda a, b: a > b, "<=")


def less(spec: ClaimSpec, v: Values) -> Verdict:
    return _ordered(spec, v, lambda a, b: a < b, ">=")


def not_greater(spec: ClaimSpec, v: Values) -> Verdict:
    """No configuration above `against` (same BTU) on any metric, except the `allow`ed pairs;
    configurations listed config by config, the allowed ones named when they are above."""
    above, missing = [], []
    for config in spec.configs:
        against = _against(spec, config)
        for metric in spec.metrics:
            a, b = v.get((config, metric)), v.get((against, metric))
            if a is None or b is None:
                missing += [f"{n} {metric}" for n, x in ((config, a), (against, b)) if x is None]
            elif a > b:
                above.append((f"{config} {metric}",
                              f"{config} {_label(spec, metric)} {_num(a, spec)} > {_num(b, spec)}"))
    if missing:
        return _missing(missing)
    listed = "; ".join(text for _, text in above)
    if any(key not in spec.allow for key, _ in above):
        return Verdict(FAILS, "above the baseline: " + listed)
    return Verdict(HOLDS, ("above the baseline only: " + listed) if above else "never above the baseline")


def monotone_increasing(spec: ClaimSpec, v: Values) -> Verdict:
    """Per metric, the configurations in their listed order never fall and the last exceeds the first."""
    fails, missing = [], []
    for metric in spec.metrics:
        values = [v.get((c, metric)) for c in spec.configs]
        if any(x is None for x in values):
            missing.append(metric)
            continue
        seq = [float(x) for x in values if x is not None]
        if not (all(a <= b for a, b in zip(seq[:-1], seq[1:], strict=True)) and seq[0] < seq[-1]):
            fails.append(f"{_label(spec, metric)} " + ", ".join(_num(x, spec) for x in seq))
    if missing:
        return _missing(missing)
    return Verdict(FAILS, "; ".join(fails)) if fails else Verdict(HOLDS, spec.holds)


def _ratio_like(spec: ClaimSpec, v: Values, ok: Callable[[float, float], bool],
                what: Callable[[float, float], str]) -> Verdict:
    results, missing, good = [], [], True
    for config, against, metric in _pairs(spec):
        a, b = v.get((config, metric)), v.get((against, metric))
        if a is None or b is None:
            missing += [f"{n} {metric}" for n, x in ((config, a), (against, b)) if x is None]
            continue
        good &= ok(a, b)
        results.append(f"{config} {_label(spec, metric)} {_num(a, spec)} vs {_num(b, spec)} ({what(a, b)})")
    if missing:
        return _missing(missing)
    return Verdict(HOLDS if good else FAILS, "; ".join(results))


def ratio_at_most(spec: ClaimSpec, v: Values) -> Verdict:
    """Every configuration's value at most `bound` times `against`'s."""
    return _ratio_like(spec, v, lambda a, b: b != 0 and a / b <= spec.bound,
                       lambda a, b: f"ratio {a / b:.2f}" if b else "ratio n/a")


def within(spec: ClaimSpec, v: Values) -> Verdict:
    """Every configuration's value within `bound` of `against`'s."""
    return _ratio_like(spec, v, lambda a, b: abs(a - b) <= spec.bound, lambda a, b: f"difference {a - b:+.2f}")


Check = Callable[[ClaimSpec, Values], Verdict]
KINDS: Dict[str, Check] = {"greater": greater, "less": less, "not_greater": not_greater,
                           "monotone_increasing": monotone_increasing, "ratio_at_most": ratio_at_most,
                           "within": within}
assert tuple(KINDS) == KIND_NAMES, "every comparison a claim spec may name has one check"


def values(table: pd.DataFrame, pattern: str) -> Dict[Tuple[str, str], float]:
    """(configuration, metric) -> mean of one pattern's rows of a long table (measured or the paper's)."""
    from reporting.metrics import ran_configurations
    from reporting.paper_comparison import config_labels

    rows = table[table["pattern"] == pattern]
    if rows.empty:
        return {}
    if "config" in rows.columns:
        rows = rows.assign(config=ran_configurations(rows))
    labels = config_labels(rows)
    return {(c, str(m)): float(x) for c, m, x in zip(labels, rows["metric"], rows["mean"], strict=True)
            if not pd.isna(x)}


def judge(spec: ClaimSpec, v: Values) -> Verdict:
    """The claim's verdict on one pattern's values; where a value it needs is missing, on its
    `fallback` metrics if they have every value (the detail then ends with `fallback_note`)."""
    verdict = KINDS[spec.compare](spec, v)
    if verdict.status != NOT_EVALUABLE or not spec.fallback:
        return verdict
    alternative = KINDS[spec.compare](replace(spec, metrics=[spec.fallback.get(m, m) for m in spec.metrics]), v)
    if alternative.status == NOT_EVALUABLE:
        return verdict
    return Verdict(alternative.status, f"{alternative.detail} {spec.fallback_note}".rstrip())


def members(spec: ClaimSpec, measured: Collection[str]) -> List[str]:
    """The members of the claim's family (`each`) among the measured configurations: the family
    itself first, then its variants <family>-<name> by name. None measured: the family itself
    if another configuration the claim names was measured, else none (the pattern is not the claim's)."""
    family = spec.each
    found = sorted({c for c in measured if c == family or (c.startswith(f"{family}-") and "@" not in c)},
                   key=lambda c: (c != family, c))
    named = {*spec.configs, spec.against} - {EACH}
    return found or ([family] if named & set(measured) else [])


def bind(spec: ClaimSpec, member: str, suffix: str) -> ClaimSpec:
    """The claim about one member of its family (named for `{each}`), `suffix` added to its id and text."""
    return replace(spec, id=spec.id + suffix, text=spec.text + suffix, against=spec.against.replace(EACH, member),
                   configs=[c.replace(EACH, member) for c in spec.configs])


def _bound(specs: Sequence[ClaimSpec], mine: Values) -> List[Tuple[ClaimSpec, ClaimSpec]]:
    """(the claim on the measured values, on the paper's) of every claim on one pattern: a family's
    claims once per member measured, member by member, suffixed with its name when there are
    several; the paper's side always names the family."""
    measured = {c for c, _ in mine}
    rows: List[Tuple[int, ClaimSpec, ClaimSpec]] = []
    for spec in specs:
        if not spec.each:
            rows.append((0, spec, spec))
            continue
        found = members(spec, measured)
        for k, member in enumerate(found):
            suffix = f" ({member})" if len(found) > 1 else ""
            rows.append((k, bind(spec, member, suffix), bind(spec, spec.each, suffix)))
    rows.sort(key=lambda row: row[0])  # stable: within a member, the claims in their declared order
    return [(on_measured, on_paper) for _, on_measured, on_paper in rows]


def check(specs: Sequence[ClaimSpec], measured: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per measured pattern and claim: the verdict on the paper's own numbers and on the measured ones."""
    rows = []
    for pattern in sorted(set(measured["pattern"].astype(str))):
        mine, paper = values(measured, pattern), values(reference, pattern)
        for spec, paper_spec in _bound(specs, mine):
            on_paper, on_measured = judge(paper_spec, paper), judge(spec, mine)
            rows.append({"pattern": pattern, "claim": spec.id, "text": spec.text,
                         "paper": on_paper.status, "paper_detail": on_paper.detail,
                         "measured": on_measured.status, "measured_detail": on_measured.detail})
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _evaluation_node(evaluation: str, folder: Path) -> Dict[str, Any]:
    from omegaconf import OmegaConf

    path = folder / f"{evaluation}.yaml"
    if not path.exists():
        return {}
    node = OmegaConf.to_container(OmegaConf.load(path))
    return dict(node.get("evaluation") or {}) if isinstance(node, dict) else {}


def declared_sources(evaluation: str, folder: Path = EVALUATIONS) -> Tuple[str, str]:
    """(the reference table's path relative to the project, the evaluation whose YAML declares the
    claims checked: its own, the one `claims_from` names, or "" for none)."""
    node = _evaluation_node(evaluation, folder)
    source = str(node.get("claims_from") or (evaluation if node.get("claims") else ""))
    return str(node.get("reference") or ""), source


def declared(evaluation: str, folder: Path = EVALUATIONS) -> List[ClaimSpec]:
    """The claims an evaluation's YAML declares (`evaluation.claims`), validated."""
    raw = _evaluation_node(evaluation, folder).get("claims") or []
    known = set(ClaimSpec.__dataclass_fields__)
    for i, claim in enumerate(raw):
        unknown = sorted(set(claim) - known)
        if unknown:
            raise ValueError(f"evaluation.claims[{i}].{unknown[0]}: no such key of a claim")
    specs = [ClaimSpec(**claim) for claim in raw]
    validate(specs)
    return specs


def claim_checker(evaluation: str) -> Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]:
    """claims.csv rows of the claims `evaluation`'s YAML declares, for the report's extension point."""
    specs = declared(evaluation)

    def checked(measured: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
        return check(specs, measured, reference)

    return checked


def reference_reader(relative: str) -> Callable[[], pd.DataFrame]:
    """The published table at `relative` (to the project) in the long format; none: an empty one."""
    from reporting.paper_comparison import REFERENCE_COLUMNS, load_reference

    def read() -> pd.DataFrame:
        if not relative:
            return pd.DataFrame(columns=REFERENCE_COLUMNS)
        return load_reference(EVALUATIONS.parents[2] / relative)

    return read
