"""Fixtures for CLI tests: a tiny random Llama with a word-level tokenizer and a chat template."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from tiny_models import make_tiny_model  # noqa: E402

# Roles become marker words of the word-level vocabulary ('t1' system, 't2' user, 't3' assistant).
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}t1 {% elif m['role'] == 'user' %}t2 {% else %}t3 "
    "{% endif %}{{ m['content'] }} t4 {% endfor %}{% if add_generation_prompt %}t3{% endif %}"
)
MAX_POSITIONS = 4096  # long enough for a reply that Ctrl-C can interrupt
SEQS = 4  # keeps the KV cache (sized for SEQS full-length sequences) small


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory) -> str:
    """A tiny Llama folder whose tokenizer has a chat template."""
    import transformers

    path = tmp_path_factory.mktemp("tiny-chat-llama")
    make_tiny_model(path, "llama")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = MAX_POSITIONS
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="session")
def llm(chat_model):
    """The same model through the offline API, the reference for the CLI's outputs."""
    from pagoda import LLM

    return LLM(model=chat_model, max_num_seqs=SEQS)


def cli_env() -> dict[str, str]:
    """Environment of `pagoda` subprocesses: one torch thread, like the test process."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `pagoda ARGS` in a subprocess (stdin piped, so never a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "pagoda.cli.main", *args, "--max-num-seqs", str(SEQS)], input=stdin or "", capture_output=True, text=True,
        timeout=timeout, env=cli_env(),
    )
