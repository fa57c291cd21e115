"""A small read-only client of the Prometheus HTTP API, and pure parsers of its answers.

Fetch apart from parse: `PrometheusClient` sends `/api/v1/query` and `/api/v1/query_range`;
`parse_query_response` turns the JSON document into a `QueryResult` without any I/O.

Every failure is a `PrometheusError` whose `kind` says what went wrong:
- "unreachable": no connection (refused, DNS, TLS), or a gateway that could not reach the server
- "timeout": no answer in time, or Prometheus gave up on the query
- "bad_query": Prometheus rejected the PromQL (errorType bad_data / execution)
- "forbidden": 401 or 403 from Prometheus or a proxy in front of it
- "not_found": 404, usually a base URL without the right path prefix
- "unreadable": anything else (a 500, a body that is not the API's JSON)

Credentials are never put in messages or reprs: the URL is shown without user:password@ or a
query string, and an error text a server or proxy sends back (which may quote the request's
Authorization header) is masked (`runbooks.model.secrets`), the client's own token and password
wherever they appear.

>>> r = parse_query_response({"status": "success", "data": {"resultType": "vector", "result": [
...     {"metric": {"gpu": "0"}, "value": [1700000000, "73400"]}]}})
>>> r.series[0].labels["gpu"], r.series[0].points[0][1]
('0', 73400.0)
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests

from collectors.errors import CollectorError, ParseError, noun, quoted, said
from collectors.errors import field as at_field
from runbooks.model.evidence import ReadIssue
from runbooks.model.phrases import Phrase
from runbooks.model.secrets import redact_text

SOURCE = "prometheus"
#: PrometheusError kinds
ERROR_KINDS = ("unreachable", "timeout", "bad_query", "forbidden", "not_found", "unreadable")
#: ReadIssue kind of each error kind (ReadIssue has no "bad_query": the message carries it)
_ISSUE_KIND = {"bad_query": "unreadable"}
_RESULT_TYPES = ("vector", "matrix", "scalar", "string")
#: the times a datetime can hold: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z
_FIRST_UNIX_S, _LAST_UNIX_S = -62135596800, 253402300799
# a GET URL longer than this goes as a form POST instead (proxies cut long URLs; the API takes both)
_MAX_GET_QUERY_CHARS = 3000


class PrometheusError(CollectorError):
    """A query that gave no result. `kind` is one of ERROR_KINDS.

    >>> PrometheusError("bad_query", "bad_data: parse error").issue("memory").kind
    'unreadable'
    >>> PrometheusError("forbidden", "proxy says Authorization: Bearer abc123456").message
    Phrase(key='read.quoted', params={'text': 'proxy says Authorization: Bearer <redacted>'})

    `message` is a phrase under `read.` (text is the server's own words, quoted); every text
    in it has `secrets` and credential-shaped strings redacted.
    """

    def __init__(self, kind: str, message: Phrase | str, secrets: tuple[str, ...] = ()):
        message = _redacted(message if isinstance(message, Phrase) else quoted(message, 500), secrets)
        super().__init__(f"{kind}: {message}")
        self.kind = kind if kind in ERROR_KINDS else "unreadable"
        self.message = message

    def issue(self, what: str | None = None) -> ReadIssue:
        """This error as a ReadIssue of the "prometheus" source; `what` names the query (a
        query Prometheus refused says so: ReadIssue has no kind for it)."""
        message = said("bad_query", message=self.message) if self.kind == "bad_query" else self.message
        return ReadIssue(SOURCE, at_field(what, message) if what else message, kind=_ISSUE_KIND.get(self.kind, self.kind))


def _redacted(phrase: Phrase, secrets: tuple[str, ...]) -> Phrase:
    """`phrase` with every text in it (nested phrases too) passed through `redact_text`."""
    def clean(value: Any) -> Any:
        if isinstance(value, Phrase):
            return _redacted(value, secrets)
        return redact_text(value, secrets) if isinstance(value, str) else value
    return Phrase(phrase.key, {k: clean(v) for k, v in phrase.params.items()})


# --------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class PromSeries:
    """One series of a result: its labels and (unix seconds, value) points, oldest first."""

    labels: dict[str, str] = field(default_factory=dict)
    points: tuple[tuple[float, float], ...] = ()

    @property
    def name(self) -> str | None:
        return self.labels.get("__name__")


@dataclass(frozen=True)
class QueryResult:
    """A successful answer. A vector has one point per series; a scalar is one unlabelled series."""

    result_type: str
    series: tuple[PromSeries, ...] = ()
    warnings: tuple[str, ...] = ()


def parse_query_response(doc: Any, source: str = SOURCE) -> QueryResult:
    """Read the JSON document of /api/v1/query or /api/v1/query_range (already decoded).

    Raises PrometheusError for a `status: error` document (kind from its errorType) and
    ParseError for a document that is not the API's shape. NaN and infinite values are
    dropped: they mean "no reading" (an empty histogram, a division by zero).
    """
    if not isinstance(doc, dict):
        raise ParseError(source, said("expected", what=noun("prometheus_answer")))
    status = doc.get("status")
    if status == "error":
        error_type, error = doc.get("errorType"), doc.get("error")
        raise PrometheusError(_kind_of_error_type(error_type), quoted(f"{_text(error_type)}: {_text(error)}", 500))
    if status != "success":
        raise ParseError(source, at_field("status", said("expected_got", what=noun("success_or_error"),
                                                      got=quoted(_text(status)))))
    data = doc.get("data")
    if not isinstance(data, dict):
        raise ParseError(source, at_field("data", said("expected", what=noun("object"))))
    result_type, result = data.get("resultType"), data.get("result")
    if result_type not in _RESULT_TYPES:
        raise ParseError(source, at_field("data.resultType", said("unknown", value=quoted(_text(result_type)))))
    warnings = doc.get("warnings")
    notes = tuple(str(w) for w in warnings) if isinstance(warnings, list) else ()
    if result_type in ("scalar", "string"):
        point = _point(result, source, "data.result") if result_type == "scalar" else None
        return QueryResult(str(result_type), (PromSeries({}, (point,) if point else ()),), notes)
    if not isinstance(result, list):
        raise ParseError(source, at_field("data.result", said("expected", what=noun("list"))))
    if result_type == "vector":
        return QueryResult("vector", _vector(result, source), notes)
    series = tuple(_series(item, True, source, f"data.result[{i}]") for i, item in enumerate(result))
    return QueryResult(str(result_type), series, notes)


def _vector(result: list, source: str) -> tuple[PromSeries, ...]:
    """An instant vector's series. The shape every server sends (an object of string labels, a
    [number, "value"] pair) is read inline: a fleet answer holds 100,000 series, and a call per
    series and per label is most of its reading. Anything else goes through `_series`, which
    names what is wrong (ParseError) or reads what it can."""
    out: list[PromSeries] = []
    add = out.append
    for i, item in enumerate(result):
        if type(item) is dict and len(item) == 2:
            metric, raw = item.get("metric"), item.get("value")
            if type(metric) is dict and type(raw) is list and len(raw) == 2:
                at, text = raw
                try:
                    # str.join takes strings only: every label name and value is one, or TypeError
                    "".join(metric)
                    "".join(metric.values())
                    value = float(text) if type(text) is str else None
                except (TypeError, ValueError):
                    value = None
                if (value is not None and (type(at) is float or type(at) is int)
                        and _FIRST_UNIX_S <= at <= _LAST_UNIX_S):
                    add(PromSeries(metric.copy(), ((float(at), value),) if math.isfinite(value) else ()))
                    continue
        add(_series(item, False, source, f"data.result[{i}]"))
    return tuple(out)


def _series(item: Any, is_matrix: bool, source: str, where: str) -> PromSeries:
    if not isinstance(item, dict):
        raise ParseError(source, at_field(where, said("expected", what=noun("object"))))
    metric = item.get("metric", {})
    if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        raise ParseError(source, at_field(f"{where}.metric", said("expected", what=noun("object_of_strings"))))
    if is_matrix:
        values = item.get("values", [])
        if not isinstance(values, list):
            raise ParseError(source, at_field(f"{where}.values", said("expected", what=noun("list"))))
        points = [_point(v, source, f"{where}.values[{j}]") for j, v in enumerate(values)]
    else:
        points = [_point(item.get("value"), source, f"{where}.value")]
    kept = sorted((p for p in points if p is not None), key=lambda p: p[0])
    return PromSeries(dict(metric), tuple(kept))


def _point(raw: Any, source: str, where: str) -> tuple[float, float] | None:
    """[unix seconds, "value"] -> (seconds, value); None for a NaN or infinite value.

    A time a datetime cannot hold (before year 1, after year 9999) is no reading: ParseError,
    rather than a ValueError later where the history turns seconds into datetimes.

    >>> _point([253402300800.0, "1"], "fuzz.json", "data.result")
    Traceback (most recent call last):
    ...
    collectors.errors.ParseError: fuzz.json: read.field(field=data.result, message=read.time_out_of_range)
    """
    if not isinstance(raw, list) or len(raw) != 2:
        raise ParseError(source, at_field(where, said("expected", what=noun("time_value"))))
    at, text = raw
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        raise ParseError(source, at_field(where, said("time_not_a_number")))
    if not _FIRST_UNIX_S <= at <= _LAST_UNIX_S:
        raise ParseError(source, at_field(where, said("time_out_of_range")))
    if not isinstance(text, str):
        raise ParseError(source, at_field(where, said("expected", what=noun("string"))))
    try:
        value = float(text)
    except ValueError:
        raise ParseError(source, at_field(where, said("bad_value", value=quoted(text[:40])))) from None
    return (float(at), value) if math.isfinite(value) else None


def _kind_of_error_type(error_type: Any) -> str:
    if error_type in ("timeout", "canceled"):
        return "timeout"
    if error_type in ("bad_data", "execution"):
        return "bad_query"
    if error_type == "unavailable":
        return "unreachable"
    if error_type == "not_found":
        return "not_found"
    return "unreadable"


def _text(value: Any) -> str:
    return str(value)[:500] if value is not None else "(none)"


# ---------------------------------------------------------------------- client


class PrometheusClient:
    """Queries one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics).

    `base_url` may carry a path prefix ("https://mon.example/prometheus"). Authentication is
    a bearer token or (user, password) basic auth; `verify` is True, False or a CA bundle path;
    `headers` adds fixed headers (e.g. X-Scope-OrgID for a multi-tenant backend).
    `queries_sent` counts the queries made, for callers that budget them (`rules_reads` the
    rules API's requests).

    >>> PrometheusClient("http://127.0.0.1:9090", bearer_token="s3cret")
    PrometheusClient('http://127.0.0.1:9090', auth=bearer)
    """

    def __init__(
        self,
        base_url: str,
        *,
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        timeout_s: float = 5.0,
        verify: bool | str = True,
        headers: Mapping[str, str] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.verify = verify
        self._headers = {"Accept": "application/json", **(headers or {})}
        if bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        self._basic = basic_auth
        #: masked in every error message, however a server echoes them
        self._secrets = tuple(s for s in (bearer_token, basic_auth[1] if basic_auth else None, _url_password(base_url))
                              if s)
        self._auth_kind = "bearer" if bearer_token else "basic" if basic_auth else "none"
        self._local = threading.local()  # one Session per thread: Sessions are not thread-safe
        self._lock = threading.Lock()
        self.queries_sent = 0
        #: requests to the rules API (`recording_rules`), apart from the queries
        self.rules_reads = 0

    def __repr__(self) -> str:
        return f"PrometheusClient({_safe_url(self.base_url)!r}, auth={self._auth_kind})"

    def query(self, promql: str, at: datetime | float | None = None) -> QueryResult:
        """An instant query, evaluated at `at` (default: the server's now)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = _unix(at)
        return self._call("/api/v1/query", params)

    def query_range(
        self, promql: str, start: datetime | float, end: datetime | float, step_s: float
    ) -> QueryResult:
        """A range query: the expression at start, start + step, ... up to end."""
        params = {"query": promql, "start": _unix(start), "end": _unix(end), "step": f"{step_s:g}"}
        return self._call("/api/v1/query_range", params)

    # ------------------------------------------------------------------ private

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers.update(self._headers)
            if self._basic is not None:
                session.auth = self._basic
            session.verify = self.verify
            self._local.session = session
        return session

    def recording_rules(self) -> frozenset[str]:
        """The names of the recording rules the server has loaded and that are not failing
        (`/api/v1/rules?type=record`); PrometheusError when it cannot say."""
        url = self.base_url + "/api/v1/rules"
        where = f"{_safe_url(url)}"
        with self._lock:
            self.rules_reads += 1
        resp = self._request(url, {"type": "record"}, where)
        try:
            return read_recording_rules(resp.content, where, resp.status_code)
        except PrometheusError as e:
            raise PrometheusError(e.kind, e.message, self._secrets) from None

    def _call(self, path: str, params: dict[str, str]) -> QueryResult:
        url = self.base_url + path
        where = f"{_safe_url(url)}"
        with self._lock:
            self.queries_sent += 1
        resp = self._request(url, params, where)
        try:
            return _read_response(resp, where)
        except PrometheusError as e:
            raise PrometheusError(e.kind, e.message, self._secrets) from None

    def _request(self, url: str, params: dict[str, str], where: str) -> requests.Response:
        try:
            if len(params.get("query", "")) > _MAX_GET_QUERY_CHARS:
                resp = self._session().post(url, data=params, timeout=self.timeout_s)
            else:
                resp = self._session().get(url, params=params, timeout=self.timeout_s)
        except requests.Timeout:
            raise PrometheusError("timeout", _at(where, said("no_answer_within", seconds=f"{self.timeout_s:g}"))) from None
        except requests.exceptions.SSLError:
            raise PrometheusError("unreachable", _at(where, said("transport.tls_failed"))) from None
        except requests.ConnectionError:
            raise PrometheusError("unreachable", _at(where, said("transport.cannot_connect"))) from None
        except requests.RequestException as e:
            raise PrometheusError("unreachable", _at(where, quoted(type(e).__name__))) from None
        return resp


def _read_response(resp: requests.Response, where: str) -> QueryResult:
    doc: Any = None
    try:
        doc = resp.json()
    except (ValueError, UnicodeError):
        doc = None
    if isinstance(doc, dict) and doc.get("status") in ("success", "error"):
        # Prometheus answers errors with a JSON body (400 bad_data, 422 execution, 503 timeout)
        try:
            return parse_query_response(doc, source=where)
        except ParseError as e:
            raise PrometheusError("unreadable", e.reason) from None  # the URL and the field
    raise _status_error(resp.status_code, where, "query")


def _at(where: str, message: Phrase) -> Phrase:
    """`message` about the URL `where` (already without credentials)."""
    return said("where", source=where, message=message)


def _status_error(status: int, where: str, api: str) -> PrometheusError:
    """What an answer that is not the API's JSON means, by its HTTP status."""
    if status in (401, 403):
        return PrometheusError("forbidden", _at(where, said("http_code", code=status)))
    if status == 404:
        return PrometheusError("not_found", _at(where, said("prometheus_404")))
    if status in (502, 503, 504):
        return PrometheusError("unreachable", _at(where, said("http_from_proxy", code=status)))
    if status >= 400:
        return PrometheusError("unreadable", _at(where, said("http_code", code=status)))
    return PrometheusError("unreadable", _at(where, said("not_api_json", api=api)))


def read_recording_rules(body: bytes, where: str, status: int = 200) -> frozenset[str]:
    """The `name`s of the healthy recording rules in a `/api/v1/rules` answer (a rule whose
    last evaluation failed writes nothing, so it does not count). PrometheusError `not_found`
    for a backend without the rules API, `forbidden`, or `unreadable` naming what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeError, RecursionError):
        raise _status_error(status, where, "rules") from None
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        raise _status_error(status, where, "rules")
    if doc["status"] == "error":
        raise PrometheusError(_kind_of_error_type(doc.get("errorType")), _at(where, quoted(_text(doc.get("error")), 500)))
    data = doc.get("data")
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise PrometheusError("unreadable", _at(where, at_field("data.groups", said("expected", what=noun("list")))))
    names: set[str] = set()
    for i, group in enumerate(groups):
        rules = group.get("rules") if isinstance(group, dict) else None
        if not isinstance(rules, list):
            raise PrometheusError("unreadable", _at(where, at_field(f"data.groups[{i}].rules",
                                                                 said("expected", what=noun("list")))))
        for rule in rules:
            if (isinstance(rule, dict) and rule.get("type") == "recording" and isinstance(rule.get("name"), str)
                    and rule.get("health") != "err"):
                names.add(rule["name"])
    return frozenset(names)


def _unix(at: datetime | float) -> str:
    if isinstance(at, datetime):
        # a naive time is read as UTC, never as the machine's local time
        seconds = (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()
    else:
        seconds = float(at)
    return f"{seconds:.3f}"


def _safe_url(url: str) -> str:
    """The URL without user:password@ or a query string, fit for a message."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "(base URL)"


def _url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def load_response_text(text: str, source: str) -> QueryResult:
    """Parse a recorded response body (JSON text); ParseError names `source` and the line."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(source, said("not_json", detail=quoted(e.msg)), line=e.lineno) from None
    except RecursionError:
        raise ParseError(source, said("nested_too_deeply")) from None
    return parse_query_response(doc, source=source)
