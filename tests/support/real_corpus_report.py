"""The real-evidence corpus (tests/data/real): cases taken from public issue threads.

Each case is a bundle folder holding the evidence exactly as it was posted, split into the
files it corresponds to, and a `source.md` whose header lines give the expectation decided
from the thread before gpumem ran:

    expected: <verdict id>
    also_accepted: [<id>, ...]      (optional: an alternative the thread itself accepts)
    known_wrong: <reason>           (optional: the rules cannot get it right, and why)
    batch: <n>                      (optional: the batch it was collected in; 1 when absent)

`python -m tests.support.real_corpus_report` prints the accuracy table (markdown) that
docs/accuracy.md quotes; `tests/test_real_corpus.py` holds triage to it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from collectors.bundle import load_bundle
from runbooks.model.report import VERDICT_IDS, Report
from runbooks.triage.runbook import triage

CORPUS = Path(__file__).resolve().parent.parent / "data" / "real"
#: every report is stamped with the same instant, so a run is reproducible
STAMP = datetime(2026, 1, 1, tzinfo=UTC)

_HEADER = re.compile(r"^(expected|also_accepted|known_wrong|url|batch):\s*(.+?)\s*$")


class CorpusError(ValueError):
    """A case folder whose source.md does not say what the thread concluded."""


@dataclass(frozen=True)
class Case:
    id: str
    path: Path
    url: str
    expected: str
    also_accepted: tuple[str, ...] = ()
    known_wrong: str | None = None
    #: the batch it was collected in: 1 with the first rules, 2 unseen by them (issue 20)
    batch: int = 1

    @property
    def accepted(self) -> tuple[str, ...]:
        return (self.expected, *self.also_accepted)


@dataclass(frozen=True)
class Result:
    case: Case
    got: str
    report: Report

    @property
    def ok(self) -> bool:
        return self.got in self.case.accepted


def read_case(path: Path) -> Case:
    """The expectation in a case's source.md header. Raises CorpusError when it is missing or
    names a verdict gpumem does not have."""
    source = path / "source.md"
    if not source.is_file():
        raise CorpusError(f"{path.name}: no source.md")
    fields: dict[str, str] = {}
    for line in source.read_text(encoding="utf-8").splitlines():
        m = _HEADER.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
    if "expected" not in fields or "url" not in fields:
        raise CorpusError(f"{path.name}: source.md needs `url:` and `expected:` lines")
    also = tuple(x.strip() for x in fields.get("also_accepted", "").strip("[]").split(",") if x.strip())
    for verdict in (fields["expected"], *also):
        if verdict not in VERDICT_IDS:
            raise CorpusError(f"{path.name}: {verdict!r} is not a verdict id ({', '.join(VERDICT_IDS)})")
    try:
        batch = int(fields.get("batch", "1"))
    except ValueError:
        raise CorpusError(f"{path.name}: batch must be a number, not {fields['batch']!r}") from None
    return Case(path.name, path, fields["url"], fields["expected"], also, fields.get("known_wrong"), batch)


def load_cases(root: Path = CORPUS) -> list[Case]:
    return [read_case(p) for p in sorted(root.iterdir()) if p.is_dir()]


def run_case(case: Case) -> Result:
    report = triage(load_bundle(case.path), now=STAMP)
    return Result(case, report.verdict.primary, report)


def run_all(root: Path = CORPUS) -> list[Result]:
    return [run_case(c) for c in load_cases(root)]


def accuracy(results: list[Result]) -> float:
    return sum(r.ok for r in results) / len(results) if results else 0.0


@dataclass(frozen=True)
class Score:
    """Right verdicts (the thread's or an alternative it accepts), exactly the expected one,
    and "healthy" said where the thread found a fault."""

    cases: int
    right: int
    exact: int
    false_healthy: int

    def line(self) -> str:
        pct = round(100 * self.right / self.cases) if self.cases else 0
        return (f"{self.right}/{self.cases} right ({pct}%), {self.exact} with the exact expected cause, "
                f"{self.false_healthy} false healthy")


def score(results: list[Result]) -> Score:
    return Score(len(results), sum(r.ok for r in results), sum(r.got == r.case.expected for r in results),
                 sum(r.got == "healthy" and r.case.expected != "healthy" for r in results))


def table(results: list[Result]) -> str:
    """The accuracy table as markdown: case, expected (and accepted alternatives), got, ok."""
    lines = ["| case | expected | got | ok |", "| --- | --- | --- | --- |"]
    for r in results:
        expected = r.case.expected + (f" (or {', '.join(r.case.also_accepted)})" if r.case.also_accepted else "")
        mark = "yes" if r.ok else ("no (known)" if r.case.known_wrong else "no")
        lines.append(f"| {r.case.id} | {expected} | {r.got} | {mark} |")
    right = sum(r.ok for r in results)
    lines.append("")
    lines.append(f"{right}/{len(results)} right ({accuracy(results) * 100:.0f}%)")
    for batch in sorted({r.case.batch for r in results}):
        lines.append(f"batch {batch}: " + score([r for r in results if r.case.batch == batch]).line())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    root = Path(argv[0]) if argv else CORPUS
    print(table(run_all(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
