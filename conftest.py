# The repository root is on sys.path for the tests (the packages also install with `pip install -e .`).
