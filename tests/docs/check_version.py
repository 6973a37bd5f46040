#!/usr/bin/env python3
"""The release's version is one fact: CMake's project() version (which the
binaries are built with) is the chart's version and appVersion, and the
Python package's. Usage: check_version.py REPO_ROOT VERSION (CMake's).
Prints each place that differs, file and line, and exits 1 if any does."""
import re
import sys


def main(root, want):
    places = [
        ("charts/numaserve/Chart.yaml", r'^version:\s*"?([^"\s]+)"?\s*$'),
        ("charts/numaserve/Chart.yaml", r'^appVersion:\s*"?([^"\s]+)"?\s*$'),
        ("python/pyproject.toml", r'^version\s*=\s*"([^"]+)"\s*$'),
    ]
    failures = 0
    for path, pattern in places:
        found = None
        with open(f"{root}/{path}", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = re.match(pattern, line)
                if m:
                    found = (number, m.group(1))
                    break
        if found is None:
            print(f"{path}: no line matching {pattern}")
            failures += 1
        elif found[1] != want:
            print(f"{path}:{found[0]}: version {found[1]}, CMakeLists.txt's project() says {want}")
            failures += 1
    print(f"{len(places)} places checked against {want}; {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
