"""A plugin author's ordinary mistakes, each reproduced by a tiny fake plugin (in-process): the
plugin fails at load, or its one registration is refused, with a reason that names it; the rest of
the engine and the default runs are unaffected. Also: one meaning of ``auto`` and the start-up line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch

from pagoda import LLM, SamplingParams
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.cli import main as cli_main
from pagoda.hookspecs import hookimpl
from pagoda.interfaces import AttentionBackend, AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins import PluginCodeError
from pagoda.plugins import manager as plugin_manager
from pagoda.plugins.manager import ENV_ALLOW, ENV_BLOCK, ENV_OVERRIDES, PluginManager
from pagoda.quantization.unquantized import UnquantizedMethod
from pagoda.guided.xgrammar_backend import XgrammarBackend
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.scheduler import FcfsScheduler
from pagoda.spec_decode.ngram import NgramProposer

sys.path.insert(0, str(Path(__file__).parent / "engine"))
from tiny_models import make_tiny_model  # noqa: E402

GREEDY = SamplingParams(temperature=0, max_tokens=6)


# -- the fake plugins --------------------------------------------------------------------------
class NoForward(AttentionBackend):
    """Forgot ``forward``; would outrank every backend in ``auto``."""

    priority = 1000


class Sibling(TorchAttentionBackend):
    priority = 500


class AbstractBackend:
    @hookimpl
    def register_attention_backends(self, register) -> None:
        register("sibling", Sibling)  # fine by itself, but its plugin fails: never selected either
        register("no-forward", NoForward)


class Squatter:
    """Registers names that belong to the built-ins (fcfs, none) and to a first-party plugin (triton)."""

    @hookimpl
    def register_attention_backends(self, register) -> None:
        register("triton", type("SquatTriton", (TorchAttentionBackend,), {}))
        register("squat-own", type("SquatOwn", (TorchAttentionBackend,), {"priority": -1}))

    @hookimpl
    def register_schedulers(self, register) -> None:
        register("fcfs", type("SquatFcfs", (FcfsScheduler,), {}))

    @hookimpl
    def register_quantization_methods(self, register) -> None:
        register("none", type("SquatNone", (UnquantizedMethod,), {}))


class Int3(UnquantizedMethod):
    """A third-party weight-only method, eager to be chosen."""

    priority = 100


class Int3Plugin:
    @hookimpl
    def register_quantization_methods(self, register) -> None:
        register("int3", Int3)


class Typo:
    @hookimpl
    def register_attention_backend(self, register) -> None:  # the hook is register_attention_backends
        register("typo", TorchAttentionBackend)


class Boom(TorchAttentionBackend):
    def __init__(self, spec, platform) -> None:
        raise RuntimeError("the kernels are missing")


class RaisingCheck(TorchAttentionBackend):
    priority = 900

    @classmethod
    def check(cls, platform, spec=None):
        raise KeyError("device_name")


class Buggy:
    @hookimpl
    def register_attention_backends(self, register) -> None:
        register("boom", Boom)
        register("raising-check", RaisingCheck)


# -- helpers -----------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_ALLOW, ENV_BLOCK, ENV_OVERRIDES):
        monkeypatch.delenv(name, raising=False)


def manager(overrides=None, **modules) -> PluginManager:
    return PluginManager(block="", overrides=overrides, modules={n.replace("_", "-"): m for n, m in modules.items()},
                         entry_points=False)


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch):
    """``use(pm)``: make ``pm`` the process-wide manager (LLM, the engine) for this test."""

    def install(pm: PluginManager) -> PluginManager:
        monkeypatch.setattr(plugin_manager, "_MANAGER", pm)
        return pm

    return install


@pytest.fixture
def cli_plugins(monkeypatch: pytest.MonkeyPatch):
    """``cli_plugins(**modules)``: `pagoda` commands see the built-ins plus these modules only; the
    CLI's plugin flags still reach the manager."""

    def install(**modules):
        def configure(allow=None, block=None, overrides=None):
            named = {n.replace("_", "-"): m for n, m in modules.items()}
            pm = PluginManager(allow, block, overrides=overrides, modules=named, entry_points=False)
            monkeypatch.setattr(plugin_manager, "_MANAGER", pm)
            return pm

        monkeypatch.setattr(plugin_manager, "configure", configure)

    return install


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_model(path, "llama")
    return str(path)


