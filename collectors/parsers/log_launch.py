"""The server launch a log shows, read as the same ServerConfig a Deployment gives.

People paste the command on top of the log, and the engines print their own settings at
start-up; either one is a fact about the launch:

- a command line anywhere in a line (`vllm serve`, `python -m vllm.entrypoints...`,
  `python -m sglang.launch_server`, `sglang serve`, `text-generation-launcher`,
  `docker run IMAGE ARGS`), after a shell prompt, `bash`, `VAR=value` assignments, with `\\`
  continuation lines;
- a docker compose service (`image:` then `command:` or `entrypoint:`), or a Kubernetes
  container's `args:`/`command:` list with its `image:` before or after it;
- vLLM's offline `LLM(model=..., gpu_memory_utilization=...)` call;
- the engines' printouts: vLLM `Initializing an LLM engine (v0.5.4) with config: k=v, ...`,
  `args: Namespace(k=v, ...)`, `non-default args: {'k': v}`; TGI `Args { k: v, ... }` (or
  the bare `{ model_id: ... }`); SGLang `server_args=ServerArgs(k=v, ...)`.

The last command wins (a paste may show several tries); the engine's printout, being what
ran, overrides the command flag by flag.

>>> s = LaunchScanner()
>>> s.feed("$ vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 \\\\")
>>> s.feed("    --gpu-memory-utilization 0.95")
>>> cfg = s.result()
>>> cfg.engine, cfg.model, cfg.max_model_len, cfg.memory_fraction
('vllm', 'Qwen/Qwen2.5-7B-Instruct', 8192, 0.95)
"""

from __future__ import annotations

import re

from collectors.parsers.flags import server_config_from_container
from runbooks.launch.argv import canonical_flag, config_from_flags, parse_command_line
from runbooks.launch.flag_tables import MODEL_FLAG
from runbooks.launch.forms import split_words, strip_wrappers
from runbooks.model.evidence import ServerConfig

