"""Resize, Upsample and spatial rearrangement ops."""