def tokens(llm: LLM) -> list[int]:
    try:
        return llm.generate(["t1 t2 t3"], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    finally:
        llm.shutdown()


def startup_line(caplog: pytest.LogCaptureFixture) -> str:
    return next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Pagoda engine:"))


# -- an abstract class -------------------------------------------------------------------------
def test_an_abstract_backend_fails_its_plugin_and_auto_keeps_torch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "pagoda.plugins"):
        pm = manager(no_forward=AbstractBackend())
    info = pm.plugins["no-forward"]
    assert (info.status, info.registers) == ("failed", {})
    assert info.errors == ["attention backend 'no-forward' (NoForward) is abstract: it does not implement forward"]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["Pagoda plugin 'no-forward' (AbstractBackend) skipped: " + info.errors[0]]
    attention = pm.registry("attention")
    assert "no-forward" not in attention and "sibling" not in attention  # none of its registrations
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=8, scale=0.35, block_size=4, dtype=torch.float32)
    assert attention.select("auto", platform=CpuPlatform(), spec=spec)[0] == "torch"


def test_default_generate_runs_with_the_abstract_plugin_installed(cli_plugins, capsys, caplog) -> None:
    cli_plugins(no_forward=AbstractBackend())
    with caplog.at_level(logging.INFO):
        assert cli_main.main(["generate", "Hello", "--max-tokens", "3", "--json", "--max-num-seqs", "2"]) == 0
    out = json.loads(capsys.readouterr().out)["outputs"][0]
    assert (len(out["token_ids"]), out["finish_reason"]) == (3, "length")
    assert "| attention torch |" in startup_line(caplog)
    assert plugin_manager.get_plugin_manager().plugins["no-forward"].status == "failed"


def test_a_failed_plugin_changes_no_token(tiny: str, use) -> None:
    use(manager())
    reference = tokens(LLM(tiny, max_num_seqs=2))
    use(manager(no_forward=AbstractBackend()))
    assert tokens(LLM(tiny, max_num_seqs=2)) == reference


@pytest.mark.parametrize("attrs, reason", [
    ({"priority": "high"}, "class attribute 'priority' must be an int, got 'high'"),
    ({"priority": True}, "class attribute 'priority' must be an int, got True"),
    ({"description": None}, "class attribute 'description' must be a string, got None"),
    ({"supports_graphs": 1}, "class attribute 'supports_graphs' must be True or False, got 1"),
    ({"kv_cache_dtypes": "auto"}, "class attribute 'kv_cache_dtypes' must be a tuple of strings, got 'auto'"),
    ({"check": lambda self: None}, "Pagoda calls Bad.check(platform=..., spec=...) on the class"),
])
def test_bad_metadata_fails_the_plugin(attrs: dict, reason: str) -> None:
    bad = type("Bad", (TorchAttentionBackend,), attrs)

    class Plugin:
        @hookimpl
        def register_attention_backends(self, register) -> None:
            register("bad", bad)

    info = manager(bad=Plugin()).plugins["bad"]
    assert info.status == "failed" and len(info.errors) == 1
    assert info.errors[0].startswith(f"attention backend 'bad' (Bad): {reason}")


@pytest.mark.parametrize("name", ["", " torch", "auto", 3])
def test_bad_names_fail_the_plugin(name) -> None:
    class Plugin:
        @hookimpl
        def register_attention_backends(self, register) -> None:
            register(name, TorchAttentionBackend)

    info = manager(named=Plugin()).plugins["named"]
    assert info.status == "failed" and info.errors[0].startswith("attention backend ")


