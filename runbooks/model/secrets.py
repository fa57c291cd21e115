"""Credentials out of everything gpumem reads, shows and writes: one set of rules for every room.

Collectors mask what they read (objects, logs, error bodies), the bot masks what it logs, and
both use these rules, so a value masked in a bundle is masked the same way in Slack.

- `secret_name`: a variable, flag or key that carries a credential, by the words of its name.
  A name is secret when its LAST word is token, key, secret, password, passwd, passphrase,
  credential(s), apikey, authtoken or auth (HF_TOKEN, --api-key, WANDB_KEY, client_secret,
  apiKey), or when ANY word is secret, password, passwd, passphrase, credential(s) or apikey
  (DB_PASSWORD_FILE, --ssl-keyfile-password). Words are whole: `tokens` is not `token`, `kv`
  is not `key`, so MAX_TOTAL_TOKENS, --max-num-batched-tokens, --kv-cache-dtype,
  --long-prefill-token-threshold and TOKENIZERS_PARALLELISM are settings, not secrets. A bare
  `key` is too common a word to count on its own.
- `redact_text`: free text (a log line, an error body, a `sh -c` script) with credential-shaped
  values (sk-..., hf_..., ghp_..., xoxb-..., AKIA..., JWTs, private keys), `name=value` and
  `name: value` of secret names, `--secret-flag value`, Authorization headers, `Bearer` tokens
  and URL passwords masked. In free text a value that reads as a number (`time_per_token=20ms`)
  is never masked: it is not a credential, and triage may read it.
- `redact_argv`, `redact_flags`: a command or args list, flag by flag; parsed flags by name.
- `redact_evidence`: every string of an Evidence (or any of its parts); numbers, times and
  booleans are never touched.

A masked value reads `<redacted>`; the name stays, so on-call sees the flag or variable was set.

>>> redact_argv(["--model=m", "--api-key", "abc123", "--hf-token=hf_x", "--max-num-batched-tokens", "8192"])
['--model=m', '--api-key', '<redacted>', '--hf-token=<redacted>', '--max-num-batched-tokens', '8192']
>>> redact_text("args: Namespace(max_num_seqs=128, api_key='abc123')")
"args: Namespace(max_num_seqs=128, api_key='<redacted>')"
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["REDACTED", "redact_argv", "redact_evidence", "redact_flags", "redact_known", "redact_text",
           "secret_name", "secret_value"]

REDACTED = "<redacted>"
T = TypeVar("T")

#: a name is secret when it ends with one of these words ...
_LAST_WORDS = frozenset({"token", "key", "secret", "password", "passwd", "passphrase", "credential",
                         "credentials", "apikey", "authtoken", "auth"})
#: ... or has one of these anywhere
_ANY_WORDS = frozenset({"secret", "password", "passwd", "passphrase", "credential", "credentials",
                        "apikey"})
#: words too common to mean a secret on their own (a name of one word)
_NOT_ALONE = frozenset({"key", "auth"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
#: known secrets shorter than this are not searched for (they would mask ordinary words)
_MIN_KNOWN = 6

# credential shapes, whatever they are called; each must not be a part of a longer word
_EDGE_BEFORE = r"(?<![A-Za-z0-9_-])"
_EDGE_AFTER = r"(?![A-Za-z0-9_-])"
_SHAPES = [
    r"sk-(?:proj-|ant-|live-|test-|svcacct-)?[A-Za-z0-9_-]{16,}",  # OpenAI, Anthropic and look-alikes
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"xox[abposer]-[A-Za-z0-9-]{6,}",  # Slack bot, user, ... tokens
    r"xoxe\.xox[bp]-[A-Za-z0-9-]{6,}",
    r"xapp-[A-Za-z0-9-]{6,}",  # Slack app-level tokens
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key ids
    r"AIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # JWTs: header.payload.signature
]
_SHAPE = re.compile(_EDGE_BEFORE + "(?:" + "|".join(_SHAPES) + ")" + _EDGE_AFTER)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL)
#: an Authorization header, in any quoting: the scheme stays, the credential goes
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?)"
    r"((?:basic|bearer|token|digest|negotiate|apikey|sso-key)[ \t]+)?([^\s\"',;}\]]+)")
_BEARER = re.compile(r"(?i)\b(bearer[ \t]+)([A-Za-z0-9._~+/=-]{8,})")
#: user:password@ in a URL: the user stays
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*:)([^\s/@]+)(@)")
#: name=value, name: value, "name": "value" (and --name=value)
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])(?P<name>-{0,2}[A-Za-z_][\w.-]*)(?P<close>[\"']?)(?P<sep>[ \t]*[=:][ \t]*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;)}\]&]+)")
#: --name value (a flag and the next word)
_FLAG_VALUE = re.compile(
    r"(?<![\w-])(?P<name>--?[A-Za-z][\w.-]*)(?P<sep>[ \t]+)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\-][^\s\"';|&]*)")
#: values that are never credentials: numbers with an optional unit, and words that mean "not set"
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[A-Za-zµ%/]{0,4}")
_NOT_SET = frozenset({"", "none", "null", "nil", "true", "false", "undefined", REDACTED, "***", "(redacted)"})


def secret_name(name: str) -> bool:
    """Whether a variable, flag or key named `name` carries a credential.

    >>> [secret_name(n) for n in ("HF_TOKEN", "--api-key", "WANDB_KEY", "apiKey", "db_password")]
    [True, True, True, True, True]
    >>> [secret_name(n) for n in ("MAX_TOTAL_TOKENS", "max-num-batched-tokens", "kv-cache-dtype", "ssl-keyfile")]
    [False, False, False, False]
    """
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words:
        return False
    if len(words) == 1 and words[0] in _NOT_ALONE:
        return False
    return words[-1] in _LAST_WORDS or any(w in _ANY_WORDS for w in words)


def secret_value(value: str) -> bool:
    """Whether `value` as a whole is shaped like a credential (sk-..., hf_..., a JWT, ...).

    >>> secret_value("hf_" + "a" * 34), secret_value("Qwen/Qwen2.5-7B-Instruct")
    (True, False)
    """
    text = value.strip()
    return bool(_SHAPE.fullmatch(text) or _PRIVATE_KEY.fullmatch(text))


def redact_known(text: str, known: Iterable[str] = ()) -> str:
    """`text` with each known secret value (6 characters or more) masked wherever it appears."""
    for secret in sorted({s for s in known if s and len(s) >= _MIN_KNOWN}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def redact_text(text: str, known: Iterable[str] = (), *, shell: bool = False) -> str:
    """Free text with every credential masked (see the module's rules).

    `known`: secret values to mask wherever they appear (a configured token). `shell`: the text
    is a shell script (a `sh -c` argument): a mask standing alone as a word is quoted, so the
    script still splits into the same words.

    >>> redact_text("Authorization: Bearer abc.def.ghi and https://u:pw@prom:9090/ ok")
    'Authorization: Bearer <redacted> and https://u:<redacted>@prom:9090/ ok'
    >>> redact_text("vllm serve m --api-key abc123 --max-num-batched-tokens 8192", shell=True)
    "vllm serve m --api-key '<redacted>' --max-num-batched-tokens 8192"
    """
    if not text:
        return text
    text = redact_known(text, known)
    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _AUTH_HEADER.sub(_auth_header, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    text = _SHAPE.sub(REDACTED, text)
    text = _scan(_ASSIGNMENT, text, REDACTED)
    return _scan(_FLAG_VALUE, text, f"'{REDACTED}'" if shell else REDACTED)


def _scan(pattern: re.Pattern[str], text: str, standalone: str) -> str:
    """Mask the value of each `name<sep>value` whose name is secret. After a name that is not,
    the search goes on right after its separator: the "value" may hold the next pair
    (`JSON: token=...`, `bash -c "... --api-key ..."`)."""
    out: list[str] = []
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        name, value = m.group("name"), m.group("value")
        if secret_name(name.lstrip("-")) and _maskable(value):
            out.append(text[pos:m.start("value")] + _quoted(value, standalone))
            pos = m.end()
        else:
            out.append(text[pos:m.end("sep")])
            pos = m.end("sep")
    out.append(text[pos:])
    return "".join(out)


def _auth_header(m: re.Match[str]) -> str:
    return m.group(1) + (m.group(2) or "") + REDACTED


def _maskable(value: str) -> bool:
    bare = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value
    bare = bare.strip()
    return not (bare.lower() in _NOT_SET or bare.startswith(("$", "{", "[")) or _NUMBER.fullmatch(bare))


def _quoted(value: str, mask: str) -> str:
    return value[0] + REDACTED + value[-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else mask


def redact_argv(words: Sequence[Any]) -> list[Any]:
    """A container's command or args with the values of secret flags masked, word by word.

    `--flag=value` and `--flag value` (the next word, unless it is a flag); a word with spaces is
    a shell script and is masked as free text; every other word loses credential shapes. Values
    of other flags are left as they are, so every number triage reads stays.

    >>> redact_argv(["sh", "-c", "exec vllm serve m --hf-token=hf_secret --port 8000"])
    ['sh', '-c', 'exec vllm serve m --hf-token=<redacted> --port 8000']
    """
    out: list[Any] = []
    mask_next = False
    for word in words:
        if not isinstance(word, str):
            out.append(word)
            mask_next = False
            continue
        if mask_next and not word.startswith("-"):
            out.append(word if word.startswith("$") else REDACTED)
            mask_next = False
            continue
        mask_next = False
        if word.startswith("-") and not any(c.isspace() for c in word):
            name, eq, value = word.lstrip("-").partition("=")
            if secret_name(name):
                if not eq:
                    mask_next = True
                    out.append(word)
                else:
                    out.append(word if not value or value.startswith("$") else word[: len(word) - len(value)] + REDACTED)
                continue
        out.append(redact_text(word, shell=any(c.isspace() for c in word)))
    return out


def redact_flags(flags: Mapping[str, str]) -> dict[str, str]:
    """Parsed flags (canonical name -> text) with secret ones masked and credential shapes gone.

    >>> redact_flags({"api-key": "abc", "max-num-batched-tokens": "8192", "enable-prefix-caching": ""})
    {'api-key': '<redacted>', 'max-num-batched-tokens': '8192', 'enable-prefix-caching': ''}
    """
    return {k: _masked_value(k, v) for k, v in flags.items()}


def _masked_value(name: Any, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if isinstance(name, str) and value and secret_name(name) and not value.startswith("$"):
        return REDACTED
    return redact_text(value)


def redact_evidence(obj: T, known: Iterable[str] = ()) -> T:
    """A copy of `obj` (an Evidence, a ReadIssue, any frozen dataclass, tuple, list or dict of
    them) with every string through `redact_text` and every string under a secret key (a flag,
    a variable) masked. Numbers, times and booleans are never touched; parts with nothing to
    mask are returned as they are.

    >>> from runbooks.model.evidence import ServerConfig
    >>> cfg = redact_evidence(ServerConfig("d", max_model_len=8192, flags={"api-key": "k", "max-model-len": "8192"}))
    >>> cfg.flags, cfg.max_model_len
    ({'api-key': '<redacted>', 'max-model-len': '8192'}, 8192)
    """
    return _walk(obj, tuple(known))


def _walk(value: Any, known: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact_text(value, known)
    if value is None or isinstance(value, (bool, int, float, bytes)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = _walk(old, known)
            if new is not old and new != old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [_walk(v, known) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
            return type(value)(*items)
        return type(value)(items)
    if isinstance(value, dict):
        out = {}
        changed = False
        for k, v in value.items():
            new = _masked_value(k, v) if isinstance(v, str) else _walk(v, known)
            if isinstance(new, str) and known:
                new = redact_known(new, known)
            changed = changed or (new is not v and new != v)
            out[k] = new
        return out if changed else value
    return value
