"""activation ops."""
