"""normalization ops."""
