#!/usr/bin/env python3
"""gpumem's layers: every module import goes down, and no modules import each other in a circle.

Reads crates/gpumem/src, finds each file's imports of other gpumem modules (`use crate::…`,
`use super::…`, `use self::…`, a child module's name, and `crate::…`/`super::…` paths in the
code), resolves them through the `pub use` re-exports of the modules on the way to the file that
defines the name, and fails, naming the file and the import, when

- a file imports from a layer above its own (LAYERS below, bottom first: each layer is a folder of
  crates/gpumem/src or a file at its root);
- files import each other in a circle (directly or through others);
- a file imports through the crate root's public names (`crate::Device`, `crate::history`): those
  are for users; inside gpumem a name comes from the module of its layer.

Left out on purpose: lib.rs (it declares the layers and gathers the public paths), a folder's
mod.rs declaring and re-exporting its own files (the folder's face; its files may still import
mod.rs), comments (doc links are not imports) and `#[cfg(test)]` items (unit tests may use
`crate::testing`). Python 3 standard library only.

Usage: scripts/check-gpumem-layers.py [--list] [SRC_DIR]
  --list   print every import, `file -> module  (path as written)`, before checking.
"""

import os
import re
import sys

# The layers, bottom first. A file may import from its own layer and the layers below it.
LAYERS = [
    ("error.rs", "format.rs"),  # the one error type and byte formatting, used everywhere
    ("raw",),  # raw backends: the backend trait, cpu, cuda, the driver probe
    ("policy",),  # the caching allocator, its settings, statistics and history
    ("formats",),  # allocation traces and their replay, torch's snapshot pickles
    ("memory",),  # Device, buffers, pinned memory, streams and events, copies, activity
    ("ops",),  # compute: kernels, element-wise ops, GEMM, attention, the tiny model
    ("autograd",),  # tensors, the engine, ops and their saved tensors, checkpointing
    ("optim",),  # SGD, Adam, AdamW
    ("inference",),  # the KV cache and the serving simulator
    ("testing.rs",),  # helpers for tests and exercises
]
ROOT = "lib.rs"


