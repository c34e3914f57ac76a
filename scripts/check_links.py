#!/usr/bin/env python3
"""Checks the relative links of the Markdown documentation: every [text](target) and <a href> whose
target is a path in the repository (not a URL) must name a file or folder that exists, and every
#anchor, in the same file or in another Markdown file, a heading there (GitHub's anchors: lowercase,
spaces to '-', punctuation but '-' and '_' dropped, a repeated heading getting -1, -2, ...) or an
explicit <a name>/<a id>. Links inside code blocks and code spans are not links.

  scripts/check_links.py [FILE.md ...]    default: README.md, CONTRIBUTING.md, BENCHMARKS.md,
                                          apps/dtl-train/README.md and docs/*.md

Prints one line per dead link, `file:line: target: why`, and exits 1 when there is any; 0 otherwise.
Python 3's standard library only."""
import glob
import os
import re
import sys
import unicodedata
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FILES = ["README.md", "CONTRIBUTING.md", "BENCHMARKS.md", "apps/dtl-train/README.md"]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
IMAGE = re.compile(r"!\[[^\[\]]*\]\(\s*(<[^>]*>|[^)\s]+)")  # an image inside a link's text too
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_LINK = re.compile(r"<a\s[^>]*href=\"([^\"]*)\"", re.I)
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]*)\"", re.I)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
        elif ch == " ":
            kept.append("-")
    return "".join(kept)


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip().strip(fence[0]):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, line


def without_code_spans(line):
    return CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


_anchors = {}


def anchors(path):
    """The anchors a Markdown file defines: its headings' and its <a name>/<a id>."""
    if path not in _anchors:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for _, line in prose_lines(text):
            found.update(HTML_ANCHOR.findall(without_code_spans(line)))
            h = HEADING.match(line)
            if not h:
                continue
            base = slug(h.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = found
    return _anchors[path]


def targets(text):
    """(line number, target) of every link in a Markdown text."""
    for number, line in prose_lines(text):
        line = without_code_spans(line)
        found = {(m.start(1), m.group(1)) for m in INLINE_LINK.finditer(line)}
        found |= {(m.start(1), m.group(1)) for m in IMAGE.finditer(line)}
        for _, target in sorted(found):
            yield number, target
        m = REFERENCE_DEF.match(line)
        if m:
            yield number, m.group(1)
        for href in HTML_LINK.findall(line):
            yield number, href


def check(md_file):
    """The dead links of one file, as messages."""
    dead = []
    with open(md_file, encoding="utf-8") as f:
        text = f.read()
    here = os.path.dirname(md_file)
    for number, target in targets(text):
        target = target.strip("<>")
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # a URL (https:, mailto:, ...): not this checker's
        where = f"{os.path.relpath(md_file, ROOT)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        path_part = urllib.parse.unquote(path_part)
        if path_part:
            if path_part.startswith("/"):
                resolved = os.path.join(ROOT, path_part.lstrip("/"))
            else:
                resolved = os.path.normpath(os.path.join(here, path_part))
            if not os.path.exists(resolved):
                dead.append(f"{where}: no such file or folder")
                continue
        else:
            resolved = md_file
        if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
            if urllib.parse.unquote(anchor) not in anchors(resolved):
                dead.append(f"{where}: no heading or anchor '#{anchor}' in {os.path.relpath(resolved, ROOT)}")
    return dead


def main(argv):
    files = argv or DEFAULT_FILES + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    dead = []
    for name in files:
        path = name if os.path.isabs(name) else os.path.join(ROOT, name)
        if not os.path.isfile(path):
            dead.append(f"{name}: no such file")
            continue
        dead.extend(check(path))
    for line in dead:
        print(line, flush=True)
    if dead:
        print(f"check_links.py: {len(dead)} dead link(s)", file=sys.stderr)
        return 1
    print(f"check_links.py: every link of {len(files)} files resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
