"""berth's Python client: submit jobs and parameter sweeps to a berth cluster, wait for them with a
progress line, read their logs, cancel and requeue them, and look at jobs and the queue — from a
script or a notebook, with the standard library only (pandas, when installed, for ``to_dataframe()``).

    import berth
    c = berth.Client()   # finds the server as the `berth` command does
    group = c.sweep({"lr": [0.1, 0.01, 0.001]}, "python3 train.py --lr $lr", gpus="V100:1")
    result = c.wait(group)
    print(result.ok, result.counts)

The module-level functions (``berth.submit(...)``, ``berth.wait(...)``, ...) use one default Client.
docs/python.md in berth's repository describes every call, the errors and the retries.
"""

from __future__ import annotations

from typing import Any

from .client import Client, default_client
from . import errors as _errors
from .errors import (ApiError, BadRequestError, BerthError, BerthWarning, ConfigError,
                     ConflictError, ForbiddenError, InfeasibleError, NotFoundError, TlsError,
                     UnauthorizedError, UnavailableError, WaitTimeout)
from .models import (ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES, CancelResult, Group, GroupInfo,
                     Identity, Job, JobInfo, JobList, Placement, Progress, Requeued, Resources,
                     WaitResult)
from .yamlish import TaskFileError

__version__ = "0.1.0"

# berth.ConnectionError (a subclass of the built-in one) is left out of __all__, so that
# `from berth import *` does not hide the built-in ConnectionError.
ConnectionError = _errors.ConnectionError  # noqa: A001

__all__ = [
    "ACTIVE_STATUSES", "STATUSES", "TERMINAL_STATUSES",
    "ApiError", "BadRequestError", "BerthError", "BerthWarning", "CancelResult", "Client",
    "ConfigError", "ConflictError", "ForbiddenError", "Group", "GroupInfo",
    "Identity", "InfeasibleError", "Job", "JobInfo", "JobList", "NotFoundError", "Placement",
    "Progress", "Requeued", "Resources", "TaskFileError", "TlsError", "UnauthorizedError",
    "UnavailableError", "WaitResult", "WaitTimeout",
    "cancel", "default_client", "logs", "queue", "requeue", "show", "submit", "sweep", "wait",
]


def submit(task: Any, **kw: Any) -> Any:
    """``Client.submit`` on the default client."""
    return default_client().submit(task, **kw)


def sweep(param_grid: Any, template: Any, **kw: Any) -> Group:
    """``Client.sweep`` on the default client."""
    return default_client().sweep(param_grid, template, **kw)


def wait(jobs: Any, timeout: Any = None, progress: Any = True, **kw: Any) -> WaitResult:
    """``Client.wait`` on the default client."""
    return default_client().wait(jobs, timeout=timeout, progress=progress, **kw)


def logs(job: Any, follow: bool = True, **kw: Any) -> Any:
    """``Client.logs`` on the default client."""
    return default_client().logs(job, follow=follow, **kw)


def cancel(jobs: Any = None, **kw: Any) -> CancelResult:
    """``Client.cancel`` on the default client."""
    return default_client().cancel(jobs, **kw)


def requeue(jobs: Any) -> Any:
    """``Client.requeue`` on the default client."""
    return default_client().requeue(jobs)


def show(job: Any) -> JobInfo:
    """``Client.show`` on the default client."""
    return default_client().show(job)


def queue(**kw: Any) -> Any:
    """``Client.queue`` on the default client."""
    return default_client().queue(**kw)
