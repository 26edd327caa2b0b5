"""The house rule: each layer imports only from the layers below it (docs/architecture.md).

Walks the syntax tree of every module under ``apps/`` and ``retasc/`` and checks each
import, at any depth (inside functions and ``TYPE_CHECKING`` blocks too), against the
directions written once below. A new app must be placed in a layer here before it can
import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top. A package may import from every layer below its own.
LAYERS = [
    ("foundation", ["apps.core"]),
    ("domains", ["apps.orgs", "apps.issues", "apps.leases", "apps.billing", "apps.intake", "apps.notifications"]),
    ("unit of work", ["apps.work"]),
    ("tool facade", ["apps.tools"]),
    ("interfaces", ["apps.mcp", "apps.api", "apps.dash", "apps.accounts", "apps.devices", "apps.ops", "apps.hooks"]),
    ("composition root", ["retasc"]),
]

# Within the domains, the order among them: each domain may import these (and core).
DOMAINS_BELOW = {
    "apps.orgs": set(),
    "apps.issues": {"apps.orgs"},
    "apps.leases": {"apps.orgs", "apps.issues"},
    "apps.billing": {"apps.orgs"},
    "apps.intake": {"apps.orgs", "apps.issues", "apps.leases", "apps.billing"},
    "apps.notifications": {"apps.orgs", "apps.issues", "apps.leases", "apps.billing"},
}

# Interfaces sit side by side and may use each other (the CLI endpoints reuse the API's
# authentication, for one).
LATERAL = {"interfaces"}

# The `retasc` CLI is a separate program that talks HTTP only: it imports nothing of the
# server but its own modules and the version.
CLI = "retasc.cli"
CLI_MAY_IMPORT = {"retasc.cli", "retasc"}

# Written-out exceptions, each with its reason.
EXCEPTIONS = {
    # The agent config blocks are written once, in the CLI (which may import no app and
    # must install alone); the Dash shows the very same blocks.
    ("apps.dash.agent_configs", "retasc.cli.agents"),
}

# Imports inside a function are allowed only to defer a heavy import or one that needs
# the app registry, and say so in a comment on the line or just above it.
DEFERRAL_WORDS = ("heavy", "defer", "ready()", "registry")

FORBIDDEN_EVERYWHERE_BUT_ROOT = ("retasc.settings", "retasc.urls", "retasc.asgi", "retasc.celery", "retasc.jobs")


def _package_of(module: str) -> str | None:
    if module == CLI or module.startswith(CLI + "."):
        return CLI
    for _, packages in LAYERS:
        for package in packages:
            if module == package or module.startswith(package + "."):
                return package
    return None


def _layer_of(package: str) -> int:
    for index, (_, packages) in enumerate(LAYERS):
        if package in packages:
            return index
    raise KeyError(package)


def _modules():
    for base in ("apps", "retasc"):
        for path in sorted((ROOT / base).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            relative = path.relative_to(ROOT).with_suffix("")
            parts = list(relative.parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts == ["apps"]:
                continue  # the namespace of the apps, empty
            yield ".".join(parts), path


def _imports(module: str, path: Path):
    """(imported module, line number, nested in a function?) for each import."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]

    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, inner
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = ".".join(package_parts[: len(package_parts) - child.level + 1])
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module
                yield target, child.lineno, inner
                for alias in child.names:  # `from apps.issues import services`
                    yield f"{target}.{alias.name}", child.lineno, inner
            yield from visit(child, inner)

    yield from visit(tree, False)


def _allowed(source: str, target: str) -> bool:
    src, dst = _package_of(source), _package_of(target)
    if dst is None or src == dst:
        return True  # a third-party module, or the same package
    if (source, target) in EXCEPTIONS or any(source == a and target.startswith(b) for a, b in EXCEPTIONS):
        return True
    if src == CLI:
        return target in CLI_MAY_IMPORT or target.startswith(CLI + ".") or target == "retasc.__version__"
    if dst == CLI:
        return False
    if src is None:
        return True
    src_layer, dst_layer = _layer_of(src), _layer_of(dst)
    if src_layer != _layer_of("retasc") and target.startswith(FORBIDDEN_EVERYWHERE_BUT_ROOT):
        return False
    if dst_layer < src_layer:
        return True
    if dst_layer > src_layer:
        return False
    if LAYERS[src_layer][0] == "domains":
        return dst in DOMAINS_BELOW[src]
    return LAYERS[src_layer][0] in LATERAL


def violations():
    found = []
    for module, path in _modules():
        if _package_of(module) is None:
            found.append(f"{module}: not in any layer (place it in tests/test_layers.py LAYERS)")
            continue
        for target, line, _ in _imports(module, path):
            if not _allowed(module, target):
                found.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target} (upward or sideways)")
    return sorted(set(found))


def undocumented_nested_imports():
    found = []
    for module, path in _modules():
        lines = path.read_text().splitlines()
        for target, line, nested in _imports(module, path):
            if not nested or _package_of(target) is None:
                continue
            context, above = lines[line - 1], line - 2
            while above >= 0 and lines[above].strip().startswith("#"):  # the comment block above
                context += " " + lines[above]
                above -= 1
            if not any(word in context for word in DEFERRAL_WORDS):
                found.append(f"{path.relative_to(ROOT)}:{line}: {target} imported inside a function without saying why")
    return sorted(set(found))


def test_every_layer_imports_only_downward():
    assert violations() == []


def test_imports_inside_functions_only_defer_and_say_so():
    assert undocumented_nested_imports() == []


def test_core_imports_no_other_app():
    for module, path in _modules():
        if _package_of(module) == "apps.core":
            for target, line, _ in _imports(module, path):
                assert not (target.startswith("apps.") and not target.startswith("apps.core")), f"{module}:{line} -> {target}"


@pytest.mark.parametrize(
    "source, target, allowed",
    [
        ("apps.core.unit", "apps.orgs.models", False),  # the foundation knows no domain
        ("apps.orgs.services", "apps.issues.selectors", False),  # orgs is the lowest domain
        ("apps.issues.services", "apps.leases.services", False),  # issues below leases
        ("apps.billing.selectors", "apps.issues.shapes", False),  # billing stands on orgs only
        ("apps.leases.services", "apps.issues.models", True),
        ("apps.orgs.services", "apps.work.writer", False),  # domains below the unit of work
        ("apps.work.writer", "apps.billing.models", True),
        ("apps.issues.services", "apps.tools.operations", False),
        ("apps.mcp.tools", "apps.tools.operations", True),
        ("apps.api.views", "apps.devices.auth", True),  # interfaces side by side
        ("apps.dash.views.org", "retasc.jobs", False),  # nothing reaches into the root
        ("retasc.jobs", "apps.leases.services", True),
        ("retasc.cli.main", "apps.core.errors", False),  # the CLI talks HTTP only
        ("retasc.cli.main", "retasc.cli.client", True),
        ("apps.dash.selectors", "retasc.cli.agents", False),  # only the one written-out exception
    ],
)
def test_the_rule_itself(source, target, allowed):
    """The checker would catch an upward import (and lets the right ones through)."""
    assert _allowed(source, target) is allowed
