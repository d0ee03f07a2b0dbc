"""Test helpers for Pagoda and its plugins, also a pytest plugin (entry point ``pytest11``).

Wherever pagoda is installed, pytest knows the ``gpu`` marker and skips such tests without a
CUDA device, so plugin test suites need no conftest of their own for it. A GPU test gets its
compiled kernels through :func:`built_kernels`, which fails it where a GPU is present but the
kernels did not build.
"""

from __future__ import annotations

import importlib
import importlib.util
import importlib.metadata as md
import os
from typing import Callable, TypeVar

from pagoda.plugins.manager import PluginInfo, PluginManager

T = TypeVar("T")


def load_installed_plugin(distribution: str, entry_point: str) -> PluginInfo:
    """Load only ``entry_point`` through a fresh PluginManager and return its info.

    Skips the calling test when ``distribution`` is not installed; fails it when the plugin does
    not load or belongs to another distribution.
    """
    import pytest

    try:
        version = md.version(distribution)
    except md.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed (pip install it to run this test)")
    info = PluginManager(allow=[entry_point], block="").plugins[entry_point]
    assert info.status == "loaded", info.errors
    assert (info.distribution, info.version) == (distribution, version)
    return info


def skip_unless_ci(reason: str) -> None:
    """Skip the calling test (or test module) for ``reason`` (something optional is missing), except under ``CI=true``,
    where README's test command installs everything: there a missing piece is a failure."""
    import pytest

    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI installs it (README's test command)")
    pytest.skip(reason, allow_module_level=True)


def import_or_skip(module: str):
    """The module ``module`` where it is installed; else skip the caller (at import: the whole test module), as
    :func:`skip_unless_ci` does (a test-only dependency such as ``anthropic``, absent on the GPU machine)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        skip_unless_ci(f"needs {module} (pip install -e '.[test]')")


GPU_NEEDED = {"cuda": "needs an NVIDIA GPU (CUDA)", "rocm": "needs an AMD GPU (ROCm)"}


def gpu_kind() -> str | None:
    """``"cuda"`` or ``"rocm"``: the kind of GPU this torch sees, or ``None`` without one."""
    from pagoda.platforms.cuda_api import CudaApiPlatform

    return CudaApiPlatform.visible_gpu()


def built_kernels(what: str, load: Callable[[], T], gpu: str = "cuda") -> T:
    """``load()``: the compiled kernels a GPU test runs. Without a ``gpu`` GPU ("cuda" or "rocm") the
    calling test skips; with one, kernels that did not build fail it with ``load``'s error: a GPU
    machine whose kernel tests skip would report nothing tested as all green.

    ``load`` raises when the kernels are missing (``ExtensionUnavailable``, ``ImportError``, a build
    error; a skip inside it counts too); ``what`` names them in the failure."""
    import pytest

    if gpu not in GPU_NEEDED:
        raise ValueError(f"gpu={gpu!r}: choose one of {', '.join(GPU_NEEDED)}")
    if gpu_kind() != gpu:
        pytest.skip(GPU_NEEDED[gpu])
    try:
        return load()
    except (Exception, pytest.skip.Exception) as error:  # noqa: BLE001 - what stopped the build is the message
        pytest.fail(f"{what} did not build on this {gpu} machine: {type(error).__name__}: {error}", pytrace=False)


def import_triton_kernels(*modules: str) -> bool:
    """Import Triton kernel modules; without CUDA under ``TRITON_INTERPRET=1`` (the kernels are
    decorated at import, so the interpreter must be on then), restoring the variable afterwards so
    that other tests of the session (which start subprocesses) do not inherit it. Returns whether
    the interpreter is in use: the caller sets the variable again around each kernel test."""
    interpret = gpu_kind() is None
    previous = os.environ.get("TRITON_INTERPRET")
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        if interpret and previous is None:
            del os.environ["TRITON_INTERPRET"]
        elif interpret:
            os.environ["TRITON_INTERPRET"] = previous
    return interpret


def interpreted_kernels(module: str):
    """A pytest fixture body (``yield from``): skip without triton, else import the Triton kernel
    ``module`` (under the interpreter without CUDA), yield it with ``TRITON_INTERPRET=1`` set while
    its tests run without CUDA, and restore the variable after."""
    import pytest

    if importlib.util.find_spec("triton") is None:  # not importorskip: triton must first load under the interpreter
        pytest.skip("needs triton")
    interpret = import_triton_kernels(module)
    previous = os.environ.get("TRITON_INTERPRET")
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    yield importlib.import_module(module)
    if interpret and previous is None:
        del os.environ["TRITON_INTERPRET"]


SM90 = ("cuda", 90, 32)  # a Triton target: backend, architecture, warp size
ROCM_TARGETS = tuple(("hip", arch, 64) for arch in ("gfx908", "gfx90a", "gfx942", "gfx950"))  # docs/rocm.md's GPUs


def compile_triton(fn, signature: dict, constants: dict, target: tuple = SM90, num_warps: int = 4) -> str:
    """The Triton kernel ``fn`` compiled for ``target`` (backend, architecture, warp size), no GPU needed: its PTX
    (``"cuda"``) or AMDGCN (``"hip"``), or ``"error: "`` and the reason where Triton refuses the kernel. Call it in
    a process without ``TRITON_INTERPRET`` (:func:`compiled_in_subprocess`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(fn=fn, signature={**signature, **{c: "constexpr" for c in constants}}, constexprs=constants)
    try:
        compiled = triton.compile(source, target=GPUTarget(*target), options={"num_warps": num_warps})
    except Exception as exc:  # noqa: BLE001 - Triton's refusal is what the test reports
        while exc.__cause__ is not None:  # a CompilationError's message ends at the source line; its cause says why
            exc = exc.__cause__
        return f"error: {type(exc).__name__}: " + "".join(str(exc).strip().splitlines()[-1:])
    return compiled.asm["ptx" if target[0] == "cuda" else "amdgcn"]


def compile_errors(kernels: dict[str, tuple], targets: tuple = ROCM_TARGETS) -> dict[str, str]:
    """``"name architecture"`` -> Triton's error for each kernel (name -> (fn, signature, constants[, warps])) that
    does not compile for one of ``targets`` (:func:`compile_triton`); empty when all do."""
    errors = {}
    for name, (fn, signature, constants, *warps) in kernels.items():
        for target in targets:
            code = compile_triton(fn, signature, constants, target, *warps)
            if code.startswith("error: "):
                errors[f"{name} {target[1]}"] = code
    return errors


def dependent_launch_facts(ptx: str) -> dict[str, bool]:
    """What a kernel's PTX does as a programmatic dependent: whether it waits for the kernel before it
    (``griddepcontrol.wait``), lets the next one start (``launch_dependents``), and in which order."""
    wait, trigger = ptx.find("griddepcontrol.wait"), ptx.find("griddepcontrol.launch_dependents")
    return {"wait": wait >= 0, "launch_dependents": trigger >= 0, "trigger_before_wait": 0 <= trigger < wait,
            "wait_before_first_load": wait < ptx.find("ld.global")}


def compiled_in_subprocess(script: str, *args: str, timeout: float = 900):
    """Run ``script`` (a compile test's own file) in a fresh interpreter without ``TRITON_INTERPRET`` (the tests'
    interpreter mode cannot compile), and return the JSON its last line of output printed."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items) -> None:
    import pytest

    if gpu_kind() is not None:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
