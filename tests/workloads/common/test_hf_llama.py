"""The platform's Llama and Hugging Face's LlamaForCausalLM compute the same logits through the
adapter (workloads.common.hf_llama), both ways, with GQA and Llama 3.1 rope scaling; the rotary
permutation is what makes them agree. A Hugging Face folder written by transformers imports;
an export loads with ``from_pretrained`` (model and tokenizer) and decodes the same tokens.
Random tiny models, tokenizers trained here: nothing is downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig, _rope_tables, count_parameters

transformers = pytest.importorskip("transformers")

ATOL = 1e-5
SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Wavelengths of a 16-wide head at theta 10000 run from 6.3 to 5.6e3 positions: with 32
    # original positions, some are kept (< 8), some interpolated (8..32), some divided (> 32).
    "original_max_position_embeddings": 32,
}


def _hf_config(scaling: dict | None, vocab: int = 300, block: int = 96):
    kwargs = {"rope_scaling": dict(scaling)} if scaling else {}
    return transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=vocab,
        max_position_embeddings=block,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attn_implementation="eager",
        **kwargs,
    )


def _platform_config(scaling: dict | None, vocab: int = 300, block: int = 96) -> LlamaConfig:
    return LlamaConfig(
        block_size=block,
        vocab_size=vocab,
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        ffn_hidden=128,
        rope_theta=10000.0,
        norm_eps=1e-5,
        rope_scaling=dict(scaling) if scaling else None,
    )


def _hf_model(scaling: dict | None, seed: int = 0):
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(_hf_config(scaling)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # away from 1, so a swapped norm would show
                p.uniform_(0.5, 1.5)
            if "q_proj" in name or "k_proj" in name:  # attention far from uniform: rotary matters
                p.normal_(0.0, 0.3)
    return model


def _ids(n: int = 96, vocab: int = 300, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(seed))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def test_rope_scaling_matches_transformers_inverse_frequencies():
    """``_rope_tables`` with llama3 scaling uses transformers' own inverse frequencies (bitwise),
    and the scaling changes some of them (so the parity tests below exercise it)."""
    hf = _hf_model(SCALING)
    cos, sin = _rope_tables(_platform_config(SCALING))
    plain_cos, _ = _rope_tables(_platform_config(None))
    inv = hf.model.rotary_emb.inv_freq
    angles = torch.outer(torch.arange(96).float(), inv)
    assert torch.equal(cos, angles.cos()) and torch.equal(sin, angles.sin())
    assert not torch.equal(cos, plain_cos)


@pytest.mark.parametrize("scaling", [None, SCALING], ids=["plain", "llama3-scaling"])
def test_hf_to_platform_logits_match(scaling):
    hf = _hf_model(scaling)
    config = _platform_config(scaling)
    model = Llama(config).eval()
    model.load_state_dict(hf_llama.from_hf_state_dict(hf.state_dict(), config))
    ids = _ids()
    with torch.no_grad():
        ref, got = hf(ids).logits, model(ids)[0]
    diff = _max_diff(ref, got)
    print(f"HF -> platform ({'llama3' if scaling else 'plain'} rope, GQA 4/2): max |logit diff| {diff:.2e}")
    assert diff <= ATOL


@pytest.mark.parametrize("scaling", [None, SCALING], ids=["plain", "llama3-scaling"])
def test_platform_to_hf_logits_match(scaling):
    config = _platform_config(scaling)
    torch.manual_seed(2)
    model = Llama(config).eval()
    hf = transformers.LlamaForCausalLM(_hf_config(scaling)).eval()
    hf.load_state_dict(hf_llama.to_hf_state_dict(model.state_dict(), config))
    ids = _ids()
    with torch.no_grad():
        ref, got = model(ids)[0], hf(ids).logits
    diff = _max_diff(ref, got)
    print(f"platform -> HF ({'llama3' if scaling else 'plain'} rope, GQA 4/2): max |logit diff| {diff:.2e}")
    assert diff <= ATOL


def test_without_the_permutation_the_logits_differ():
    """Names alone (no query/key row permutation) give another model: the permutation is needed."""
    hf = _hf_model(SCALING)
    config = _platform_config(SCALING)
    model = Llama(config).eval()
    model.load_state_dict({hf_llama.from_hf_name(k): v for k, v in hf.state_dict().items()})
    ids = _ids()
    with torch.no_grad():
        diff = _max_diff(hf(ids).logits, model(ids)[0])
    print(f"without the permutation: max |logit diff| {diff:.2e}")
    assert diff > 1000 * ATOL


def test_permutations_are_inverse_and_per_head():
    w = torch.arange(6 * 8 * 3, dtype=torch.float32).reshape(48, 3)
    assert torch.equal(hf_llama.permute_from_hf(hf_llama.permute_to_hf(w, 6), 6), w)
    # Head 0 (rows 0..7): even rows first, then odd rows; head 1 starts at row 8.
    assert hf_llama.permute_to_hf(w, 6)[:8, 0].tolist() == [0, 6, 12, 18, 3, 9, 15, 21]
    assert hf_llama.permute_to_hf(w, 6)[8, 0].item() == 24


def test_folder_written_by_transformers_imports(tmp_path):
    """``save_pretrained`` (transformers 5's config.json: rope_parameters) into the platform's
    model through ``load_hf_into``: the same logits; the digest changes with the folder."""
    hf = _hf_model(SCALING)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")  # several shards and an index
    assert (tmp_path / hf_llama.INDEX).exists()
    config, _ = hf_llama.read_config(str(tmp_path))
    assert config == _platform_config(SCALING)
    model = Llama(config).eval()
    digest = hf_llama.load_hf_into(model, str(tmp_path))
    assert digest.startswith("sha256:") and digest == hf_llama.load_hf_into(model, str(tmp_path))
    ids = _ids()
    with torch.no_grad():
        assert _max_diff(hf(ids).logits, model(ids)[0]) <= ATOL
    index = json.loads((tmp_path / hf_llama.INDEX).read_text())
    index["metadata"]["note"] = "changed"
    (tmp_path / hf_llama.INDEX).write_text(json.dumps(index))
    assert hf_llama.load_hf_into(model, str(tmp_path)) != digest


def test_tied_folder_fills_the_head_from_the_embedding(tmp_path):
    cfg = _hf_config(None)
    cfg.tie_word_embeddings = True
    torch.manual_seed(3)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    hf.save_pretrained(tmp_path)
    config, _ = hf_llama.read_config(str(tmp_path))
    model = Llama(config).eval()
    hf_llama.load_hf_into(model, str(tmp_path))
    assert torch.equal(model.head.weight, model.tok_emb.weight)
    ids = _ids()
    with torch.no_grad():
        assert _max_diff(hf(ids).logits, model(ids)[0]) <= ATOL


def _folder(tmp_path, scaling=None) -> str:
    config = _platform_config(scaling)
    torch.manual_seed(4)
    out = tmp_path / "export"
    hf_llama.export_hf(
        Llama(config).state_dict(),
        str(out),
        config=config,
        tokenizer_files=[_tokenizer(tmp_path)],
        max_shard_bytes=100_000,
    )
    return str(out)


def _shard_of(folder: str, name: str) -> str:
    with open(os.path.join(folder, hf_llama.INDEX)) as f:
        return str(json.load(f)["weight_map"][name])


def test_shape_mismatch_names_both_shapes(tmp_path):
    folder = _folder(tmp_path)
    config_path = Path(folder, "config.json")
    conf = json.loads(config_path.read_text())
    conf["intermediate_size"] = 192
    config_path.write_text(json.dumps(conf))
    shard = _shard_of(folder, "model.layers.0.mlp.gate_proj.weight")
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.check_folder(folder)
    assert str(err.value) == (
        f"{folder}/{shard}: model.layers.0.mlp.gate_proj.weight is (128, 64), "
        "the config's model needs (192, 64) (config.json)"
    )


def test_missing_shard_and_missing_index_are_named(tmp_path):
    folder = _folder(tmp_path)
    shard = _shard_of(folder, "model.layers.1.self_attn.q_proj.weight")
    os.remove(os.path.join(folder, shard))
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.check_folder(folder)
    assert str(err.value) == f"{folder}/model.safetensors.index.json: lists ['{shard}'] which {folder} does not hold"
    os.remove(os.path.join(folder, hf_llama.INDEX))
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.check_folder(folder)
    assert str(err.value) == (
        f"{folder}: neither model.safetensors.index.json nor model.safetensors; "
        "a Hugging Face folder holds its weights in them"
    )


def test_model_and_folder_architectures_must_match(tmp_path):
    folder = _folder(tmp_path, SCALING)
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.load_hf_into(Llama(_platform_config(None)), folder)
    assert str(err.value) == (
        f"{folder}/config.json: rope_scaling is {SCALING!r}, the model's is None; they must match"
    )


def test_unsupported_rope_type_is_named():
    conf = hf_llama.hf_config(_platform_config(None))
    conf["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.config_from_hf(conf, "x/config.json")
    assert str(err.value) == "x/config.json: rope_scaling.rope_type is 'yarn'; allowed: 'llama3' or no scaling"


def test_unknown_preset_is_named():
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.preset_config("llama-9b")
    assert str(err.value) == (
        "preset 'llama-9b' is not known; allowed: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-3.1-70b"
    )


def test_config_round_trip():
    for config in (_platform_config(SCALING), _platform_config(None), hf_llama.preset_config("llama-3.1-8b")):
        assert hf_llama.config_from_hf(hf_llama.hf_config(config)) == config


@pytest.mark.parametrize("name", sorted(hf_llama.HF_PRESETS))
def test_presets_have_the_published_parameter_counts(name):
    """The platform's model (untied head) has the published count plus, for the tied 3.2
    models, one more embedding-sized head; transformers agrees on the shape."""
    preset = hf_llama.HF_PRESETS[name]
    config = hf_llama.preset_config(name)
    extra = config.vocab_size * config.n_embd if preset["tie_word_embeddings"] else 0
    assert count_parameters(config) == preset["params"] + extra
    conf = hf_llama.hf_config(config, bos_token_id=preset["bos_token_id"], eos_token_id=preset["eos_token_id"])
    conf["tie_word_embeddings"] = preset["tie_word_embeddings"]
    with torch.device("meta"):
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**conf))
    assert sum(p.numel() for p in hf.parameters()) == preset["params"]


# ------------------------------------------------------------------------------------------------
# Export


def _tokenizer(tmp_path, vocab: int = 300) -> str:
    """A byte-level BPE tokenizer trained here, with <s> and </s>, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = tmp_path / "tokenizer.json"
    if path.exists():
        return str(path)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    text = ["the quick brown fox jumps over the lazy dog", "a platform that trains llama models on ray"] * 50
    tok.train_from_iterator(text, trainer)
    assert tok.get_vocab_size() <= vocab
    tok.save(str(path))
    return str(path)


def test_export_loads_in_transformers_and_decodes_the_same(tmp_path):
    scaling = SCALING
    config = _platform_config(scaling)
    torch.manual_seed(5)
    model = Llama(config).eval()
    with torch.no_grad():  # attention far from uniform, so the rotary embedding matters
        for layer in model.layers:
            layer.attn.wq.weight.normal_(0.0, 0.3)
            layer.attn.wk.weight.normal_(0.0, 0.3)
    out = str(tmp_path / "export")
    manifest = hf_llama.export_hf(
        model.state_dict(),
        out,
        config=config,
        tokenizer_files=[_tokenizer(tmp_path)],
        max_shard_bytes=60_000,
        bos_token_id=0,
        eos_token_id=1,
    )
    shards = [n for n in manifest["files"] if n.endswith(".safetensors")]
    assert len(shards) > 2
    assert hf_llama.verify_export(out) == sorted(manifest["files"])
    assert sorted(os.listdir(out)) == sorted([*manifest["files"], "manifest.json"])

    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert hf.config.rope_parameters["rope_type"] == "llama3"
    assert hf.config.rope_parameters["original_max_position_embeddings"] == 32
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert isinstance(tok, transformers.PreTrainedTokenizerFast)
    assert (tok.bos_token, tok.eos_token) == ("<s>", "</s>")
    ids = torch.tensor([tok.encode("the quick brown fox")])
    assert tok.decode(ids[0]) == "the quick brown fox"
    with torch.no_grad():
        assert _max_diff(hf(_ids()).logits, model(_ids())[0]) <= ATOL
        ours = model.generate(ids, max_new_tokens=20, temperature=0)
        theirs = hf.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=1)
    print("greedy:", ours[0].tolist())
    assert theirs.shape[1] > ids.shape[1]
    assert ours[0, : theirs.shape[1]].tolist() == theirs[0].tolist()
    # The export reads back into the platform's model bitwise.
    back = Llama(hf_llama.read_config(out)[0])
    hf_llama.load_hf_into(back, out)
    for name, p in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], p), name


