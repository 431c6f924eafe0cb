"""What the client returns: typed, read-only views of the server's JSON answers (docs/api.md), and
the handles of submitted jobs and groups.

Every view keeps the answer it was made from in ``raw`` (fields a newer server adds are there).
Lists of them have ``to_dataframe()``, which needs pandas (imported only then; never required).
"""

from __future__ import annotations

import datetime as _dt
import importlib
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar)

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

ACTIVE_STATUSES = ("PENDING", "STARTING", "SETTING_UP", "RUNNING")
TERMINAL_STATUSES = ("SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED", "LOST", "PREEMPTED")
STATUSES = ACTIVE_STATUSES + TERMINAL_STATUSES
#: Statuses the CLI's progress counts as failed (cancelled jobs are counted apart).
FAILED_STATUSES = ("FAILED", "FAILED_SETUP", "LOST", "PREEMPTED")


def parse_time(value: Any) -> Optional[_dt.datetime]:
    """An RFC 3339 UTC time of the API ("2026-11-22T05:02:03.123Z") as an aware datetime; None for
    null (or anything else)."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _opt_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _ints(value: Any) -> List[int]:
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Resources:
    """What a job asked for per node: accelerators by type, CPUs, memory in GiB."""

    accelerators: Dict[str, float] = field(default_factory=dict)
    cpus: float = 0.0
    memory: float = 0.0

    @classmethod
    def from_json(cls, data: Any) -> "Resources":
        data = data if isinstance(data, dict) else {}
        acc = data.get("accelerators")
        accelerators = {str(k): _num(v) for k, v in acc.items()} if isinstance(acc, dict) else {}
        return cls(accelerators=accelerators, cpus=_num(data.get("cpus")),
                   memory=_num(data.get("memory")))

    @property
    def gpus(self) -> str:
        """The accelerators as the CLI's GPUS column shows them ("V100:1", "-" for none)."""
        if not self.accelerators:
            return "-"
        kind, count = next(iter(self.accelerators.items()))
        return f"{kind}:{int(count) if float(count).is_integer() else count}"


@dataclass(frozen=True)
class Placement:
    """Where one rank of a job runs: its node and the device indices (and shares) it holds."""

    node: str
    rank: int
    gpus: List[int] = field(default_factory=list)
    gpu_shares: List[float] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> "Placement":
        data = data if isinstance(data, dict) else {}
        shares = data.get("gpu_shares")
        return cls(node=_str(data.get("node")), rank=_int(data.get("rank")),
                   gpus=_ints(data.get("gpus")),
                   gpu_shares=[_num(s) for s in shares] if isinstance(shares, list) else [])


