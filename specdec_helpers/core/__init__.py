"""The algorithm: decode loops (chain, tree, batch), verification, drafters, sampling, the KV cache, checks.

Imports nothing else of the kit (layers: README.md, tests/test_layers.py)."""