# -- errors of a plugin's code -----------------------------------------------------------------
def test_errors_of_plugin_code_name_the_plugin_kind_and_name(tiny: str, use, caplog) -> None:
    pm = use(manager(buggy=Buggy()))
    with pytest.raises(PluginCodeError) as err:
        LLM(tiny, attention_backend="boom", max_num_seqs=2)
    assert str(err.value).startswith("Attention backend 'boom' of plugin 'buggy' (Buggy) raised RuntimeError in "
                                     "Boom(...): the kernels are missing")
    assert isinstance(err.value.__cause__, RuntimeError)
    with pytest.raises(PluginCodeError, match=r"^Attention backend 'raising-check' of plugin 'buggy' .*raised KeyError "
                                              r"in check\(\): 'device_name'"):
        pm.registry("attention").select("raising-check", platform=CpuPlatform())
    with caplog.at_level(logging.WARNING):  # auto: a check that raises counts as unusable, logged
        assert pm.registry("attention").select("auto", platform=CpuPlatform())[0] == "torch"
    assert any("raising-check" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


class BoomGrammar(XgrammarBackend):
    def __init__(self, tokenizer, vocab_size, stop_token_ids) -> None:
        raise RuntimeError("no grammar compiler")


class BoomProposer(NgramProposer):
    def __init__(self, config) -> None:
        raise RuntimeError("no draft model")


class BuggyFeatures:
    @hookimpl
    def register_guided_decoding_backends(self, register) -> None:
        register("boom-grammar", BoomGrammar)

    @hookimpl
    def register_proposers(self, register) -> None:
        register("boom-drafts", BoomProposer)


def test_a_grammar_backend_or_proposer_that_raises_names_its_plugin(tiny: str, use) -> None:
    use(manager(buggy_features=BuggyFeatures()))
    with pytest.raises(PluginCodeError, match=r"^Speculative proposer 'boom-drafts' of plugin 'buggy-features' .*no draft model"):
        LLM(tiny, max_num_seqs=2, speculative_config={"method": "boom-drafts", "num_speculative_tokens": 2})
    llm = LLM(tiny, max_num_seqs=2)
    guided = SamplingParams(max_tokens=4, guided_decoding=GuidedDecodingParams(choice=["t1"], backend="boom-grammar"))
    with pytest.raises(PluginCodeError, match=r"^Guided decoding backend 'boom-grammar' of plugin 'buggy-features' "
                                              r".*no grammar compiler"):
        llm.generate([[1, 2, 3]], guided, use_tqdm=False)
    assert llm.generate([[1, 2, 3]], GREEDY, use_tqdm=False)[0].outputs[0].token_ids  # the engine keeps serving
    llm.shutdown()


# -- names that belong to others ---------------------------------------------------------------
def test_builtin_and_first_party_names_are_refused_without_opt_in() -> None:
    pm = manager(squatter=Squatter())
    info = pm.plugins["squatter"]
    assert (info.status, info.registers) == ("loaded", {"attention": ["squat-own"]})  # its other name loads
    assert pm.registry("scheduler").get("fcfs") is FcfsScheduler
    assert pm.registry("quantization").get("none") is UnquantizedMethod
    assert "triton" not in pm.registry("attention")
    assert info.notes == [
        "attention backend 'triton' not registered: the name belongs to the first-party distribution "
        "pagoda-attention-triton; to let plugin 'squatter' (Squatter) replace it, pass "
        "--allow-plugin-overrides attention:triton",
        "quantization method 'none' not registered: the name belongs to Pagoda's built-ins; to let plugin 'squatter' "
        "(Squatter) replace it, pass --allow-plugin-overrides quantization:none",
        "scheduler 'fcfs' not registered: the name belongs to Pagoda's built-ins; to let plugin 'squatter' (Squatter) "
        "replace it, pass --allow-plugin-overrides scheduler:fcfs",
    ]
    message = pm.registry("attention").unknown_message("triton")
    assert "pip install ./plugins/attention_triton" in message and "plugin 'squatter' registers 'triton' too" in message


def test_opted_in_replacements_load_and_show_in_the_startup_line(tiny: str, use, caplog) -> None:
    pm = use(manager(overrides="triton,scheduler:fcfs", squatter=Squatter()))
    assert pm.registry("scheduler").get("fcfs").__name__ == "SquatFcfs"
    assert pm.registry("attention").get("triton").__name__ == "SquatTriton"
    assert pm.registry("quantization").get("none") is UnquantizedMethod  # not allowed: still refused
    assert pm.plugins["squatter"].registers == {"attention": ["triton", "squat-own"], "scheduler": ["fcfs"]}
    assert "scheduler" not in pm.plugins["builtin"].registers or "fcfs" not in pm.plugins["builtin"].registers["scheduler"]
    assert "scheduler 'fcfs' replaced by plugin 'squatter' (Squatter) (--allow-plugin-overrides)" in pm.plugins["builtin"].notes
    with caplog.at_level(logging.INFO):
        assert tokens(LLM(tiny, attention_backend="triton", max_num_seqs=2))
    line = startup_line(caplog)
    assert "| attention triton (plugin squatter, replacing the one of the first-party distribution " \
           "pagoda-attention-triton) |" in line
    assert "| scheduler fcfs (plugin squatter, replacing the one of Pagoda's built-ins) |" in line


def test_the_cli_flag_and_the_variable_allow_overrides(cli_plugins, capsys, monkeypatch) -> None:
    cli_plugins(squatter=Squatter())
    assert cli_main.main(["plugins", "--json", "--allow-plugin-overrides", "scheduler:fcfs"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["squatter"]["registers"] == {"attention": ["squat-own"], "scheduler": ["fcfs"]}
    assert listed["squatter"]["notes"][-1] == ("scheduler 'fcfs' replaces the one of Pagoda's built-ins (allowed by "
                                               "--allow-plugin-overrides)")
    monkeypatch.setenv(ENV_OVERRIDES, "none")
    assert cli_main.main(["plugins"]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("squatter "))
    assert row.split(None, 4) == ["squatter", "-", "-", "loaded", "attention: squat-own; quantization: none"]
    notes = table.split("\nNotes:\n")[1].splitlines()
    assert "  builtin (pagoda): quantization method 'none' replaced by plugin 'squatter' (Squatter) " \
           "(--allow-plugin-overrides)" in notes
    assert any(n.startswith("  squatter (Squatter): attention backend 'triton' not registered") for n in notes)
    assert cli_main.main(["plugins", "--allow-plugin-overrides", "sheduler:fcfs"]) == 2
    assert "unknown kind 'sheduler' in 'sheduler:fcfs'" in capsys.readouterr().err


# -- one meaning of auto -----------------------------------------------------------------------
def test_quantization_auto_never_picks_a_plugin_for_an_unquantized_checkpoint(tiny: str, use, caplog) -> None:
    pm = use(manager(int3=Int3Plugin()))
    assert pm.registry("quantization").select("auto", platform=CpuPlatform())[0] == "none"
    with caplog.at_level(logging.INFO):
        tokens(LLM(tiny, quantization="auto", max_num_seqs=2))
    assert "| quantization none |" in startup_line(caplog)


def test_scheduler_auto_works(tiny: str, use, caplog) -> None:
    use(manager())
    with caplog.at_level(logging.INFO):
        assert len(tokens(LLM(tiny, scheduler="auto", max_num_seqs=2))) == GREEDY.max_tokens
    line = startup_line(caplog)
    assert "| scheduler fcfs |" in line and "| guided decoding xgrammar |" in line


def test_startup_line_names_the_proposer_when_speculating(tiny: str, use, caplog) -> None:
    use(manager())
    with caplog.at_level(logging.INFO):
        tokens(LLM(tiny, max_num_seqs=2, speculative_config={"method": "ngram", "num_speculative_tokens": 2}))
    assert "| proposer ngram (k=2) |" in startup_line(caplog)


def test_kinds_without_auto_say_so() -> None:
    with pytest.raises(ValueError, match=r"Unknown tool-call parser 'auto'\. Available: hermes, llama3_json, mistral\."):
        manager().registry("tool_parser").select("auto")


# -- a typo in a hook name ---------------------------------------------------------------------
def test_a_misspelt_hook_fails_its_plugin_with_a_did_you_mean(caplog) -> None:
    with caplog.at_level(logging.WARNING, "pagoda.plugins"):
        pm = manager(typo=Typo())
    info = pm.plugins["typo"]
    assert info.status == "failed"
    assert info.errors == ["hook 'register_attention_backend' matches no hook spec (did you mean "
                           "'register_attention_backends'?); Pagoda's hooks are listed in pagoda.hookspecs"]
    assert "typo" not in pm.registry("attention")
    assert "did you mean 'register_attention_backends'?" in caplog.records[0].getMessage()


def test_a_command_hook_that_raises_drops_the_plugins_registrations() -> None:
    class BadCommand:
        @hookimpl
        def register_attention_backends(self, register) -> None:
            register("cmd-attn", Sibling)

        @hookimpl
        def register_commands(self, subparsers) -> None:
            raise RuntimeError("no parser for you")

    pm = manager(bad_command=BadCommand())
    assert "cmd-attn" in pm.registry("attention")
    cli_main.build_parser(pm)  # `pagoda` calls the command hooks while building its parser
    info = pm.plugins["bad-command"]
    assert (info.status, info.errors, info.registers) == ("failed", ["register_commands raised: no parser for you"], {})
    assert "cmd-attn" not in pm.registry("attention")


# -- CLI choices -------------------------------------------------------------------------------
def test_a_missing_first_party_backend_is_a_clean_cli_error_with_the_install_hint(cli_plugins, capsys) -> None:
    cli_plugins()
    with pytest.raises(SystemExit) as info:
        cli_main.main(["generate", "Hello", "--attention-backend", "flash"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("pagoda generate: error: argument --attention-backend: Unknown attention backend 'flash'. "
                          "Available: torch (or 'auto').")
    assert "pip install ./plugins/attention_flash" in err


@pytest.mark.parametrize("flag, kind", [
    ("--quantization", "quantization method"), ("--scheduler", "scheduler"), ("--platform", "platform"),
    ("--guided-decoding-backend", "guided decoding backend"),
])
def test_every_registry_flag_names_what_exists(cli_plugins, capsys, flag: str, kind: str) -> None:
    cli_plugins(int3=Int3Plugin())
    with pytest.raises(SystemExit):
        cli_main.main(["generate", "Hello", flag, "nope"])
    assert f"argument {flag}: Unknown {kind} 'nope'. Available: " in capsys.readouterr().err


def test_serve_parser_flags_and_help_list_the_registered_names(cli_plugins, capsys) -> None:
    cli_plugins(int3=Int3Plugin())
    for flag, kind in (("--tool-call-parser", "tool-call parser"), ("--reasoning-parser", "reasoning parser")):
        with pytest.raises(SystemExit):
            cli_main.main(["serve", flag, "nope"])
        assert f"argument {flag}: Unknown {kind} 'nope'." in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main.main(["generate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--quantization {auto,int3,none}" in help_text and "--scheduler {auto,fcfs,priority}" in help_text
    assert "--allow-plugin-overrides NAMES" in help_text


def test_auto_is_accepted_by_the_cli_for_quantization_and_scheduler(cli_plugins) -> None:
    cli_plugins()
    parser = cli_main.build_parser(plugin_manager.configure())
    args = parser.parse_args(["generate", "Hello", "--quantization", "auto", "--scheduler", "auto"])
    assert (args.quantization, args.scheduler) == ("auto", "auto")
    assert parser.parse_args(["generate", "Hello"]).quantization == "auto"
