"""Registry logic and error shapes, in-process: a PluginManager fed by the fake plugin modules of
tests/plugins/ (imported from source) instead of installed entry points."""

from __future__ import annotations

import argparse
import importlib
import types
from pathlib import Path

import pytest
import torch

from pagoda.cli import main as cli_main
from pagoda.cli.plugins_cmd import format_table, run_list, run_new
from pagoda.errors import IncompatibleChoiceError, UnknownChoiceError
from pagoda.hookspecs import hookimpl
from pagoda.interfaces import AttentionMetadata, AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins.manager import ENV_ALLOW, ENV_BLOCK, PluginInfo, PluginManager

FAKES = Path(__file__).parent / "plugins"
SPEC = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=8, scale=8**-0.5, block_size=4, dtype=torch.float32)


@pytest.fixture(autouse=True)
def no_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_ALLOW, raising=False)
    monkeypatch.delenv(ENV_BLOCK, raising=False)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    """``fake("fake_attention")`` -> that fake project's plugin module, imported from source."""

    def load(project: str) -> types.ModuleType:
        monkeypatch.syspath_prepend(str(FAKES / project))
        return importlib.import_module(f"pagoda_{project}.plugin")

    return load


def manager(allow=None, block="", **modules) -> PluginManager:
    """Built-ins plus the given modules (keyword = plugin name with '_' for '-'); no entry points."""
    named = {name.replace("_", "-"): module for name, module in modules.items()}
    return PluginManager(allow=allow, block=block, modules=named, entry_points=False)


def stub(name: str) -> types.ModuleType:
    """A plugin module that implements no hook (like a first-party plugin before its release)."""
    return types.ModuleType(name)


def test_builtins_register_the_reference_capabilities() -> None:
    info = manager().plugins["builtin"]
    assert (info.status, info.distribution, info.builtin) == ("loaded", "pagoda", True)
    assert info.registers["attention"] == ["torch"]
    assert info.registers["platform"] == ["cpu"]
    assert info.registers["quantization"] == ["none"]


