"""workloads/common/tokenizer.py: a trained BPE tokenizer.json and the byte tokenizer behind one
interface; the EOS/BOS ids found; the fingerprint of the file's bytes; each bad input one message."""

from __future__ import annotations

import hashlib

import pytest

from rigs.bpe import stdlib_texts, train_bpe
from workloads.common.tokenizer import (
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    TokenizerError,
    load_tokenizer,
)


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
    return train_bpe(tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=1000)


def test_a_trained_tokenizer_json_loads_with_its_eos_and_fingerprint(bpe_path):
    from tokenizers import Tokenizer as HF

    tok = load_tokenizer(bpe_path)
    assert isinstance(tok, HFTokenizer) and isinstance(tok, Tokenizer)
    hf = HF.from_file(str(bpe_path))
    assert tok.vocab_size == hf.get_vocab_size() == 1000
    assert tok.eos_id == hf.token_to_id("<|endoftext|>")
    assert tok.bos_id is None
    assert tok.fingerprint == hashlib.sha256(bpe_path.read_bytes()).hexdigest()
    assert tok.kind == "huggingface"


def test_encode_batch_and_decode_round_trip_without_special_tokens(bpe_path):
    tok = load_tokenizer(bpe_path)
    texts = [*stdlib_texts(2, start=40), "", "naïve café ✓"]
    ids = tok.encode_batch(texts)
    assert [tok.decode(i) for i in ids] == texts
    assert all(tok.eos_id not in i for i in ids)
    # Compression: BPE trained on Python gives fewer tokens than bytes.
    assert len(ids[0]) < len(texts[0].encode()) / 2


def test_a_directory_means_its_tokenizer_json(bpe_path):
    assert load_tokenizer(bpe_path.parent).fingerprint == load_tokenizer(bpe_path).fingerprint


def test_the_fingerprint_changes_with_the_file(tmp_path, bpe_path):
    other = train_bpe(tmp_path / "tokenizer.json", vocab_size=900)
    assert load_tokenizer(other).fingerprint != load_tokenizer(bpe_path).fingerprint


def test_eos_and_bos_from_the_post_processor_template(tmp_path):
    path = train_bpe(tmp_path / "t.json", specials=("[BEGIN]", "[END]"), template=("[BEGIN]", "[END]"))
    tok = load_tokenizer(path)
    from tokenizers import Tokenizer as HF

    hf = HF.from_file(str(path))
    assert (tok.bos_id, tok.eos_id) == (hf.token_to_id("[BEGIN]"), hf.token_to_id("[END]"))


def test_default_names_and_an_explicit_eos_name(tmp_path):
    path = train_bpe(tmp_path / "t.json", specials=("<s>", "</s>", "<|eot|>"))
    from tokenizers import Tokenizer as HF

    hf = HF.from_file(str(path))
    tok = load_tokenizer(path)
    assert (tok.bos_id, tok.eos_id) == (hf.token_to_id("<s>"), hf.token_to_id("</s>"))
    assert load_tokenizer(path, eos_token="<|eot|>").eos_id == hf.token_to_id("<|eot|>")


def test_the_byte_tokenizer_is_an_explicit_choice():
    tok = load_tokenizer("bytes")
    assert isinstance(tok, ByteTokenizer) and isinstance(tok, Tokenizer)
    assert (tok.vocab_size, tok.eos_id, tok.bos_id, tok.kind) == (256, 0, None, "bytes")
    assert tok.encode_batch(["hé"]) == [[104, 195, 169]]
    assert tok.decode([104, 195, 169]) == "hé"
    assert tok.fingerprint == ByteTokenizer().fingerprint and len(tok.fingerprint) == 64


def test_a_missing_file_is_one_message(tmp_path):
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(tmp_path / "nope.json")
    assert str(info.value) == (
        f'tokenizer {tmp_path}/nope.json: no such file (expected a Hugging Face tokenizer.json, or "bytes" for bytes)'
    )


@pytest.mark.parametrize("content", [b'{"version": "1.0", "model": 3}', b"not json at all"])
def test_a_file_the_library_rejects_is_one_message(tmp_path, content):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(path)
    assert str(info.value) == (
        f"tokenizer {path}: not a Hugging Face tokenizer.json (the tokenizers library rejects it)"
    )
    assert info.value.__cause__ is not None


def test_a_tokenizer_without_an_eos_token_is_one_message(tmp_path):
    path = train_bpe(tmp_path / "tokenizer.json", specials=("<pad>",))
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(path)
    assert str(info.value) == (
        f"tokenizer {path}: no end-of-sequence token; none of <|endoftext|>, <|end_of_text|>, </s>, <eos>, "
        "<|eot_id|> is in its vocabulary (name the tokenizer's EOS token with eos_token)"
    )
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(path, eos_token="<END>")
    assert str(info.value) == (
        f"tokenizer {path}: no end-of-sequence token; none of <END> is in its vocabulary "
        "(name the tokenizer's EOS token with eos_token)"
    )


def test_a_tokenizer_on_s3(s3_server, s3_bucket, bpe_path):
    import boto3

    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL_S3"]).put_object(
        Bucket=s3_bucket, Key="tok/tokenizer.json", Body=bpe_path.read_bytes()
    )
    tok = load_tokenizer(f"s3://{s3_bucket}/tok/tokenizer.json")
    assert tok.fingerprint == load_tokenizer(bpe_path).fingerprint
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(f"s3://{s3_bucket}/tok/missing.json")
    assert str(info.value).startswith(f"tokenizer s3://{s3_bucket}/tok/missing.json: no such file")