_COMMAND = re.compile(
    r"(?:^|(?<=[\s$#>`:]))((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)"
    r"(python[\d.]*\s+-m\s+(?:vllm|sglang|sglang_router)\.[\w.]+|vllm\s+serve\b|sglang\s+serve\b"
    r"|text-generation-launcher\b|(?:docker|podman)\s+run\b)"
)
_PRINTOUTS = (
    ("vllm", re.compile(r"Initializing an? (?:V\d )?LLM engine(?: \(v([\w.+\-]{1,40})\))? with config: (.*)")),
    ("vllm", re.compile(r"\bargs: Namespace\((.*)")),
    ("vllm", re.compile(r"non-default args: \{(.*)")),
    # SGLang to 0.5.15 prints the dataclass (`{server_args=}`, entrypoints/engine.py:127@0.5.3,
    # :225@0.5.15), from 0.5.19 its resolved dict (:265@0.5.19, :311@0.5.23)
    ("sglang", re.compile(r"server_args=ServerArgs\((.*)")),
    ("sglang", re.compile(r"server_args=\{(.*)")),
    ("tgi", re.compile(r"(?:\bArgs \{|^\{\s*(?=model_id:))(.*)")),
)
#: a value: quoted, a flat list (`cuda_graph_bs=[1, 2, 4]`), or a bare word
#: (after `top_level`, a nested value is its name and blank brackets: read as no value)
_PAIR_EQ = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\[\]]{0,4000}\]|[\w.]{0,80}\([^()]{0,20000}\)|\{[^{}]{0,20000}\}|[^,()\s]+)")
_PAIR_DICT = re.compile(r"'(\w+)':\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\[\]]{0,4000}\]|[\w.]{0,80}\([^()]{0,20000}\)|\{[^{}]{0,20000}\}|[^,{}\s]+)")
_PAIR_RUST = re.compile(r"(\w+): (Some\(\"?([^\")]*)\"?\)|\"([^\"]*)\"|[^,\s}]+)")
_LLM_CALL = re.compile(r"\b(?:LLM|(?:Async)?EngineArgs)\((.*)")
#: SGLang names the fraction it ran with in its refusal ("under --mem-fraction-static=0.88",
#: "Current value: mem_fraction_static=0.6")
_SGLANG_FRACTION = re.compile(r"(?:--mem-fraction-static=|\bmem_fraction_static=)(\d(?:\.\d{1,4})?)\b")
_COMPOSE_IMAGE = re.compile(r"^(\s*)image:\s*['\"]?([^'\"\s]+)")
_COMPOSE_COMMAND = re.compile(r"^(\s*)(command|entrypoint):\s*(.*)$")
#: a Kubernetes container pasted into a log: `args:` (or `- args:`, the container's first key)
#: then its items, at the key's column or deeper; its `image:` may come before or after
_KUBE_LIST = re.compile(r"^(\s*)(- )?(args|command):\s*(.*)$")
_VERSION_PIN = re.compile(r"^\s*(vllm|sglang)==(\d+\.\d+[\w.+\-]{0,30})\s*$")
#: printout keys whose meaning differs from the flag of the same name
_KEY_FLAGS = {"vllm": {"max_seq_len": "max-model-len", "model_tag": "model"}, "sglang": {}, "tgi": {}}
_DOCKER_VALUE_OPTIONS = frozenset({
    "-e", "--env", "-v", "--volume", "-p", "--publish", "--name", "--gpus", "--shm-size", "--runtime",
    "--ipc", "--network", "--net", "--entrypoint", "-w", "--workdir", "--env-file", "--mount",
    "--device", "-u", "--user", "-m", "--memory", "--cpus", "--platform", "--add-host", "--ulimit",
    "-l", "--label", "--restart", "--log-driver", "-h", "--hostname", "--security-opt", "--cap-add",
    "--pull", "--pid", "--uts", "--cgroupns", "--memory-swap", "--log-opt", "--tmpfs",
})
_MAX_CONTINUATION = 60
#: TGI from 2.0.2 prints its Args with `{:#?}` (launcher/src/main.rs:1287@v2.0.2, :2079@v3.3.7):
#: one field per line, an Option's value on a line of its own; to 2.0.1 with `{:?}`, one line
#: (launcher/src/main.rs:999@v0.9.0, :1276@v2.0.1)
_PRETTY_ARGS = re.compile(r"\bArgs \{\s*$")
_MAX_PRETTY_LINES = 400
#: one line of a `{:#?}` block: `field: value,`, a value and its comma, `),` `],` `[` or the
#: closing `}`; recognised by its shape, not its indentation, which a log prefix
#: (`tgi-1  | ` in docker compose) may have taken away
_PRETTY_LINE = re.compile(r'^\s*(?:\w+: .*|"(?:[^"\\]|\\.)*",|[^\s:"]+,|[)\]],?|\[|\})\s*$')
#: the limits TGI's launcher chose where none was given: input and total 2.0.0-2.4.0
#: (launcher/src/main.rs:1329, :1339@v2.0.0; :1710, :1720@v2.4.0), the prefill budget 2.0.0 on
#: (:1355@v2.0.0, :2150@v3.3.7)
_TGI_DEFAULT = re.compile(r"\bDefault `(max_input_tokens|max_total_tokens|max_batch_prefill_tokens)` to (\d{1,9})\b")


def flat_debug(lines: list[str]) -> str:
    """A Rust struct printed with `{:#?}` (one field per line, `Some(` and its value and `)` on
    lines of their own) as the one line `{:?}` prints.

    >>> flat_debug(["INFO x: Args {", "    num_shard: Some(", "        2,", "    ),", '    model_id: "m",', "}"])
    'INFO x: Args { num_shard: Some(2), model_id: "m" }'
    """
    text = " ".join(x.strip() for x in lines)
    text = re.sub(r"([(\[])\s+", r"\1", text)
    text = re.sub(r",?\s+([)\]])", r"\1", text)
    return re.sub(r",\s*\}$", " }", text)


