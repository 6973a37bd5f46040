#!/usr/bin/env python3
"""The house's size rules, checked on every change instead of once a pass.

Usage: check_sizes.py REPO_ROOT

Over the C++ of the programs (service/, topology-agent/, kube/, operator/,
common/, bench/), files listed by git when REPO_ROOT is a checkout, else
every .h/.cpp below those folders:

- a file holds at most MAX_FILE_LINES lines;
- a function defined at namespace scope holds at most MAX_FUNCTION_LINES
  lines, from the first line of its signature to its closing brace.

A function is found the way this code base is written (clang-format, Google
style): its signature starts at column 0, its body's first '{' is the last
character of the signature and the only '{' in it, and its closing '}' is
the next line that starts at column 0 with '}'. Member functions defined
inside a class body (indented) are not measured: they are one-liners here,
and a long one shows in its file's size. Lambdas count toward the function
that holds them.

Prints each breach as file:line: message and exits 1 if there was any, or
if it measured no function at all (a checker that checks nothing passes
nothing).
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
FOLDERS = ("service", "topology-agent", "kube", "operator", "common", "bench")
# Column-0 lines that never start a function's signature.
NOT_A_SIGNATURE = re.compile(r"^(#|//|/\*|\*|}|namespace\b|class\b|struct\b|enum\b|union\b|using\b|typedef\b|extern\b|public:|private:|protected:)")


def sources(root):
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "--", *FOLDERS], check=True, capture_output=True,
                                text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [os.path.relpath(os.path.join(d, f), root) for folder in FOLDERS
                  for d, _, files in os.walk(os.path.join(root, folder)) for f in files]
    return sorted(p for p in listed if p.endswith((".h", ".cpp")))


def code(line):
    """The line without a trailing // comment (good enough: no '//' in our strings ends a signature)."""
    return line.split("//", 1)[0].rstrip()


def functions(lines):
    """(first line, line count, signature) of each namespace-scope function definition, 1-based."""
    found, start, signature = [], None, ""
    i = 0
    while i < len(lines):
        line = lines[i]
        at_column_0 = line[:1] not in ("", " ", "\t")
        if start is None:
            if at_column_0 and not NOT_A_SIGNATURE.match(line):
                start, signature = i, ""
            else:
                i += 1
                continue
        elif at_column_0 and NOT_A_SIGNATURE.match(line) and not line.startswith("//"):
            start = None  # a signature never runs into another declaration
            continue
        signature += " " + code(line).strip()
        if signature.endswith(";") or (signature.count("{") and not signature.endswith("{")):
            start = None  # a declaration, or a variable with a braced initializer
        elif signature.endswith("{"):
            if signature.count("{") == 1 and "(" in signature:
                end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")), None)
                if end is None:
                    return found
                found.append((start + 1, end - start + 1, signature.strip()))
                i = end
            start = None
        i += 1
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = sys.argv[1]
    breaches, measured, files = [], 0, sources(root)
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) > MAX_FILE_LINES:
            breaches.append(f"{path}:1: {len(lines)} lines (at most {MAX_FILE_LINES} a file): split it by job")
        for first, count, signature in functions(lines):
            measured += 1
            if count > MAX_FUNCTION_LINES:
                name = signature.split("(", 1)[0].split()[-1] if "(" in signature else signature[:40]
                breaches.append(f"{path}:{first}: {name} is {count} lines (at most {MAX_FUNCTION_LINES} a function)")
    for breach in breaches:
        print(breach)
    if measured == 0:
        print(f"check_sizes.py: no function found under {', '.join(FOLDERS)} in {root}")
        return 1
    print(f"check_sizes.py: {measured} functions in {len(files)} files measured, {len(breaches)} over the limits")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
