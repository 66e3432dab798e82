"""Test and demo infrastructure, not part of the product: local stand-ins for the production base.

``standin.build``: Debian bookworm + torch CPU + vLLM 0.24.0's sources
(``m3-image/standin-base:vllm-0.24.0``).
``standin.pinned``: that base plus one layer with the pinned revision's bytes of the files the
production stack touches (``m3-image/standin-base:vllm-4a560dd``).
``python -m standin`` builds both, pushes them to the local registry and pins the spec targets.
Everything goes through the builder's Engine; nothing here is hashed into a lock.
"""
