#!/usr/bin/env python3
"""The documentation's promises about the tree, checked.

Usage: check_docs.py REPO_ROOT

Over README.md, docs/**/*.md, charts/README.md and bench/README.md:

- every relative Markdown link (and image) resolves to a file or folder of
  the repository, and a `#anchor` into a Markdown file names one of its
  headings (GitHub's slugs);
- every repository path named in an inline code span, in link text or in a
  shell block (a word that contains a '/' and starts with a top-level folder:
  service/, tests/, docs/, ...) exists. `a.{h,cpp}` names both files; a word
  with a <placeholder> or '...' is skipped; one with '*' must match something;
  paths under a folder .gitignore lists (bench/results/) are outputs, skipped;
- the generated option tables are there, between their markers, once each
  (their currency is the CLI tests': they diff them against `options`);
- every metric family the service, the agent and the operator export (the
  "numaserve_..." names in their metrics sources) is in the metrics
  reference.

Prints each failure as file:line: message and exits 1 if there was any, or
if it found nothing to check (a checker that checks nothing passes nothing).
"""
import glob
import os
import re
import sys
import unicodedata

TOP_LEVEL = ("service", "topology-agent", "kube", "operator", "common", "tests", "charts", "docs", "bench",
             "scripts", "docker", "manifests", "cmake", ".ci", "python", "examples")
# The generated tables, and the file that holds them.
OPTION_TABLES = ("service-options", "agent-options", "operator-options")
SHELL_FENCES = ("", "sh", "bash", "shell", "console")
# The files that name every exported metric family, and the page that
# documents them.
METRICS_SOURCES = ("service/metrics/metrics.cpp", "topology-agent/serve/metrics.cpp",
                   "operator/controller/operator.cpp")
METRICS_REFERENCE = "docs/operate.md"

LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[([^\]]+)\]:\s+(\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+-]*)")


def doc_files(root):
    files = ["README.md", "charts/README.md", "bench/README.md"]
    files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    return files


