# The repository root is on sys.path for the tests (the packages also install with `pip install -e .`).
import sys

# pytest rewrites the asserts of every test module (about 230) before it can import them, and
# caches the result in __pycache__ unless bytecode writing is off (PYTHONDONTWRITEBYTECODE=1):
# then each run rewrites them all again, about 14 s of CPU. The cache is pytest's own (tagged
# with its version, checked against the source's mtime and size), so it is kept on for the tests.
sys.dont_write_bytecode = False