def layer_of(rel):
    """The index in LAYERS of the file at `rel` (relative to src), or None for lib.rs."""
    if rel == ROOT:
        return None
    top = rel.split("/")[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    return -1


def module_path(rel):
    """`memory/device.rs` -> ('memory', 'device'); `ops/mod.rs` -> ('ops',); lib.rs -> ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def strip_comments_and_strings(text):
    """The code with comments removed and string/char literals emptied (same line numbers)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and (text[i + 1 : i + 2] == "\\" or text[i + 2 : i + 3] == "'"):
            j = text.find("'", i + 2 if text[i + 1] != "\\" else i + 3)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_item(code, i):
    """The index just after the item starting at `i`: its `;`, or its matching `}`."""
    depth = 0
    while i < len(code):
        ch = code[i]
        if ch == ";" and depth == 0:
            return i + 1
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def drop_test_items(code):
    """The code without `#[cfg(test)]` items, newlines kept so line numbers stay right."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", code)
        if not m:
            return code
        end = skip_item(code, m.end())
        code = code[: m.start()] + "\n" * code.count("\n", m.start(), end) + code[end:]


def expand_use_tree(tree, aliases=None):
    """`a::{b, c::{d as e, self}}` -> [['a','b'], ['a','c','d'], ['a','c']]; with a dict as
    `aliases`, it also gets each path's name where it lands (`e` for `a::c::d`)."""
    tree = re.sub(r"\s+as\s+", "@", tree)
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def walk(prefix, s):
        # split s at top-level commas
        depth, start, items = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(s[start:k])
                start = k + 1
        items.append(s[start:])
        for item in filter(None, items):
            if "{" in item:
                head, rest = item.split("{", 1)
                head_parts = [p for p in head.split("::") if p]
                walk(prefix + head_parts, rest[: rest.rindex("}")])
            else:
                item, _, alias = item.partition("@")
                parts = [p for p in item.split("::") if p]
                if parts and parts[-1] == "self":
                    parts = parts[:-1]
                paths.append(prefix + parts)
                if aliases is not None and (alias or parts):
                    aliases[tuple(prefix + parts)] = alias or (prefix + parts)[-1]

    walk([], tree)
    return paths


def use_statements(code):
    """(line, use tree text) for every `use` statement, and the code with them blanked."""
    found = []
    pattern = re.compile(r"(?<![\w:])(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
    for m in pattern.finditer(code):
        tree = m.group(1)
        found.append((code.count("\n", 0, m.start()) + 1, tree, m.group(0).startswith("pub")))
    blanked = pattern.sub(lambda m: "\n" * m.group(0).count("\n"), code)
    return found, blanked


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # rel -> code without comments, strings and test items
        for dp, _, fns in os.walk(src):
            for fn in fns:
                if fn.endswith(".rs"):
                    rel = os.path.relpath(os.path.join(dp, fn), src).replace(os.sep, "/")
                    with open(os.path.join(dp, fn), encoding="utf-8") as f:
                        self.files[rel] = drop_test_items(strip_comments_and_strings(f.read()))
        self.modules = {module_path(rel): rel for rel in self.files}
        # each module's `pub use` re-exports: name -> the absolute path it stands for
        self.reexports = {}
        for rel, code in self.files.items():
            mod = module_path(rel)
            table = {}
            for _, tree, public in use_statements(code)[0]:
                if not public:
                    continue
                names = {}
                for path in expand_use_tree(tree, names):
                    absolute = self.absolute(mod, path)
                    if absolute and path and path[-1] != "*":
                        table[names[tuple(path)]] = absolute
            self.reexports[mod] = table

    def absolute(self, mod, path):
        """`path` as written in module `mod`, from the crate root; None for other crates."""
        if not path:
            return None
        head = path[0]
        if head == "crate":
            return tuple(path[1:])
        if head == "self":
            return mod + tuple(path[1:])
        if head == "super":
            base = list(mod)
            while path and path[0] == "super":
                base, path = base[:-1], path[1:]
            return tuple(base) + tuple(path)
        if mod + (head,) in self.modules:  # a child module named directly
            return mod + tuple(path)
        return None

    def resolve(self, path):
        """The file defining `path` (absolute) and whether the way there went through lib.rs."""
        mod, rest, via_root = (), list(path), False
        for _ in range(50):
            if not rest:
                break
            if mod + (rest[0],) in self.modules:
                mod, rest = mod + (rest[0],), rest[1:]
                continue
            target = self.reexports.get(mod, {}).get(rest[0])
            if target is None:
                break
            via_root |= mod == ()
            mod, rest = (), list(target) + rest[1:]
        else:
            via_root = True
        return self.modules.get(mod), via_root

    def imports(self):
        """(file, line, path as written, file imported, through the root?) for every import."""
        out = []
        for rel, code in sorted(self.files.items()):
            if rel == ROOT:
                continue
            mod = module_path(rel)
            uses, rest = use_statements(code)
            written = [(line, path) for line, tree, _ in uses for path in expand_use_tree(tree)]
            for m in re.finditer(r"(?<![\w:])(?:crate|super|self)(?:::\w+)+", rest):
                written.append((rest.count("\n", 0, m.start()) + 1, m.group(0).split("::")))
            for line, path in written:
                absolute = self.absolute(mod, [p for p in path if p != "*"])
                if absolute is None:
                    continue
                target, via_root = self.resolve(absolute)
                if target is None:
                    first = absolute[0] if absolute else "crate"
                    target, via_root = ROOT, (first,) not in self.modules
                if target == rel:
                    continue
                if rel.endswith("/mod.rs") and module_path(target)[: len(mod)] == mod:
                    continue  # a folder's face declaring and re-exporting its own files
                out.append((rel, line, "::".join(path), target, via_root))
        return out


def circles(edges):
    """The strongly connected components with more than one file (Tarjan)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def shortest_circle(comp, edges):
    """The edges of a shortest circle through the component's first file."""
    start = comp[0]
    inside = set(comp)
    came_from = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for a, b in sorted(edges):
            if a != node or b not in inside:
                continue
            if b == start:
                path = [(a, b)]
                while path[0][0] != start:
                    path.insert(0, (came_from[path[0][0]], path[0][0]))
                return path
            if b not in came_from:
                came_from[b] = a
                queue.append(b)
    return []


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    here = os.path.dirname(os.path.abspath(__file__))
    src = args[0] if args else os.path.join(here, "..", "crates", "gpumem", "src")
    crate = Crate(src)
    imports = crate.imports()
    if "--list" in argv:
        for rel, line, written, target, _ in imports:
            print(f"{rel}:{line} -> {module_path(target) and '::'.join(module_path(target)) or 'crate'}  ({written})")
    problems = []
    for rel in sorted(crate.files):
        if layer_of(rel) == -1:
            problems.append(f"{rel}: not in any layer; add its folder to LAYERS in {sys.argv[0]}")
    for rel, line, written, target, via_root in imports:
        if via_root:
            problems.append(
                f"{rel}:{line}: imports `{written}` through the crate root's public names; "
                f"import it from its layer's module instead"
            )
            continue
        a, b = layer_of(rel), layer_of(target)
        if b is not None and a is not None and b > a:
            problems.append(
                f"{rel}:{line}: imports `{written}` ({target}, layer `{'/'.join(LAYERS[b])}`) "
                f"from above its own layer `{'/'.join(LAYERS[a])}`"
            )
    edges = {}
    for rel, line, written, target, _ in imports:
        if target != ROOT:
            edges.setdefault((rel, target), []).append(f"{rel}:{line} `{written}`")
    for comp in circles(edges):
        steps = shortest_circle(comp, edges)
        problems.append(
            "import circle between " + ", ".join(comp) + ", for example:\n    "
            + "\n    ".join(edges[step][0] for step in steps)
        )
    files = len([r for r in crate.files if r != ROOT])
    if problems:
        print(f"gpumem layers: {len(problems)} problem(s)", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(
        f"gpumem layers: {files} files, {len(edges)} imports between files, "
        f"{len(LAYERS)} layers, every import goes down, no circles"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