@dataclass(frozen=True)
class JobInfo:
    """A job as the server describes it (``GET /v1/jobs/{id}`` or a listing's row).

    ``spec``, ``events``, ``attempts``, ``waiting``, ``depends_on`` and ``notifications`` are filled by
    :meth:`berth.Client.show` only (listings leave them empty).
    """

    id: int
    name: str
    user: str
    status: str
    priority: int = 0
    group: Optional[int] = None
    rank: Optional[int] = None
    num_nodes: int = 1
    resources: Resources = field(default_factory=Resources)
    submitted_at: Optional[_dt.datetime] = None
    started_at: Optional[_dt.datetime] = None
    ended_at: Optional[_dt.datetime] = None
    exit_code: Optional[int] = None
    attempt: int = 0
    restarts: int = 0
    preemptions: int = 0
    requeues: int = 0
    reason: str = ""
    reason_code: Optional[str] = None
    placement: List[Placement] = field(default_factory=list)
    spec: Optional[Dict[str, Any]] = None
    events: List[Dict[str, Any]] = field(default_factory=list)
    attempts: List[Dict[str, Any]] = field(default_factory=list)
    waiting: Optional[Dict[str, Any]] = None
    depends_on: List[str] = field(default_factory=list)
    notifications: List[Dict[str, Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "JobInfo":
        """The view of one job object."""
        placement = data.get("placement")
        events = data.get("events")
        attempts = data.get("attempts")
        depends = data.get("depends_on")
        notices = data.get("notifications")
        waiting = data.get("waiting")
        spec = data.get("spec")
        return cls(
            id=_int(data.get("id")), name=_str(data.get("name")), user=_str(data.get("user")),
            status=_str(data.get("status")), priority=_int(data.get("priority")),
            group=_opt_int(data.get("group")), rank=_opt_int(data.get("rank")),
            num_nodes=_int(data.get("num_nodes"), 1),
            resources=Resources.from_json(data.get("resources")),
            submitted_at=parse_time(data.get("submitted_at")),
            started_at=parse_time(data.get("started_at")),
            ended_at=parse_time(data.get("ended_at")),
            exit_code=_opt_int(data.get("exit_code")), attempt=_int(data.get("attempt")),
            restarts=_int(data.get("restarts")), preemptions=_int(data.get("preemptions")),
            requeues=_int(data.get("requeues")), reason=_str(data.get("reason")),
            reason_code=data.get("reason_code") if isinstance(data.get("reason_code"), str) else None,
            placement=[Placement.from_json(p) for p in placement] if isinstance(placement, list) else [],
            spec=spec if isinstance(spec, dict) else None,
            events=[e for e in events if isinstance(e, dict)] if isinstance(events, list) else [],
            attempts=[a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else [],
            waiting=waiting if isinstance(waiting, dict) else None,
            depends_on=[d for d in depends if isinstance(d, str)] if isinstance(depends, list) else [],
            notifications=([n for n in notices if isinstance(n, dict)]
                           if isinstance(notices, list) else []),
            raw=dict(data))

    @property
    def active(self) -> bool:
        """Not ended yet (pending, starting, setting up or running)."""
        return self.status in ACTIVE_STATUSES

    @property
    def finished(self) -> bool:
        """Ended, one way or another."""
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"

    @property
    def nodes(self) -> List[str]:
        """The nodes its ranks are placed on."""
        return [p.node for p in self.placement]

    def record(self) -> Dict[str, Any]:
        """A flat row for a table (what ``to_dataframe`` puts in a row)."""
        return {
            "id": self.id, "name": self.name, "user": self.user, "status": self.status,
            "priority": self.priority, "group": self.group, "rank": self.rank,
            "num_nodes": self.num_nodes, "gpus": self.resources.gpus, "cpus": self.resources.cpus,
            "memory": self.resources.memory, "submitted_at": self.submitted_at,
            "started_at": self.started_at, "ended_at": self.ended_at, "exit_code": self.exit_code,
            "attempt": self.attempt, "nodes": ",".join(self.nodes), "reason": self.reason,
        }


@dataclass(frozen=True)
class GroupInfo:
    """A bulk group (``GET /v1/groups/{id}``): its size, owner, cap and jobs per status."""

    group: int
    jobs: int
    user: str
    max_running: Optional[int]
    counts: Dict[str, int] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GroupInfo":
        counts = data.get("counts")
        return cls(group=_int(data.get("group")), jobs=_int(data.get("jobs")),
                   user=_str(data.get("user")), max_running=_opt_int(data.get("max_running")),
                   counts={str(k): _int(v) for k, v in counts.items()} if isinstance(counts, dict) else {},
                   raw=dict(data))

    @property
    def done(self) -> int:
        """How many of its jobs have ended."""
        return sum(n for s, n in self.counts.items() if s in TERMINAL_STATUSES)

    @property
    def finished(self) -> bool:
        return self.jobs > 0 and self.done >= self.jobs


@dataclass(frozen=True)
class CancelResult:
    """What a cancel did, job by job (``POST /v1/jobs/cancel``)."""

    cancelled: List[int] = field(default_factory=list)
    already_finished: List[int] = field(default_factory=list)
    not_found: List[int] = field(default_factory=list)
    forbidden: List[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CancelResult":
        return cls(cancelled=_ints(data.get("cancelled")),
                   already_finished=_ints(data.get("already_finished")),
                   not_found=_ints(data.get("not_found")), forbidden=_ints(data.get("forbidden")))

    def merged(self, other: "CancelResult") -> "CancelResult":
        """Both results together (a cancel of several groups is several requests)."""
        return CancelResult(self.cancelled + other.cancelled,
                            self.already_finished + other.already_finished,
                            self.not_found + other.not_found, self.forbidden + other.forbidden)


@dataclass(frozen=True)
class Requeued:
    """A job put back in the queue (``POST /v1/jobs/{id}/requeue``)."""

    id: int
    status: str


@dataclass(frozen=True)
class Identity:
    """Who the server takes you for (``GET /v1/whoami``)."""

    user: str
    role: str
    team: Optional[str]
    via: str
    max_priority: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Identity":
        team = data.get("team")
        return cls(user=_str(data.get("user")), role=_str(data.get("role")),
                   team=team if isinstance(team, str) else None, via=_str(data.get("via")),
                   max_priority=_opt_int(data.get("max_priority")), raw=dict(data))


@dataclass(frozen=True)
class Progress:
    """Counts of the jobs waited for, as the CLI's progress line groups them."""

    pending: int = 0
    running: int = 0  # starting, setting up or running
    succeeded: int = 0
    failed: int = 0  # failed, failed in setup, lost, preempted
    cancelled: int = 0
    total: int = 0

    @classmethod
    def of_counts(cls, counts: Mapping[str, int], total: int) -> "Progress":
        def n(*statuses: str) -> int:
            return sum(counts.get(s, 0) for s in statuses)

        return cls(pending=n("PENDING"), running=n("STARTING", "SETTING_UP", "RUNNING"),
                   succeeded=n("SUCCEEDED"), failed=n(*FAILED_STATUSES), cancelled=n("CANCELLED"),
                   total=total)

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.done >= self.total


@dataclass(frozen=True)
class WaitResult:
    """What ``wait()`` saw last: every job's status (by id) and the counts."""

    statuses: Dict[int, str]
    progress: Progress
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        """Every job succeeded."""
        return self.progress.total > 0 and self.progress.succeeded == self.progress.total

    @property
    def counts(self) -> Dict[str, int]:
        """Jobs per status."""
        out: Dict[str, int] = {}
        for status in self.statuses.values():
            out[status] = out.get(status, 0) + 1
        return out

    def failed(self) -> List[int]:
        """The ids of the jobs that ended without succeeding (cancelled ones included)."""
        return sorted(i for i, s in self.statuses.items() if s in TERMINAL_STATUSES and s != "SUCCEEDED")


T = TypeVar("T")


class ResultList(List[T]):
    """A list of views with ``records()`` and ``to_dataframe()``."""

    def records(self) -> List[Dict[str, Any]]:
        """One flat dict per item."""
        return [item.record() if hasattr(item, "record") else dict(vars(item)) for item in self]

    def to_dataframe(self) -> Any:
        """A pandas DataFrame of ``records()`` (pandas is imported now; ImportError without it)."""
        return to_dataframe(self.records())


class JobList(ResultList[JobInfo]):
    """Jobs, newest first, as ``queue()`` returns them."""


def to_dataframe(records: Sequence[Mapping[str, Any]]) -> Any:
    """A pandas DataFrame of `records`; a clear ImportError when pandas is not installed."""
    try:
        pandas = importlib.import_module("pandas")  # optional: imported only when asked for
    except ImportError as e:
        raise ImportError("to_dataframe() needs pandas, which is not installed (pip install "
                          "pandas, or apt install python3-pandas); the rows are there without it: "
                          ".records()") from e
    return pandas.DataFrame.from_records(list(records))


@dataclass(frozen=True)
class Job:
    """A submitted job: its id, and shortcuts to the client's calls about it."""

    id: int
    name: str = ""
    warnings: Tuple[str, ...] = ()
    client: Optional["Client"] = field(default=None, repr=False, compare=False)

    def _client(self) -> "Client":
        if self.client is None:
            raise ValueError(f"job {self.id} is not bound to a client")
        return self.client

    def show(self) -> JobInfo:
        """The job as the server describes it now."""
        return self._client().show(self)

    @property
    def status(self) -> str:
        """Its status now (one request)."""
        return self.show().status

    def wait(self, timeout: Optional[float] = None, progress: bool = True, **kw: Any) -> WaitResult:
        return self._client().wait(self, timeout=timeout, progress=progress, **kw)

    def logs(self, follow: bool = True, **kw: Any) -> Iterator[str]:
        return self._client().logs(self, follow=follow, **kw)

    def cancel(self, reason: Optional[str] = None) -> CancelResult:
        return self._client().cancel(self, reason=reason)

    def requeue(self) -> Requeued:
        result = self._client().requeue(self)
        assert isinstance(result, Requeued)
        return result


@dataclass(frozen=True)
class Group:
    """A submitted bulk group: its id, its jobs' ids by rank, and (for a sweep) each rank's
    parameters."""

    id: int
    job_ids: Tuple[int, ...]
    name: str = ""
    params: Tuple[Dict[str, Any], ...] = ()
    warnings: Tuple[str, ...] = ()
    client: Optional["Client"] = field(default=None, repr=False, compare=False)

    def _client(self) -> "Client":
        if self.client is None:
            raise ValueError(f"group {self.id} is not bound to a client")
        return self.client

    def __len__(self) -> int:
        return len(self.job_ids)

    @property
    def jobs(self) -> List[Job]:
        """Its jobs, rank 0 first."""
        return [Job(i, self.name, client=self.client) for i in self.job_ids]

    def job(self, rank: int) -> Job:
        """The job of rank `rank`."""
        return Job(self.job_ids[rank], self.name, client=self.client)

    def info(self) -> GroupInfo:
        """Its size, owner, cap and counts per status now."""
        return self._client().group(self)

    def wait(self, timeout: Optional[float] = None, progress: bool = True, **kw: Any) -> WaitResult:
        return self._client().wait(self, timeout=timeout, progress=progress, **kw)

    def logs(self, follow: bool = True, **kw: Any) -> Iterator[str]:
        return self._client().logs(self, follow=follow, **kw)

    def cancel(self, reason: Optional[str] = None) -> CancelResult:
        return self._client().cancel(self, reason=reason)

    def update(self, max_running: Optional[int]) -> GroupInfo:
        """Sets (or with None lifts) how many of its jobs run at once."""
        return self._client().update_group(self, max_running=max_running)
