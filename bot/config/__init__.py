"""What gpumem is configured with: the YAML settings, read once into a frozen tree, and the
process environment (`environ`), read once by `bot.main`. The only reader of `os.environ`."""
