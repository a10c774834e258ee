"""Tokenizers for foundation-model data: a Hugging Face ``tokenizer.json``, or raw bytes.

    tok = load_tokenizer("/fsx/tokenizers/llama3/tokenizer.json")   # or "s3://bucket/tok.json"
    tok = load_tokenizer("bytes")                                  # ByteTokenizer, 256 ids
    ids = tok.encode_batch(["first document", "second"])           # no special tokens added
    tok.vocab_size, tok.eos_id, tok.bos_id, tok.fingerprint

Both kinds share one interface (:class:`Tokenizer`). The ``fingerprint`` is the SHA-256 of the
``tokenizer.json`` bytes (for bytes: of a fixed label), written into a token dataset's manifest
so that a dataset is only ever read with the tokenizer that made it.

The end-of-sequence token is found, in order: the name given (``eos_token=``), the last special
token of the post-processor's single-sequence template (``$A </s>``), else the first of
:data:`EOS_NAMES` in the vocabulary. The beginning-of-sequence token likewise (template's first
special token, then :data:`BOS_NAMES`), and may be absent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from workloads.common import storage

EOS_NAMES: tuple[str, ...] = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>")
BOS_NAMES: tuple[str, ...] = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")
BYTES = "bytes"


class TokenizerError(ValueError):
    """A tokenizer that cannot be used: missing, not a tokenizer.json, or without an EOS token."""


@runtime_checkable
class Tokenizer(Protocol):
    """What a data pipeline needs of a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_id(self) -> int: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: 256 ids. The EOS id is 0 (NUL), a byte that text does not hold;
    there is no BOS. The explicit choice for byte-level models (the job's ``llama-*-bytes``)."""

    kind = "bytes"
    vocab_size = 256
    eos_id = 0
    bos_id: int | None = None
    fingerprint = hashlib.sha256(b"hpray byte tokenizer v1: utf-8 bytes, eos 0").hexdigest()

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(t.encode("utf-8")) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer read from its ``tokenizer.json`` bytes."""

    kind = "huggingface"

    def __init__(
        self,
        data: bytes,
        source: str,
        *,
        eos_token: str | None = None,
        bos_token: str | None = None,
    ) -> None:
        from tokenizers import Tokenizer as _HF

        try:
            self._tok = _HF.from_str(data.decode("utf-8"))
        except Exception as err:  # the library raises plain Exception subclasses of its own
            raise TokenizerError(
                f"tokenizer {source}: not a Hugging Face tokenizer.json (the tokenizers library rejects it)"
            ) from err
        self.source = source
        self._fingerprint = hashlib.sha256(data).hexdigest()
        first, last = _template_specials(data)
        eos = self._find(eos_token, last, EOS_NAMES)
        if eos is None:
            names = [eos_token] if eos_token else ([last] if last else []) + list(EOS_NAMES)
            raise TokenizerError(
                f"tokenizer {source}: no end-of-sequence token; none of {', '.join(names)} is in its "
                "vocabulary (name the tokenizer's EOS token with eos_token)"
            )
        self._eos = eos
        self._bos = self._find(bos_token, first, BOS_NAMES)

    def _find(self, name: str | None, template: str | None, defaults: Sequence[str]) -> int | None:
        candidates = [name] if name else ([template] if template else []) + list(defaults)
        for candidate in candidates:
            token_id = self._tok.token_to_id(candidate)
            if token_id is not None:
                return int(token_id)
        return None

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    @property
    def eos_id(self) -> int:
        return self._eos

    @property
    def bos_id(self) -> int | None:
        return self._bos

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens (the caller appends EOS)."""
        return [e.ids for e in self._tok.encode_batch_fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=False))


def _template_specials(data: bytes) -> tuple[str | None, str | None]:
    """The first and last special token of the post-processor's single-sequence template
    (``TemplateProcessing``, also inside a ``Sequence`` processor), if it has one."""
    try:
        spec = json.loads(data)
    except ValueError:
        return None, None
    processors: list[Any] = []
    post = spec.get("post_processor") if isinstance(spec, dict) else None
    if isinstance(post, dict):
        processors = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for proc in processors:
        if isinstance(proc, dict) and proc.get("type") == "TemplateProcessing":
            specials = [p["SpecialToken"]["id"] for p in proc.get("single", []) if "SpecialToken" in p]
            seq_at = [i for i, p in enumerate(proc.get("single", [])) if "Sequence" in p]
            if not specials or not seq_at:
                continue
            items = proc["single"]
            before = [p["SpecialToken"]["id"] for p in items[: seq_at[0]] if "SpecialToken" in p]
            after = [p["SpecialToken"]["id"] for p in items[seq_at[-1] + 1 :] if "SpecialToken" in p]
            return (before[0] if before else None), (after[-1] if after else None)
    return None, None


def read_bytes(path: str) -> bytes:
    """The bytes of a local/FSx file or an ``s3://`` object; TokenizerError if it does not exist."""
    import pyarrow.fs as pafs

    fs, inner = storage.filesystem_for(path)
    info = fs.get_file_info(inner)
    if info.type != pafs.FileType.File:
        raise TokenizerError(
            f'tokenizer {path}: no such file (expected a Hugging Face tokenizer.json, or "{BYTES}" for bytes)'
        )
    with fs.open_input_stream(inner) as f:
        return bytes(f.read())


def load_tokenizer(spec: str | Path, *, eos_token: str | None = None, bos_token: str | None = None) -> Tokenizer:
    """``"bytes"``: a :class:`ByteTokenizer`; otherwise the ``tokenizer.json`` at a local path or
    ``s3://`` URI (a directory means its ``tokenizer.json``)."""
    spec = str(spec)
    if spec == BYTES:
        return ByteTokenizer()
    if not storage.is_s3(spec) and Path(spec).is_dir():
        spec = str(Path(spec) / "tokenizer.json")
    return HFTokenizer(read_bytes(spec), spec, eos_token=eos_token, bos_token=bos_token)
