"""A Qwen2-style byte-level BPE text tokenizer, trained offline, with Qwen's real special ids.

No Qwen vocabulary is reachable here, so we train a small byte-level BPE with
`tokenizers` on a built-in English corpus (all 256 byte tokens included, Qwen2's
pre-tokenizer regex), then lay it out the way Qwen3-TTS expects: 151643 regular
ids (padded with unreachable filler entries), `assistant` at Qwen's id 77091,
and the added tokens at 151643..151675 (see `configs.ADDED_TOKENS`). English
prompts come out longer than with the real vocab (only prefill length changes).
The wrapper slices its prompt by position, so `assistant` and `\\n` must each be
one token; `build_vocab` checks that.
"""

from __future__ import annotations

import json
from pathlib import Path

from omni_cpu.checkpoint.configs import REGULAR_VOCAB_SIZE

# Qwen2's pre-tokenizer split (tokenizer.json of Qwen2/Qwen3).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
ASSISTANT_ID = 77091
_TRAIN_VOCAB_SIZE = 4000

_CORPUS = """\
The quick brown fox jumps over the lazy dog. Hello world, this is a test of speech synthesis.
Speech synthesis turns written text into spoken audio, one frame of sound after another.
A talker model reads the text and writes codec frames; a decoder turns the frames into a wave.
Every frame is eighty milliseconds of audio at twenty-four thousand samples per second.
The weather today is sunny with a light breeze, and the temperature will reach twenty degrees.
Please call me back when you have a moment; I would like to talk about the plan for next week.
She said she would be here by noon, but the train was late and the station was crowded.
Numbers such as 1, 2, 3, 10, 42, 100 and 2025 appear in dates, prices and phone numbers.
Questions end with a question mark? Exclamations end with an exclamation mark! Lists use commas.
The meeting starts at nine o'clock in the morning; don't be late, we'll begin on time.
It's a good day to read a book, write a letter, or listen to music in the garden.
Computers with many cores can run several models at once when each one has its own cores.
The server answered every request quickly, and the users were happy with the voices they heard.
Once upon a time there was a little house at the edge of a forest, near a quiet river.
In the morning the children walked to school, and in the evening they played in the park.
Good morning, good afternoon, good evening and good night. Thank you very much. You're welcome.
How are you today? I am fine, thank you. What time is it? It is half past three.
system user assistant system user assistant system user assistant system user assistant
<|im_start|>assistant
Hello, how can I help you today?<|im_end|>
<|im_start|>user
Please read this sentence aloud in a calm and friendly voice.<|im_end|>
"""


def _corpus_lines() -> list[str]:
    # Repetition gives the trainer stable pair counts; the role words must merge fully.
    return _CORPUS.splitlines(keepends=True) * 8


def _train() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train the byte-level BPE; returns its vocab (token → id) and merges in rank order."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=_TRAIN_VOCAB_SIZE,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_lines(), trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), merges  # type: ignore[arg-type]


def build_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The full regular vocab (exactly REGULAR_VOCAB_SIZE ids) and the BPE merges."""
    trained, merges = _train()
    if "assistant" not in trained or "Ċ" not in trained:
        raise RuntimeError("tokenizer training lost 'assistant' or '\\n' as single tokens")
    by_id = {token_id: token for token, token_id in trained.items()}
    # Move `assistant` to Qwen's id; every other free id gets a filler entry that
    # no merge can produce, so ids line up with the real embedding table.
    del by_id[trained["assistant"]]
    by_id[ASSISTANT_ID] = "assistant"
    vocab = {
        by_id.get(token_id, f"<|filler_{token_id}|>"): token_id
        for token_id in range(REGULAR_VOCAB_SIZE)
    }
    if len(vocab) != REGULAR_VOCAB_SIZE:
        raise RuntimeError("tokenizer vocab has duplicate entries")
    return vocab, merges


def write_tokenizer(out_dir: Path) -> list[Path]:
    """Write vocab.json and merges.txt (tokenizer_config.json comes from `configs`)."""
    vocab, merges = build_vocab()
    vocab_path = out_dir / "vocab.json"
    merges_path = out_dir / "merges.txt"
    vocab_path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2", *(f"{left} {right}" for left, right in merges)]
    merges_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [vocab_path, merges_path]


def load_tokenizer(checkpoint_dir: Path):  # -> tokenizers.Tokenizer
    """A `tokenizers.Tokenizer` over a checkpoint's vocab.json + merges.txt + added tokens.

    Mirrors what transformers' Qwen2TokenizerFast builds from the same files.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers as pre

    bpe = models.BPE.from_file(
        str(checkpoint_dir / "vocab.json"), str(checkpoint_dir / "merges.txt")
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre.Sequence(
        [
            pre.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
            pre.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    config = json.loads((checkpoint_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    for token_id, entry in sorted(config["added_tokens_decoder"].items(), key=lambda e: int(e[0])):
        token = AddedToken(entry["content"], special=entry["special"], normalized=False)
        if entry["special"]:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
        if tokenizer.token_to_id(entry["content"]) != int(token_id):
            raise ValueError(f"added token {entry['content']} did not land at id {token_id}")
    return tokenizer
