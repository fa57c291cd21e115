"""The terminal surface: `gpumem VERB`, one module per verb."""