def top_level(body: str) -> str:
    """`body` with what is nested in parentheses or braces blanked out (quotes respected), so
    that only its own pairs are read: vLLM's engine config holds
    `speculative_config=SpeculativeConfig(method='eagle3', model='DRAFT', ...)`, whose `model`
    is the draft's, not the served model's.

    >>> top_level("model='m', spec=Spec(model='d', n=3), tp=2").split()
    ["model='m',", 'spec=Spec(', '),', 'tp=2']
    """
    out = list(body)
    depth, quote, escaped = 0, "", False
    for i, ch in enumerate(body):
        if quote:
            if depth:
                out[i] = " "
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "({":
            depth += 1
            if depth > 1:
                out[i] = " "
            continue
        if ch in ")}":
            if depth > 1:
                out[i] = " "
            depth = max(0, depth - 1)
            continue
        if depth:
            out[i] = " "
        if ch in "'\"":
            quote = ch
    return "".join(out)


def _balanced(text: str) -> bool:
    """True once the call's parentheses close (quoted text not counted)."""
    depth = 1
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return True
    return False


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


#: TGI's Args print its enums by variant name (Debug); the launcher takes them as clap names:
#: kebab case for Quantization (`ValueEnum`, launcher/src/main.rs:404-421@v3.3.7), the names
#: given for Dtype and KVCacheDtype (:490-517@v3.3.7)
_TGI_ENUM_NAMES = {"BFloat16": "bfloat16", "Float16": "float16", "Fp8e4m3fn": "fp8_e4m3fn", "Fp8e5m2": "fp8_e5m2"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
#: a nested value `top_level` blanked out: `SpeculativeConfig(   )`, `{   }`
_BLANKED = re.compile(r"[\w.]*\(\s*\)|\{\s*\}")


def _printout_value(engine: str, key: str, raw: str) -> str | None:
    """A printed value as the flag takes it.

    >>> _printout_value("tgi", "quantize", "BitsandbytesNf4"), _printout_value("tgi", "dtype", "BFloat16")
    ('bitsandbytes-nf4', 'bfloat16')
    """
    value = _unquote(raw)
    if value in ("None", "none", "null", "", "[]", "{}") or _BLANKED.fullmatch(value):
        return None
    if value in ("True", "False"):
        return value.lower()
    if key == "dtype" and value.startswith("torch."):
        return value[len("torch."):]
    if engine == "tgi" and key in ("quantize", "dtype", "kv_cache_dtype") and value[:1].isupper():
        return _TGI_ENUM_NAMES.get(value) or _CAMEL.sub("-", value).lower()
    return value


class LaunchScanner:
    """Feeds on log lines one at a time; `result()` is the launch they showed, or None."""

    def __init__(self, source: str = "logs.txt") -> None:
        self.source = source
        self._pending: list[str] | None = None
        self._compose: dict[str, object] | None = None
        self._compose_image: str | None = None
        #: a container's `args:`/`command:` read before its `image:` line came
        self._kube_lists: dict[str, list[str]] = {}
        self._launch: ServerConfig | None = None
        self._printed: dict[str, str] = {}
        self._printed_engine: str | None = None
        self._version: str | None = None
        self._pinned: dict[str, str] = {}
        #: the lines of a Python call whose parentheses have not closed yet
        self._call: list[str] | None = None
        #: the lines of TGI's pretty-printed Args so far
        self._pretty: list[str] | None = None

    # ---------------------------------------------------------------- feeding

    def feed(self, line: str) -> None:
        """Read one raw log line (prefixes and all)."""
        if self._pending is not None:
            self._pending.append(line)
            if not line.rstrip().endswith("\\") or len(self._pending) > _MAX_CONTINUATION:
                self._command(" ".join(x.rstrip().rstrip("\\") for x in self._pending))
                self._pending = None
            return
        if self._pretty is not None:
            if line.strip() == "}" or (len(self._pretty) < _MAX_PRETTY_LINES and _PRETTY_LINE.match(line)):
                self._pretty.append(line)
                if line.strip() == "}":
                    self._printout(flat_debug(self._pretty))
                    self._pretty = None
                return
            # a line of another shape ends the block (a paste cut short)
            self._printout(flat_debug([*self._pretty, "}"]))
            self._pretty = None
        if "Default `" in line:
            chosen = _TGI_DEFAULT.search(line)
            if chosen:  # printed only where neither the command nor the Args set it: what ran
                self._printed[chosen.group(1).replace("_", "-")] = chosen.group(2)
                self._printed_engine = self._printed_engine or "tgi"
                return
        if "Args {" in line and _PRETTY_ARGS.search(line):
            self._pretty = [line]
            return
        if self._compose_line(line):
            return
        pin = _VERSION_PIN.match(line)
        if pin:
            self._pinned[pin.group(1)] = pin.group(2)
            return
        m = _COMMAND.search(line)
        if m and "File \"" not in line:
            text = line[m.start(1):]
            if text.rstrip().endswith("\\"):
                self._pending = [text]
            else:
                self._command(text)
            return
        if self._call is not None:
            # a Python call over several lines: read it once its parentheses close
            self._call.append(line)
            if _balanced("\n".join(self._call)) or len(self._call) > _MAX_CONTINUATION:
                self._llm_call("\n".join(self._call))
                self._call = None
            return
        if "LLM(" in line or "EngineArgs(" in line:
            call = _LLM_CALL.search(line)
            if call:
                if _balanced(call.group(1)):
                    self._llm_call(call.group(1))
                else:
                    self._call = [call.group(1)]
                return
        if "=" in line or "{" in line:
            self._printout(line)
            if "fraction" in line and "ServerArgs" not in line:
                fraction = _SGLANG_FRACTION.search(line)
                if fraction:
                    self._printed["mem-fraction-static"] = fraction.group(1)
                    self._printed_engine = self._printed_engine or "sglang"

    def _command(self, text: str) -> None:
        env: dict[str, str] = {}
        words = strip_wrappers(split_words(text), env)
        if len(words) >= 2 and words[0] in ("docker", "podman") and words[1] == "run":
            found = self._docker_run(words[2:], env)
        else:
            found = parse_command_line(words, env=env, source=self.source)
        if found is not None and (found.flags or "/" in (found.model or "")):
            # a command sets flags or names a model path; prose that mentions one does neither
            self._launch = found

    def _docker_run(self, words: list[str], env: dict[str, str]) -> ServerConfig | None:
        entrypoint: str | None = None
        i = 0
        while i < len(words) and words[i].startswith("-"):
            option, has_value, value = words[i].partition("=")
            if not has_value and option in _DOCKER_VALUE_OPTIONS and i + 1 < len(words):
                value = words[i + 1]
                i += 1
            if option in ("-e", "--env") and "=" in value:
                name, _, val = value.partition("=")
                env[name] = val
            elif option == "--entrypoint":
                entrypoint = value
            i += 1
        if i >= len(words):
            return None
        return self._container(words[i], [entrypoint] if entrypoint else [], words[i + 1:], env)

    def _container(self, image: str, command: list[str], args: list[str], env: dict[str, str]) -> ServerConfig | None:
        spec: dict[str, object] = {"image": image, "env": [{"name": k, "value": v} for k, v in env.items()]}
        if command:
            spec["command"] = command
        if args:
            spec["args"] = args
        try:
            return server_config_from_container(spec, source=self.source)
        except ValueError:
            return None

    # ---------------------------------------------------------- docker compose

    def _compose_line(self, line: str) -> bool:
        """Follow a compose service: its image, then its command/entrypoint block."""
        state = self._compose
        if state is not None:
            indent = len(line) - len(line.lstrip())
            stripped = line.strip()
            item_at_key = state["kube"] and indent == state["indent"] and stripped.startswith("- ")
            if stripped and indent <= state["indent"] and not item_at_key:  # type: ignore[operator]
                self._finish_compose()
            else:
                if stripped and not stripped.startswith("#"):
                    state["lines"].append(stripped[2:] if stripped.startswith("- ") else stripped)  # type: ignore[union-attr]
                return True
        image = _COMPOSE_IMAGE.match(line)
        if image:
            self._compose_image = image.group(2)
            if self._kube_lists:
                self._finish_kube_lists()
            return True
        command = _COMPOSE_COMMAND.match(line)
        if command and self._compose_image:
            first = command.group(3).strip()
            self._compose = {"indent": len(command.group(1)), "kind": command.group(2),
                             "lines": [first] if first else [], "kube": False}
            return True
        kube = _KUBE_LIST.match(line)
        if kube and not kube.group(4).strip():
            # the list's items follow: at the key's column (after a `- `) or deeper
            self._compose = {"indent": len(kube.group(1)) + (2 if kube.group(2) else 0), "kind": kube.group(3),
                             "lines": [], "kube": True}
            return True
        return False

    def _finish_compose(self) -> None:
        state, self._compose = self._compose, None
        if state is None:
            return
        if state["kube"]:
            self._kube_lists[state["kind"]] = [_unquote(w) for w in state["lines"]]  # type: ignore[union-attr]
            if self._compose_image:
                self._finish_kube_lists()
            return
        if not self._compose_image:
            return
        text = " ".join(state["lines"])  # type: ignore[arg-type]
        if text.startswith("["):
            words = [_unquote(w) for w in text.strip("[]").split(",") if w.strip()]
        else:
            words = split_words(text)
        command, args = (words, []) if state["kind"] == "entrypoint" else ([], words)
        found = self._container(self._compose_image, command, args, {})
        if found is not None:
            self._launch = found

    def _finish_kube_lists(self) -> None:
        """A container's `command:` and `args:` lists, once its image is known (Kubernetes
        semantics: `command` replaces the entrypoint, `args` follow it)."""
        lists, self._kube_lists = self._kube_lists, {}
        found = self._container(self._compose_image or "", lists.get("command", []), lists.get("args", []), {})
        if found is not None:
            self._launch = found

    # ------------------------------------------------------------- printouts

    def _llm_call(self, text: str) -> None:
        flags: dict[str, str] = {}
        for key, raw in _PAIR_EQ.findall(text):
            value = _printout_value("vllm", key, raw)
            if value is not None:
                flags[canonical_flag("vllm", key)] = value
        if flags:
            self._launch = config_from_flags("vllm", flags, source=self.source, form="vllm-offline")

    def _printout(self, line: str) -> None:
        for engine, pattern in _PRINTOUTS:
            m = pattern.search(line)
            if m is None:
                continue
            body = m.group(m.lastindex or 1)
            if m.lastindex and m.lastindex > 1 and m.group(1):
                self._version = m.group(1)
            if engine == "tgi":
                pairs = [(k, some or quoted or raw) for k, raw, some, quoted in _PAIR_RUST.findall(body)]
            elif "non-default args" in line or "server_args={" in line:
                pairs = _PAIR_DICT.findall(top_level(body))
            else:
                pairs = _PAIR_EQ.findall(top_level(body))
            for key, raw in pairs:
                value = _printout_value(engine, key, raw)
                if value is None:
                    continue
                flag = _KEY_FLAGS[engine].get(key) or canonical_flag(engine, key)
                self._printed[flag] = value
            self._printed_engine = engine
            return

    # ----------------------------------------------------------------- result

    def result(self) -> ServerConfig | None:
        if self._call is not None:
            # a call the paste cut before it closed: the arguments it shows still count
            self._llm_call("\n".join(self._call))
            self._call = None
        if self._pending is not None:
            self._command(" ".join(x.rstrip().rstrip("\\") for x in self._pending))
            self._pending = None
        if self._pretty is not None:  # the paste ends inside the Args: what it shows still counts
            self._printout(flat_debug([*self._pretty, "}"]))
            self._pretty = None
        self._finish_compose()
        launch = self._launch
        if launch is None and not self._printed:
            return None
        engine = (launch.engine if launch else None) or self._printed_engine
        flags = dict(launch.flags) if launch else {}
        if self._printed and (launch is None or self._printed_engine == engine):
            flags.update(self._printed)
        version = (launch.engine_version if launch else None) or self._version or self._pinned.get(engine or "")
        # a model flag with no value after it names no model ("missing_value")
        model = flags.get(MODEL_FLAG.get(engine or "", MODEL_FLAG["vllm"])) or None
        if launch is not None and launch.model and "model" not in self._printed:
            model = launch.model
        return config_from_flags(
            engine, flags, source=self.source, model=model,
            form=launch.launch_form if launch else "engine-printout", version=version,
            warnings=launch.warnings if launch else (), env=launch.env if launch else None)
