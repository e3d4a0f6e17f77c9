"""quant_ops ops."""
