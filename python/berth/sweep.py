"""Parameter sweeps as one bulk group.

A grid (``{"lr": [0.1, 0.01], "bs": [32, 64]}``: every combination, the last name varying fastest,
as ``itertools.product``; or a list of points, ``[{"lr": 0.1}, ...]``) becomes one submission of
``num_jobs`` = its number of points (``POST /v1/jobs``, the server's bulk group, ``/v1/groups/{id}``).
Every job of a group runs the same task; what tells them apart is ``BERTH_JOB_RANK`` (0..N-1). So the
client puts in front of the task's ``run`` a shell ``case`` on ``$BERTH_JOB_RANK`` that exports the
point's parameters as environment variables of the same names (``$lr``, ``$bs``), and the whole point
as JSON in ``$SWEEP_PARAMS``. Rank R runs point R (``Group.params[R]``).

Values are strings, numbers or booleans (``true``/``false`` in the environment).
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Dict, List, Mapping, Sequence, Union

from .taskfile import shell_quote

Grid = Union[Mapping[str, Sequence[Any]], Sequence[Mapping[str, Any]]]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_PREFIXES = ("BERTH_", "SKYPILOT_")
RESERVED_NAMES = ("CUDA_VISIBLE_DEVICES", "SWEEP_PARAMS")
MAX_POINTS = 1_000_000


def expand_grid(grid: Grid) -> List[Dict[str, Any]]:
    """The grid's points, in rank order. ValueError/TypeError for an empty grid, a name that cannot
    be an environment variable, a value that is not a scalar, or points that name other parameters."""
    if isinstance(grid, Mapping):
        points = _product(grid)
    elif isinstance(grid, (list, tuple)):
        points = [_point(p, i) for i, p in enumerate(grid)]
    else:
        raise TypeError("param_grid: expected a mapping of names to lists of values, or a list of "
                        f"points (mappings), got {type(grid).__name__}")
    if not points:
        raise ValueError("param_grid: the grid is empty (no point to run)")
    if len(points) > MAX_POINTS:
        raise ValueError(f"param_grid: {len(points)} points, over the limit of {MAX_POINTS}")
    return points


def _product(grid: Mapping[str, Sequence[Any]]) -> List[Dict[str, Any]]:
    if not grid:
        raise ValueError("param_grid: the grid is empty (no parameter)")
    names = list(grid)
    for name in names:
        _check_name(name)
        values = grid[name]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise TypeError(f"param_grid: '{name}': expected a list of values, got "
                            f"{type(values).__name__} (write [{values!r}] for one value)")
        if len(values) == 0:
            raise ValueError(f"param_grid: '{name}' has no values")
        for value in values:
            _check_value(name, value)
    total = 1
    for name in names:
        total *= len(grid[name])
        if total > MAX_POINTS:
            raise ValueError(f"param_grid: over {MAX_POINTS} points")
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def _point(point: Any, index: int) -> Dict[str, Any]:
    if not isinstance(point, Mapping):
        raise TypeError(f"param_grid: point {index}: expected a mapping of names to values, got "
                        f"{type(point).__name__}")
    if not point:
        raise ValueError(f"param_grid: point {index} is empty")
    for name, value in point.items():
        _check_name(name)
        _check_value(name, value)
    return dict(point)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise ValueError(f"param_grid: {name!r} cannot be an environment variable's name (letters, "
                         "digits and _, not starting with a digit)")
    if name.startswith(RESERVED_PREFIXES) or name in RESERVED_NAMES:
        raise ValueError(f"param_grid: '{name}' is reserved (BERTH_*, SKYPILOT_*, "
                         "CUDA_VISIBLE_DEVICES, SWEEP_PARAMS)")


def _check_value(name: str, value: Any) -> None:
    if not isinstance(value, (str, int, float, bool)):
        raise TypeError(f"param_grid: '{name}': values are strings, numbers or booleans, got "
                        f"{type(value).__name__}")
    if isinstance(value, str) and "\0" in value:
        raise ValueError(f"param_grid: '{name}': a value holds a NUL byte")
    if isinstance(value, float) and value != value:
        raise ValueError(f"param_grid: '{name}': NaN is not a value")


def env_text(value: Any) -> str:
    """A parameter's value as its environment variable holds it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


def run_prefix(points: List[Dict[str, Any]]) -> str:
    """The shell lines put in front of the task's run: point $BERTH_JOB_RANK's parameters, exported."""
    lines = ["# berth sweep: this job's parameters (point $BERTH_JOB_RANK of the grid)",
             'case "${BERTH_JOB_RANK:-}" in']
    for rank, point in enumerate(points):
        exports = " ".join(f"{name}={shell_quote(env_text(value))}" for name, value in point.items())
        params = shell_quote(json.dumps(point, separators=(",", ":"), ensure_ascii=False))
        lines.append(f"  {rank}) export {exports} SWEEP_PARAMS={params} ;;")
    lines.append('  *) echo "berth sweep: no parameters for rank ${BERTH_JOB_RANK:-unset}" >&2; '
                 "exit 2 ;;")
    lines.append("esac")
    return "\n".join(lines) + "\n"
