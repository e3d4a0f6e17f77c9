"""recurrent ops."""
