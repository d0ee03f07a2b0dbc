"""A tokenizer without a chat template gets its family's turn format (Gemma GGUF files carry none)."""

from __future__ import annotations

import pytest
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from pagoda.entrypoints.chat_template import ChatTemplateError, render_chat
from pagoda.loader.chat_templates import ensure_chat_template


def word_tokenizer(words: list[str]):
    vocab = {w: i for i, w in enumerate(["<unk>", "<bos>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", unk_token="<unk>")


def test_gemma_turns_for_a_gemma_vocabulary():
    tokenizer = ensure_chat_template(word_tokenizer(["<start_of_turn>", "<end_of_turn>", "hi"]))
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi there "},
                    {"role": "assistant", "content": "Hello."}, {"role": "user", "content": [{"type": "text", "text": "Bye"}]}]
    text, _ = render_chat(tokenizer, conversation)
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(ChatTemplateError, match="must alternate"):
        render_chat(tokenizer, [{"role": "assistant", "content": "first"}])


def test_other_vocabularies_and_own_templates_are_left_alone():
    assert ensure_chat_template(word_tokenizer(["hi"])).chat_template is None
    own = word_tokenizer(["<start_of_turn>", "<end_of_turn>"])
    own.chat_template = "{{ messages[0]['content'] }}"
    assert ensure_chat_template(own).chat_template == "{{ messages[0]['content'] }}"