def ignored_folders(root):
    """The plain folders .gitignore lists (outputs such as bench/results/)."""
    out = []
    try:
        with open(os.path.join(root, ".gitignore"), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("#") or not line.endswith("/") or any(c in line for c in "*?[!"):
                    continue
                out.append(line.lstrip("/"))
    except OSError:
        pass
    return out


def slug(text):
    """GitHub's anchor for a heading: the rendered text, lower case, only
    letters, digits, '-', '_' and spaces, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)                       # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


class Doc:
    """A Markdown file as lines, each marked as prose or code of a fence."""

    def __init__(self, root, rel):
        self.rel = rel
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        self.kinds = []  # None for prose, else the fence's language
        fence = None
        for line in self.lines:
            m = FENCE.match(line)
            if fence is None and m:
                fence = (m.group(1)[0], len(m.group(1)), m.group(2).lower())
                self.kinds.append("fence")
            elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not m.group(2):
                fence = None
                self.kinds.append("fence")
            else:
                self.kinds.append(None if fence is None else fence[2])

    def anchors(self):
        seen, out = {}, set()
        for line, kind in zip(self.lines, self.kinds):
            m = HEADING.match(line) if kind is None else None
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", "\n".join(self.lines)):
            out.add(m.group(1))
        return out


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.failures = []
        self.links = 0
        self.paths = 0
        self.ignored = ignored_folders(self.root)
        self.docs = {}

    def fail(self, where, message):
        self.failures.append(f"{where}: {message}")

    def doc(self, rel):
        if rel not in self.docs:
            self.docs[rel] = Doc(self.root, rel)
        return self.docs[rel]

    # Paths -----------------------------------------------------------------

    def expand(self, word):
        """a.{h,cpp} -> a.h, a.cpp (one brace group at a time)."""
        m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
        if not m:
            return [word]
        out = []
        for alt in m.group(1).split(","):
            out += self.expand(word[:m.start()] + alt + word[m.end():])
        return out

    def check_path(self, where, word):
        word = word.strip("\"'()[],;")
        word = re.sub(r":\d+(-\d+)?$", "", word)   # file:line
        word = re.sub(r"#.*$", "", word)            # file#anchor
        word = word.rstrip(".,;:")
        if "/" not in word or not word.split("/", 1)[0] in TOP_LEVEL:
            return
        if "<" in word or ">" in word or "..." in word or "…" in word or "$" in word or "|" in word:
            return  # a placeholder or an elided path, not one file
        for path in self.expand(word):
            # The folder itself (`tests/clients/.venv`, made by a test run) or anything in it.
            if any((path.rstrip("/") + "/").startswith(folder) for folder in self.ignored):
                continue
            self.paths += 1
            full = os.path.join(self.root, path)
            if any(c in path for c in "*?["):
                if not glob.glob(full):
                    self.fail(where, f"'{path}' matches nothing in the tree")
            elif not os.path.exists(full):
                self.fail(where, f"'{path}' does not exist")
            elif path.endswith("/") and not os.path.isdir(full):
                self.fail(where, f"'{path}' is not a folder")

    def check_words(self, where, text):
        for word in re.split(r"[\s=]+", text):
            if word:
                self.check_path(where, word)

    # Links -----------------------------------------------------------------

    def check_link(self, where, doc, target):
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            return  # http:, https:, mailto: ...: not ours to check offline
        self.links += 1
        path, _, anchor = target.partition("#")
        if path:
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc.rel), path))
            if resolved.startswith(".."):
                self.fail(where, f"link '{target}' leaves the repository")
                return
            if not os.path.exists(os.path.join(self.root, resolved)):
                self.fail(where, f"link '{target}': no such file {resolved}")
                return
        else:
            resolved = doc.rel
        if anchor:
            if not resolved.endswith(".md"):
                return
            if anchor not in self.doc(resolved).anchors():
                self.fail(where, f"link '{target}': {resolved} has no heading #{anchor}")

    # One file ----------------------------------------------------------------

    def check_doc(self, rel):
        doc = self.doc(rel)
        for n, (line, kind) in enumerate(zip(doc.lines, doc.kinds), start=1):
            where = f"{rel}:{n}"
            if kind == "fence":
                continue
            if kind is not None:
                if kind in SHELL_FENCES:
                    code = line.split(" #", 1)[0]  # not the comment
                    if not code.lstrip().startswith(("#", "$ curl", "{", "level=")):
                        self.check_words(where, code.lstrip("$ "))
                continue
            for m in REF_DEF.finditer(line):
                self.check_link(where, doc, m.group(2))
            prose = line
            for m in LINK.finditer(line):
                self.check_link(where, doc, m.group(3))
                text = m.group(2)
                for word in re.split(r"\s+", re.sub(r"`", " ", text)):
                    self.check_path(where, word)
            for m in CODE_SPAN.finditer(prose):
                self.check_words(where, m.group(2))

    def check_option_tables(self, files):
        for name in OPTION_TABLES:
            begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
            holders = [f for f in files if begin in "\n".join(self.doc(f).lines)]
            if len(holders) != 1:
                self.fail("docs", f"the marker {begin} is in {len(holders)} files ({', '.join(holders) or 'none'}), want 1")
                continue
            doc = self.doc(holders[0])
            text = "\n".join(doc.lines)
            inside = text.split(begin, 1)[1].split(end, 1)
            if len(inside) != 2:
                self.fail(holders[0], f"{begin} has no {end}")
            elif inside[0].count("\n| `--") < 3:
                self.fail(holders[0], f"the table between {begin} and {end} is empty: run scripts/update-option-tables.sh")

    def check_metrics(self):
        try:
            reference = "\n".join(self.doc(METRICS_REFERENCE).lines)
        except OSError:
            self.fail(METRICS_REFERENCE, "missing: it holds the metrics reference")
            return
        for source in METRICS_SOURCES:
            try:
                with open(os.path.join(self.root, source), encoding="utf-8") as f:
                    families = sorted(set(re.findall(r'"(numaserve_[a-z0-9_]+)"', f.read())))
            except OSError:
                self.fail(METRICS_REFERENCE, f"{source} is gone: update METRICS_SOURCES in tests/docs/check_docs.py")
                continue
            if not families:
                self.fail(source, "no metric family found")
            for family in families:
                if f"`{family}`" not in reference:
                    self.fail(METRICS_REFERENCE, f"metric family {family} ({source}) is not in the metrics reference")

    def run(self):
        files = doc_files(self.root)
        present = []
        for rel in files:
            if not os.path.isfile(os.path.join(self.root, rel)):
                self.fail(rel, "missing")
            else:
                present.append(rel)
        if not any(f.startswith("docs/") for f in present):
            self.fail("docs/", "no Markdown file under docs/")
        for rel in present:
            self.check_doc(rel)
        self.check_option_tables(present)
        self.check_metrics()
        if self.links == 0:
            self.fail("docs", "no relative link checked: the checker is reading nothing")
        if self.paths == 0:
            self.fail("docs", "no repository path checked: the checker is reading nothing")
        for failure in self.failures:
            print(failure)
        print(f"{len(present)} files, {self.links} links, {self.paths} paths checked; {len(self.failures)} failure(s)")
        return 1 if self.failures else 0


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_docs.py REPO_ROOT", file=sys.stderr)
        return 2
    return Checker(argv[1]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
