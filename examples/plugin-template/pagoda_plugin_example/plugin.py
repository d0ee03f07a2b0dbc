"""Pagoda plugin 'plugin-example': registers the attention backend 'example'.

Pagoda finds this module through the ``pagoda.plugins`` entry point in pyproject.toml and calls
the hooks it implements (``pagoda.hookspecs`` lists them all; a misspelt hook name fails the
plugin). Import heavy modules inside the hook, not at the top, so that listing plugins stays cheap.
"""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_attention_backends(register: Register) -> None:
    from pagoda_plugin_example.backend import ExampleBackend

    register("example", ExampleBackend)
