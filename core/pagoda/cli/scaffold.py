"""Render the plugin template shipped in ``pagoda/cli/template`` (``pagoda plugins new``).

The template is package data: ``common/`` holds the files every plugin has, and one folder per
kind holds the capability module and its tests (a kind's file replaces the common file of the same
path, as the command kind's plugin.py does). File names ending in ``.tmpl`` lose the suffix;
``{{placeholders}}`` in names and contents are replaced. ``examples/plugin-template`` in the
repository is this template rendered by :func:`write_example` (a test keeps the two equal).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from pagoda.cli.scaffold_kinds import TEMPLATE_KINDS, TemplateKind, class_names, select_hint

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["TEMPLATE_KINDS", "TemplateKind", "check_name", "placeholders", "render", "write_example", "write_package"]

SUFFIX = ".tmpl"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

EXAMPLE = {"name": "example", "plugin": "plugin-example", "kind": "attention"}


def check_name(name: str) -> None:
    """Raise ValueError (naming the fix) unless ``name`` is lowercase words joined by dashes."""
    if name.startswith("pagoda-"):
        raise ValueError(f"plugin name '{name}': leave out the 'pagoda-' prefix, it is added (try '{name[7:]}')")
    if not NAME_PATTERN.match(name):
        suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        hint = f" (try '{suggestion}')" if suggestion and NAME_PATTERN.match(suggestion) else ""
        raise ValueError(
            f"plugin name '{name}' is not valid: use lowercase letters, digits and single dashes, "
            f"starting with a letter{hint}"
        )


def placeholders(name: str, kind: str = "attention", plugin: str | None = None) -> dict[str, str]:
    """The values substituted into the template for a plugin registering ``name`` of ``kind``.

    ``plugin`` is the entry-point name (default ``name``); it gives the distribution
    ``pagoda-<plugin>`` and the package ``pagoda_<plugin>``. A model (either template) registers its
    class name (the HF architecture), every other kind registers ``name``.
    """
    plugin = plugin or name
    for value in (name, plugin):
        check_name(value)
    if kind not in TEMPLATE_KINDS:
        raise ValueError(f"no template for kind '{kind}'; choose one of: {', '.join(TEMPLATE_KINDS)}")
    tk = TEMPLATE_KINDS[kind]
    base, cls = class_names(name, tk.class_suffix)
    values = {
        "name": name,
        "plugin": plugin,
        "distribution": f"pagoda-{plugin}",
        "package": "pagoda_" + plugin.replace("-", "_"),
        "base": base,
        "class": cls,
        "registered": cls if tk.registry == "model" else name,
        "module": tk.module,
        "kind": kind,
        "kind_label": tk.label,
        "hook": tk.hook,
        "flag": tk.flag,
    }
    values["starts_as"] = tk.starts_as.format(**values)
    values["tests"] = tk.tests
    values["select"] = select_hint(tk.registry, values)
    return values


def template_files(kind: str) -> dict[str, str]:
    """Relative path (with placeholders, suffix removed) -> raw template text, for ``kind``."""
    root = resources.files("pagoda.cli") / "template"
    files: dict[str, str] = {}
    for folder in ("common", kind):  # a kind's file replaces the common one of the same path
        for rel, node in _walk(root / folder, ""):
            files[rel.removesuffix(SUFFIX)] = node.read_text(encoding="utf-8")
    return files


def _walk(node: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            if child.name != "__pycache__":
                found.extend(_walk(child, rel + "/"))
        elif child.name.endswith(SUFFIX):
            found.append((rel, child))
    return found


def fill(text: str, values: dict[str, str]) -> str:
    """Replace every ``{{key}}``; an unknown placeholder is a template bug and raises KeyError."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], text)


def render(values: dict[str, str]) -> dict[str, str]:
    """Relative path -> file text of the plugin package described by ``values``."""
    return {fill(rel, values): fill(text, values) for rel, text in template_files(values["kind"]).items()}


def write_package(dest: Path, values: dict[str, str]) -> list[Path]:
    """Write the rendered package into ``dest`` (which must not exist or be empty)."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} already exists and is not empty; remove it or choose another --output")
    written = []
    for rel, text in render(values).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def write_example(dest: Path) -> list[Path]:
    """Regenerate ``examples/plugin-template`` (the ``example`` attention backend)."""
    return write_package(dest, placeholders(**EXAMPLE))