def test_auto_picks_the_highest_priority_usable_backend(fake) -> None:
    plugin = fake("fake_attention")
    assert manager().registry("attention").select("auto", platform=CpuPlatform(), spec=SPEC)[0] == "torch"
    name, backend = (
        manager(fake_attention=plugin).registry("attention").select("auto", platform=CpuPlatform(), spec=SPEC)
    )
    assert (name, backend) == ("fake-attn", plugin.FakeAttentionBackend)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q: [q_len, heads, d] (the last q_len positions), k/v: [seq_len, kv_heads, d]; float64."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1).double(), v.repeat_interleave(groups, 1).double()
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * SPEC.scale
    q_pos = torch.arange(k.shape[0] - q.shape[0], k.shape[0])[:, None]
    scores = scores.masked_fill(torch.arange(k.shape[0])[None, :] > q_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def test_fake_backend_attends_over_the_paged_cache(fake) -> None:
    backend_cls = manager(fake_attention=fake("fake_attention")).registry("attention").get("fake-attn")
    gen = torch.Generator().manual_seed(0)
    seq_lens, query_lens = [7, 5, 9], [1, 5, 3]  # one decode, one whole prefill, one chunk
    k_all = [torch.randn(n, 2, 8, generator=gen) for n in seq_lens]
    v_all = [torch.randn(n, 2, 8, generator=gen) for n in seq_lens]
    q = torch.randn(sum(query_lens), 4, 8, generator=gen)
    tables = torch.randperm(12, generator=gen)[:9].view(3, 3).int()
    cache = torch.zeros(2, 12, 4, 2, 8)
    slots = []
    for i, n in enumerate(seq_lens):
        seq_slots = [int(tables[i, p // 4]) * 4 + p % 4 for p in range(n)]
        past = n - query_lens[i]
        cache[0].view(-1, 2, 8)[seq_slots[:past]] = k_all[i][:past]  # earlier steps' tokens
        cache[1].view(-1, 2, 8)[seq_slots[:past]] = v_all[i][:past]
        slots += seq_slots[past:]
    metadata = AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        block_tables=tables,
        query_start_loc=torch.tensor([0, 1, 6, 9], dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        max_query_len=5,
        max_seq_len=9,
        num_decodes=1,
    )
    new_k = torch.cat([k[n - ql :] for k, n, ql in zip(k_all, seq_lens, query_lens)])
    new_v = torch.cat([v[n - ql :] for v, n, ql in zip(v_all, seq_lens, query_lens)])
    out = backend_cls(SPEC, CpuPlatform()).forward(q, new_k, new_v, cache, metadata)
    starts = metadata.query_start_loc.tolist()
    for i in range(3):
        expected = naive_attention(q[starts[i] : starts[i + 1]], k_all[i], v_all[i])
        torch.testing.assert_close(out[starts[i] : starts[i + 1]].double(), expected, rtol=1e-5, atol=1e-5)


def test_a_hook_that_raises_registers_nothing(fake) -> None:
    pm = manager(broken_hook=fake("broken_hook"), fake_attention=fake("fake_attention"))
    info = pm.plugins["broken-hook"]
    assert info.status == "failed"
    assert "register_attention_backends raised: RuntimeError: broken_hook failed halfway" in info.errors[0]
    assert info.registers == {}
    assert "half-registered" not in pm.registry("attention")
    assert pm.registry("attention").names() == ["fake-attn", "torch"]  # the others are unaffected


def test_bad_registrations_fail_the_plugin_and_argless_hooks_work() -> None:
    class Bad:
        @hookimpl
        def register_attention_backends(self, register) -> None:
            register("bad", object)

    class Argless:
        @hookimpl
        def register_schedulers(self) -> None:
            pass

    pm = manager(bad=Bad(), argless=Argless())
    assert pm.plugins["bad"].status == "failed"
    assert "must be a subclass of pagoda.interfaces.AttentionBackend" in pm.plugins["bad"].errors[0]
    assert "bad" not in pm.registry("attention")
    assert (pm.plugins["argless"].status, pm.plugins["argless"].registers) == ("loaded", {})


def test_unknown_name_lists_the_available_ones(fake) -> None:
    with pytest.raises(UnknownChoiceError) as err:
        manager(fake_attention=fake("fake_attention")).registry("attention").get("torhc")
    message = str(err.value)
    assert "Unknown attention backend 'torhc'" in message
    assert "Available: fake-attn, torch (or 'auto')" in message
    assert "Did you mean 'torch'?" in message


def test_missing_first_party_name_says_what_to_install() -> None:
    with pytest.raises(UnknownChoiceError) as err:
        manager().registry("attention").get("triton")
    assert "pip install pagoda-attention-triton" in str(err.value)
    assert "pip install ./plugins/attention_triton" in str(err.value)


def test_installed_but_disabled_or_empty_first_party_plugin() -> None:
    disabled = manager(block="attention-triton", attention_triton=stub("pagoda_attention_triton.plugin"))
    assert (disabled.plugins["attention-triton"].status, disabled.plugins["attention-triton"].registers) == (
        "disabled",
        {},
    )
    with pytest.raises(UnknownChoiceError, match="plugin 'attention-triton' is disabled"):
        disabled.registry("attention").get("triton")
    empty = manager(attention_triton=stub("pagoda_attention_triton.plugin"))
    with pytest.raises(
        UnknownChoiceError, match=r"pagoda-attention-triton is installed but does not register 'triton' \(yet\)"
    ):
        empty.registry("attention").get("triton")


def test_allowlist_loads_only_the_listed_plugins(fake) -> None:
    pm = manager(allow="fake-attention", fake_attention=fake("fake_attention"), fake_platform=fake("fake_platform"))
    assert pm.plugins["fake-attention"].status == "loaded"
    assert (pm.plugins["fake-platform"].status, pm.plugins["fake-platform"].registers) == ("disabled", {})
    assert "fake-platform" not in pm.registry("platform")
    assert pm.plugins["builtin"].status == "loaded"  # built-ins are not subject to the lists


def test_incompatible_choice_says_why(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    platforms = manager(fake_platform=fake("fake_platform")).registry("platform")
    monkeypatch.delenv("FAKE_PLATFORM_AVAILABLE", raising=False)
    with pytest.raises(IncompatibleChoiceError) as err:
        platforms.select("fake-platform")
    assert (
        "Platform 'fake-platform' cannot be used here: the fake device is absent (set FAKE_PLATFORM_AVAILABLE=1)"
        in str(err.value)
    )
    assert "Usable here: cpu." in str(err.value)
    monkeypatch.setenv("FAKE_PLATFORM_AVAILABLE", "1")
    assert platforms.select("fake-platform")[0] == "fake-platform"
    assert platforms.select("auto")[0] == "cpu"  # priority -1 < cpu's 0


def test_unknown_model_architecture_names_the_hook() -> None:
    with pytest.raises(UnknownChoiceError) as err:
        manager().registry("model").get("NoSuchForCausalLM")
    assert "Unknown model architecture 'NoSuchForCausalLM'" in str(err.value)
    assert "`register_models` hook registers 'NoSuchForCausalLM'" in str(err.value)


def test_table_shows_registrations_then_errors() -> None:
    plugins = [
        PluginInfo(
            "builtin",
            "pagoda.builtin",
            "pagoda",
            "0.1.0",
            builtin=True,
            registers={"attention": ["torch"], "platform": ["cpu"]},
        ),
        PluginInfo(
            "broken-import",
            "pagoda_broken_import.plugin",
            "pagoda-broken-import",
            "0.1.0",
            status="failed",
            errors=["import failed: ImportError: no libfake"],
        ),
        PluginInfo("off", "off.plugin", "pagoda-off", "1.2", status="disabled"),
    ]
    lines = format_table(plugins).splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "REGISTERS"]
    assert lines[1].split(None, 4) == ["builtin", "pagoda", "0.1.0", "loaded", "platform: cpu; attention: torch"]
    assert lines[2].split() == ["broken-import", "pagoda-broken-import", "0.1.0", "failed", "-"]
    assert lines.index("Errors (these plugins register nothing):") > 3
    assert "  broken-import (pagoda-broken-import): import failed: ImportError: no libfake" in lines
    assert lines[-1].endswith(": off")


def test_cli_parser_routes_plugins_and_new() -> None:
    parser = cli_main.build_parser(manager())
    assert parser.parse_args(["plugins"]).func is run_list
    assert parser.parse_args(["plugins", "--json"]).json is True
    args = parser.parse_args(["plugins", "new", "my-attn", "--kind", "quantization", "--output", "out"])
    assert (args.func, args.name, args.kind, args.output) == (run_new, "my-attn", "quantization", "out")
    plugins_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["plugins"]
    new_parser = next(a for a in plugins_parser._actions if isinstance(a, argparse._SubParsersAction)).choices["new"]
    for p in (plugins_parser, new_parser):
        assert all(action.help for action in p._actions), "every flag needs --help text"


def test_a_name_taken_by_an_earlier_plugin_is_refused_unless_allowed(fake) -> None:
    backend = fake("fake_attention").FakeAttentionBackend

    class Later:
        @hookimpl
        def register_attention_backends(self, register) -> None:
            register("fake-attn", type("LaterBackend", (backend,), {}))

    pm = manager(fake_attention=fake("fake_attention"), later=Later())
    assert pm.registry("attention").get("fake-attn") is backend
    assert pm.plugins["later"].registers == {}
    assert pm.plugins["later"].notes == [
        "attention backend 'fake-attn' not registered: the name belongs to plugin 'fake-attention' "
        "(pagoda_fake_attention.plugin); to let plugin 'later' (Later) replace it, pass "
        "--allow-plugin-overrides attention:fake-attn"
    ]
    allowed = PluginManager(block="", overrides="fake-attn", entry_points=False,
                            modules={"fake-attention": fake("fake_attention"), "later": Later()})
    assert allowed.registry("attention").get("fake-attn").__name__ == "LaterBackend"
    assert allowed.plugins["later"].registers == {"attention": ["fake-attn"]}
    assert "attention" not in allowed.plugins["fake-attention"].registers
    assert allowed.registry("attention").describe("fake-attn") == (
        "fake-attn (plugin later, replacing the one of plugin 'fake-attention' (pagoda_fake_attention.plugin))"
    )
