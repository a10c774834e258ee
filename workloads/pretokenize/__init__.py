"""Pretokenize a corpus into token shards for training: ``python -m workloads.pretokenize --help``
(pipeline.py has the scheme; workloads/common/token_shards.py the format)."""
