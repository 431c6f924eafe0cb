"""The berth client: submit jobs and sweeps, wait for them, read their logs, cancel, requeue, look at
jobs and the queue, over berth's HTTP API (docs/api.md), as the ``berth`` command line does.

    import berth
    c = berth.Client()                       # the server the CLI would use
    job = c.submit("python3 train.py --lr 0.1", gpus="V100:1")
    for line in c.logs(job):                 # followed until the job ends
        print(line)
    group = c.sweep({"lr": [0.1, 0.01]}, "python3 train.py --lr $lr")
    result = c.wait(group)                   # a progress line; every job's final status

docs/python.md describes every call.
"""

from __future__ import annotations

import codecs
import json
import logging
import secrets
import time
import urllib.parse
import warnings
from typing import (IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple,
                    Union)

from . import config, sweep as _sweep
from .errors import (ApiError, BerthWarning, ConfigError, ConnectionError, WaitTimeout,
                     api_error_class)
from .models import (STATUSES, TERMINAL_STATUSES, CancelResult, Group, GroupInfo, Identity, Job,
                     JobInfo, JobList, Progress, Requeued, WaitResult)
from .progress import ProgressView
from .taskfile import MAX_RUNNING, PreparedTask, notify_text, prepare_task
from .transport import DEFAULT_RETRY_FOR, DEFAULT_TIMEOUT, Response, Retry, ServerUrl, Transport
from .transport import mark_submission_error

log = logging.getLogger("berth")

JobRef = Union[Job, JobInfo, int]
Waitable = Union[Job, Group, JobInfo, int, Iterable[Union[Job, Group, JobInfo, int]]]

LOG_WAIT_MS = 20_000  # the long poll of a followed log, as `berth logs -f`
LOG_TIMEOUT = 70.0
MAX_PAGE = 2_000  # the server's largest page of jobs
MAX_REASON = 200


