"""Writing an evidence bundle: the shell's job (collectors only read).

`bundle.json` is written atomically (a temporary file, then a rename), so a crash never leaves
half a bundle.json behind and never overwrites a good one with a torn one. The evidence is
written with credentials masked (`runbooks.model.secrets`), whatever collected it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from runbooks.model.evidence import Evidence
from runbooks.model.secrets import redact_evidence
from runbooks.model.serde import to_jsonable


def write_bundle_json(directory: str | os.PathLike[str], evidence: Evidence) -> Path:
    """Write bundle.json (target, time, parsed evidence) atomically: never a half-written file."""
    root = Path(directory)
    evidence = redact_evidence(evidence)
    doc = {
        "format": "gpumem-bundle/1",
        "target": evidence.target,
        "collected_at": evidence.collected_at.isoformat() if evidence.collected_at else None,
        "evidence": to_jsonable(evidence),
    }
    tmp = root / ".bundle.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, root / "bundle.json")
    return root / "bundle.json"
