#!/usr/bin/env python3
"""The benchmark scripts under bench/compare name only what exists.

They need torch, which CI lacks, so nothing else runs them there; a rename
in compare.py or in the binding (tools/python/ckfmt) would otherwise show
only as a traceback half-way through bench/run_all.sh. This reads the
scripts without running them: every `from M import n` and every
`ckfmt.n` whose M is a sibling script or the binding must name something
M defines at its top level. Modules from elsewhere (torch, ...) are not
looked at. Standard library only.

    check_bench_scripts.py [REPOSITORY_ROOT]
"""
import ast
import functools
import os
import sys


@functools.lru_cache(maxsize=None)  # each module once, however often it is named
def top_level_names(path):
    """What a module defines at its top level: functions, classes,
    assignments and imports (the way a package re-exports)."""
    names = set()
    for node in ast.parse(open(path, encoding="utf-8").read(), path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def module_file(module, script_dir, binding_dir):
    """The file of a sibling script or of the binding's module, else None."""
    parts = module.split(".")
    if len(parts) == 1 and os.path.isfile(os.path.join(script_dir, module + ".py")):
        return os.path.join(script_dir, module + ".py")
    if parts[0] != "ckfmt":
        return None
    base = os.path.join(binding_dir, *parts)
    for candidate in (os.path.join(base, "__init__.py"), base + ".py"):
        if os.path.isfile(candidate):
            return candidate
    return None


def problems_in(script, binding_dir):
    tree = ast.parse(open(script, encoding="utf-8").read(), script)
    here = os.path.dirname(script)
    found = []

    def require(module, name, line):
        path = module_file(module, here, binding_dir)
        if path is not None and name not in top_level_names(path):
            found.append(f"{script}:{line}: {module} has no {name} "
                         f"(expected a top-level name in {os.path.relpath(path)})")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                require(node.module, alias.name, node.lineno)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "ckfmt"):
            require("ckfmt", node.attr, node.lineno)
    return found


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    scripts_dir = os.path.join(root, "bench", "compare")
    binding_dir = os.path.join(root, "tools", "python")
    scripts = sorted(os.path.join(scripts_dir, f) for f in os.listdir(scripts_dir)
                     if f.endswith(".py"))
    if not scripts:
        print(f"no scripts in {scripts_dir}", file=sys.stderr)
        return 1
    problems = [p for s in scripts for p in problems_in(s, binding_dir)]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(scripts)} scripts, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
