"""A model folder both servers can load with dummy weights: the real config.json plus a synthetic
word-level tokenizer whose token i is the word 't<i>' (so a prompt of N words is exactly N known
token ids on both servers, and every generated id decodes to text that streams).

Neither server has a --skip-tokenizer-init path that streams text, and no real Llama-3 tokenizer
can travel; this tokenizer costs both servers the same (one dict lookup per word).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def build_model_dir(config_dir: Path, dest: Path) -> Path:
    """Copy config.json from config_dir into dest and write the tokenizer files there; returns dest."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = json.loads((config_dir / "config.json").read_text())
    vocab_size = int(config["vocab_size"])
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config_dir / "config.json", dest / "config.json")
    vocab = {f"t{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(dest / "tokenizer.json"))
    # No special tokens: an added token matches anywhere in the text ('t1' inside 't172'), and both
    # engines take EOS from config.json (the benchmarks ignore it anyway).
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(config.get("max_position_embeddings", 131072)),
        "clean_up_tokenization_spaces": False,
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return dest
