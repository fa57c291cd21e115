"""Where a GPU's memory goes: weights, KV cache, activations, each engine's budget, what-if, capacity."""
