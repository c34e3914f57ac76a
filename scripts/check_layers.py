#!/usr/bin/env python3
"""Refuses an #include "..." that points up a layer, or across to a sibling library.

    scripts/check_layers.py [ROOT]     default: the repository this script is in

Each library is a folder. A file may include its own folder's headers and those of any library on a
lower layer; libraries on one layer are siblings, and none includes another. apps/dtl-train includes
no library of the launcher. Tests may include anything. Exits 1 naming every include that breaks
the rule, 0 when none does. docs/architecture.md draws the same table.
"""
import os
import re
import sys

# Lowest first. A library may include the ones on the lines above its own.
LAYERS = [
    ["base"],
    ["config", "rendezvous", "store", "node"],
    ["watch"],
    ["launcher"],
    ["agent", "fanout"],
    ["commands"],
    ["apps/dtlaunch"],
]
# Folders that stand apart: they include only themselves.
APART = ["apps/dtl-train"]
SOURCES = (".cc", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of():
    layer = {}
    for n, names in enumerate(LAYERS):
        for name in names:
            layer[name] = n
    return layer


def library(path, libraries):
    """The library a repository path belongs to (the longest folder that names one), or None."""
    best = None
    for name in libraries:
        if (path == name or path.startswith(name + "/")) and (best is None or len(name) > len(best)):
            best = name
    return best


def problems(root):
    layer = layer_of()
    libraries = list(layer) + APART
    found = []
    for folder in libraries:
        top = os.path.join(root, folder)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                own = library(path, libraries)
                if own != folder:  # a nested library's file is checked as its own
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = library(m.group(1), libraries)
                        if target is None or target == own:
                            continue
                        where = f"{path}:{number}: includes {m.group(1)}"
                        if own in APART:
                            found.append(f"{where}: {own} stands apart and includes no library of the launcher")
                        elif target in APART:
                            found.append(f"{where}: {target} stands apart; no library includes it")
                        elif layer[target] > layer[own]:
                            found.append(f"{where}: {target} is a layer above {own}")
                        elif layer[target] == layer[own]:
                            found.append(f"{where}: {target} and {own} are siblings, and neither includes the other")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = problems(root)
    for p in found:
        print(f"check_layers: {p}", file=sys.stderr)
    if found:
        print(f"check_layers: {len(found)} include(s) break the layering (scripts/check_layers.py, docs/architecture.md)",
              file=sys.stderr)
        return 1
    print(f"check_layers: every include of {sum(len(n) for n in LAYERS) + len(APART)} libraries points down a layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
