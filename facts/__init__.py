"""Facts: the bottom layer. Instance types, pinned versions, well-known labels and taints, paths and
the shape of a config problem. Imports nothing of ours, so every other layer may import it."""
