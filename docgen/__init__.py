"""The generated pages and schemas that are committed: ``python -m docgen.reference`` (the
configuration reference and the JSON Schemas, config/schema/), ``python -m docgen.sizing_page``
(docs/reference/sizing.md) and ``python -m docgen.images_page`` (docs/reference/images.md); each
takes ``--check``, which writes nothing and exits 1 when a committed file is stale.

An entry point on top of the layers (tests/test_import_cycles.py): it reads the config models, the
plan, the stacks' pipeline config and the review's image table; nothing imports it, and nothing of
it ships in the workloads image.
"""