def test_export_bf16_and_from_a_checkpoint(tmp_path):
    """A single-writer checkpoint (verified first) exports; bf16 weights are the model's cast."""
    from workloads.common import checkpoint as ckpt

    config = _platform_config(None)
    torch.manual_seed(6)
    model = Llama(config)
    path = str(tmp_path / "checkpoint_000000007")
    ckpt.save(path, {"model": model.state_dict()}, {"step": 7, "model_config": config.to_dict()})
    out = str(tmp_path / "export")
    manifest = hf_llama.export_hf(
        path, out, tokenizer_files=[_tokenizer(tmp_path)], max_shard_bytes=1 << 20, dtype=torch.bfloat16
    )
    assert manifest["source"]["step"] == 7 and manifest["dtype"] == "bfloat16"
    back = Llama(config)
    hf_llama.load_hf_into(back, out)
    for name, p in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], p.to(torch.bfloat16).float()), name


def test_a_changed_byte_fails_verification(tmp_path):
    folder = _folder(tmp_path)
    victim = Path(folder, _shard_of(folder, "model.layers.1.mlp.up_proj.weight"))
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0x01  # one bit of the last tensor's data
    victim.write_bytes(bytes(data))
    manifest = json.loads(Path(folder, "manifest.json").read_text())
    want = manifest["files"][victim.name]["sha256"]
    got = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.verify_export(folder)
    assert str(err.value) == f"{victim}: sha256 {got}, manifest.json says {want}"


