"""Generators of the documentation in docs/ (run through tools/gen_docs.py)."""
