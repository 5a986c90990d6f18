#!/usr/bin/env python3
"""Fails when modules of a crate import each other in a cycle.

Reads every `src/**/*.rs` of the crates named on the command line, maps each file to its module
path (`rules/precheck.rs` -> `rules::precheck`, `rules/mod.rs` -> `rules`), and collects the
`crate::a::b` paths each file names (in `use` trees too). Two graphs are checked:

* top level: an edge a -> b when a file under module `a` names `crate::b::...` (a != b);
* inside each folder: an edge x -> y between sibling files when x names `super::y`,
  `crate::<folder>::y` or (from the folder's own files) `self::y`. The folder's `mod.rs` is its
  facade (it declares and re-exports the children) and is not a node.

A cycle in either graph is printed and the exit status is 1.

    python3 scripts/modcycles.py engine/core engine/server
"""
import os
import re
import sys


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def use_paths(text):
    """Every path a file names: `a::b::c` joined from `use` trees and inline paths."""
    out = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        out.extend(expand(m.group(1).replace("\n", " ")))
    for m in re.finditer(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        out.append(m.group(1))
    return out


def expand(tree):
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree.split(" as ")[0]]
    i = tree.index("{")
    prefix, inner = tree[:i], tree[i + 1 : tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p:
            out.extend(prefix + q for q in expand(p))
    return out


def cycles(graph):
    found, state, stack = [], {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m) :] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def check(crate):
    src = os.path.join(crate, "src")
    files = []
    for root, _, names in os.walk(src):
        files += [os.path.join(root, n) for n in names if n.endswith(".rs")]
    mods = {tuple(module_of(src, f)): f for f in files}
    top, inner = {}, {}
    for f in files:
        me = module_of(src, f)
        if f.endswith("main.rs"):
            continue
        text = strip_comments(open(f, encoding="utf-8").read())
        # Test modules may reach anywhere.
        text = re.split(r"#\[cfg\(test\)\]\s*mod\s+tests", text)[0]
        is_facade = os.path.basename(f) == "mod.rs"
        folder = me if is_facade else me[:-1]
        for p in use_paths(text):
            seg = p.split("::")
            if seg[0] == "crate":
                target = seg[1:]
            elif seg[0] == "super":
                base = list(folder)
                while seg and seg[0] == "super":
                    base = base[:-1] if is_facade or base is not folder else base
                    seg = seg[1:]
                    if is_facade:
                        is_facade = False  # one `super` from mod.rs leaves the folder
                target = base + seg
                is_facade = os.path.basename(f) == "mod.rs"
            elif seg[0] == "self":
                target = list(folder) + seg[1:]
            else:
                continue
            if not target:
                continue
            if me and target[0] != me[0]:
                top.setdefault(me[0], set()).add(target[0])
            # Sibling edges inside a folder.
            if not is_facade and len(me) >= 2 and list(target[: len(me) - 1]) == list(me[:-1]):
                if len(target) >= len(me):
                    sib = target[len(me) - 1]
                    if sib != me[-1] and tuple(me[:-1]) + (sib,) in mods:
                        inner.setdefault("::".join(me[:-1]), {}).setdefault(me[-1], set()).add(sib)
    bad = []
    for c in cycles(top):
        bad.append(f"{crate}: crate::{' -> '.join(c)}")
    for folder, g in sorted(inner.items()):
        for c in cycles(g):
            bad.append(f"{crate}: {folder}::{{{' -> '.join(c)}}}")
    return bad


def main():
    bad = []
    for crate in sys.argv[1:]:
        bad += check(crate)
    for b in bad:
        print("module cycle:", b)
    if bad:
        sys.exit(1)
    print("no module cycles in", ", ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
