"""A pool split planned and applied from Slack beside an `--api-key` (two elements, or one with
`=`) and a literal env credential: no Slack call and no byte of the store holds either, and
the long pool created on the stand-in API server carries both (rebuilt from the original at
apply time)."""

from __future__ import annotations

import json

import pytest

import tests.test_slack_remediation as R
from bot.render import slack_remediation as P
from bot.store.db import Store
from tests.test_plan_secrets import HF, SECRETS, _store_bytes
from tests.test_split_secrets import ENV_KEY, LONG, NS, _plant, _vllm


@pytest.mark.parametrize("form", ["split", "joined"])
def test_slack_phase1_beside_a_key_posts_and_stores_none_and_the_clone_serves_with_it(tmp_path, form):
    secret = SECRETS[1] if form == "split" else SECRETS[0]
    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        _plant(sc, form, secret)
        db = tmp_path / "gpumem.db"
        R._command(bot, fake, "plan llm/vllm-server --split-pools --context prod", n=30)
        plan_id, plan_ts = R._top_level_plan(fake)
        assert sc.kube.writes() == [] and sc.kube.dry_runs() == []
        stored = Store.open(db).get(plan_id).plan
        assert [op["source"]["kind"] for op in stored.patch] == ["Deployment", "Service"]
        R._click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, R.SECOND, n=31)
        R._wait_edit(fake, plan_ts, "Held:", timeout=60)
        assert [(r.verb, r.resource) for r in sc.kube.writes()] == [("create", "deployments"), ("create", "services")]
        long = _vllm(sc.kube.get("Deployment", NS, LONG))
        key = ["--api-key", secret] if form == "split" else [f"--api-key={secret}"]
        assert long["args"][1:1 + len(key)] == key and {"name": "OPENAI_API_KEY", "value": ENV_KEY} in long["env"]

        everything = json.dumps([[c.method, c.args, getattr(c, "response", None)] for c in fake.calls],
                                ensure_ascii=False, default=str)
        stored_bytes = _store_bytes(db)
        for value in (secret, ENV_KEY, HF):
            assert value not in everything, value
            assert value.encode() not in stored_bytes, value
