"""Smoke test of the carried vLLM (PYTHONPATH=/tmp/vllm_site): imports the modules a dense bf16 Llama
run loads (offline LLM, `vllm serve`, `vllm bench serve`), loads the kernels, and prints in one line
what is missing, so that one more call can fix it. Exit status 1 when anything failed."""

from __future__ import annotations

import importlib
import sys
import traceback

MODULES = (
    "vllm", "vllm.entrypoints.llm", "vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve", "vllm.benchmarks.serve", "vllm.benchmarks.datasets",
    "vllm.v1.engine.core", "vllm.v1.engine.async_llm", "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner", "vllm.v1.attention.backends.flash_attn",
    "vllm.v1.attention.backends.triton_attn", "vllm.model_executor.models.llama",
    "vllm.model_executor.model_loader.dummy_loader", "vllm.platforms.cuda", "vllm.compilation.backends",
)
KERNELS = ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa3_C")


def try_import(name: str, missing: dict[str, str], errors: dict[str, str]) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing.setdefault(exc.name or str(exc), name)
    except Exception as exc:  # an import that runs and breaks: keep the first line of the reason
        errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def check_app(errors: dict[str, str]) -> None:
    """Build `vllm serve`'s FastAPI app without an engine: catches missing route-time imports."""
    try:
        from vllm.entrypoints.openai.api_server import build_app
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "/tmp/none", "--load-format", "dummy"])
        app = build_app(args, ("generate",))
        print(f"vllm serve app: {len(app.routes)} routes")
    except Exception as exc:
        traceback.print_exc(limit=3)
        errors["build_app"] = f"{type(exc).__name__}: {exc}"


def main() -> int:
    missing: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name in MODULES + KERNELS:
        try_import(name, missing, errors)
    if not missing and "vllm" not in errors:
        import vllm
        from vllm import LLM  # noqa: F401
        from vllm.vllm_flash_attn.flash_attn_interface import FA3_AVAILABLE, FA3_UNAVAILABLE_REASON

        print(f"vllm {vllm.__version__} from {vllm.__file__}; FA3 available: {FA3_AVAILABLE}"
              f"{'' if FA3_AVAILABLE else ' (' + str(FA3_UNAVAILABLE_REASON) + ')'}")
        check_app(errors)
    for module, importer in missing.items():
        print(f"missing module {module} (first needed by {importer})")
    for name, reason in errors.items():
        print(f"import error in {name}: {reason}")
    if missing or errors:
        print("SMOKE FAILED: missing modules: " + (" ".join(missing) or "none") + "; errors in: " + (" ".join(errors) or "none"))
        return 1
    print("SMOKE OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
