"""`pagoda generate`: greedy output equals LLM.generate; bad flags fail fast with one line."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from pagoda import SamplingParams
from pagoda.cli.main import main


def test_subprocess_output_equals_llm_generate(chat_model, llm):
    prompts = ["t1 t2 t3", "t9 t8"]
    expected = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    single = run_cli("generate", chat_model, prompts[0], "--max-tokens", "8", "--log-level", "warning")
    assert single.returncode == 0, single.stderr
    assert single.stdout == prompts[0] + expected[0].outputs[0].text + "\n"
    several = run_cli("generate", "--model", chat_model, *prompts, "--max-tokens", "8", "--json")
    assert several.returncode == 0, several.stderr
    records = [json.loads(line) for line in several.stdout.splitlines()]
    assert [r["prompt"] for r in records] == prompts
    for record, out in zip(records, expected):
        assert record["outputs"] == [{"text": out.outputs[0].text, "token_ids": out.outputs[0].token_ids,
                                      "finish_reason": "length"}]


def test_stop_n_and_chat_flags(chat_model, llm, capsys):
    greedy = llm.generate(["t5 t6"], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)[0].outputs[0]
    stop_word = greedy.text.split()[3]
    assert main(["generate", chat_model, "t5 t6", "--max-tokens", "8", "--stop", stop_word, "--json", "--max-num-seqs", "4"]) == 0
    out = json.loads(capsys.readouterr().out)["outputs"][0]
    assert out["finish_reason"] == "stop" and out["text"] == greedy.text[: greedy.text.index(" " + stop_word)] + " "
    assert main(["generate", chat_model, "t5 t6", "--max-tokens", "4", "--n", "3", "--temperature", "1", "--max-num-seqs", "4"]) == 0
    text = capsys.readouterr().out
    assert [f"--- prompt 1, sample {j} (length) ---" in text for j in (1, 2, 3)] == [True] * 3
    reply = llm.chat([{"role": "user", "content": "t7"}], SamplingParams(temperature=0, max_tokens=5), use_tqdm=False)
    assert main(["generate", chat_model, "t7", "--chat", "--max-tokens", "5", "--max-num-seqs", "4"]) == 0
    assert capsys.readouterr().out == reply[0].outputs[0].text + "\n"


@pytest.mark.parametrize("flags, reason", [
    (["--temperature", "-1"], "temperature must be >= 0"),
    (["--top-p", "0"], "top_p must be in (0, 1]"),
    (["--max-tokens", "0"], "max_tokens must be >= 1, got 0"),
    (["--n", "0"], "n must be >= 1, got 0"),
    (["--block-size", "3"], "block_size must be a power of two"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in (0, 1]"),
    (["--model", "./no/such/model"], "model './no/such/model' not found"),
])
def test_bad_values_exit_2_with_one_line_before_loading(flags, reason, capsys, monkeypatch):
    monkeypatch.setattr("pagoda.entrypoints.llm.LLM.__init__", _must_not_load)
    assert main(["generate", "t1 t2", *flags]) == 2
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1


def test_bad_choice_or_type_exits_2_in_the_parser(capsys):
    for flags, reason in ((["--attention-backend", "nope"], "argument --attention-backend: Unknown attention backend "
                                                             "'nope'. Available: "),
                          (["--temperature", "hot"], "invalid float value: 'hot'")):
        with pytest.raises(SystemExit) as exit_info:
            main(["generate", "t1", *flags])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and reason in err and err.count("\n") == 1, err


def test_missing_model_path_in_first_position_is_an_error(capsys, monkeypatch):
    monkeypatch.setattr("pagoda.entrypoints.llm.LLM.__init__", _must_not_load)
    assert main(["generate", "/no/such/folder", "t1 t2"]) == 2
    assert "not found" in capsys.readouterr().err


def test_help_mentions_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = capsys.readouterr().out
    for flag in ("--model", "--n", "--chat", "--json", "--max-tokens", "--min-tokens", "--temperature", "--top-p",
                 "--top-k", "--min-p", "--repetition-penalty", "--stop", "--ignore-eos", "--seed", "--dtype",
                 "--max-model-len", "--attention-backend", "--quantization", "--block-size", "--plugins"):
        assert flag in text


def _must_not_load(*args, **kwargs):
    raise AssertionError("a bad flag must be reported before the model loads")


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_a_model_that_cannot_be_built_exits_1_with_one_line(command, chat_model, tmp_path, capsys):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(chat_model, broken)
    config = json.loads((broken / "config.json").read_text())
    config["architectures"] = ["NoSuchModelForCausalLM"]
    (broken / "config.json").write_text(json.dumps(config))
    args = [command, str(broken), "hello"] if command == "generate" else [command, str(broken), "--message", "hi"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pagoda {command}: error: ") and "NoSuchModelForCausalLM" in err and "register_models" in err
    assert "Traceback" not in err
