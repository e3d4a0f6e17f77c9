"""Placement: NPU support verdicts (support.py) and partitioning with transfers (partition.py)."""
