"""conv ops."""
