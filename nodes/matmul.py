"""matmul ops."""
