"""Test helpers: stand-in servers that speak the real wire protocols, fixtures, harnesses."""
