"""The offline Qwen2-style tokenizer: real special ids, single-token prompt markers."""

from __future__ import annotations

import json
import logging

import pytest

from omni_cpu.checkpoint import configs
from omni_cpu.checkpoint.text_tokenizer import ASSISTANT_ID, load_tokenizer

PROMPT = "<|im_start|>assistant\nHello world.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return load_tokenizer(tiny_checkpoint)


def test_special_tokens_sit_at_their_real_ids(tokenizer):
    for token_id, content, _ in configs.ADDED_TOKENS:
        assert tokenizer.token_to_id(content) == token_id
    assert tokenizer.token_to_id("<tts_pad>") == 151671
    assert tokenizer.token_to_id("<tts_text_eod>") == 151673


def test_plain_text_encodes_to_regular_ids(tokenizer):
    ids = tokenizer.encode("Hello world").ids
    assert ids and all(i < configs.REGULAR_VOCAB_SIZE for i in ids)


def test_prompt_role_and_newline_are_single_tokens(tokenizer):
    """The wrapper slices the prompt by position: [:3] is the role, [3:-5] the text."""
    ids = tokenizer.encode(PROMPT).ids
    newline = tokenizer.token_to_id("Ċ")
    assert ids[:3] == [151644, ASSISTANT_ID, newline]
    assert ids[-5:] == [151645, newline, 151644, ASSISTANT_ID, newline]
    assert tokenizer.decode(ids[3:-5]) == "Hello world."


def test_vocab_has_exactly_the_regular_ids_and_merges_have_the_version_header(tiny_checkpoint):
    vocab = json.loads((tiny_checkpoint / "vocab.json").read_text(encoding="utf-8"))
    assert sorted(vocab.values()) == list(range(configs.REGULAR_VOCAB_SIZE))
    merges = (tiny_checkpoint / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0] == "#version: 0.2"
    assert all(len(line.split(" ")) == 2 for line in merges[1:])


def test_transformers_auto_tokenizer_loads_it(tiny_checkpoint):
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    assert tokenizer.convert_tokens_to_ids("<tts_text_bos>") == 151672
    ids = tokenizer("Hello world")["input_ids"]
    assert ids and all(i < configs.REGULAR_VOCAB_SIZE for i in ids)
    assert tokenizer(PROMPT)["input_ids"][:3] == [151644, ASSISTANT_ID, 198]


def test_transformers_loads_it_without_the_mistral_regex_warning(tiny_checkpoint):
    """Every stage process loads this tokenizer: the warning was one line per process."""
    transformers = pytest.importorskip("transformers")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    finally:
        library_logger.removeHandler(handler)
    assert [r.getMessage() for r in records if "regex" in r.getMessage()] == []
    assert tokenizer(PROMPT)["input_ids"][:3] == [151644, ASSISTANT_ID, 198]  # split unchanged
