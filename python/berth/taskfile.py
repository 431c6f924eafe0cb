"""What to submit: a task given as a YAML file, YAML text, a dict or a command, made into the task
file text the server reads (``POST /v1/jobs`` with ``{"yaml": TEXT}``), with what ``berth exec`` adds to
it (src/cli/job_cmds.cpp ``SpecOfArgs``, ``ApplyOverrides``, ``ResolveWorkdir``):

- the name: ``name=``, else the file's, else the file name's stem (``train.yaml``: ``train``) or the
  command's first word (``python3 train.py``: ``python3``), made valid as the CLI makes it;
- the work directory: none given means the current directory's path, on the nodes (as sbatch and
  ``berth exec`` do); ``node:/path`` is a path on the nodes. A local directory to upload (what
  ``berth exec`` does with any other workdir) is refused: the client does not upload;
- ``gpus=``, ``cpus=``, ``memory=``, ``envs=``, ``priority=`` override the file as ``--gpus``,
  ``--cpus``, ``--memory``, ``--env``, ``--priority`` do; ``after=`` adds to its ``depends_on`` (as
  ``--after``) and ``max_running=`` sets ``max_running``.

Which kind of task a value is: a ``dict`` is a task file's mapping (``{"run": ..., "resources":
{"accelerators": "V100:1"}}``); an ``os.PathLike`` is a task file; a list of strings is a command's
words (quoted as the CLI quotes them); a string is a task file's path when it names one (ends in
``.yaml``/``.yml``, or is an existing file with no space in its name, as the CLI decides), YAML text
when a line of it starts with a top-level ``key:``, and otherwise a shell command.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .yamlish import TaskFileError, TaskText

TaskLike = Union[str, "os.PathLike[str]", Mapping[str, Any], Sequence[str]]

_NAME_OK = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,127}$")
_TOP_KEY_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*[ \t]*:([ \t]|$)", re.MULTILINE)
_DEPENDENCY = re.compile(
    r"^\s*(ok|notok|any|afterok|afternotok|afterany)\s*:\s*(group\s*:\s*)?[0-9]+(\s*[,:]\s*[0-9]+)*\s*$",
    re.IGNORECASE)
_SHELL_PLAIN = re.compile(r"^[A-Za-z0-9\-_./=:,+@%]+$")
MAX_SCRIPT_BYTES = 1 << 20  # setup and run, each (docs/task-yaml.md "Limits")
MAX_RUNNING = 1_000_000


@dataclass(frozen=True)
class PreparedTask:
    """The task file text to send, and the job's name when the client knows it."""

    text: str
    name: str


def is_valid_name(name: str) -> bool:
    """A job name the server takes: 1-128 letters, digits, '.', '_' or '-', not starting with '-'."""
    return bool(_NAME_OK.match(name))


def clean_name(name: str) -> str:
    """A derived name made valid as the CLI makes it (odd characters become '_')."""
    if is_valid_name(name):
        return name
    clean = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name)
    return "job" if not clean or clean.startswith("-") else clean[:128]


