"""Small Hugging Face tokenizers trained here (no download): byte-level BPE on stdlib text, for
the rehearsals, the benchmarks and the tests."""

from __future__ import annotations

import sysconfig
from collections.abc import Sequence
from pathlib import Path


def stdlib_texts(n: int | None = None, start: int = 0) -> list[str]:
    """The text of ``n`` standard-library modules (sorted by name, from ``start``; all of them
    when ``n`` is None)."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[start : None if n is None else start + n]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def train_bpe(
    path: Path,
    *,
    texts: Sequence[str] | None = None,
    vocab_size: int = 1000,
    specials: tuple[str, ...] = ("<|endoftext|>",),
    template: tuple[str, str] | None = None,
) -> Path:
    """Train a byte-level BPE tokenizer on ``texts`` (default: 30 stdlib modules) and save its
    tokenizer.json at ``path``. ``template=(bos, eos)`` adds a ``bos $A eos`` post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stdlib_texts(30) if texts is None else texts, trainer=trainer)
    if template is not None:
        bos, eos = template
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A {eos}",
            special_tokens=[(bos, tok.token_to_id(bos)), (eos, tok.token_to_id(eos))],
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path
