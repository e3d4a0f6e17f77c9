"""Gather/scatter/indexing ops."""
