"""Typed experiment configuration (Hydra structured configs).

The dataclasses below are the schema of `experiments/conf/`: Hydra merges the YAML groups into
them, so an unknown key or a value of the wrong type fails at composition, naming the key.
`validate()` adds the semantic checks a type cannot express, again naming the key.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from testbed.arguments import ConfigError, flatten
from testbed.backend_registry import backend_entry, backend_node, backends
from testbed.claim_spec import ClaimSpec
from testbed.claim_spec import validate as validate_claims
from testbed.fidelity_spec import FidelitySpec
from testbed.fidelity_spec import validate as validate_fidelity
from testbed.job_config import FlinkJobConfig, JobConfig
from testbed.live_config import LiveConfig
from testbed.placement.base import PlacementChoice, placement_entries, placement_node
from testbed.policies.registry import policies as registered_policies
from testbed.sim_config import SimSettings
from testbed.workloads.patterns import PatternConfig, PatternError, kind_settings, pattern_node
from testbed.workloads.registry import workload_kinds

CONF_DIR = Path(__file__).resolve().parent.parent / "experiments" / "conf"


class Measurement(str, Enum):
    milliseconds = "milliseconds"
    seconds_truncated = "seconds_truncated"  # VISP: upstream send time truncated to whole seconds


class Sampling(str, Enum):
    """Which processed items give a duration sample (and, at a sink, a latency sample), in both
    backends alike (docs/architecture.md#latency-sampling)."""

    every_nth = "every_nth"  # every `runtime.sample_every`-th item
    probabilistic = "probabilistic"  # VISP: each item with probability 1/sample_every


class EmissionMode(str, Enum):
    """What a filtering operator passes on, in either backend (docs/architecture.md#emission)."""

    ratio = "ratio"  # ratio_out outputs per ratio_in inputs, evenly (every ratio_in-th input for a 50:1 filter)
    incident = "incident"  # one output per new incident (live: the operator's rule; simulated: a seeded process)


class BillingMode(str, Enum):
    own = "own"  # billed by the BTU length the run used (an approach that plans around BTUs)
    rebill = "rebill"  # BTU-agnostic: billed after the run under each of billing.rebill_minutes


@dataclass
class RunConfiguration:
    """One named configuration of an evaluation: a policy with its parameters, placement and billing."""

    name: str = MISSING  # the run folder's name, e.g. btu-10
    policy: str = MISSING  # a registered policy (testbed/policies/registry.py)
    billing: BillingMode = BillingMode.rebill
    btu_minutes: Optional[int] = None  # the BTU length it runs with; None = billing.btu_minutes
    params: Dict[str, Any] = field(default_factory=dict)  # on top of policies.<policy>
    placement: str = ""  # a registered placement; "" = the policy's default
    placement_params: Dict[str, Any] = field(default_factory=dict)  # on top of placement.*, e.g. {odp: {w_a: 1}}
    # on top of runtime.*, e.g. {reasoning_s: 60}: the cadence its paper gives the policy, when the
    # evaluation compares policies of different cadences
    runtime: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EvaluationConfig:
    """What one published evaluation compares (experiments/conf/evaluation/): its workloads, its named
    configurations, the reference table and the claims checked by the report."""

    name: str = "btu"
    title: str = ""
    workloads: List[str] = field(default_factory=list)  # patterns it is published for
    configurations: List[RunConfiguration] = field(default_factory=list)
    only: List[str] = field(default_factory=list)  # run just these configurations (names); empty: all
    reference: str = ""  # the published table (long format), relative to the project
    claims: List[ClaimSpec] = field(default_factory=list)  # the paper's claims, checked by reporting/claims.py
    claims_from: str = ""  # check another evaluation's claims instead (its name)
    fidelity: FidelitySpec = field(default_factory=FidelitySpec)  # its calibration loop (testbed/fidelity)


@dataclass
class PolicySelection:
    """`policy=<name>` runs that one policy instead of the evaluation's configurations."""

    name: str = "matrix"  # matrix: every configuration of the evaluation


@dataclass
class ServiceConfig:
    """Simulated service model of one operator type (estimated; see
    docs/papers/btu-provisioning.md#visp-operators)."""

    mean_ms: float = 20.0
    cv: float = 0.3  # coefficient of variation of the (gamma-distributed) service time
    parallel: int = 1  # items in service at once per instance
    cpu_cores: float = 0.1  # cores a busy slot uses (host CPU contention model)
    step_cv: float = 0.0  # > 0: each simulation step's capacity x a seeded gamma factor (mean 1, this CV)
    # per item, the wait of a woken worker for a CPU on a machine with cores to spare (the run-queue
    # delay a live item pays even then): it holds the slot but uses no core, and the shared cores'
    # slowdown stretches it like the work, since a crowded run queue delays every wake-up
    wait_ms: float = 0.0

    @property
    def slot_ms(self) -> float:
        """The time an item holds a worker slot on a machine with cores to spare: work and wait."""
        return self.mean_ms + self.wait_ms

    @property
    def slot_cv(self) -> float:
        """The slot time's cv: the wait is taken as constant, so only the work varies (without a
        wait exactly `cv`, so the seeded draws stay those of a profile without one)."""
        return self.cv / (1.0 + self.wait_ms / self.mean_ms)


@dataclass
class EmissionConfig:
    """What an operator emits per input, one mode per backend (the values mean the same in both;
    docs/architecture.md#emission). `ratio`: ratio_out per ratio_in inputs. `incident`: one output
    to each downstream operator per new incident; live, the operator's own rule decides (O2: a
    machine's defect, O6: a temperature above the threshold); simulated, a seeded renewal process
    with geometric gaps of mean `items_per_incident` inputs (measure it from a live run:
    `python -m reporting.incidents RUN_DIR`)."""

    sim: EmissionMode = EmissionMode.ratio
    live: EmissionMode = EmissionMode.ratio  # incident: only operators whose implementation has the rule (O2, O6)
    items_per_incident: float = 0.0  # the simulated incident process: mean inputs per new incident


@dataclass
class OperatorConfig:
    slo_ms: float = 1000.0
    cpu_shares: int = 100
    memory_mb: int = 512
    image_mb: int = 68
    stateful: bool = False
    ratio_in: int = 1  # in:out, e.g. 50:1 for O2; outputs go to each downstream operator in turn
    ratio_out: int = 1
    downstream: List[str] = field(default_factory=list)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    emission: EmissionConfig = field(default_factory=EmissionConfig)


@dataclass
class SourceConfig:
    items_per_tick: int = 1  # per active machine
    downstream: List[str] = field(default_factory=list)


@dataclass
class TopologyConfig:
    name: str = "oee"
    tick_ms: float = 480.0
    sources: Dict[str, SourceConfig] = field(default_factory=dict)
    operators: Dict[str, OperatorConfig] = field(default_factory=dict)
    compliance_excluded: List[str] = field(default_factory=lambda: ["O2", "O6"])
    item_timeout_s: float = 0.0  # > 0: an operator drops items older than this when it takes them (reason timeout)


@dataclass
class BillingConfig:
    btu_minutes: int = 60
    price_per_10_minutes: float = 1.0
    penalty_per_item: float = 0.0001
    rebill_minutes: List[int] = field(default_factory=lambda: [10, 30, 60])


@dataclass
class InfrastructureConfig:
    host_cpu_shares: int = 4096
    host_memory_mb: int = 7168
    max_hosts: int = 64
    lease_delay_s: List[float] = field(default_factory=lambda: [30.0, 60.0])  # uniform range
    container_start_s: List[float] = field(default_factory=lambda: [5.0, 10.0])
    pull_mb_per_s: float = 25.0  # image pull bandwidth where the image is not cached


@dataclass
class RuntimeConfig:
    monitoring_s: float = 15.0
    reasoning_s: float = 60.0
    sample_every: int = 10
    sampling: Sampling = Sampling.every_nth
    measurement: Measurement = Measurement.milliseconds
    initial_instances: int = 1
    history: int = 60  # monitoring intervals a snapshot's histories keep (durations, rates)


def _policies_node() -> Any:
    """The `policies` node: one field per registered policy, typed by its parameter dataclass, so
    that `policies.btu.samples=abc` or a misspelt key fails at composition, naming the key. Built
    from the registry when a config is made (after `to_typed` it is a plain name -> params dict)."""
    entries = registered_policies()
    cls = make_dataclass("Policies", [(n, e.params, field(default_factory=e.params)) for n, e in entries.items()])
    return cls()


class BackendNode(SimSettings):
    """The `backend` node as code reads it (`cfg.backend.*`, checked by mypy): the backend chosen, the
    simulator's settings (flat: every run's node has them) and the keyed settings of the backends
    built in. The node itself is made from the registry (testbed/backend_registry.py: a field per
    registered backend, a plug-in's under its own key, which its own module reads);
    tests/unit/test_backend_registry.py checks that it has each attribute declared here, so typed."""

    name: str
    live: LiveConfig
    flink: FlinkJobConfig


if TYPE_CHECKING:
    BackendField = BackendNode
    # code outside a strategy reads only the shared keys; a strategy gets its own parameters, typed
    PlacementField = PlacementChoice
else:  # Hydra types these nodes by their defaults: the classes made for the plug-ins registered
    BackendField = Any
    PlacementField = Any


@dataclass
class ExperimentConfig:
    pattern: PatternConfig = field(default_factory=pattern_node)  # flat: every workload kind's keys
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    policy: PolicySelection = field(default_factory=PolicySelection)
    policies: Any = field(default_factory=_policies_node)  # parameters of every registered policy
    # `name`, `pins` and every registered strategy's parameters (testbed/placement/base.py)
    placement: PlacementField = field(default_factory=placement_node)
    # `name` (a registered backend) and every registered backend's settings (testbed/backend_registry.py)
    backend: BackendField = field(default_factory=backend_node)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    billing: BillingConfig = field(default_factory=BillingConfig)
    infrastructure: InfrastructureConfig = field(default_factory=InfrastructureConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    job: JobConfig = field(default_factory=JobConfig)  # job mode (Daedalus): testbed/sim/job.py
    profile: str = "paper"
    reps: int = 3
    seed: int = 1
    out: str = "runs"
    duration_min: float = 120.0
    load_scale: float = 1.0  # emission rate factor (the tick interval is divided by it), both backends
    workers: int = 0  # parallel runs; 0 = one per core (live runs always run one at a time)
    summary: bool = True  # print the summary table at the end
    mix: bool = False  # allow adding runs to a workload folder that holds runs of other settings


# the placement strategies and workload kinds whose keys the stored schema has (the schema is built
# from their registries, so one registered since, e.g. a plug-in found later, needs it built again)
_schema_registries: List[Tuple[str, ...]] = []


def register() -> None:
    """Make the schema known to Hydra (config.yaml lists `schema` first in its defaults), and one
    option of the `policy` group per registered policy (`policy=<name>`: that policy alone)."""
    # every plug-in is imported first, so that one that fails is named by discovery (PluginError)
    # rather than inside OmegaConf, which builds the schema from the registries
    known = registered_policies()
    built_from = [tuple(placement_entries()), tuple(workload_kinds())]
    engines = [name for name in backends() if not (CONF_DIR / "backend" / f"{name}.yaml").is_file()]
    store = ConfigStore.instance()
    # storing builds every schema node again: a third of a config load
    if _stored(store, known, engines) and _schema_registries == built_from:
        return
    store.store(name="schema", node=ExperimentConfig)
    _schema_registries[:] = built_from
    for name in known:
        store.store(group="policy", name=name, node=PolicySelection(name=name))
    stored = store.repo.get("backend")
    if isinstance(stored, dict):  # a backend registered earlier in this process, gone since (a test's plug-in)
        for stale in set(stored) - {f"{name}.yaml" for name in engines}:
            del stored[stale]
    for name in engines:  # a backend without a YAML of its own: `backend=<name>` selects its defaults
        store.store(group="backend", name=name, node={"name": name})


def _stored(store: ConfigStore, policies: Iterable[str], engines: Iterable[str]) -> bool:
    """The schema and exactly these policies' and backends' options are in Hydra's store already."""
    group, stored_engines = store.repo.get("policy"), store.repo.get("backend", {})
    return ("schema.yaml" in store.repo and isinstance(group, dict) and isinstance(stored_engines, dict)
            and set(group) == {f"{name}.yaml" for name in policies}
            and set(stored_engines) == {f"{name}.yaml" for name in engines})


def unknown_keys(node: Any, path: str = "") -> List[str]:
    """Keys of a composed config that its schema does not have (Hydra's `+key=value` adds them to a
    typed node, and converting to the dataclasses would silently drop them)."""
    if not isinstance(node, DictConfig):
        if isinstance(node, ListConfig):
            return [k for i, v in enumerate(node) for k in unknown_keys(v, f"{path}[{i}]")]
        return []
    typ = OmegaConf.get_type(node)
    names = {f.name for f in fields(typ)} if dataclasses.is_dataclass(typ) else None
    out = []
    for key in node.keys():
        key_path = f"{path}.{key!s}" if path else str(key)
        if names is not None and key not in names:
            out.append(key_path)
        else:
            out += unknown_keys(node._get_node(key), key_path)
    return out


def to_typed(cfg: DictConfig | ExperimentConfig) -> ExperimentConfig:
    if not isinstance(cfg, ExperimentConfig):
        unknown = unknown_keys(cfg)
        if unknown:
            raise ConfigError(unknown[0],
                              "no such key" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
        obj = OmegaConf.to_object(cfg)
        assert isinstance(obj, ExperimentConfig)
        cfg = obj
    if not isinstance(cfg.policies, dict):  # plain classes pickle (worker processes); the schema's do not
        cfg.policies = {f.name: getattr(cfg.policies, f.name) for f in fields(cfg.policies)}
    try:  # the flat node as its kind's own settings: only its keys, and a class that pickles
        cfg.pattern = kind_settings(cfg.pattern)
    except PatternError as exc:
        raise ConfigError(f"pattern.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from exc
    return cfg


def to_plain(cfg: ExperimentConfig) -> Dict[str, Any]:
    """The resolved config as plain JSON-able data (for manifests and settings digests): what
    OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True) gives, built directly
    (several times faster, and every run builds it twice)."""
    return _plain(cfg)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def measurement_settings(cfg: ExperimentConfig) -> Dict[str, Any]:
    """What the run's backend samples and what its operators emit, as the manifest records them
    (`details`): `latency_sampling` (runtime.sampling, sample_every, measurement: the same rule in
    both backends) and, per operator, the emission mode the backend applies (`emission.sim` or
    `emission.live`) with its ratio or its incident process (docs/architecture.md#emission). Empty
    in job mode (a keyed job samples by `job.latency_samples`)."""
    if cfg.job.enabled:
        return {}
    rt, applied = cfg.runtime, backend_entry(cfg.backend.name).emission
    emission: Dict[str, Any] = {}
    for o, op in sorted(cfg.topology.operators.items()):
        mode = getattr(op.emission, applied)
        entry: Dict[str, Any] = {"mode": mode.value}
        if mode == EmissionMode.ratio:
            entry["ratio"] = f"{op.ratio_in}:{op.ratio_out}"
        elif applied == "sim":  # the simulated incident process (live: the operators' own rule)
            entry["items_per_incident"] = op.emission.items_per_incident
        emission[o] = entry
    return {"latency_sampling": {"rule": rt.sampling.value, "every": rt.sample_every,
                                 "measurement": rt.measurement.value},
            "emission": emission}


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(key, f"must be > 0, got {value}")


def _at_most(key: str, value: float, limit: float, why: str = "") -> None:
    if not value <= limit:
        raise ConfigError(key, f"must be <= {limit:g}{why}, got {value:g}")


# What one run may ask of the simulator: beyond these a run takes hours without a line of output.
MAX_DURATION_MIN = 7 * 24 * 60.0
MAX_TICKS = 5_000_000  # provider ticks of one run (the emission loop is per tick)
MAX_STEPS = 5_000_000  # simulation steps of one run
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a folder name: no separators, no "..", no hidden


def _range(key: str, values: List[float]) -> None:
    if len(values) != 2 or values[0] < 0 or values[1] < values[0]:
        raise ConfigError(key, f"must be [low, high] with 0 <= low <= high, got {list(values)}")


# Seeds feed numpy's SeedSequence (non-negative integers only) and are kept in manifests and the
# report's tables, whose integer columns are 64-bit.
MAX_SEED = 2**63 - 1


def validate_seed(key: str, value: int) -> None:
    """A seed is an integer in [0, MAX_SEED]; ConfigError naming `key` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(key, f"must be an integer in [0, 2**63 - 1], got {value!r}")


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Semantic checks that types cannot express. Raises ConfigError naming the key, and the profile
    when the offending value is the profile's (the user may never have written that key)."""
    try:
        return _validate(cfg)
    except ConfigError as exc:
        blamed = _blame_profile(cfg, exc)
        if blamed is None:
            raise
        raise blamed from exc


def profile_settings(name: str, conf_dir: Path = CONF_DIR) -> Dict[str, Tuple[Any, Path]]:
    """Dotted key -> (value, file) of what profile `name` sets, its own `defaults` (the profiles it
    extends) included; {} for a profile that is not in conf_dir."""
    path = conf_dir / "profile" / f"{name}.yaml"
    if not path.is_file():
        return {}
    raw: Any = OmegaConf.to_container(OmegaConf.load(path))
    out: Dict[str, Tuple[Any, Path]] = {}
    for parent in raw.pop("defaults", None) or []:
        if isinstance(parent, str) and parent not in ("_self_", name):
            out.update(profile_settings(parent, conf_dir))
    out.update({key: (value, path) for key, value in flatten(raw).items()})
    return out


def _value_at(cfg: ExperimentConfig, key: str) -> Any:
    node: Any = to_plain(cfg)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def _blame_profile(cfg: ExperimentConfig, exc: ConfigError) -> Optional[ConfigError]:
    """The error restated when the selected profile set the offending value (and nothing changed it
    since), else None."""
    set_by = profile_settings(cfg.profile).get(exc.key)
    if set_by is None or _value_at(cfg, exc.key) != set_by[0]:
        return None
    value, path = set_by
    where = path.relative_to(CONF_DIR.parent.parent) if path.is_relative_to(CONF_DIR.parent.parent) else path
    reason = str(exc).removeprefix(f"{exc.key}: ")
    return ConfigError(exc.key, f"profile {cfg.profile} sets it to {value!r} ({where}); {reason}, or choose "
                                f"another profile")


def _validate(cfg: ExperimentConfig) -> ExperimentConfig:
    validate_seed("seed", cfg.seed)
    _validate_workload(cfg)
    _positive("reps", cfg.reps)
    _at_most("reps", cfg.reps, 1000)
    _positive("duration_min", cfg.duration_min)
    _at_most("duration_min", cfg.duration_min, MAX_DURATION_MIN, " (a week)")
    _positive("load_scale", cfg.load_scale)
    _at_most("load_scale", cfg.load_scale, 1000)
    if not cfg.out.strip() or "\0" in cfg.out:
        raise ConfigError("out", f"must name a folder, got {cfg.out!r}")
    if not SAFE_NAME.match(cfg.pattern.name):
        raise ConfigError("pattern.name", f"{cfg.pattern.name!r} is not a folder name (letters, digits, _ . -)")
    if cfg.workers < 0:
        raise ConfigError("workers", f"must be >= 0, got {cfg.workers}")
    _positive("billing.btu_minutes", cfg.billing.btu_minutes)
    for i, m in enumerate(cfg.billing.rebill_minutes):
        _positive(f"billing.rebill_minutes[{i}]", m)
    if cfg.billing.penalty_per_item < 0:
        raise ConfigError("billing.penalty_per_item", "must be >= 0")
    if cfg.billing.price_per_10_minutes < 0:
        raise ConfigError("billing.price_per_10_minutes", "must be >= 0")
    _validate_policies(cfg)
    _validate_evaluation(cfg)
    infra = cfg.infrastructure
    _positive("infrastructure.host_cpu_shares", infra.host_cpu_shares)
    _positive("infrastructure.host_memory_mb", infra.host_memory_mb)
    _positive("infrastructure.max_hosts", infra.max_hosts)
    _positive("infrastructure.pull_mb_per_s", infra.pull_mb_per_s)
    _range("infrastructure.lease_delay_s", infra.lease_delay_s)
    _range("infrastructure.container_start_s", infra.container_start_s)
    selected = _validate_backends(cfg)
    _validate_runtime(cfg.runtime)
    _validate_topology(cfg.topology, infra)
    _validate_scale(cfg)
    problem = cfg.job.validate()
    if problem is not None:
        raise ConfigError(*problem)
    if selected.key:  # flat settings (directly under `backend`) were checked with the others'
        selected.backend.validate(cfg)
    return cfg


def _validate_backends(cfg: ExperimentConfig) -> Any:
    """The selected backend (its registry entry) after checking that it is registered and runs the
    config's mode, and the settings every run's node shares (those directly under `backend`)."""
    known = backends()
    if cfg.backend.name not in known:
        raise ConfigError("backend.name", f"no such backend {cfg.backend.name!r}; registered: {sorted(known)}")
    selected, mode = known[cfg.backend.name], "job" if cfg.job.enabled else "operator"
    if mode not in selected.modes:
        raise ConfigError("backend", f"backend={selected.name} runs {' and '.join(selected.modes)} mode only, not "
                                     f"{mode} mode (job mode: job.enabled=true, e.g. evaluation=daedalus)")
    for entry in known.values():  # every node has them, and _validate_scale needs the step
        if not entry.key:
            entry.backend.validate(cfg)
    return selected


def _validate_workload(cfg: ExperimentConfig) -> None:
    from testbed.workloads.patterns import gives_rates, validate_pattern

    if not 0 <= cfg.seed + cfg.pattern.seed_offset <= MAX_SEED:  # a random walk's seed
        raise ConfigError("pattern.seed_offset", f"seed + seed_offset must lie in [0, 2**63 - 1], "
                                                 f"got {cfg.seed + cfg.pattern.seed_offset}")
    try:
        validate_pattern(cfg.pattern)
    except PatternError as exc:
        raise ConfigError(f"pattern.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from exc
    if cfg.job.enabled and not gives_rates(cfg.pattern):
        raise ConfigError("pattern", f"evaluation {cfg.evaluation.name!r} runs in job mode (job.enabled), which "
                                     f"replays items/s: workload {cfg.pattern.name!r} (kind {cfg.pattern.kind}) "
                                     f"gives machine counts only; use one of its workloads "
                                     f"({', '.join(cfg.evaluation.workloads)}) or a trace (pattern=trace)")


def _validate_runtime(rt: "RuntimeConfig", key: str = "runtime") -> None:
    _positive(f"{key}.monitoring_s", rt.monitoring_s)
    _positive(f"{key}.reasoning_s", rt.reasoning_s)
    _positive(f"{key}.sample_every", rt.sample_every)
    _positive(f"{key}.initial_instances", rt.initial_instances)
    _positive(f"{key}.history", rt.history)


def _validate_scale(cfg: ExperimentConfig) -> None:
    """Relations between keys: the simulation step against the monitoring interval and the run, the
    provider's ticks and the steps a run would take. (The initial deployment against the host limit
    needs the topology and the policies' deployment: testbed.experiment checks it when it plans the
    runs, before anything starts.)"""
    duration_s, rt = cfg.duration_min * 60.0, cfg.runtime
    if cfg.backend.step_ms / 1000.0 > rt.monitoring_s:
        raise ConfigError("backend.step_ms", f"must not exceed runtime.monitoring_s ({rt.monitoring_s:g} s)")
    if rt.monitoring_s > duration_s:
        raise ConfigError("runtime.monitoring_s", f"must not exceed the run ({duration_s:g} s)")
    ticks = duration_s * cfg.load_scale / (cfg.topology.tick_ms / 1000.0)
    if ticks > MAX_TICKS:
        raise ConfigError("load_scale", f"{ticks:.3g} provider ticks in a run (duration_min {cfg.duration_min:g} x "
                                        f"load_scale {cfg.load_scale:g}) exceed {MAX_TICKS:,}: lower either")
    steps = duration_s / (cfg.backend.step_ms / 1000.0)
    if steps > MAX_STEPS:
        raise ConfigError("backend.step_ms", f"{steps:.3g} simulation steps in a run exceed {MAX_STEPS:,}")


def validate_cores(key: str, cores: Any, allow_off: bool = True) -> float:
    """A number of cores the hosts share: finite and > 0, or 0 (off) where `allow_off`; ConfigError
    naming `key` otherwise. `testbed live-profile cores=` writes backend.shared_cores: one rule."""
    finite = not isinstance(cores, bool) and isinstance(cores, (int, float)) and math.isfinite(cores)
    if not finite or cores < 0 or (cores == 0 and not allow_off):
        raise ConfigError(key, f"must be a number {'>= 0 (0: off)' if allow_off else '> 0'}, got {cores!r}")
    return float(cores)


def _validate_policies(cfg: ExperimentConfig) -> None:
    known = registered_policies()
    for name, params in cfg.policies.items():
        if name not in known:
            raise ConfigError(f"policies.{name}", f"no such policy; registered: {sorted(known)}")
        _check_params(f"policies.{name}", params)
    if cfg.policy.name != "matrix" and cfg.policy.name not in known:
        raise ConfigError("policy.name",
                          f"{cfg.policy.name!r} is neither 'matrix' nor a registered policy: {sorted(known)}")
    _validate_placement(cfg)


def _validate_placement(cfg: ExperimentConfig) -> None:
    """placement.name, every strategy's parameters (each checks its own) and placement.pins."""
    from testbed.emulation import host_index

    strategies = placement_entries()  # every plug-in imported now, not in a run's worker
    if cfg.placement.name and cfg.placement.name not in strategies:
        raise ConfigError("placement.name", f"unknown placement {cfg.placement.name!r}; known: {sorted(strategies)}")
    for entry in strategies.values():
        params = entry.params_of(cfg.placement)
        problem = params.validate() if params is not None else None
        if problem is not None:
            raise ConfigError(f"placement.{entry.key + '.' if entry.key else ''}{problem[0]}", problem[1])
    for operator, host in cfg.placement.pins.items():
        if operator not in cfg.topology.operators:
            raise ConfigError(f"placement.pins.{operator}", "unknown operator")
        if host_index(host) is None:
            raise ConfigError(f"placement.pins.{operator}",
                              f"hosts are named vm<k> (the k-th host leased), got {host!r}")


def _check_params(key: str, params: Any) -> None:
    check = getattr(params, "validate", None)
    if check is None:
        return
    try:
        check()
    except ValueError as exc:  # "<field>: <message>"
        field_name, _, message = str(exc).partition(": ")
        raise ConfigError(f"{key}.{field_name}", message) from exc


def _validate_evaluation(cfg: ExperimentConfig) -> None:
    ev = cfg.evaluation
    if cfg.policy.name == "matrix" and not ev.configurations:
        raise ConfigError("evaluation.configurations", f"evaluation {ev.name!r} names no configuration")
    names = set()
    for i, conf in enumerate(ev.configurations):
        key = f"evaluation.configurations[{i}]"
        if conf.name in names:
            raise ConfigError(f"{key}.name", f"{conf.name!r} appears twice")
        names.add(conf.name)
        if not conf.name or "/" in conf.name or conf.name.startswith("."):
            raise ConfigError(f"{key}.name", f"{conf.name!r} is not a folder name")
        if conf.policy not in cfg.policies:
            raise ConfigError(f"{key}.policy", f"no such policy {conf.policy!r}; registered: {sorted(cfg.policies)}")
        if conf.btu_minutes is not None:
            _positive(f"{key}.btu_minutes", conf.btu_minutes)
        if conf.placement and conf.placement not in placement_entries():
            raise ConfigError(f"{key}.placement",
                              f"unknown placement {conf.placement!r}; known: {sorted(placement_entries())}")
        _check_params(f"{key}.params", policy_params(cfg, conf.policy, conf.params, f"{key}.params"))
        if conf.placement_params:
            trial = dataclasses.replace(cfg, placement=placement_config(cfg, conf.placement_params,
                                                                        f"{key}.placement_params"))
            try:
                _validate_placement(trial)
            except ConfigError as exc:
                sub = exc.key.removeprefix("placement.")
                raise ConfigError(f"{key}.placement_params.{sub}", str(exc).removeprefix(f"{exc.key}: ")) from exc
        if conf.runtime:
            rt = runtime_config(cfg, conf.runtime, f"{key}.runtime")
            _validate_runtime(rt, f"{key}.runtime")
            try:
                _validate_scale(dataclasses.replace(cfg, runtime=rt))
            except ConfigError as exc:
                raise ConfigError(f"{key}.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from exc
    try:
        # their structure only: a claim naming a configuration the evaluation does not run (renamed or
        # left out by an override) is "not evaluable" in the report, which names what is missing
        validate_claims(ev.claims)
    except ValueError as exc:  # "<key>: <message>"
        key, _, message = str(exc).partition(": ")
        raise ConfigError(key, message) from exc
    _check_fidelity(cfg)
    for i, name in enumerate(ev.only):
        if name not in names:
            raise ConfigError(f"evaluation.only[{i}]",
                              f"no configuration {name!r} in evaluation {ev.name!r}: {sorted(names)}")


def _check_fidelity(cfg: ExperimentConfig) -> None:
    """The fidelity loop's shape, and that every key it sets is a key of the config."""
    spec = cfg.evaluation.fidelity
    try:
        validate_fidelity(spec, cfg.evaluation.workloads)
    except ValueError as exc:  # "<key>: <message>"
        key, _, message = str(exc).partition(": ")
        raise ConfigError(key, message) from exc
    plain = to_plain(cfg)  # a walk over plain data: OmegaConf.structured(cfg) costs half a second a load
    for where, key in spec.set_keys():
        if not has_key(plain, key):
            raise ConfigError(f"evaluation.fidelity.{where}", f"{key!r} is not a key of the experiment config")


def has_key(plain: Any, key: str) -> bool:
    """Whether a dotted key (list items as `name[i]` or `name.i`) names a value of plain config data."""
    node = plain
    for part in re.sub(r"\[(\d+)\]", r".\1", key).split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def policy_params(cfg: ExperimentConfig, policy: str, overrides: Dict[str, Any], key: str = "params") -> Any:
    """policies.<policy> with a configuration's overrides on top, typed; errors name the key."""
    base = OmegaConf.structured(cfg.policies[policy])
    try:
        return OmegaConf.to_object(OmegaConf.merge(base, overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}.{exc.full_key}" if getattr(exc, "full_key", None) else key,
                          str(exc).splitlines()[0]) from exc


def _overridden(node: Any, overrides: Dict[str, Any], key: str) -> Any:
    """A config node (dataclass) with a configuration's overrides on top, typed; errors name the key."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(node), overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}.{exc.full_key}" if getattr(exc, "full_key", None) else key,
                          str(exc).splitlines()[0]) from exc


def placement_config(cfg: ExperimentConfig, overrides: Dict[str, Any],
                     key: str = "placement_params") -> Any:
    """placement.* with a configuration's overrides on top."""
    return _overridden(cfg.placement, overrides, key)


def runtime_config(cfg: ExperimentConfig, overrides: Dict[str, Any], key: str = "runtime") -> "RuntimeConfig":
    """runtime.* with a configuration's overrides on top."""
    return _overridden(cfg.runtime, overrides, key)


def _validate_topology(topo: TopologyConfig, infra: InfrastructureConfig) -> None:
    if not topo.operators:
        raise ConfigError("topology.operators", "no operators defined")
    if not topo.sources:
        raise ConfigError("topology.sources", "no sources defined")
    _positive("topology.tick_ms", topo.tick_ms)
    names = set(topo.operators)
    for s, src in topo.sources.items():
        for d in src.downstream:
            if d not in names:
                raise ConfigError(f"topology.sources.{s}.downstream", f"unknown operator {d!r}")
    for o, op in topo.operators.items():
        key = f"topology.operators.{o}"
        for d in op.downstream:
            if d not in names:
                raise ConfigError(f"{key}.downstream", f"unknown operator {d!r}")
        _positive(f"{key}.slo_ms", op.slo_ms)
        _positive(f"{key}.cpu_shares", op.cpu_shares)
        _positive(f"{key}.memory_mb", op.memory_mb)
        _positive(f"{key}.ratio_in", op.ratio_in)
        if op.ratio_out < 0:
            raise ConfigError(f"{key}.ratio_out", "must be >= 0")
        if op.ratio_out > 0 and not op.downstream:
            raise ConfigError(f"{key}.downstream", "an operator with outputs needs a downstream operator")
        if op.cpu_shares > infra.host_cpu_shares or op.memory_mb > infra.host_memory_mb:
            raise ConfigError(key, "does not fit on an empty host (infrastructure.host_*)")
        _positive(f"{key}.service.mean_ms", op.service.mean_ms)
        _positive(f"{key}.service.parallel", op.service.parallel)
        if op.service.cv < 0:
            raise ConfigError(f"{key}.service.cv", "must be >= 0")
        if not 0 <= op.service.wait_ms < math.inf:
            raise ConfigError(f"{key}.service.wait_ms", f"must be finite and >= 0, got {op.service.wait_ms:g}")
        if not 0 <= op.service.step_cv < 1:
            raise ConfigError(f"{key}.service.step_cv", f"must be in [0, 1), got {op.service.step_cv:g}")
        _validate_emission(f"{key}.emission", op)
    if topo.item_timeout_s < 0:
        raise ConfigError("topology.item_timeout_s", f"must be >= 0 (0: no timeout), got {topo.item_timeout_s:g}")
    for o in topo.compliance_excluded:
        if o not in names:
            raise ConfigError("topology.compliance_excluded", f"unknown operator {o!r}")
    _check_acyclic(topo)


def _validate_emission(key: str, op: OperatorConfig) -> None:
    em = op.emission
    if not em.items_per_incident >= 0 or em.items_per_incident == float("inf"):
        raise ConfigError(f"{key}.items_per_incident", f"must be a finite number >= 0, got {em.items_per_incident:g}")
    if em.sim == EmissionMode.incident and em.items_per_incident < 1:
        raise ConfigError(f"{key}.items_per_incident", f"must be >= 1 with {key}.sim=incident (the mean inputs per "
                                                       f"new incident), got {em.items_per_incident:g}")
    for backend in ("sim", "live"):
        if getattr(em, backend) == EmissionMode.incident and not op.downstream:
            raise ConfigError(f"{key}.{backend}", "incident: the operator has no downstream operator to warn")


def _check_acyclic(topo: TopologyConfig) -> None:
    state: Dict[str, int] = {}

    def visit(o: str) -> None:
        if state.get(o) == 1:
            raise ConfigError(f"topology.operators.{o}.downstream", "the topology has a cycle")
        if state.get(o) == 2:
            return
        state[o] = 1
        for d in topo.operators[o].downstream:
            visit(d)
        state[o] = 2

    for o in topo.operators:
        visit(o)
