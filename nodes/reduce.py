"""reduce ops."""
