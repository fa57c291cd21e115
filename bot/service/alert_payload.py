"""Alertmanager's webhook body (`webhook_config`, payload version 4), read into typed alerts.

Pure: bytes in, a `Notification` or a `PayloadError` out (it names the field, e.g.
`alerts[3].labels: expected an object of strings`), never another exception. The shape is
Alertmanager's `template.Data` with `version`, `groupKey` and `truncatedAlerts`:

>>> n = parse_notification(b'{"version": "4", "groupKey": "{}:{alertname=\\\\"X\\\\"}", "status": "firing",'
...                        b' "alerts": [{"status": "firing", "labels": {"alertname": "X"},'
...                        b' "startsAt": "2026-03-09T21:00:00.123456789Z", "fingerprint": "a1b2"}]}')
>>> n.alerts[0].fingerprint, n.alerts[0].starts_at.isoformat()
('a1b2', '2026-03-09T21:00:00.123456+00:00')
>>> parse_notification(b'{"version": "3"}')
Traceback (most recent call last):
...
bot.service.alert_payload.PayloadError: version: expected "4" (Alertmanager's webhook payload version), got '3'
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

STATUSES = ("firing", "resolved")
#: more alerts than this in one notification is not something Alertmanager sends
MAX_ALERTS = 10_000
_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?"
                   r"([Zz]|[+-][0-9]{2}:[0-9]{2})")
_FINGERPRINT = re.compile(r"[0-9A-Za-z]{1,64}")


class PayloadError(ValueError):
    """The body is not an Alertmanager webhook notification; `field` says where."""

    def __init__(self, field_: str, problem: str):
        self.field = field_
        self.problem = problem
        super().__init__(f"{field_}: {problem}")


@dataclass(frozen=True)
class Alert:
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    #: None while firing (Alertmanager sends the zero time, 0001-01-01)
    ends_at: datetime | None
    fingerprint: str
    generator_url: str = ""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def summary(self) -> str:
        a = self.annotations
        return a.get("summary") or a.get("message") or a.get("description") or self.name


@dataclass(frozen=True)
class Notification:
    group_key: str
    status: str
    alerts: tuple[Alert, ...]
    receiver: str = ""
    group_labels: dict[str, str] = field(default_factory=dict)
    common_labels: dict[str, str] = field(default_factory=dict)
    common_annotations: dict[str, str] = field(default_factory=dict)
    external_url: str = ""
    truncated_alerts: int = 0


def parse_notification(body: bytes | str) -> Notification:
    """The notification in `body`, or PayloadError naming the first field that is wrong."""
    if isinstance(body, bytes | bytearray):
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise PayloadError("body", "not UTF-8 text") from None
    else:
        text = body
    if not text.strip():
        raise PayloadError("body", "empty: expected Alertmanager's JSON notification")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise PayloadError("body", "nested too deeply") from None
    except ValueError as e:
        raise PayloadError("body", f"not JSON ({str(e)[:80]})") from None
    if not isinstance(doc, dict):
        raise PayloadError("body", "expected a JSON object")
    version = doc.get("version")
    if version != "4":
        got = "missing" if "version" not in doc else f"got {_show(version)}"
        raise PayloadError("version", f'expected "4" (Alertmanager\'s webhook payload version), {got}')
    group_key = _str(doc, "groupKey", "groupKey", required=True)
    status = _status(doc, "status")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("alerts", "missing" if alerts is None else "expected a list")
    if len(alerts) > MAX_ALERTS:
        raise PayloadError("alerts", f"{len(alerts)} alerts in one notification; at most {MAX_ALERTS}")
    truncated = doc.get("truncatedAlerts", 0)
    if truncated is None:
        truncated = 0
    if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
        raise PayloadError("truncatedAlerts", f"expected a whole number, got {_show(truncated)}")
    return Notification(
        group_key=group_key, status=status,
        alerts=tuple(_alert(a, f"alerts[{i}]") for i, a in enumerate(alerts)),
        receiver=_str(doc, "receiver", "receiver"),
        group_labels=_strings(doc.get("groupLabels"), "groupLabels"),
        common_labels=_strings(doc.get("commonLabels"), "commonLabels"),
        common_annotations=_strings(doc.get("commonAnnotations"), "commonAnnotations"),
        external_url=_str(doc, "externalURL", "externalURL"),
        truncated_alerts=truncated,
    )


def _alert(doc: Any, at: str) -> Alert:
    if not isinstance(doc, dict):
        raise PayloadError(at, "expected an object")
    labels = _strings(doc.get("labels"), f"{at}.labels", required=True)
    fingerprint = _str(doc, "fingerprint", f"{at}.fingerprint")
    if fingerprint and not _FINGERPRINT.fullmatch(fingerprint):
        raise PayloadError(f"{at}.fingerprint", f"expected up to 64 letters and digits, got {_show(fingerprint)}")
    starts = _time(doc.get("startsAt"), f"{at}.startsAt", required=True)
    assert starts is not None
    return Alert(
        status=_status(doc, f"{at}.status", key="status"),
        labels=labels,
        annotations=_strings(doc.get("annotations"), f"{at}.annotations"),
        starts_at=starts,
        ends_at=_time(doc.get("endsAt"), f"{at}.endsAt"),
        fingerprint=fingerprint or label_fingerprint(labels),
        generator_url=_str(doc, "generatorURL", f"{at}.generatorURL"),
    )


def label_fingerprint(labels: dict[str, str]) -> str:
    """A stable id for a label set when the sender gave none (Alertmanager always does)."""
    text = "\xff".join(f"{k}\xff{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _status(doc: dict[str, Any], at: str, key: str = "status") -> str:
    value = doc.get(key)
    if value not in STATUSES:
        got = "missing" if value is None else f"got {_show(value)}"
        raise PayloadError(at, f"expected firing or resolved, {got}")
    return str(value)


def _str(doc: dict[str, Any], key: str, at: str, required: bool = False) -> str:
    value = doc.get(key)
    if value is None:
        if required:
            raise PayloadError(at, "missing")
        return ""
    if not isinstance(value, str):
        raise PayloadError(at, f"expected a string, got {_show(value)}")
    if required and not value:
        raise PayloadError(at, "empty")
    return value


def _strings(value: Any, at: str, required: bool = False) -> dict[str, str]:
    if value is None:
        if required:
            raise PayloadError(at, "missing")
        return {}
    if not isinstance(value, dict):
        raise PayloadError(at, f"expected an object of strings, got {_show(value)}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise PayloadError(f"{at}.{_clip(k)}", f"expected a string, got {_show(v)}")
    return dict(value)


def _time(value: Any, at: str, required: bool = False) -> datetime | None:
    """An RFC 3339 time (Go's, with up to nanoseconds); None for a missing or zero time."""
    if value is None or value == "":
        if required:
            raise PayloadError(at, "missing")
        return None
    if not isinstance(value, str):
        raise PayloadError(at, f"expected an RFC 3339 time, got {_show(value)}")
    m = _TIME.fullmatch(value)
    if m is None:
        raise PayloadError(at, f"expected an RFC 3339 time like 2026-03-09T21:00:00Z, got {_show(value)}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if year <= 1:
        if required:
            raise PayloadError(at, "the zero time")
        return None
    micro = int((m.group(7) or ".0")[1:7].ljust(6, "0"))
    zone = m.group(8)
    try:
        tz = UTC if zone in ("Z", "z") else timezone((-1 if zone[0] == "-" else 1)
                                                        * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz).astimezone(UTC)
    except (ValueError, OverflowError) as e:
        raise PayloadError(at, f"not a valid time ({e}): {_show(value)}") from None


def _clip(value: Any, n: int = 60) -> str:
    text = str(value)
    return text if len(text) <= n else text[:n] + "…"


def _show(value: Any) -> str:
    return _clip(repr(value))
