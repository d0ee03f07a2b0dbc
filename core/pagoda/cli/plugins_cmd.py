"""``pagoda plugins``: what is installed and what it registers; ``pagoda plugins new``: scaffold one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pagoda.plugins.catalog import KINDS
from pagoda.plugins.manager import ENV_ALLOW, ENV_BLOCK, PluginInfo, get_plugin_manager
from pagoda.plugins.names import OVERRIDES_FLAG

JSON_HELP = (
    "print a JSON list instead of the table: one object per plugin with the keys name (entry-point "
    "name), distribution, version, module, builtin (bool), status ('loaded' | 'disabled' | "
    "'failed'), registers ({kind: [names]}, kinds: " + ", ".join(KINDS) + "), errors ([text]: why a failed "
    "plugin registers nothing) and notes ([text]: a registration refused because its name belongs to another "
    "plugin, or allowed to replace it)"
)

LIST_EPILOG = f"""\
status: 'loaded' plugins register what the REGISTERS column shows; 'disabled' ones are installed
but switched off (--plugins / --disable-plugins, or {ENV_ALLOW} / {ENV_BLOCK}) and register
nothing; 'failed' ones could not be imported, implement a hook that does not exist, raised in a
hook, registered a class their kind's interface refuses (abstract, not a subclass, a class
attribute of the wrong type) or reuse another distribution's entry-point name: their errors are
printed below the table and nothing of theirs is registered. A registration of a name that
belongs to another plugin (a built-in or first-party name) is refused alone and listed under
Notes; {OVERRIDES_FLAG} NAME allows it. The exit status is 0 in every case.

Write a plugin: `pagoda plugins new NAME` (see docs/writing_plugins.md)."""


def add_parser(subparsers: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``plugins`` (lists plugins) with its nested ``new`` (creates a plugin package)."""
    parser = subparsers.add_parser(
        "plugins",
        parents=[parent],
        help="list installed plugins and what they register; `plugins new` creates one",
        description="List the built-in and installed Pagoda plugins: distribution, version, "
        "status, what each registers by kind, and load errors.",
        epilog=LIST_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(func=run_list)
    actions = parser.add_subparsers(
        dest="plugins_action", metavar="ACTION", help="optional; without one, the plugins are listed"
    )
    _add_new_parser(actions, parent)
    return parser


def _add_new_parser(actions: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    from pagoda.cli.scaffold import TEMPLATE_KINDS

    new = actions.add_parser(
        "new",
        parents=[parent],
        help="create a ready-to-install plugin package from the template",
        description="Create the plugin package pagoda-NAME (package pagoda_NAME, entry point NAME) "
        "registering a capability named NAME: a working copy of the built-in reference with "
        "tests, to install with `pip install -e DIR/pagoda-NAME`.",
    )
    new.add_argument("name", metavar="NAME", help="plugin name: lowercase letters, digits and dashes, e.g. 'my-attn'")
    new.add_argument(
        "--kind",
        choices=sorted(TEMPLATE_KINDS),
        default="attention",
        help="what the plugin registers (default: attention): one of the registry kinds, 'command' (a "
        "`pagoda` subcommand) or 'multimodal_model' (a vision-language model family)",
    )
    new.add_argument(
        "--output",
        metavar="DIR",
        default=".",
        help="directory to create the package folder pagoda-NAME in (default: the current directory)",
    )
    new.set_defaults(func=run_new)


def run_list(args: argparse.Namespace) -> int:
    """Print the plugin table (or JSON); never fails because a plugin did."""
    plugins = sorted(get_plugin_manager().list_plugins(), key=lambda p: (not p.builtin, p.name))
    if args.json:
        print(json.dumps([p.to_dict() for p in plugins], indent=2))
    else:
        print(format_table(plugins))
    return 0


def format_registers(info: PluginInfo) -> str:
    """``{"attention": ["torch"], ...}`` -> ``attention: torch; ...`` in the catalog's kind order."""
    parts = [f"{key}: {', '.join(info.registers[key])}" for key in KINDS if info.registers.get(key)]
    return "; ".join(parts) or "-"


def format_table(plugins: list[PluginInfo]) -> str:
    """An aligned table, then one line per error and a note on disabled plugins."""
    header = ("NAME", "DISTRIBUTION", "VERSION", "STATUS", "REGISTERS")
    rows = [(p.name, p.distribution or "-", p.version or "-", p.status, format_registers(p)) for p in plugins]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in (header, *rows)]
    failed = [p for p in plugins if p.errors]
    if failed:
        lines += ["", "Errors (these plugins register nothing):"]
        lines += [f"  {p.name} ({p.distribution or p.module}): {error}" for p in failed for error in p.errors]
    noted = [p for p in plugins if p.notes]
    if noted:
        lines += ["", "Notes:"]
        lines += [f"  {p.name} ({p.distribution or p.module}): {note}" for p in noted for note in p.notes]
    disabled = [p.name for p in plugins if p.status == "disabled"]
    if disabled:
        lines += ["", f"Disabled by --plugins/--disable-plugins or {ENV_ALLOW}/{ENV_BLOCK}: {', '.join(disabled)}"]
    return "\n".join(lines)


def run_new(args: argparse.Namespace) -> int:
    """Render the template into ``--output``/pagoda-NAME and say what to do next."""
    from pagoda.cli.scaffold import placeholders, write_package

    try:
        values = placeholders(args.name, args.kind)
        dest = Path(args.output) / values["distribution"]
        write_package(dest, values)
    except (ValueError, FileExistsError) as exc:
        print(f"pagoda plugins new: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"Created {dest}: the distribution {values['distribution']} registering the "
        f"{values['kind_label']} '{values['registered']}' (class {values['class']} in "
        f"{values['package']}/{values['module']}.py).\n"
        f"Next: pip install -e {dest}  then  pagoda plugins  and  python -m pytest {dest}"
    )
    return 0
