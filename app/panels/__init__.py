"""Dock panels of the editor: palette, inspector, diagnostics, pass trace."""
