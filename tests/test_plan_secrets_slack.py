"""In Slack too: a plan beside an API key posts no secret (the plan message, its Approve and Roll
back confirm dialogs, the exact patch and the rollback note in its thread, the store, the logs),
and a credential flag, a script carrying a key, or a value out of its range is refused in an
ephemeral reply with no write."""

from __future__ import annotations

import json
import logging

import pytest

from bot.render import slack_remediation as P
from bot.store.db import Store
from tests.support.slack_kit import CHANNEL
from tests.test_plan_secrets import HF, SECRETS, _launch, _store_bytes, _with_key
from tests.test_slack_remediation import (
    APPROVER,
    _click,
    _command,
    _patches,
    _respond,
    _top_level_plan,
    _wait_edit,
    remediation_bot,
)


def _confirms(blocks: list[dict]) -> list[dict]:
    return [e["confirm"] for b in blocks if b.get("type") == "actions" for e in b["elements"] if "confirm" in e]


@pytest.mark.parametrize("form", ["split", "joined"])
def test_a_slack_plan_beside_a_key_posts_and_stores_no_secret_and_rolls_back_exactly(tmp_path, caplog, form):
    caplog.set_level(logging.DEBUG)
    secret = SECRETS[1]  # secret only because of the flag before it: no shape gives it away
    with remediation_bot(tmp_path) as (sc, fake, bot):
        _with_key(sc, form, secret)
        before = _launch(sc)
        _command(bot, fake, "plan llm/vllm-server --set max-num-seqs=64 --context prod", n=201)
        plan_id, plan_ts = _top_level_plan(fake)
        message = fake.messages[(CHANNEL, plan_ts)]
        posted = [c.args for c in fake.calls_to("chat.postMessage")]
        plan_message = next(a for a in posted if any(b.get("type") == "actions" for b in a.get("blocks") or []))
        assert "`--max-num-seqs 128 -&gt; 64`" in json.dumps(plan_message["blocks"])
        assert _confirms(plan_message["blocks"]), "Approve asks to confirm"
        patch = fake.wait_for("chat.postMessage", where=lambda c: "Exact patch" in (c.args.get("text") or ""),
                              timeout=20)[0].args
        ops = [json.loads(line) for line in patch["blocks"][0]["text"]["text"].split("```")[1].splitlines()]
        assert [o["op"] for o in ops] == ["test", "replace"] and ops[1]["value"] in ("64", "--max-num-seqs=64")
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, n=202)
        _wait_edit(fake, plan_ts, "Held:")
        rollback_dialogs = [_confirms(c.args.get("blocks") or []) for c in fake.calls_to("chat.update")
                            if c.args.get("ts") == plan_ts]
        assert any(rollback_dialogs), "Roll back asks to confirm"
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, n=203)
        _wait_edit(fake, plan_ts, "Rolled back by")
        assert _launch(sc) == before and _patches(sc) == 2
        everything = json.dumps([c.args for c in fake.calls]) + json.dumps(message)
        audit = json.dumps([r.__dict__ for r in Store.open(tmp_path / "gpumem.db").audit()], default=str)
        for text in (everything, audit, caplog.text):
            assert secret not in text and HF not in text
        assert secret.encode() not in _store_bytes(tmp_path / "gpumem.db")


@pytest.mark.parametrize(("form", "text", "words"), [
    ("shell", "plan llm/vllm-server --set max-num-seqs=64", "args[0] also carries a credential"),
    ("split", f"plan llm/vllm-server --set api-key={SECRETS[0]}", "--api-key carries a credential"),
    ("split", "plan llm/vllm-server --set hf-token=abcdef123456", "--hf-token carries a credential"),
    ("split", "plan llm/vllm-server --set max-num-seqs=" + "9" * 1900, "is out of range: gpumem plans 1..65536"),
    ("split", "plan llm/vllm-server --set max-model-len=1e20", "--max-model-len 1e+20 is out of range"),
    ("split", "plan llm/vllm-server --set gpu-memory-utilization=1.5", "--gpu-memory-utilization 1.5 is out of range"),
])
def test_slack_refuses_a_secret_or_out_of_range_plan_in_an_ephemeral_reply_with_no_write(tmp_path, form, text, words):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        _with_key(sc, form, SECRETS[0])
        _command(bot, fake, text, user=APPROVER, n=211)
        (told,) = _respond(fake, 211)
        assert words in told["text"] and "Traceback" not in told["text"], told["text"]
        assert told.get("response_type", "ephemeral") == "ephemeral"
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []
        assert Store.open(tmp_path / "gpumem.db").plans() == []
        assert SECRETS[0] not in json.dumps([c.args for c in fake.calls]) and "abcdef123456" not in told["text"]
