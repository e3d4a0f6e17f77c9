"""control ops."""
