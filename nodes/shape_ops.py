"""shape_ops ops."""
