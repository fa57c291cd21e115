"""Exit codes, shared by every verb and surface (the CLI exits with them; Slack words them).

0 healthy / ok, 1 a cause was found, 2 bad usage or unreadable input (something must change
first), 3 nothing could be read or too little to decide (running it again may help).
"""

from __future__ import annotations

from runbooks.model.errors import EvidenceUnavailable, GpumemError, OutcomeUnknown, TemporaryError

EXIT_OK, EXIT_CAUSE, EXIT_USAGE, EXIT_NO_EVIDENCE = 0, 1, 2, 3


def exit_code(error: GpumemError) -> int:
    """The exit code an error calls for: 3 when nothing could be read (EvidenceUnavailable), the
    server could not answer now (TemporaryError) or a write's outcome is not known yet
    (OutcomeUnknown: reading again settles it), since running it again may help; else 2
    (UsageError, PlanError, TargetNotFound, NotPermitted; StaleObject: plan again; PlanMoved:
    someone else moved the plan first; PartlyApplied: roll it back; something must change first).

    >>> exit_code(TemporaryError(delay_s=2.0)), exit_code(GpumemError("bad_flag"))
    (3, 2)
    """
    if isinstance(error, (EvidenceUnavailable, TemporaryError, OutcomeUnknown)):
        return EXIT_NO_EVIDENCE
    return EXIT_USAGE


def verdict_exit_code(primary: str) -> int:
    """0 healthy, 3 too little to decide, 1 any cause.

    >>> verdict_exit_code("kv_cache_pressure")
    1
    """
    if primary == "healthy":
        return EXIT_OK
    if primary == "insufficient_evidence":
        return EXIT_NO_EVIDENCE
    return EXIT_CAUSE