def test_export_refuses_a_non_empty_directory_and_a_missing_tokenizer(tmp_path):
    config = _platform_config(None)
    state = Llama(config).state_dict()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.export_hf(state, str(tmp_path / "full"), config=config, tokenizer_files=[], max_shard_bytes=1)
    assert str(err.value) == "tokenizer_files are []; allowed: a list holding tokenizer.json"
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.export_hf(
            state, str(tmp_path / "full"), config=config, tokenizer_files=[_tokenizer(tmp_path)], max_shard_bytes=1
        )
    assert str(err.value) == f"{tmp_path / 'full'} is not empty; export into a new directory"
    shutil.rmtree(tmp_path / "full")


def test_import_digest_is_of_the_content_and_an_export_is_checked_against_its_manifest(tmp_path):
    folder = _folder(tmp_path)
    files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))

    def sha(name: str) -> str:
        return hashlib.sha256(Path(folder, name).read_bytes()).hexdigest()

    body = json.dumps({"index": sha(hf_llama.INDEX), "files": {n: sha(n) for n in files}}, sort_keys=True)
    model = Llama(_platform_config(None))
    assert hf_llama.load_hf_into(model, folder) == "sha256:" + hashlib.sha256(body.encode()).hexdigest()

    victim = Path(folder, _shard_of(folder, "model.layers.0.mlp.down_proj.weight"))
    want = sha(victim.name)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(hf_llama.HFFormatError) as err:
        hf_llama.load_hf_into(model, folder)
    assert str(err.value) == f"{victim}: sha256 {sha(victim.name)}, manifest.json says {want}"
    # Without a manifest (a folder from elsewhere) the changed byte changes the digest.
    os.remove(os.path.join(folder, "manifest.json"))
    assert hf_llama.load_hf_into(model, folder) != "sha256:" + hashlib.sha256(body.encode()).hexdigest()
