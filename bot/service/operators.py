"""Who is at the terminal, for the audit and the notes: a module of its own so that a note or a
triage record names its author without importing the remediation use cases (the actuator and
the Kubernetes client, about 0.3 s)."""

from __future__ import annotations

import getpass
import os


def operator() -> str:
    """`cli:<user>`, or `cli:uid<N>` where the user has no name (a container without an
    /etc/passwd entry)."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:
        return f"cli:uid{os.getuid()}"
