"""The node canvas: scene, view, items, layout, minimap."""
