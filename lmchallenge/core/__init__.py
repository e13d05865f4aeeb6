"""LM Challenge 5.x's ``lmchallenge.core`` package path: :mod:`lmchallenge.core.model` holds
its model classes (the project's own modules are described in docs/architecture.md)."""