def shell_quote(word: str) -> str:
    """A word as the CLI quotes a command's words (ShellQuote): as it is when plain, else in ''."""
    if word and _SHELL_PLAIN.match(word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def looks_like_task_file(text: str) -> bool:
    """Whether the CLI would read `text` as a task file's path (LooksLikeTaskFile)."""
    if "\n" in text:
        return False
    return text.endswith((".yaml", ".yml")) or (os.path.isfile(text) and " " not in text)


def looks_like_yaml(text: str) -> bool:
    """Whether `text` is task-file YAML rather than a command: a line starts with `key:`."""
    return bool(_TOP_KEY_LINE.search(text)) or text.lstrip().startswith("---")


def dependency_texts(after: Any) -> List[str]:
    """``after=`` as dependency texts: a job (or its id) is ``ok:ID``, a group ``ok:group:G``, a
    string is taken as written (``any:10,11``, ``notok:group:3``); a list is all of them."""
    if after is None:
        return []
    items = list(after) if isinstance(after, (list, tuple, set, frozenset)) else [after]
    out: List[str] = []
    for item in items:
        out.append(_dependency_text(item))
    return out


def _dependency_text(item: Any) -> str:
    from .models import Group, Job  # noqa: PLC0415 - models imports nothing of ours at run time

    if isinstance(item, Group):
        return f"ok:group:{item.id}"
    if isinstance(item, Job):
        return f"ok:{item.id}"
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise TypeError(f"after: expected a job, a group, a job id or a dependency text like "
                        f"'ok:10', got {type(item).__name__}")
    if isinstance(item, int):
        if item < 1:
            raise ValueError(f"after: job ids start at 1, got {item}")
        return f"ok:{item}"
    if not _DEPENDENCY.match(item) or re.search(r"(?<![0-9])0+(?![0-9])", item.split(":", 1)[1]):
        raise ValueError(f"after: dependency '{item}': expected KIND:ID such as ok:10, any:10,11 or "
                         "notok:group:3 (KIND ok, notok or any; ids from 1)")
    return item.strip()


class _DictTask:
    """A task given as a mapping: edited as a dict, sent as JSON (which is YAML)."""

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        for key in mapping:
            if not isinstance(key, str):
                raise TypeError(f"task keys must be strings, got {key!r}")
        self.data: Dict[str, Any] = _copy(mapping)

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value

    def remove(self, key: str) -> None:
        self.data.pop(key, None)

    def render(self) -> str:
        import json  # noqa: PLC0415

        try:
            return json.dumps(self.data, indent=2, ensure_ascii=False) + "\n"
        except (TypeError, ValueError) as e:
            raise TypeError(f"the task holds a value that is not JSON (str, number, bool, None, "
                            f"list, dict): {e}") from None


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


Doc = Union["_DictTask", TaskText]


def _load(task: Any) -> Tuple[Doc, str]:
    """The task as an editable document and the name it would get from where it came from."""
    if isinstance(task, Mapping):
        return _DictTask(task), ""
    if isinstance(task, os.PathLike):
        return _from_file(os.fspath(task))
    if isinstance(task, str):
        if not task.strip():
            raise ValueError("the task is empty: give a task file, YAML, a dict or a command")
        if looks_like_task_file(task):
            return _from_file(task)
        if looks_like_yaml(task):
            return TaskText(task), ""
        return _command([task])
    if isinstance(task, (list, tuple)) and task and all(isinstance(w, str) for w in task):
        return _command(list(task))
    raise TypeError("task: expected a task file path, YAML text, a dict or a command (a string or a "
                    f"list of words), got {type(task).__name__}")


def _from_file(path: str) -> Tuple[Doc, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise FileNotFoundError(e.errno, f"cannot read task file {path}: {e.strerror}", path) from e
    try:
        doc = TaskText(text)
    except TaskFileError as e:
        raise TaskFileError(f"{path}: {e}") from None
    return doc, os.path.splitext(os.path.basename(path))[0]


def _command(words: List[str]) -> Tuple[Doc, str]:
    if not words[0].strip():
        raise ValueError("the command is empty")
    run = words[0] if len(words) == 1 else " ".join(shell_quote(w) for w in words)
    name = os.path.basename(words[0].strip().split(" ")[0])
    return _DictTask({"name": clean_name(name), "run": run}), ""


def prepare_task(task: Any, *, cwd: Optional[str] = None, name: Optional[str] = None,
                 gpus: Optional[str] = None, cpus: Optional[Union[float, str]] = None,
                 memory: Optional[Union[float, str]] = None,
                 envs: Optional[Mapping[str, Any]] = None, priority: Optional[int] = None,
                 workdir: Optional[str] = None, after: Any = None,
                 max_running: Optional[int] = None, run_prefix: str = "",
                 notify: Any = None, reservation: Optional[str] = None) -> PreparedTask:
    """The task file text for a submission (see the module's docstring). ValueError/TypeError for
    what the CLI (or the server) would refuse, before anything is sent."""
    doc, default_name = _load(task)
    _apply_name(doc, name, default_name)
    _apply_workdir(doc, workdir, cwd or os.getcwd())
    _apply_resources(doc, gpus, cpus, memory)
    _apply_envs(doc, envs)
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority: expected an integer, got {type(priority).__name__}")
        doc.set("priority", priority)
    dependencies = dependency_texts(after)
    if dependencies:
        doc.set("depends_on", _as_list(doc.get("depends_on")) + dependencies)
    if max_running is not None:
        doc.set("max_running", max_running)
    if notify is not None:
        doc.set("notify", notify_text(notify))
    if reservation is not None:
        if not isinstance(reservation, str) or not reservation:
            raise TypeError(f"reservation: expected a reservation's name, got {reservation!r}")
        doc.set("reservation", reservation)
    if run_prefix:
        run = doc.get("run")
        if not isinstance(run, str) or not run.strip():
            raise ValueError("the task has no run: command to run for each point")
        doc.set("run", run_prefix + run)
    run = doc.get("run") if isinstance(doc, _DictTask) or run_prefix else None
    if isinstance(run, str) and len(run.encode()) > MAX_SCRIPT_BYTES:
        raise ValueError(f"run is {len(run.encode())} bytes, over the limit of {MAX_SCRIPT_BYTES}")
    final_name = doc.get("name")
    return PreparedTask(text=doc.render(), name=final_name if isinstance(final_name, str) else "")


NOTIFY_EVENTS = ("started", "end", "fail", "oom", "preempted", "idle", "each")


def notify_text(notify: Any) -> str:
    """``notify`` ("end,fail", or a list of events) as the server takes it (docs/notifications.md);
    ValueError naming a word it does not know."""
    if isinstance(notify, str):
        words = [w.strip() for w in notify.split(",") if w.strip()]
    elif isinstance(notify, (list, tuple)) and all(isinstance(w, str) for w in notify):
        words = [w.strip() for w in notify]
    else:
        raise TypeError(f"notify: expected events like 'end,fail' or a list, got {notify!r}")
    for word in words:
        if word not in NOTIFY_EVENTS and not re.match(r"^pending>[0-9][0-9a-z.]*$", word):
            raise ValueError(f"notify: unknown event '{word}'; the events are "
                             f"{', '.join(NOTIFY_EVENTS[:-1])}, pending>DURATION, each")
    return ",".join(words)


def _apply_name(doc: Doc, name: Optional[str], default_name: str) -> None:
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"name: expected a string, got {type(name).__name__}")
        if not is_valid_name(name):
            raise ValueError(f"name: invalid job name '{name}' (use letters, digits, . _ -)")
        doc.set("name", name)
        return
    given = doc.get("name") if doc.has("name") else None
    if not given and default_name:
        doc.set("name", clean_name(default_name))
    elif isinstance(given, str) and given and not is_valid_name(given):
        doc.set("name", clean_name(given))  # as the CLI: a name with odd characters made valid


def _apply_workdir(doc: Doc, workdir: Optional[str], cwd: str) -> None:
    if workdir is not None and not isinstance(workdir, str):
        raise TypeError(f"workdir: expected a string, got {type(workdir).__name__}")
    given = workdir if workdir is not None else doc.get("workdir")
    if given is None or given == "":
        doc.set("workdir", cwd)
        return
    if not isinstance(given, str):
        raise ValueError(f"workdir: expected a path, got {given!r}")
    if given.startswith("node:"):
        path = given[len("node:"):]
        if not path.startswith("/"):
            raise ValueError(f"workdir: node:{path}: a path on the nodes must be absolute "
                             "(node:/shared/proj)")
        doc.set("workdir", path)
        return
    raise ValueError(
        f"workdir: {given}: the Python client does not upload directories (berth exec does): give "
        "node:/path for a path on the nodes, or no workdir (the job then runs in this directory's "
        "path on the nodes)")


def _apply_resources(doc: Doc, gpus: Any, cpus: Any, memory: Any) -> None:
    if gpus is None and cpus is None and memory is None:
        return
    resources = doc.get("resources")
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        raise ValueError("resources: the task's resources are not a mapping")
    resources = dict(resources)
    if gpus is not None:
        if not isinstance(gpus, str):
            raise TypeError(f"gpus: expected TYPE:N such as 'V100:1' (or 'none'), got {gpus!r}")
        if gpus in ("none", "0"):
            resources.pop("accelerators", None)
        elif not re.match(r"^[A-Za-z0-9._-]+(:[0-9.]+)?$", gpus):
            raise ValueError(f"gpus: expected TYPE:N such as 'V100:1' or 'T4:0.5', got '{gpus}'")
        else:
            resources["accelerators"] = gpus
    for key, value in (("cpus", cpus), ("memory", memory)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"{key}: expected a number, got {type(value).__name__}")
        if isinstance(value, (int, float)) and value < 0:
            raise ValueError(f"{key}: expected a number of at least 0, got {value}")
        resources[key] = value
    doc.set("resources", resources)


def _apply_envs(doc: Doc, envs: Optional[Mapping[str, Any]]) -> None:
    if envs is None:
        return
    if not isinstance(envs, Mapping):
        raise TypeError(f"envs: expected a mapping of names to values, got {type(envs).__name__}")
    current = doc.get("envs")
    if current is None:
        current = {}
    if not isinstance(current, dict):
        raise ValueError("envs: the task's envs are not a mapping")
    merged = dict(current)
    for key, value in envs.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"envs: names must be non-empty strings, got {key!r}")
        merged[key] = value if isinstance(value, str) else _env_text(key, value)
    doc.set("envs", merged)


def _env_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    raise TypeError(f"envs: {key}: expected a string or a number, got {type(value).__name__}")


def _as_list(value: Any) -> List[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
