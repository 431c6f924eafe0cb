"""Reading and editing the top level of a task file without a YAML library.

The server reads task files itself (``POST /v1/jobs`` with ``{"yaml": TEXT}``), so the client never
needs to understand a whole file: only to find its top-level keys and, for the few it changes (``name``,
``workdir``, ``resources``, ``envs``, ``depends_on``, ``max_running``, ``run``), to read their values.
:class:`TaskText` does that. An edited key's lines are turned into comments where they stand and its
new value is appended as one line of JSON (JSON is YAML), so every other line keeps its number and the
server's messages ("task.yaml:5: resources.cpus: ...") still point at the user's own lines.

Values are read by a small parser of the YAML that task files use: block mappings and sequences, flow
``{...}`` and ``[...]``, plain, single- and double-quoted scalars (multi-line too) and literal ``|`` and
folded ``>`` block scalars with their chomping and indentation indicators. Scalars are kept as the text
the server would read (plain ``~``/``null``/empty are None); anchors, aliases, tags and complex keys
are refused with :class:`TaskFileError`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Tuple


class TaskFileError(ValueError):
    """A task file (or a value in it) the client cannot read to edit it."""


NULLS = ("", "~", "null", "Null", "NULL")
_KEY = re.compile(r"""^(?P<key>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\[\]{},&*!|>%@`?-][^:#]*?|-[^\s:#][^:#]*?)[ \t]*:(?=[ \t]|$)""")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
            "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
            "_": "\xa0", "L": "\u2028", "P": "\u2029"}


def to_json_line(value: Any) -> str:
    """`value` as one line of JSON that YAML parsers read back as the same value."""
    text = json.dumps(value, ensure_ascii=False)
    # YAML 1.1 parsers take these as line breaks; escaped, they are plain characters to everyone.
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _blank(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _unquote_key(key: str) -> str:
    if key.startswith('"'):
        return _Reader(key, 0).double_quoted()
    if key.startswith("'"):
        return key[1:-1].replace("''", "'")
    return key.strip()


def _strip_comment(text: str) -> str:
    """`text` without a trailing ` # comment` (for plain scalars: no quotes to mind)."""
    m = re.search(r"(^|[ \t])#", text)
    return (text[:m.start()] if m else text).rstrip()


def _plain(text: str) -> Optional[str]:
    return None if text in NULLS else text


class _Reader:
    """Flow-context reading over a string: quoted scalars and ``{...}``/``[...]`` collections."""

    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos

    def error(self, what: str) -> TaskFileError:
        return TaskFileError(f"{what} (at {self.text[self.pos:self.pos + 20]!r})")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_space(self) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif c == "#" and (self.pos == 0 or self.text[self.pos - 1] in " \t\n"):
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                break

    def _fold(self, out: List[str]) -> None:
        """At a line break inside a quoted scalar: trailing blanks dropped, the break folded into a
        space, or each empty line that follows kept as one."""
        while out and out[-1] in (" ", "\t"):
            out.pop()
        self.pos += 1
        empties = 0
        while True:
            while self.peek() in (" ", "\t"):
                self.pos += 1
            if self.peek() == "\n":
                empties += 1
                self.pos += 1
            else:
                break
        out.append("\n" * empties if empties else " ")

    def double_quoted(self) -> str:
        assert self.peek() == '"'
        self.pos += 1
        out: List[str] = []
        while True:
            if self.pos >= len(self.text):
                raise self.error("unterminated double-quoted string")
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\":
                nxt = self.text[self.pos + 1:self.pos + 2]
                if nxt == "\n":  # an escaped line break: joined without a space
                    self.pos += 2
                    while self.peek() in (" ", "\t"):
                        self.pos += 1
                    continue
                if nxt in _ESCAPES:
                    out.append(_ESCAPES[nxt])
                    self.pos += 2
                    continue
                width = {"x": 2, "u": 4, "U": 8}.get(nxt)
                digits = self.text[self.pos + 2:self.pos + 2 + width] if width else ""
                if not width or not re.fullmatch(r"[0-9A-Fa-f]+", digits or "-") or len(digits) != width:
                    raise self.error("bad escape in a double-quoted string")
                out.append(chr(int(digits, 16)))
                self.pos += 2 + width
                continue
            if c == "\n":
                self._fold(out)
                continue
            out.append(c)
            self.pos += 1

    def single_quoted(self) -> str:
        assert self.peek() == "'"
        self.pos += 1
        out: List[str] = []
        while True:
            if self.pos >= len(self.text):
                raise self.error("unterminated single-quoted string")
            c = self.text[self.pos]
            if c == "'":
                if self.text[self.pos + 1:self.pos + 2] == "'":
                    out.append("'")
                    self.pos += 2
                    continue
                self.pos += 1
                return "".join(out)
            if c == "\n":
                self._fold(out)
                continue
            out.append(c)
            self.pos += 1

    def flow_value(self) -> Any:
        self.skip_space()
        c = self.peek()
        if c == "{":
            return self.flow_mapping()
        if c == "[":
            return self.flow_sequence()
        if c == '"':
            return self.double_quoted()
        if c == "'":
            return self.single_quoted()
        if c in ("&", "*", "!", "?"):
            raise self.error("anchors, aliases, tags and complex keys are not supported")
        return self.flow_plain()

    def flow_plain(self) -> Optional[str]:
        start = self.pos
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in ",[]{}\n":
                break
            if c == ":" and self.text[self.pos + 1:self.pos + 2] in ("", " ", "\t", "\n", ",", "]", "}"):
                break
            if c == "#" and self.pos > start and self.text[self.pos - 1] in " \t":
                break
            self.pos += 1
        return _plain(self.text[start:self.pos].strip())

    def flow_mapping(self) -> Dict[str, Any]:
        self.pos += 1
        out: Dict[str, Any] = {}
        while True:
            self.skip_space()
            if self.peek() == "}":
                self.pos += 1
                return out
            key = self.flow_value()
            self.skip_space()
            value = None
            if self.peek() == ":":
                self.pos += 1
                self.skip_space()
                value = None if self.peek() in (",", "}") else self.flow_value()
            out["" if key is None else str(key)] = value
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "}":
                raise self.error("expected ',' or '}' in a flow mapping")

    def flow_sequence(self) -> List[Any]:
        self.pos += 1
        out: List[Any] = []
        while True:
            self.skip_space()
            if self.peek() == "]":
                self.pos += 1
                return out
            item = self.flow_value()
            self.skip_space()
            if self.peek() == ":":  # [a: b]: a single-pair mapping
                self.pos += 1
                item = {"" if item is None else str(item): self.flow_value()}
                self.skip_space()
            out.append(item)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.error("expected ',' or ']' in a flow sequence")


class _Block:
    """Block-context reading of a list of lines (one top-level entry, or a whole document)."""

    def __init__(self, lines: List[str]) -> None:
        self.lines = list(lines)
        self.pos = 0

    def _next_content(self) -> Optional[int]:
        i = self.pos
        while i < len(self.lines) and _blank(self.lines[i]):
            i += 1
        return i if i < len(self.lines) else None

    def _rest_text(self, first: str) -> str:
        return "\n".join([first] + self.lines[self.pos:])

    def _consume_reader(self, first: str, read: Callable[[_Reader], Any]) -> Any:
        """Reads a value that may span lines (quoted, flow) starting with `first` (the rest of the
        current line) and moves past the lines it used; what follows it on its last line must be
        nothing or a comment."""
        reader = _Reader(self._rest_text(first), 0)
        value = read(reader)
        used = reader.text.count("\n", 0, reader.pos)
        line_end = reader.text.find("\n", reader.pos)
        tail = reader.text[reader.pos:line_end if line_end >= 0 else len(reader.text)]
        if tail.strip() and not tail.strip().startswith("#"):
            raise TaskFileError(f"unexpected text after a value: {tail.strip()!r}")
        self.pos += used
        return value

    def node(self, inline: str, parent: int, seq_at_parent: bool) -> Any:
        """The value that starts with `inline` (what follows "key:" or "- " on its line, already
        consumed) of a node whose parent sits at column `parent`."""
        text = inline.strip()
        if text.startswith(("&", "*", "!", "?", "%", "@", "`")):
            raise TaskFileError("anchors, aliases, tags and complex keys are not supported")
        if text.startswith(("|", ">")):
            return self.block_scalar(text, parent)
        if text.startswith('"'):
            return self._consume_reader(inline.lstrip(), lambda r: r.double_quoted())
        if text.startswith("'"):
            return self._consume_reader(inline.lstrip(), lambda r: r.single_quoted())
        if text.startswith(("{", "[")):
            return self._consume_reader(inline.lstrip(), lambda r: r.flow_value())
        text = _strip_comment(text)
        if text:
            return self.plain_continued(text, parent)
        nxt = self._next_content()
        if nxt is None:
            return None
        line = self.lines[nxt]
        ind = _indent(line)
        is_item = line.lstrip(" ").startswith("- ") or line.strip() == "-"
        if ind > parent or (ind == parent and is_item and seq_at_parent):
            self.pos = nxt
            return self.sequence(ind) if is_item else self.mapping(ind)
        return None

    def plain_continued(self, text: str, parent: int) -> Optional[str]:
        """A plain scalar, folded with the more-indented lines that continue it."""
        parts = [text]
        empties = 0
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if not line.strip():
                empties += 1
                self.pos += 1
                continue
            if _indent(line) <= parent or line.strip().startswith("#"):
                break
            parts.append("\n" * empties if empties else " ")
            parts.append(_strip_comment(line.strip()))
            empties = 0
            self.pos += 1
        return _plain("".join(parts))

    def block_scalar(self, header: str, parent: int) -> str:
        m = re.fullmatch(r"([|>])([+-]?)([1-9]?)([+-]?)[ \t]*(#.*)?", header)
        if not m or (m.group(2) and m.group(4)):
            raise TaskFileError(f"bad block scalar header {header!r}")
        folded = m.group(1) == ">"
        chomp = m.group(2) or m.group(4)
        indent = parent + int(m.group(3)) if m.group(3) else None
        if indent is not None and parent < 0:
            indent = int(m.group(3))
        collected: List[str] = []
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if not line.strip(" "):
                collected.append(line)
                self.pos += 1
                continue
            ind = _indent(line)
            if indent is None:
                if ind <= parent:
                    break
                indent = ind
            if ind < indent:
                break
            collected.append(line)
            self.pos += 1
        indent = indent if indent is not None else parent + 1
        empty = [len(line) <= indent and not line.strip(" ") for line in collected]
        texts = [line[indent:] for line in collected]
        return _fold_block(texts, empty, folded, chomp)

    def mapping(self, indent: int) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        while True:
            nxt = self._next_content()
            if nxt is None:
                return out
            line = self.lines[nxt]
            ind = _indent(line)
            if ind < indent or (ind == indent and line.lstrip(" ").startswith("- ")):
                return out
            if ind > indent:
                raise TaskFileError(f"unexpected indentation: {line.strip()!r}")
            m = _KEY.match(line[ind:])
            if not m:
                raise TaskFileError(f"expected 'key: value', got {line.strip()!r}")
            self.pos = nxt + 1
            out[_unquote_key(m.group("key"))] = self.node(line[ind + m.end():], ind, True)

    def sequence(self, indent: int) -> List[Any]:
        out: List[Any] = []
        while True:
            nxt = self._next_content()
            if nxt is None:
                return out
            line = self.lines[nxt]
            ind = _indent(line)
            stripped = line.lstrip(" ")
            if ind != indent or not (stripped.startswith("- ") or stripped.strip() == "-"):
                if ind > indent:
                    raise TaskFileError(f"unexpected indentation: {line.strip()!r}")
                return out
            rest = stripped[2:] if stripped.startswith("- ") else ""
            column = ind + 2 + (len(rest) - len(rest.lstrip(" ")))
            inner = rest.lstrip(" ")
            if inner.startswith("- ") or inner == "-":
                # "- - x": a list in the list, at the inner dash's column.
                self.lines[nxt] = " " * column + inner
                self.pos = nxt
                out.append(self.sequence(column))
            elif _KEY.match(inner) and not inner.startswith(("{", "[", '"', "'")):
                # "- key: value" and what follows at its column: a mapping in the list.
                self.lines[nxt] = " " * column + inner
                self.pos = nxt
                out.append(self.mapping(column))
            else:
                self.pos = nxt + 1
                out.append(self.node(rest, ind, False))


def _fold_block(texts: List[str], empty: List[bool], folded: bool, chomp: str) -> str:
    """A block scalar's value from its lines (indentation removed), as YAML folds and chomps it
    (the algorithm of PyYAML's scanner)."""
    chunks: List[str] = []
    i, n = 0, len(texts)
    breaks: List[str] = []
    while i < n and empty[i]:
        breaks.append("\n")
        i += 1
    line_break = ""
    while i < n:
        chunks.extend(breaks)
        text = texts[i]
        leading_non_space = text[:1] not in (" ", "\t")
        chunks.append(text)
        i += 1
        line_break = "\n"
        breaks = []
        while i < n and empty[i]:
            breaks.append("\n")
            i += 1
        if i >= n:
            break
        if folded and leading_non_space and texts[i][:1] not in (" ", "\t"):
            if not breaks:
                chunks.append(" ")
        else:
            chunks.append(line_break)
    if chomp != "-":
        chunks.append(line_break)
    if chomp == "+":
        chunks.extend(breaks)
    return "".join(chunks)


def parse_value(text: str) -> Any:
    """The value of a small YAML document (used for whole flow-style documents and in tests)."""
    stripped = "\n".join(line for line in text.splitlines() if not _blank(line)).lstrip()
    if not stripped:
        return None
    if stripped[0] in "{[\"'":
        reader = _Reader(text, 0)
        value = reader.flow_value()
        reader.skip_space()
        if reader.pos < len(text):
            raise reader.error("unexpected text after the value")
        return value
    return _Block(text.splitlines()).node("", -1, True)


class TaskText:
    """A task file's text, its top-level keys found, editable key by key (see the module's
    docstring)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.entries: Dict[str, Tuple[int, int]] = {}  # key -> [first line, end line)
        self.end = len(self.lines)  # where the document ends ("..." or the end of the text)
        self.flow: Optional[Dict[str, Any]] = None  # a document written as one {...} mapping
        self._changed: Dict[str, Any] = {}
        self._removed: List[str] = []
        self._index()

    def _index(self) -> None:
        key: Optional[str] = None
        start = 0
        for i, line in enumerate(self.lines):
            if key is None and line.startswith("%"):  # a directive (%YAML 1.2) before "---"
                continue
            if re.match(r"^---([ \t]|$)", line):
                if key is not None:
                    raise TaskFileError("the task file holds several YAML documents: give one")
                start = i + 1
                continue
            if re.match(r"^\.\.\.([ \t]|$)", line):
                self.end = i
                if any(not _blank(rest) for rest in self.lines[i + 1:]):
                    raise TaskFileError("the task file holds several YAML documents: give one")
                break
            if _blank(line) or line[0] in " \t" or line.startswith("- ") or line == "-":
                if key is None and not _blank(line):
                    raise TaskFileError("a task file is a mapping of keys (name:, run:, ...); "
                                        f"line {i + 1} is not one")
                continue
            if key is None and line.lstrip().startswith("{"):
                value = parse_value("\n".join(self.lines[start:]))
                if not isinstance(value, dict):
                    raise TaskFileError("a task file is a mapping of keys (name:, run:, ...)")
                self.flow = value
                return
            m = _KEY.match(line)
            if not m:
                raise TaskFileError(f"line {i + 1} is not a top-level 'key: value': {line.strip()!r}")
            if key is not None:
                self.entries[key] = (self.entries[key][0], i)
            key = _unquote_key(m.group("key"))
            if key in self.entries:
                raise TaskFileError(f"line {i + 1}: '{key}' is given twice")
            self.entries[key] = (i, self.end)
        if key is not None:
            self.entries[key] = (self.entries[key][0], self.end)

    def has(self, key: str) -> bool:
        if self.flow is not None:
            return key in self.flow
        return (key in self.entries or key in self._changed) and key not in self._removed

    def get(self, key: str) -> Any:
        """The value of top-level `key` (None when absent)."""
        if self.flow is not None:
            return self.flow.get(key)
        if key in self._changed:
            return self._changed[key]
        if key not in self.entries or key in self._removed:
            return None
        first, end = self.entries[key]
        block = _Block(self.lines[first:end])
        m = _KEY.match(block.lines[0])
        assert m is not None
        block.pos = 1
        try:
            value = block.node(block.lines[0][m.end():], 0, True)
        except TaskFileError as e:
            raise TaskFileError(f"cannot read '{key}' of the task file (line {first + 1}): {e}") from None
        if block._next_content() is not None:
            raise TaskFileError(f"cannot read '{key}' of the task file (line {first + 1}): "
                                "unexpected lines after its value")
        return value

    def set(self, key: str, value: Any) -> None:
        """Gives top-level `key` this value (JSON-able)."""
        if self.flow is not None:
            self.flow[key] = value
            return
        if key in self._removed:
            self._removed.remove(key)
        self._changed[key] = value

    def remove(self, key: str) -> None:
        if self.flow is not None:
            self.flow.pop(key, None)
            return
        self._changed.pop(key, None)
        if key in self.entries:
            self._removed.append(key)

    def render(self) -> str:
        """The text to send: the original lines, edited keys' old lines commented out in place, and
        their new values appended."""
        if self.flow is not None:
            return json.dumps(self.flow, indent=2, ensure_ascii=False) + "\n"
        lines = list(self.lines[:self.end])
        for key in list(self._changed) + self._removed:
            if key in self.entries:
                first, end = self.entries[key]
                for i in range(first, end):
                    lines[i] = "# " + lines[i] if lines[i].strip() else lines[i]
        for key, value in self._changed.items():
            lines.append(f"{to_json_line(key)}: {to_json_line(value)}")
        return "\n".join(lines) + "\n"
