#!/usr/bin/env python3
"""Checks the code's shape limits (docs/design.md "How the code reads"):

- no class or struct in src/ declares more than 45 member functions (counted over its header,
  private ones included; deleted ones not);
- no source file in src/ is over 1,000 lines;
- no function in server/, cli/, agent/, exe/ or supervise/ is over 150 lines;
- no comment in src/, tests/ or bench/ code names an issue number: comments cite files in this
  repository (docs/design.md says where each thing is), which outlive the tracker's numbering.

It reads the code with regular expressions, not a compiler: it is a guard, not a proof. Prints what
is over and exits 1; prints the largest of each otherwise.
"""
import os
import re
import subprocess
import sys

MAX_METHODS = 45
MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 150
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+\b", re.I)
FUNCTION_DIRS = ("server", "cli", "agent", "exe", "supervise")
NOT_FUNCTIONS = {
    "REQUIRES", "EXCLUDES", "GUARDED_BY", "ACQUIRE", "RELEASE", "PT_GUARDED_BY",
    "BERTH_THREAD_ANNOTATION", "ACQUIRED_AFTER", "CAPABILITY", "decltype", "sizeof", "alignof",
    "noexcept", "static_assert", "alignas",
}


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])'", "''", text)


def closing_brace(text, i):
    depth = 0
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return i


def declares_function(stmt):
    stmt = re.sub(r"\b(public|private|protected)\s*:", "", stmt).strip()
    if not stmt or "(" not in stmt:
        return False
    if re.match(r"(using|friend|typedef|enum|class|struct|template\s*<[^>]*>\s*(class|struct))\b", stmt):
        return False
    m = re.search(r"(~?\w+|operator\s*\S+?)\s*\(", stmt)
    if not m or m.group(1) in NOT_FUNCTIONS:
        return False
    before = stmt[: m.start()]
    return "=" not in before and "{" not in before and not re.search(r"=\s*delete\s*$", stmt)


def methods_per_class(path):
    text = strip(open(path).read())
    counts = {}
    head = r"\b(class|struct)\s+(?:[A-Z_]+(?:\([^)]*\))?\s+)*(\w+)\s*(?:final\s*)?(?::[^{;()]*)?\{"
    for m in re.finditer(head, text):
        start = m.end() - 1
        end = closing_brace(text, start)
        i, stmt, n = start + 1, "", 0
        while i < end:
            c = text[i]
            if c == "{":
                j = closing_brace(text, i)
                if declares_function(stmt) and re.search(r"\)[^()]*$", stmt):
                    n, stmt, i = n + 1, "", j + 1
                    continue
                stmt, i = stmt + text[i : j + 1], j + 1
                continue
            if c == ";":
                n += declares_function(stmt)
                stmt = ""
            elif c == ":" and re.search(r"\b(public|private|protected)\s*$", stmt):
                stmt = ""
            else:
                stmt += c
            i += 1
        counts[m.group(2)] = counts.get(m.group(2), 0) + n
    return counts


def long_functions(path):
    lines = open(path).read().split("\n")
    out, i = [], 0
    skip = ("//", "#", "namespace", "}", "using", "struct", "class", "enum", "template", "static_assert")
    while i < len(lines):
        line = lines[i]
        if line and not line[0].isspace() and not line.startswith(skip) and "(" in line:
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                if k - i + 1 > MAX_FUNCTION_LINES:
                    out.append((k - i + 1, i + 1, line.strip()[:60]))
                i = k
        i += 1
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = subprocess.check_output(["git", "ls-files", "src/*.cpp", "src/*.h"], text=True).split()
    over = []
    most_methods = (0, "")
    for path in (f for f in files if f.endswith(".h")):
        for name, n in methods_per_class(path).items():
            most_methods = max(most_methods, (n, f"{name} ({path})"))
            if n > MAX_METHODS:
                over.append(f"{path}: {name} declares {n} member functions (at most {MAX_METHODS})")
    most_lines = (0, "")
    for path in files:
        n = sum(1 for _ in open(path))
        most_lines = max(most_lines, (n, path))
        if n > MAX_FILE_LINES:
            over.append(f"{path}: {n} lines (at most {MAX_FILE_LINES})")
        if path.endswith(".cpp") and path.split("/")[1] in FUNCTION_DIRS:
            for n, line, what in long_functions(path):
                over.append(f"{path}:{line}: {what}... is {n} lines (at most {MAX_FUNCTION_LINES})")
    code = subprocess.check_output(
        ["git", "ls-files", "src/*.cpp", "src/*.h", "tests/*.cpp", "tests/*.h", "tests/*.py", "bench/*.cpp",
         "bench/*.py"], text=True).split()
    for path in code:
        for n, line in enumerate(open(path), 1):
            if ISSUE_NUMBER.search(line):
                over.append(f"{path}:{n}: names an issue number; cite a file of this repository instead")
    if over:
        print("\n".join(over), file=sys.stderr)
        return 1
    print(f"shape: most member functions {most_methods[0]} ({most_methods[1]}), "
          f"longest file {most_lines[0]} lines ({most_lines[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
