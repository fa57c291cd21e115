"""`gpumem note`, `gpumem notes` and `gpumem handover`: the shift's notes and its handover."""

from __future__ import annotations

import json
import sys

from bot.grammar.requests import HandoverRequest, NoteRequest, NotesRequest
from bot.render import handover as render
from bot.render.i18n import Catalog
from bot.service.deps import Deps
from bot.service.exits import EXIT_OK
from bot.service.handover import cli_handover
from bot.service.notes import find_notes, record_note

# the verbs' own error codes are worded from `handover.error.<code>`
# (the catalog section is the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: NoteRequest | NotesRequest | HandoverRequest, lang: str, deps: Deps) -> int:
    if request.verb == "note":
        note = record_note(request, deps)
        if request.json:
            _dump(render.notes_json([note])[0])
        else:
            sys.stdout.write(Catalog.load(lang).t("handover.note_saved", id=note.id, at=note.at.isoformat()) + "\n")
    elif request.verb == "notes":
        notes = find_notes(request, deps)
        _dump(render.notes_json(notes)) if request.json else sys.stdout.write(render.notes_text(notes, lang))
    else:
        handover = cli_handover(request, deps)
        _dump(render.handover_json(handover)) if request.json else sys.stdout.write(render.handover_text(handover, lang))
    return EXIT_OK


def _dump(doc: object) -> None:
    json.dump(doc, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")
