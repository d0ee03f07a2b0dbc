"""Checks of what a plugin registers, made once at load: a concrete subclass of its kind's
interface, under a usable name, with class attributes of the types the interface declares, and
hook functions that match a hook spec."""

from __future__ import annotations

import difflib
import inspect
from typing import Any

import pluggy

from pagoda.plugins.catalog import KINDS

RESERVED_NAMES = ("auto",)  # what a user types to let Pagoda choose: never a registered name


def interfaces(key: str) -> tuple[type, ...]:
    """The interface classes a registration of kind ``key`` must subclass (one of them)."""
    import pagoda.interfaces as api

    return {
        "platform": (api.Platform,),
        "attention": (api.AttentionBackend,),
        "quantization": (api.QuantizationMethod,),
        "model": (api.CausalLM, api.PoolingModel),
        "scheduler": (api.Scheduler,),
        "proposer": (api.Proposer,),
        "guided_decoding": (api.GuidedDecodingBackend,),
        "tool_parser": (api.ToolParser,),
        "reasoning_parser": (api.ReasoningParser,),
        "kv_connector": (api.KVConnector,),
    }[key]


def registration_problem(key: str, name: Any, obj: Any) -> str | None:
    """Why ``register(name, obj)`` for kind ``key`` is refused, or ``None`` when it is fine."""
    label = KINDS[key].label
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        return f"{label} names must be non-empty strings without surrounding spaces, got {name!r}"
    if name in RESERVED_NAMES:
        return f"{label} '{name}': '{name}' is reserved (it lets Pagoda choose); register another name"
    bases = interfaces(key)
    if not (isinstance(obj, type) and issubclass(obj, bases)):
        wanted = " or ".join(f"pagoda.interfaces.{b.__name__}" for b in bases)
        return f"{label} '{name}' must be a subclass of {wanted}, got {obj!r}"
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        return f"{label} '{name}' ({obj.__qualname__}) is abstract: it does not implement {missing}"
    base = next(b for b in bases if issubclass(obj, b))
    return _attribute_problem(label, name, obj, base) or _check_problem(key, label, name, obj)


def _attribute_problem(label: str, name: str, obj: type, base: type) -> str | None:
    """Each class attribute the interface declares (``ClassVar``) keeps the type of its default."""
    for attr, default in declared_class_attributes(base).items():
        value = getattr(obj, attr, default)
        expected = _type_name(default)
        if expected and not _same_kind(value, default):
            return (f"{label} '{name}' ({obj.__qualname__}): class attribute '{attr}' must be {expected}, "
                    f"got {value!r}")
    return None


def declared_class_attributes(base: type) -> dict[str, Any]:
    """``{name: default}`` of the ``ClassVar`` attributes declared by ``base`` and its bases."""
    found: dict[str, Any] = {}
    for cls in reversed(base.__mro__):
        for attr, annotation in vars(cls).get("__annotations__", {}).items():
            if "ClassVar" in str(annotation) and hasattr(base, attr):
                found[attr] = getattr(base, attr)
    return found


def _type_name(default: Any) -> str | None:
    if isinstance(default, bool):
        return "True or False"
    if isinstance(default, int):
        return "an int"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, tuple):
        return "a tuple of strings" if all(isinstance(x, str) for x in default) else "a tuple"
    return None  # None or an object: any value is accepted


def _same_kind(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        wanted = int if isinstance(default, int) else (int, float)
        return isinstance(value, wanted) and not isinstance(value, bool)
    if isinstance(default, tuple):
        strings = all(isinstance(x, str) for x in default)
        return isinstance(value, tuple) and (not strings or all(isinstance(x, str) for x in value))
    return isinstance(value, type(default))


def _check_problem(key: str, label: str, name: str, obj: type) -> str | None:
    """A ``check`` must be callable on the class with the kind's keyword arguments."""
    check = getattr(obj, "check", None)
    if check is None:
        return None
    args = KINDS[key].check_args
    call = f"check({', '.join(f'{a}=...' for a in args)})"
    try:
        inspect.signature(check).bind(**{a: None for a in args})
    except (TypeError, ValueError):
        return (f"{label} '{name}' ({obj.__qualname__}): Pagoda calls {obj.__name__}.{call} on the class; "
                "make check a classmethod taking those arguments")
    return None


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hook functions of ``plugin`` that match no hook spec (typos), with the closest spec name."""
    specs = [name for name, caller in vars(pm.hook).items() if not name.startswith("_") and caller.has_spec()]
    problems = []
    for name, caller in vars(pm.hook).items():
        if name.startswith("_") or caller.has_spec():
            continue
        if any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls()):
            close = difflib.get_close_matches(name, specs, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"the hooks are: {', '.join(sorted(specs))}"
            problems.append(f"hook '{name}' matches no hook spec ({hint})")
    return problems
