"""Brute-force references and hypothesis strategies shared by the tests.

Each topic has its own module (``tractable.testing.regex``, ``tractable.testing.masks``, ...):
slow, obviously-correct implementations of what the package computes fast (acceptance by
decoding bytes and calling Python's ``re``; masks by enumerating continuations; ...), and the
hypothesis strategies that feed both.  Import the topic module, e.g.
``from tractable.testing.regex import reference_accepts``.
"""