class Client:
    """A connection to one berth cluster.

    ``server`` and ``token`` are the CLI's ``--server`` and ``--token``; without them the server is
    found as the CLI finds it (``BERTH_SERVER``, ``berth login``, the local cluster's unix socket;
    berth.config). ``tls_fingerprint`` pins an https server's certificate (``sha256:...``), over the
    login's and ``BERTH_TLS_FINGERPRINT``. ``timeout`` bounds each wait for the server (seconds);
    ``retry_for`` how long a call may be retried (berth.transport). Thread-safe.
    """

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None, *,
                 tls_fingerprint: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                 retry_for: float = DEFAULT_RETRY_FOR) -> None:
        for label, value in (("server", server), ("token", token), ("tls_fingerprint", tls_fingerprint)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{label}: expected a string, got {type(value).__name__}")
        _check_seconds("timeout", timeout, allow_zero=False)
        _check_seconds("retry_for", retry_for, allow_zero=True)
        choice = config.choose_server(server, token, tls_fingerprint, local_health=_answers)
        self.source = choice.source
        self.transport = Transport(choice.urls, choice.token, choice.tls_fingerprint,
                                   timeout=float(timeout), retry_for=float(retry_for))
        if choice.local_home:
            self.transport.on_unreachable = _local_cluster_down(choice.local_home)

    @property
    def server(self) -> str:
        """The URL of the server in use."""
        return self.transport.url

    def __repr__(self) -> str:
        return f"berth.Client(server={self.server!r})"

    def close(self) -> None:
        """Closes its connections, every thread's (a later call opens new ones)."""
        self.transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- the API, raw ---

    def call(self, method: str, path: str, body: Any = None, *,
             idempotency_key: Optional[str] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """One API call: ``method`` ``path`` (``/v1/...``) with a JSON body; the JSON answer, or
        ApiError. Retried as berth.transport says: reads and cancels freely, a submission only
        with an Idempotency-Key, other changes only when the server surely did nothing."""
        if not isinstance(method, str) or not isinstance(path, str) or not path.startswith("/"):
            raise TypeError("call: expected a method and a path starting with /")
        method = method.upper()
        if idempotency_key is not None:
            _check_key(idempotency_key)
        return self._call(method, path, body, retry=_retry_of(method, path, idempotency_key),
                          key=idempotency_key, timeout=timeout)

    def _call(self, method: str, path: str, body: Any = None, *, retry: Retry,
              key: Optional[str] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Idempotency-Key": key} if key else None
        res = self.transport.request(method, path, data, headers=headers, retry=retry,
                                     timeout=timeout)
        return self._decode(res, method, path, key if retry is Retry.KEYED else None)

    def _decode(self, res: Response, method: str, path: str,
                key: Optional[str] = None) -> Dict[str, Any]:
        """The JSON object of a 2xx answer, else the ApiError carrying the server's message."""
        try:
            answer = json.loads(res.body.decode("utf-8")) if res.body else None
        except (UnicodeDecodeError, ValueError):
            answer = None
        bare = path.split("?", 1)[0]
        not_berth = (f"{res.url or 'the server'} answered {res.status} to {method} {bare}: is it a "
                     "berth server? (server=, BERTH_SERVER)")
        if 200 <= res.status < 300:
            if not isinstance(answer, dict):
                raise ApiError(res.status, not_berth, method=method, path=path, headers=res.headers)
            return answer
        message = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(message, str) or not message:
            message = not_berth
        error = api_error_class(res.status)(
            res.status, message, method=method, path=path,
            body=answer if isinstance(answer, dict) else None, headers=res.headers)
        if key and res.status >= 500:
            mark_submission_error(error, key, True)
        raise error

    def health(self) -> Dict[str, Any]:
        """``GET /v1/health``: ``{"ok": true, "version": ...}``."""
        return self._call("GET", "/v1/health", retry=Retry.SAFE)

    def whoami(self) -> Identity:
        """Who the server takes you for: user, role, team, and how it knows (``via``)."""
        return Identity.from_json(self._call("GET", "/v1/whoami", retry=Retry.SAFE))

    # --- submitting ---

    def submit(self, task: Any, *, num_jobs: Optional[int] = None, after: Any = None,
               max_running: Optional[int] = None, idempotency_key: Optional[str] = None,
               name: Optional[str] = None, gpus: Optional[str] = None,
               cpus: Optional[Union[float, str]] = None, memory: Optional[Union[float, str]] = None,
               envs: Optional[Mapping[str, Any]] = None, priority: Optional[int] = None,
               workdir: Optional[str] = None, notify: Any = None,
               reservation: Optional[str] = None) -> Union[Job, Group]:
        """Submits a task (a task file's path, YAML text, a dict, or a command; berth.taskfile)
        as ``berth exec -d`` does. Returns the Job, or with ``num_jobs`` the Group of its
        ``num_jobs`` jobs (ranks 0..N-1, each with BERTH_JOB_RANK). ``after`` (jobs, groups, ids or
        texts like ``any:10``) and ``max_running`` (with ``num_jobs``) are ``--after`` and
        ``--max-running``. The submission carries an Idempotency-Key (a fresh one unless given) and
        is sent again with it when its answer was lost: it never submits twice. ``notify``
        ("end,fail" or a list) is ``--notify`` (docs/notifications.md); ``reservation`` is
        ``--reservation`` (docs/reservations.md)."""
        _check_submission(num_jobs, max_running, idempotency_key)
        prepared = prepare_task(task, name=name, gpus=gpus, cpus=cpus, memory=memory, envs=envs,
                                priority=priority, workdir=workdir, after=after,
                                max_running=max_running, notify=notify, reservation=reservation)
        return self._submit(prepared, num_jobs, idempotency_key)

    def sweep(self, param_grid: Any, template: Any, *, max_running: Optional[int] = None,
              after: Any = None, idempotency_key: Optional[str] = None, name: Optional[str] = None,
              gpus: Optional[str] = None, cpus: Optional[Union[float, str]] = None,
              memory: Optional[Union[float, str]] = None, envs: Optional[Mapping[str, Any]] = None,
              priority: Optional[int] = None, workdir: Optional[str] = None,
              notify: Any = None) -> Group:
        """Runs `template` (a task or a command, as submit takes) once per point of `param_grid`,
        as one bulk group: ``{"lr": [0.1, 0.01], "bs": [32, 64]}`` is 4 jobs, each with its point's
        parameters in its environment (``$lr``, ``$bs``; all of them as JSON in ``$SWEEP_PARAMS``).
        ``Group.params[rank]`` is the point of the job of that rank. See berth.sweep."""
        _check_submission(1, max_running, idempotency_key)
        points = _sweep.expand_grid(param_grid)
        prepared = prepare_task(template, name=name, gpus=gpus, cpus=cpus, memory=memory,
                                envs=envs, priority=priority, workdir=workdir, after=after,
                                max_running=max_running, run_prefix=_sweep.run_prefix(points),
                                notify=notify)
        group = self._submit(prepared, len(points), idempotency_key, params=tuple(points))
        assert isinstance(group, Group)
        return group

    def _submit(self, prepared: PreparedTask, num_jobs: Optional[int], key: Optional[str],
                params: Tuple[Dict[str, Any], ...] = ()) -> Union[Job, Group]:
        body: Dict[str, Any] = {"yaml": prepared.text}
        if num_jobs is not None:
            body["num_jobs"] = num_jobs
        key = key or secrets.token_hex(16)  # as the CLI: 128 random bits, reused by its retries
        answer = self._call("POST", "/v1/jobs", body, retry=Retry.KEYED, key=key)
        notes = tuple(w for w in answer.get("warnings") or () if isinstance(w, str))
        for note in notes:
            warnings.warn(note, BerthWarning, stacklevel=3)
        ids = tuple(i for i in answer.get("jobs") or () if isinstance(i, int))
        group = answer.get("group")
        if isinstance(group, int):
            return Group(group, ids, prepared.name, params, notes, client=self)
        if len(ids) != 1:
            raise ApiError(201, f"the server answered a submission with jobs {list(ids)}",
                           method="POST", path="/v1/jobs", body=answer)
        return Job(ids[0], prepared.name, notes, client=self)

    # --- looking ---

    def show(self, job: JobRef) -> JobInfo:
        """One job in full (``berth show``): spec, events, attempts, and why it waits."""
        return JobInfo.from_json(self._call("GET", f"/v1/jobs/{_job_id(job)}", retry=Retry.SAFE))

    def group(self, group: Union[Group, int]) -> GroupInfo:
        """A bulk group's size, owner, cap and how many of its jobs are in each status."""
        return GroupInfo.from_json(
            self._call("GET", f"/v1/groups/{_group_id(group)}", retry=Retry.SAFE))

    def queue(self, *, all: bool = False, limit: int = 50, group: Optional[Union[Group, int]] = None,
              user: Optional[str] = None, team: Optional[str] = None,
              status: Optional[Union[str, Iterable[str]]] = None, active: bool = False,
              as_dataframe: bool = False) -> Any:
        """The jobs ``berth queue --json`` lists, newest first: the active ones and the ``limit``
        most recent finished ones; ``all`` every job (page after page); ``group``, ``user``,
        ``team`` filter on the server, ``status`` (names, or a comma-separated text) and ``active``
        here, as the CLI does. A JobList (``.to_dataframe()``), or with ``as_dataframe`` a pandas
        DataFrame."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_PAGE:
            raise ValueError(f"limit: expected an integer from 0 to {MAX_PAGE}, got {limit!r}")
        wanted = _statuses(status)
        every_page = all or active or bool(wanted)  # filtered here: every page is read
        query: Dict[str, Any] = ({"all": 1, "page": MAX_PAGE} if every_page
                                 else {"limit": limit, "page": limit})
        if group is not None:
            query["group"] = _group_id(group)
        for label, value in (("user", user), ("team", team)):
            if value is not None:
                if not isinstance(value, str) or not value:
                    raise ValueError(f"{label}: expected a name, got {value!r}")
                query[label] = value
        jobs = JobList(info for info in self._job_pages(query, every_page)
                       if (not active or not info.finished) and (not wanted or info.status in wanted))
        return jobs.to_dataframe() if as_dataframe else jobs

    def _job_pages(self, query: Dict[str, Any], every_page: bool) -> Iterator[JobInfo]:
        """The jobs of ``GET /v1/jobs?QUERY``: one page, or every page following ``next``."""
        before: Optional[int] = None
        while True:
            page = dict(query, **({"before": before} if before else {}))
            answer = self._call("GET", "/v1/jobs?" + urllib.parse.urlencode(page), retry=Retry.SAFE)
            for row in answer.get("jobs") or ():
                yield JobInfo.from_json(row)
            nxt = answer.get("next")
            if not every_page or not isinstance(nxt, int):
                return
            before = nxt

    # --- waiting ---

    def wait(self, jobs: Waitable, timeout: Optional[float] = None,
             progress: Union[bool, IO[str]] = True, *,
             poll_interval: Optional[float] = None) -> WaitResult:
        """Waits until every job (jobs, groups, ids) has ended, showing progress as ``berth wait``
        does (``progress``: True for stderr, a stream, or False for none): a line redrawn in place on
        a terminal, plain lines when the counts change elsewhere. Returns every job's final status
        (WaitResult; ``.ok`` when all succeeded). Raises WaitTimeout (a TimeoutError) after
        ``timeout`` seconds; the jobs go on."""
        groups, ids = _targets(jobs)
        if timeout is not None:
            _check_seconds("timeout", timeout, allow_zero=True)
        if poll_interval is not None:
            _check_seconds("poll_interval", poll_interval, allow_zero=False)
        view = _progress_view(progress, _what(groups, ids))
        interval = poll_interval or (0.25 if view is not None and view.tty else 0.5)
        started = time.monotonic()
        statuses: Dict[int, str] = {}
        try:
            while True:
                counts, total, why = self._poll(groups, ids, statuses)
                p = Progress.of_counts(counts, total)
                if view is not None:
                    view.show(p, why)
                if p.finished:
                    break
                elapsed = time.monotonic() - started
                if timeout is not None and elapsed >= timeout:
                    text = view.line(p) if view is not None else _what(groups, ids)
                    raise WaitTimeout(f"not every job ended within {timeout:g}s: {text}",
                                      WaitResult(dict(statuses), p, elapsed))
                time.sleep(max(0.0, interval if timeout is None else min(interval, timeout - elapsed)))
        finally:
            if view is not None:
                view.close()
        for g in groups:
            statuses.update(self._group_statuses(g))
        return WaitResult(dict(sorted(statuses.items())), p, time.monotonic() - started)

    def _poll(self, groups: List[int], ids: List[int],
              statuses: Dict[int, str]) -> Tuple[Dict[str, int], int, str]:
        """Counts per status of what is waited for, the total, and (one job not started yet) why."""
        counts: Dict[str, int] = {}
        total = 0
        for g in groups:
            group_info = self.group(g)
            total += group_info.jobs
            for status, n in group_info.counts.items():
                counts[status] = counts.get(status, 0) + n
        why = ""
        for i in ids:
            if statuses.get(i) not in TERMINAL_STATUSES:  # an ended job stays ended
                info = self.show(i)
                statuses[i] = info.status
                if len(ids) == 1 and info.status in ("PENDING", "STARTING"):
                    why = info.reason
            counts[statuses[i]] = counts.get(statuses[i], 0) + 1
        return counts, total + len(ids), why

    def _group_statuses(self, group: int) -> Dict[int, str]:
        """Each job of a group's status, by id."""
        return {info.id: info.status for info in self._job_pages({"all": 1, "page": MAX_PAGE,
                                                                  "group": group}, True)}

    # --- logs ---

    def logs(self, job: Union[JobRef, Group], follow: bool = True, *, rank: Optional[int] = None,
             attempt: int = 0, timestamps: bool = False) -> Iterator[str]:
        """The job's output as lines (without their newlines), as ``berth logs``: followed until the
        job ends (``follow``), or what is there now. ``rank``: one node of a multi-node job (default:
        all, interleaved); ``attempt``: an earlier attempt (default: the current one, followed into
        the next when the job is requeued); ``timestamps``: each line prefixed by when it reached the
        server. A Group gives each job's output in turn under a ``==> job N <==`` line."""
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise ValueError(f"rank: expected a node rank (0, 1, ...), got {rank!r}")
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
            raise ValueError(f"attempt: expected an attempt number (0: the current), got {attempt!r}")
        if isinstance(job, Group):
            return self._group_logs(job, follow, rank, attempt, timestamps)
        return self._log_lines(_job_id(job), follow, rank, attempt, timestamps)

    def _group_logs(self, group: Group, follow: bool, rank: Optional[int], attempt: int,
                    timestamps: bool) -> Iterator[str]:
        for job_id in sorted(group.job_ids):
            yield f"==> job {job_id} <=="
            yield from self._log_lines(job_id, follow, rank, attempt, timestamps)

    def _log_lines(self, job_id: int, follow: bool, rank: Optional[int], attempt: int,
                   timestamps: bool) -> Iterator[str]:
        """One job's output lines. Following the current attempt (``attempt`` 0), the attempt the
        first answer names is read to its end; when the job has moved on to another (it was
        requeued: seen when an answer brings nothing, or at the end), that one is read from its
        start, as ``berth logs`` does."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        partial = ""
        offset, current = 0, attempt
        while True:
            res = self._log_chunk(job_id, offset, rank, current, follow, timestamps)
            current = current or _int_header(res, "X-Berth-Attempt")
            *lines, partial = (partial + decoder.decode(res.body)).split("\n")
            yield from lines
            offset = _int_header(res, "X-Berth-Offset")
            done = res.header("X-Berth-Done") == "1"
            if res.body and not done:
                continue
            moved = self._moved_on(job_id, current) if attempt == 0 and current else 0
            if moved:
                # Requeued: the rest of the old attempt's last line, then the new attempt from 0.
                partial += decoder.decode(b"", final=True)
                if partial:
                    yield partial
                partial = ""
                log.info("berth: job %d restarted (attempt %d)", job_id, moved)
                offset, current = 0, moved
                continue
            if done or not follow:
                break
        partial += decoder.decode(b"", final=True)
        if partial:
            yield partial

    def _moved_on(self, job_id: int, attempt: int) -> int:
        """The job's attempt now when it is another than `attempt` (0 when it is not)."""
        now = self.show(job_id).attempt
        return now if now not in (0, attempt) else 0

    def _log_chunk(self, job_id: int, offset: int, rank: Optional[int], attempt: int,
                   follow: bool, timestamps: bool) -> Response:
        """One answer of ``GET /v1/jobs/{id}/logs`` (a long poll when following)."""
        query: Dict[str, Any] = {"offset": offset, "attempt": attempt,
                                 "wait_ms": LOG_WAIT_MS if follow else 0}
        if rank is not None:
            query["rank"] = rank
        if timestamps:
            query["timestamps"] = 1
        path = f"/v1/jobs/{job_id}/logs?" + urllib.parse.urlencode(query)
        res = self.transport.request("GET", path, retry=Retry.SAFE,
                                     timeout=max(LOG_TIMEOUT, self.transport.timeout))
        if res.status != 200:
            self._decode(res, "GET", path)
        return res

    # --- changing ---

    def cancel(self, jobs: Any = None, *, group: Optional[Union[Group, int]] = None,
               all: bool = False, reason: Optional[str] = None) -> CancelResult:
        """Cancels jobs (jobs, ids, groups, or a list of them), a ``group``, or with ``all`` every
        active job of yours, as ``berth cancel``. ``reason`` (one line, at most 200 characters) goes
        into each job's reason. Returns what became of each job."""
        ids: List[int] = []
        groups: List[int] = []
        if jobs is not None:
            more_groups, more_ids = _targets(jobs)
            groups += more_groups
            ids += more_ids
        if group is not None:
            groups.append(_group_id(group))
        if not isinstance(all, bool):
            raise TypeError("all: expected True or False")
        if not ids and not groups and not all:
            raise ValueError("cancel: give jobs, group= or all=True")
        extra: Dict[str, Any] = {}
        if reason is not None:
            if not isinstance(reason, str) or "\n" in reason or len(reason) > MAX_REASON:
                raise ValueError(f"reason: one line of at most {MAX_REASON} characters")
            extra["reason"] = reason
        result = CancelResult()
        if ids or all:
            body = dict(extra, **({"ids": ids} if ids else {}), **({"all": True} if all else {}))
            result = result.merged(CancelResult.from_json(
                self._call("POST", "/v1/jobs/cancel", body, retry=Retry.SAFE)))
        for g in dict.fromkeys(groups):
            result = result.merged(CancelResult.from_json(
                self._call("POST", "/v1/jobs/cancel", dict(extra, group=g), retry=Retry.SAFE)))
        return result

    def requeue(self, jobs: Any) -> Any:
        """Stops a job's running attempt and puts it back in the queue (``berth requeue``): a
        Requeued for one job, a list of them for several. 409 (ConflictError) when it is queued
        already or has ended."""
        groups, ids = _targets(jobs)
        if groups:
            raise TypeError("requeue: give jobs or job ids (a group is requeued job by job)")
        results = []
        for i in ids:
            answer = self._call("POST", f"/v1/jobs/{i}/requeue", retry=Retry.ONCE)
            results.append(Requeued(answer.get("id", i), str(answer.get("status", ""))))
        single = isinstance(jobs, (Job, JobInfo, int))
        return results[0] if single else results

    def update_group(self, group: Union[Group, int], *, max_running: Optional[int]) -> GroupInfo:
        """Sets how many of a group's jobs run at once (None: no limit), as ``berth update``."""
        if max_running is not None and (isinstance(max_running, bool)
                                        or not isinstance(max_running, int)
                                        or not 1 <= max_running <= MAX_RUNNING):
            raise ValueError(f"max_running: expected an integer from 1 to {MAX_RUNNING} or None, "
                             f"got {max_running!r}")
        return GroupInfo.from_json(self._call("POST", f"/v1/groups/{_group_id(group)}",
                                              {"max_running": max_running}, retry=Retry.ONCE))

    # --- reservations (docs/reservations.md) ---

    def reservations(self) -> List[Dict[str, Any]]:
        """Every reservation, each with its ``window`` (``start``, ``end``; None when none is left)
        and whether it is ``active``, as ``berth reserve list --json``."""
        answer = self._call("GET", "/v1/reservations", retry=Retry.SAFE)
        return list(answer.get("reservations") or [])

    # --- notifications (docs/notifications.md) ---

    def notify_set(self, *, email: Optional[str] = None, webhook: Optional[str] = None,
                   secret: Optional[str] = None, format: str = "json",
                   events: Optional[str] = None) -> List[Dict[str, Any]]:
        """Sets your e-mail address and/or webhook (each replaces the one you had), as
        ``berth notify set``. A webhook needs ``secret`` (16 to 512 characters), which signs its
        deliveries (berth.webhooks.verify); ``format`` is "json" or "slack"; ``events`` the
        defaults of your jobs without ``notify``. The sinks as the server keeps them."""
        if email is None and webhook is None:
            raise ValueError("notify_set: say where to: email= and/or webhook=")
        sinks = []
        for kind, target in (("email", email), ("webhook", webhook)):
            if target is None:
                continue
            body: Dict[str, Any] = {"kind": kind, "target": target}
            if events is not None:
                body["events"] = notify_text(events)
            if kind == "webhook":
                if not isinstance(secret, str):
                    raise ValueError("notify_set: a webhook needs secret= (16 to 512 characters)")
                body["secret"] = secret
                body["format"] = format
            sinks.append(self._call("POST", "/v1/notify/sinks", body, retry=Retry.ONCE))
        return sinks

    def notify_unset(self, *, email: bool = False, webhook: bool = False) -> None:
        """Removes your e-mail address and/or webhook; NotFoundError when there is none."""
        for kind, remove in (("email", email), ("webhook", webhook)):
            if remove:
                self._call("DELETE", f"/v1/notify/sinks/{kind}", retry=Retry.ONCE)

    def notifications(self, limit: int = 50) -> Dict[str, Any]:
        """``{"sinks": [...], "notices": [...]}``: your sinks and latest notices, newest first
        (each with its ``state``, ``attempts`` and ``last_error``), as ``berth notify ls``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValueError(f"limit: expected 1 to 1000, got {limit!r}")
        return self._call("GET", f"/v1/notify?limit={limit}", retry=Retry.SAFE)

    def notify_test(self) -> str:
        """Sends a test notification to each of your sinks; its event id."""
        return str(self._call("POST", "/v1/notify/test", retry=Retry.ONCE).get("id", ""))


# --- checks and helpers ---

def _check_seconds(label: str, value: Any, allow_zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{label}: expected seconds (a number), got {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        raise ValueError(f"{label}: expected a positive number of seconds, got {value!r}")


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise TypeError(f"idempotency_key: expected a string, got {type(key).__name__}")
    if not 1 <= len(key) <= 255 or any(not 0x21 <= ord(c) <= 0x7E for c in key):
        raise ValueError("idempotency_key: 1 to 255 printable ASCII characters without spaces")


def _check_submission(num_jobs: Any, max_running: Any, key: Any) -> None:
    if num_jobs is not None:
        if isinstance(num_jobs, bool) or not isinstance(num_jobs, int):
            raise TypeError(f"num_jobs: expected an integer, got {type(num_jobs).__name__}")
        if num_jobs < 1:
            raise ValueError(f"num_jobs: expected at least 1, got {num_jobs}")
    if max_running is not None:
        if isinstance(max_running, bool) or not isinstance(max_running, int):
            raise TypeError(f"max_running: expected an integer, got {type(max_running).__name__}")
        if not 1 <= max_running <= MAX_RUNNING:
            raise ValueError(f"max_running: expected 1 to {MAX_RUNNING}, got {max_running}")
        if num_jobs is None:
            raise ValueError("max_running limits a bulk group: add num_jobs=N")
    if key is not None:
        _check_key(key)


def _job_id(job: Any) -> int:
    if isinstance(job, (Job, JobInfo)):
        return job.id
    if isinstance(job, bool) or not isinstance(job, int):
        raise TypeError(f"expected a job or a job id, got {type(job).__name__}")
    if job < 1:
        raise ValueError(f"job ids start at 1, got {job}")
    return job


def _group_id(group: Any) -> int:
    if isinstance(group, Group):
        return group.id
    if isinstance(group, bool) or not isinstance(group, int):
        raise TypeError(f"expected a group or a group id, got {type(group).__name__}")
    if group < 1:
        raise ValueError(f"group ids start at 1, got {group}")
    return group


def _targets(jobs: Any) -> Tuple[List[int], List[int]]:
    """Groups and job ids, in order and without repeats, of a job, group, id or list of them."""
    items = [jobs] if isinstance(jobs, (Job, Group, JobInfo, int, str)) else jobs
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise TypeError(f"expected jobs, groups or job ids, got {type(jobs).__name__}")
    groups: List[int] = []
    ids: List[int] = []
    for item in items:
        if isinstance(item, Group):
            groups.append(item.id)
        else:
            ids.append(_job_id(item))
    if not groups and not ids:
        raise ValueError("no jobs given")
    return list(dict.fromkeys(groups)), list(dict.fromkeys(ids))


def _progress_view(progress: Any, what: str) -> Optional[ProgressView]:
    """wait()'s progress: None for False, stderr for True, else the stream given."""
    if progress is False:
        return None
    if progress is True:
        return ProgressView(what)
    if not hasattr(progress, "write"):
        raise TypeError("progress: expected True, False or a stream to write to")
    return ProgressView(what, progress)


def _what(groups: List[int], ids: List[int]) -> str:
    if len(groups) == 1 and not ids:
        return f"group {groups[0]}"
    if len(ids) == 1 and not groups:
        return f"job {ids[0]}"
    parts = [f"{len(groups)} groups" if len(groups) > 1 else f"group {groups[0]}"] if groups else []
    if ids:
        parts.append(f"{len(ids)} jobs" if len(ids) > 1 else f"job {ids[0]}")
    return " and ".join(parts)


def _statuses(status: Any) -> List[str]:
    if status is None:
        return []
    names = status.split(",") if isinstance(status, str) else list(status)
    out = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"status: expected status names, got {name!r}")
        name = name.strip()
        if not name:
            continue
        if name not in STATUSES:
            near = [s for s in STATUSES if s.startswith(name.upper()[:3])] if len(name) >= 3 else []
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"status: no status {name}{hint}; statuses are {', '.join(STATUSES)}")
        out.append(name)
    return out


def _retry_of(method: str, path: str, key: Optional[str]) -> Retry:
    """How a raw call may be repeated: reads and cancels freely; a submission only with its key."""
    bare = path.split("?", 1)[0].rstrip("/")
    if method in ("GET", "HEAD") or bare == "/v1/jobs/cancel":
        return Retry.SAFE
    if bare == "/v1/jobs" and method == "POST":
        return Retry.KEYED if key else Retry.NEVER
    return Retry.ONCE


def _int_header(res: Response, name: str) -> int:
    try:
        return int(res.header(name) or 0)
    except ValueError:
        return 0


def _answers(url: str) -> bool:
    """Whether a berth server answers at `url` (its health, within 2 s)."""
    try:
        res = Transport([url], timeout=2.0, retry_for=0).request("GET", "/v1/health")
    except (ConnectionError, ConfigError):
        return False
    return res.status in (200, 401)


def _local_cluster_down(home: str) -> Callable[[ServerUrl, ConnectionError],
                                                Optional[ConnectionError]]:
    """The error for a local cluster whose socket is there but whose server does not answer."""

    def replacement(server: ServerUrl, error: ConnectionError) -> Optional[ConnectionError]:
        if server.scheme != "unix" or server.socket_path != config.local_socket_path(home):
            return None
        return ConnectionError(
            f"the local cluster under {home} is not running (nothing answers at {server.socket_path}): "
            "`berth local up` starts it", url=server.text)

    return replacement


# --- a default client, for scripts and notebooks ---

_default: Optional[Client] = None


def default_client() -> Client:
    """The Client the module-level functions use, made on first use from the environment."""
    global _default
    if _default is None:
        _default = Client()
    return _default

