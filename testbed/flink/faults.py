"""Which TaskManagers a job-mode run has lost, and how long a change of the cluster may take: pure
functions of what the run read (docs/flink.md#faults). A lost TaskManager is replaced as a
Kubernetes Deployment replaces its pod; a change that does not finish in time is given up."""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any, Callable, Collection, List, Mapping, Optional, Sequence

from testbed.flink.settings import FlinkSettings

# the job's states from which it does not come back by itself (in application mode the
# JobManager then shuts down)
TERMINAL_STATES = ("FAILED", "CANCELED", "FINISHED", "SUSPENDED")
START_MARGIN = 3.0  # a change may take this many times the slowest start the run measured
# an application's states from which its job never runs (its main method threw, or it was cancelled)
FAILED_APPLICATION = ("FAILED", "CANCELED")
NO_JOB = "NONE"  # the status a reading gives while the JobManager knows no job of the run's id
# GET of a path of the JobManager's REST API, its JSON body (raises OSError or ValueError without one)
Rest = Callable[[str], Mapping[str, Any]]
# the job failing this often before it first ran is a start that fails (the fixed-delay restart
# strategy would retry it for ever), not a fault of one attempt
START_FAILURES = 3


@dataclass(frozen=True)
class Loss:
    taskmanager: str
    why: str
    kill: bool  # its process still runs (frozen, cut off, stuck): kill it before replacing it


def exit_status(status: Optional[int]) -> str:
    """`killed by SIGKILL` for -9, `exit status 1` for 1 (a Popen return code)."""
    if status is not None and status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


def find_losses(ours: Sequence[str], exited: Mapping[str, Optional[int]], registered: Optional[Collection[str]],
                seen_registered: Collection[str]) -> List[Loss]:
    """Our TaskManagers that are gone: the process exited, or the JobManager dropped a TaskManager it
    had registered while its process runs (Flink's heartbeat timeout: frozen or cut off). The latter
    is killed and replaced, as Kubernetes restarts a pod that fails its liveness probe, rather than
    trusted to come back. `registered` is None when the REST API could not be read (then nothing is
    concluded from it)."""
    losses = []
    for name in ours:
        if name in exited:
            losses.append(Loss(name, f"its process exited ({exit_status(exited[name])})", kill=False))
        elif registered is not None and name in seen_registered and name not in registered:
            losses.append(Loss(name, "the JobManager dropped it (heartbeat timeout: frozen or cut off) while its "
                                     "process still ran", kill=True))
    return losses


def unregistered(ours: Sequence[str], registered: Optional[Collection[str]], started_at: Mapping[str, float],
                 now: float, bound_s: float) -> List[Loss]:
    """Our TaskManagers that have not registered within bound_s of their start (a start that hangs)."""
    if registered is None:
        return []
    return [Loss(name, f"not registered {now - started_at[name]:.0f} s after its start", kill=True)
            for name in ours if name not in registered and now - started_at.get(name, now) >= bound_s]


def change_bound_s(slowest_start_s: float, s: FlinkSettings) -> float:
    """How long a change of the cluster (a rescale, a replaced TaskManager) may take before it is
    given up: START_MARGIN times the slowest start this run measured (TaskManagers launched -> the
    job running with them: their JVMs' start on the machine as loaded as it is), plus what Flink
    waits by its configuration (stabilisation, cooldown, a checkpoint before the rescale, the
    restart delay, and the heartbeat timeout before it declares a TaskManager lost)."""
    waits = (s.stabilization_s + s.cooldown_s + s.checkpoint_s + (s.rescale_max_delay_s or 0.0)
             + s.restart_delay_s + s.heartbeat_timeout_s)
    return START_MARGIN * slowest_start_s + waits


def root_cause(trace: str, limit: int = 300) -> str:
    """A stack trace's root cause in one line: its last `Caused by:` (Flink wraps the job's own
    exception, e.g. "Could not execute application."), else its first line; shortened."""
    lines = [ln.strip() for ln in str(trace).splitlines() if ln.strip()]
    causes = [ln[len("Caused by:"):].strip() for ln in lines if ln.startswith("Caused by:")]
    return (causes[-1] if causes else lines[0] if lines else "no message")[:limit]


def failed_application(overview: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """The application of the REST API's `/applications/overview` whose job will never run (its
    state FAILED or CANCELED), if any."""
    for app in overview.get("applications", []):
        if str(app.get("status", app.get("state", ""))).upper() in FAILED_APPLICATION:
            return app
    return None


def exception_history(exceptions: Mapping[str, Any]) -> List[str]:
    """The root causes of the failures the REST API's exception history holds (a job's or an
    application's), newest first."""
    entries = (exceptions.get("exceptionHistory") or {}).get("entries") or []
    return [root_cause(e.get("stacktrace") or e.get("exceptionName") or "") for e in entries]


def start_failure(status: str, history: Sequence[str], ran: bool) -> Optional[str]:
    """Why the job will not start, from its status and exception history: FAILED (or another state it
    does not leave), or START_FAILURES failures before it ever ran. None: nothing says so (yet)."""
    cause = history[0] if history else "no exception recorded"
    if status in TERMINAL_STATES:
        return f"the job is {status}: {cause}"
    if not ran and len(history) >= START_FAILURES:
        return f"the job failed {len(history)} times before it ever ran: {cause}"
    return None


def why_not_started(rest: Rest, job_id: str, status: str, ran: bool) -> Optional[str]:
    """Why the job will not start, as the JobManager's REST API says it: its application failed (the
    job's main method threw: a bad argument, a class not found) or was cancelled, the job is FAILED,
    or it failed START_FAILURES times before it first ran. `ran`: the job has run already (then only
    a state it does not leave counts); `status`: the job's as last read."""
    try:
        app = failed_application(rest("/applications/overview"))
    except (OSError, ValueError):  # no answer about applications: the job's own state still says
        app = None
    if app is not None:
        history = exception_history(rest(f"/applications/{app.get('id', '')}/exceptions"))
        state = app.get("status", app.get("state"))
        return f"the application is {state}: {history[0] if history else 'no exception recorded'}"
    if status == NO_JOB or (ran and status not in TERMINAL_STATES):
        return None  # asking after a job that does not exist makes the JobManager log an error each time
    return start_failure(status, exception_history(rest(f"/jobs/{job_id}/exceptions")), ran)
