"""A plan another manager reverted during its watch, as every surface says it: the terminal's
watch summary and JSON, the Slack plan message (no Roll back button: nothing of gpumem's is left),
the handover (its own section and what to watch next, en and zh, the JSON) and the review
reminder ("reverted by argocd-controller at 14:02 UTC: fold the change into the source of
truth"), from the store alone."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.watch import Look, Reverted
from bot.render.handover import handover_json, handover_text
from bot.render.i18n import Catalog
from bot.render.remediation import look_json, look_text, revert_words
from bot.render.remediation_outcome import watch_summary
from bot.render.slack_handover import handover_parent, handover_thread, review_message
from bot.render.slack_remediation import ROLLBACK_ACTION, plan_message
from bot.service.handover import build_handover
from bot.service.reviews import confirm, due_reviews
from bot.store.db import Store
from runbooks.model.changes import SetArg
from runbooks.remediation.plan import Plan, PlanTarget, can_move
from tests.support.fake_slack import block_errors

T0 = datetime(2026, 12, 1, 13, 58, tzinfo=UTC)
CHANNEL = "C0LLMOPS"
ARGO = Reverted("/spec/template/spec/containers/0/args/3", "--max-num-seqs=128", "--max-num-seqs=64",
                "--max-num-seqs=128", "argocd-controller", "2026-12-01T14:02:11Z", "2026-12-01T14:02:30Z", "Update")
UNNAMED = Reverted("/spec/replicas", 2, 3, 2, None, None, "2026-12-01T14:05:00Z")


def _plan(plan_id: str = "p-argo") -> Plan:
    return Plan(plan_id, PlanTarget(None, "llm", "Deployment", "vllm-server"), "lower_max_num_seqs",
                (SetArg("vllm", "max-num-seqs", 128, 64),), "41", 3, (), "application/json-patch+json", "U1", T0,
                T0 + timedelta(minutes=15), 1, "triage")


def _reverted(store: Store, plan: Plan, reverts: tuple[Reverted, ...] = (ARGO,)) -> None:
    store.add_plan(plan, channel=CHANNEL, now=T0)
    store.approve(plan.id, "U2", plan.content_hash, now=T0)
    store.move(plan.id, "applying", actor="U2", now=T0)
    store.move(plan.id, "applied", actor="gpumem", now=T0 + timedelta(minutes=1))
    store.move(plan.id, "reverted", actor="gpumem", now=T0 + timedelta(minutes=5),
               detail={"outcome": "reverted", "notes": [], "reverted": [r.to_json() for r in reverts]})


@pytest.fixture
def store() -> Store:
    s = Store.memory()
    _reverted(s, _plan())
    return s


def _look(reverted: tuple[Reverted, ...] = (ARGO,)) -> Look:
    return Look("reverted", 4, 2, 2, 2, 2, reverted=reverted)


def test_a_reverted_plan_is_final_and_never_rolled_back():
    assert can_move("applied", "reverted") and not can_move("reverted", "rolled_back")
    assert not can_move("watched", "reverted")


@pytest.mark.parametrize("lang, words", [
    ("en", ["reverted by argocd-controller at 14:02 UTC", "reverted by another writer, seen at 14:05 UTC "
            "(manager not recorded)"]),
    ("zh", ["已被 argocd-controller 于 14:02 UTC 改回", "已被其他写入者改回，发现于 14:05 UTC（未记录管理者）"])])
def test_who_and_when_in_both_languages(lang, words):
    cat = Catalog.load(lang)
    assert [revert_words(cat, ARGO), revert_words(cat, UNNAMED)] == words
    untimed = Reverted("/spec/replicas", 2, 3, 2, "hpa-controller", None, "2026-12-01T14:06:00Z")
    assert "14:06 UTC" in revert_words(cat, untimed) and "hpa-controller" in revert_words(cat, untimed)
    assert revert_words(cat, ARGO.to_json()) == words[0]  # the audit's JSON reads the same


def test_the_terminal_says_reverted_not_symptoms_and_what_to_do(store):
    stored = store.get("p-argo")
    text = watch_summary(stored, _look(), 245, 600, "en")
    assert text.startswith("Watch ended after 4:05 (window 10:00): reverted by another writer. Plan p-argo: reverted.")
    assert "symptoms" not in text and "roll back" not in text.lower().replace("nothing was rolled back", "")
    assert ("/spec/template/spec/containers/0/args/3: --max-num-seqs=128 / --max-num-seqs=64 / --max-num-seqs=128 "
            "(before gpumem / gpumem's / now): reverted by argocd-controller at 14:02 UTC") in text
    assert "fold the change into the source of truth (gpumem plan --out FILE" in text
    zh = look_text(_look(), "zh")
    assert "已被 argocd-controller 于 14:02 UTC 改回" in zh and "真实来源" in zh
    doc = look_json(_look())
    assert doc["outcome"] == "reverted" and doc["reverted"][0] == ARGO.to_json()
    assert doc["reverted"][0]["put_back"] is True and look_json(Look("held", 4, 2, 2, 2, 2))["reverted"] == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_slack_plan_message_says_who_reverted_it_and_offers_no_rollback(store, lang):
    msg = plan_message(store.get("p-argo"), lang, "reverted", notes=(), replicas=2, symptoms=None, reverted=(ARGO,))
    assert block_errors(msg["blocks"]) == []
    text = str(msg["blocks"])
    assert ":leftwards_arrow_with_hook:" in text and "argocd-controller" in msg["text"]
    assert ("reverted by argocd-controller at 14:02 UTC" if lang == "en" else "已被 argocd-controller 于 14:02 UTC 改回") \
        in text
    assert ROLLBACK_ACTION not in text  # nothing of gpumem's is left to roll back
    assert "gpumem plan --out FILE" in text


def test_the_handover_lists_the_revert_first_in_what_to_watch(store):
    h = build_handover(store, now=T0 + timedelta(hours=1))
    (item,) = h.reverted
    assert (item.plan, item.target, item.changes, item.manager, item.at) == (
        "p-argo", "llm/vllm-server", ("--max-num-seqs 128 -> 64",), "argocd-controller", "2026-12-01T14:02:11Z")
    assert handover_json(h)["watch_next"][0] == (
        "llm/vllm-server: --max-num-seqs 128 -> 64 (p-argo) reverted by argocd-controller at "
        "14:02 UTC: fold the change into the source of truth")
    assert [c.state for c in h.changes] == ["reverted"] and h.temporary == () and h.drift == ()
    (service,) = h.services
    assert [k for k, _v in service.field("rollback_needed")] == ["rollback_reverted"]
    doc = handover_json(h)
    assert doc["services"][0]["rollback_needed"] == (
        "no: p-argo reverted by another manager; fold the change into the source of truth")
    assert doc["services"][0]["flags_changed"] == ["--max-num-seqs 128 -> 64 (p-argo, reverted)"]
    assert doc["reverted"][0]["manager"] == "argocd-controller" and doc["reverted"][0]["fields"][0]["path"] == ARGO.path
    en = handover_text(h, "en")
    assert "Changes another manager reverted, to fold into the source of truth (1):" in en
    assert ("llm/vllm-server: --max-num-seqs 128 -> 64 (plan p-argo) reverted by argocd-controller at 14:02 UTC: "
            "fold the change into the source of truth") in en
    zh = handover_text(h, "zh")
    assert "被其他管理者改回、需并入真实来源的改动（1）：" in zh and "已被 argocd-controller 于 14:02 UTC 改回" in zh
    assert "已改参数：--max-num-seqs 128 -> 64（p-argo，已被改回）" in zh
    assert "是否需要回滚：不需要：p-argo 已被其他管理者改回；请把这项改动并入真实来源" in zh
    parent = handover_parent(h, "en")
    assert block_errors(parent["blocks"]) == [] and "reverted by argocd-controller at 14:02 UTC" in str(parent["blocks"])
    (page,), _overflow = handover_thread(h, "zh")
    assert block_errors(page["blocks"]) == [] and "已被 argocd-controller 于 14:02 UTC 改回" in str(page["blocks"])


def test_a_revert_before_the_window_is_not_listed_again(store):
    h = build_handover(store, since=T0 + timedelta(hours=1), now=T0 + timedelta(hours=2))
    assert h.reverted == () and not any(k == "reverted" for k, _v in h.watch_items)


def test_the_review_reminder_of_a_reverted_stopgap_says_so(store):
    (due,) = due_reviews(store, T0 + timedelta(hours=13), review_after_s=12 * 3600, default_channel=None)
    assert due.key == "review:p-argo:max-num-seqs" and due.channel == CHANNEL
    assert due.measure.live == "reverted" and due.reverted is not None
    assert (due.reverted.manager, due.reverted.at) == ("argocd-controller", "2026-12-01T14:02:11Z")

    def never(*_a):
        raise AssertionError("a reverted stop-gap is not read again")

    assert confirm(store, due, never, T0 + timedelta(hours=13)) == due
    for lang, words in (("en", "reverted by argocd-controller at 14:02 UTC: the stop-gap is no longer running."),
                        ("zh", "已被 argocd-controller 于 14:02 UTC 改回：该临时措施已不再生效。")):
        msg = review_message(due, lang)
        assert block_errors(msg["blocks"]) == []
        text = str(msg["blocks"])
        assert words in text and "gpumem rollback" not in text
        assert ("fold the change into the source of truth" if lang == "en" else "真实来源") in text


def test_a_revert_without_a_recorded_manager_reads_as_not_recorded_everywhere():
    s = Store.memory()
    _reverted(s, _plan("p-anon"), (UNNAMED,))
    h = build_handover(s, now=T0 + timedelta(hours=1))
    (item,) = h.reverted
    assert (item.manager, item.at, item.seen_at) == (None, None, "2026-12-01T14:05:00Z")
    assert "reverted by another writer, seen at 14:05 UTC (manager not recorded)" in handover_text(h, "en")
    assert re.search(r"未记录管理者", handover_text(h, "zh"))
