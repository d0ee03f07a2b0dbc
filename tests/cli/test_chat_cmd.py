"""`pagoda chat`: streamed replies equal LLM.chat's greedy output, on a terminal and from scripts."""

from __future__ import annotations

import io
import os
import signal
import sys

import pytest
from conftest import SEQS, run_cli
from pty_session import PtySession

from pagoda import SamplingParams
from pagoda.cli.chat_cmd import ChatSession
from pagoda.cli.main import main

GREEDY = ["--temperature", "0", "--max-num-seqs", str(SEQS), "--log-level", "warning"]


def reference(llm, conversation: list[dict], max_tokens: int) -> str:
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    return llm.chat(conversation, params, use_tqdm=False)[0].outputs[0].text


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_message_flag_prints_the_reply(chat_model, llm):
    done = run_cli("chat", chat_model, "--message", "t5 t6", "--system", "t9", "--max-tokens", "12", *GREEDY)
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference(llm, [{"role": "system", "content": "t9"}, user("t5 t6")], 12) + "\n"


def test_message_from_stdin_when_not_a_terminal(chat_model, llm, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("t7 t8\n"))
    assert main(["chat", chat_model, "--max-tokens", "6", *GREEDY]) == 0
    assert capsys.readouterr().out == reference(llm, [user("t7 t8")], 6) + "\n"


def test_interactive_chat_keeps_history_and_resets(chat_model, llm):
    chat = PtySession([sys.executable, "-m", "pagoda.cli.main", "chat", chat_model, "--max-tokens", "10", *GREEDY])
    chat.read_until(b">>> ")
    first, second = _turn(chat, "t5 t6"), _turn(chat, "t7")
    assert first == reference(llm, [user("t5 t6")], 10)
    assert second == reference(llm, [user("t5 t6"), {"role": "assistant", "content": first}, user("t7")], 10)
    chat.send(b"/reset\n")
    assert b"(history cleared)" in chat.read_until(b">>> ")
    assert _turn(chat, "t7") == reference(llm, [user("t7")], 10)
    chat.send(b"/exit\n")
    assert chat.wait() == 0


def test_ctrl_c_stops_the_reply_and_returns_to_the_prompt(chat_model):
    chat = PtySession([sys.executable, "-m", "pagoda.cli.main", "chat", chat_model, "--max-tokens", "3000", *GREEDY])
    chat.read_until(b">>> ")
    chat.send(b"t5 t6\n")
    chat.read_until(b"t5 t6\r\n")  # the echo; the reply streams after it
    chat.read_until(b" t")
    chat.send(b"\x03")  # the terminal turns Ctrl-C into SIGINT
    reply = chat.read_until(b">>> ")
    assert b"[interrupted]" in reply
    assert reply.count(b" t") < 2900  # stopped well before --max-tokens
    chat.send(b"\x04")  # Ctrl-D at the prompt quits
    assert chat.wait() == 0


def test_interrupted_reply_is_aborted_and_left_out_of_history(llm):
    session = ChatSession(llm, SamplingParams(temperature=0, max_tokens=200))
    pieces: list[str] = []

    def write(text: str) -> None:
        pieces.append(text)
        if len(pieces) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does, mid-reply

    reply, completed = session.send("t5 t6", write)
    assert not completed and reply == "".join(pieces) and 3 <= len(reply.split()) < 200
    assert session.history == [] and not llm.engine.has_unfinished_requests()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored
    reply, completed = session.send("t5 t6", lambda _: None)
    assert completed and len(reply.split()) == 200 and len(session.history) == 2


@pytest.mark.parametrize("flags, reason", [
    (["--temperature", "-1"], "temperature must be >= 0"),
    (["--max-tokens", "0"], "max_tokens must be >= 1"),
    (["--block-size", "5"], "block_size must be a power of two"),
    (["./missing-model"], "model './missing-model' not found"),
    (["--message", "  "], "the message is empty"),
])
def test_bad_values_exit_2_before_loading(flags, reason, capsys, monkeypatch):
    monkeypatch.setattr("pagoda.entrypoints.llm.LLM.__init__", _must_not_load)
    assert main(["chat", *flags]) == 2
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1


def test_help_mentions_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["chat", "--help"])
    text = capsys.readouterr().out
    for flag in ("MODEL", "--message", "--system", "--chat-template", "--max-tokens", "--min-tokens", "--temperature",
                 "--top-p", "--top-k", "--min-p", "--repetition-penalty", "--stop", "--ignore-eos", "--seed",
                 "--dtype", "--max-model-len", "--attention-backend", "/exit", "/reset", "Ctrl-C"):
        assert flag in text


def _turn(chat: PtySession, text: str) -> str:
    """Type a message; return the streamed reply (between the echoed line and the next prompt)."""
    chat.send(text.encode() + b"\n")
    chat.read_until(text.encode() + b"\r\n")
    reply = chat.read_until(b">>> ")[: -len(b">>> ")]
    assert reply.endswith(b"\r\n")
    return reply[: -len(b"\r\n")].decode()


def _must_not_load(*args, **kwargs):
    raise AssertionError("a bad flag must be reported before the model loads")


def test_tokenizer_without_template_needs_chat_template_flag(tmp_path, capsys):
    from tiny_models import make_tiny_model

    make_tiny_model(tmp_path, "llama")  # its tokenizer has no chat template
    base = ["chat", str(tmp_path), "--message", "t5", "--max-tokens", "3", *GREEDY]
    assert main(base) == 2
    assert "no chat template; pass --chat-template" in capsys.readouterr().err
    template = tmp_path / "template.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }} {% endfor %}t3")
    assert main([*base, "--chat-template", str(template)]) == 0
    assert len(capsys.readouterr().out.split()) == 3
