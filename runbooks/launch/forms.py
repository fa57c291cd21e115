"""Find the inference server's own arguments inside a container's command, args and image.

Handles exec lists (`["vllm","serve",M]`), `python -m` modules, `sh -c` / `bash -c` strings
(continuations, `&&`/`;` chains, `exec`, `export`), image entrypoints with args only, and a
whole command line packed into one `command` element.

>>> launch = locate_launch(["/bin/sh", "-c"], ["pip install x && exec vllm serve M --port 8000"],
...                        None, {})
>>> (launch.engine, launch.form, launch.argv)
('vllm', 'shell-string', ['M', '--port', '8000'])
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh", "busybox"})

VLLM_MODULES = frozenset({"vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"})
SGLANG_MODULES = frozenset({"sglang.launch_server", "sglang_router.launch_server"})

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")
_REDIRECTION = re.compile(r"(?:(?<=\s)|^)\d*(?:&>>?|>>?&?|<&?)\s*[^\s;&|]+")
_COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)|`[^`]*`")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;", "|&", "&;"})
_PREFIX_WORDS = frozenset({"exec", "nohup", "time", "do", "then", "else", "{", "!", "command"})
_K8S_REF = re.compile(r"\$(?:\$|\(([^()]*)\))")
_SHELL_REF = re.compile(r"\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])([^}]*))?\})")
_VERSION_TAG = re.compile(r"v?(\d+\.\d+(?:\.\d+)*(?:\.?(?:post|dev|rc|a|b)\d+)?)(?:[-+_].*)?")
#: nested `bash -c "... bash -c ..."` is followed this deep
_MAX_SHELL_DEPTH = 3


@dataclass
class Launch:
    """Where the server was found: engine, launch form, and the engine's own arguments."""

    engine: str | None
    form: str | None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def expand_k8s_refs(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: known names are replaced, `$$` is `$`, unknown stay literal.

    >>> expand_k8s_refs("--model=$(MODEL_ID) $(NOPE) $$(ESC)", {"MODEL_ID": "m"})
    '--model=m $(NOPE) $(ESC)'
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _K8S_REF.sub(replace, text)


def expand_shell_refs(text: str, env: dict[str, str]) -> str:
    """Shell `$VAR`, `${VAR}`, `${VAR:-default}` for known names; unknown ones stay literal."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        value = env.get(name)
        operator, default = match.group(3), match.group(4)
        if operator is not None and (value is None or (operator.startswith(":") and value == "")):
            return default or ""
        return value if value is not None else match.group(0)

    return _SHELL_REF.sub(replace, text)


def split_shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script, as word lists, in order.

    >>> split_shell_commands("set -e\\npip install x && vllm serve M \\\\\\n  --port 8000")
    [['set', '-e'], ['pip', 'install', 'x'], ['vllm', 'serve', 'M', '--port', '8000']]
    """
    commands: list[list[str]] = []
    for line in _CONTINUATION.sub(" ", script).splitlines():
        current: list[str] = []
        for token in _shell_words(line):
            if token in _SEPARATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
        if current:
            commands.append(current)
    return commands


def _shell_words(line: str) -> list[str]:
    # `$(cmd args)` must stay one word; redirections are noise for flag parsing.
    protected = _COMMAND_SUBSTITUTION.sub(lambda m: m.group(0).replace(" ", "\x1f"), line)
    protected = _REDIRECTION.sub(" ", protected)
    lexer = shlex.shlex(protected, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        # An unbalanced quote: bash would refuse it too; plain words still show the flags.
        words = protected.split()
    return [w.replace("\x1f", " ") for w in words]


def split_words(text: str) -> list[str]:
    """One command line (no chains) as words, continuations joined, quotes removed."""
    words: list[str] = []
    for command in split_shell_commands(text):
        words.extend(command)
    return words


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def strip_wrappers(tokens: list[str], env: dict[str, str]) -> list[str]:
    """Drop `exec`, `env A=b`, `nohup`, `tini --`, leading `A=b` (recorded into `env`)."""
    i = 0
    while i < len(tokens):
        word = tokens[i]
        base = _basename(word)
        assignment = _ASSIGNMENT.fullmatch(word)
        if word in _PREFIX_WORDS:
            i += 1
        elif assignment:
            env[assignment.group(1)] = assignment.group(2)
            i += 1
        elif base == "env":
            i += 1
            while i < len(tokens) and tokens[i].startswith("-"):
                i += 2 if tokens[i] in ("-u", "--unset") else 1
        elif base in ("tini", "dumb-init", "catatonit", "stdbuf"):
            i += 1
            while i < len(tokens) and tokens[i].startswith("-"):
                i += 1
                if tokens[i - 1] == "--":
                    break
        elif base == "uv" and i + 1 < len(tokens) and tokens[i + 1] == "run":
            i += 2
        else:
            break
    return tokens[i:]


def match_server(tokens: list[str]) -> tuple[str, str, list[str]] | None:
    """(engine, launch form, engine arguments) when `tokens` start a known server command."""
    if not tokens:
        return None
    head = _basename(tokens[0])
    if head == "vllm" and tokens[1:2] == ["serve"]:
        return "vllm", "vllm-serve", tokens[2:]
    if head == "sglang" and tokens[1:2] == ["serve"]:
        return "sglang", "sglang-serve", tokens[2:]
    if head in ("text-generation-launcher", "tgi-entrypoint.sh"):
        return "tgi", "tgi-launcher", tokens[1:]
    if _PYTHON.fullmatch(head):
        return _match_python_module(tokens[1:])
    return None


def _match_python_module(rest: list[str]) -> tuple[str, str, list[str]] | None:
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-m":
        i += 2 if rest[i] in ("-W", "-X") else 1
    if i + 1 >= len(rest) or rest[i] != "-m":
        return None
    module, after = rest[i + 1], rest[i + 2 :]
    if module in VLLM_MODULES:
        return "vllm", "vllm-module", after
    if module == "vllm.entrypoints.cli.main" and after[:1] == ["serve"]:
        return "vllm", "vllm-serve", after[1:]
    if module in SGLANG_MODULES:
        return "sglang", "sglang-module", after
    return None


def find_server(tokens: list[str], env: dict[str, str], depth: int = 0) -> tuple[str, str, list[str]] | None:
    """Like `match_server`, but sees through wrappers and `sh -c SCRIPT` (form "shell-string")."""
    words = strip_wrappers(list(tokens), env)
    if not words:
        return None
    if _basename(words[0]) in SHELLS and depth < _MAX_SHELL_DEPTH:
        script = _shell_script(words[1:])
        if script is None:
            return None
        return _find_in_script(script, env, depth + 1)
    return match_server(words)


def _shell_script(options: list[str]) -> str | None:
    for i, word in enumerate(options):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            return options[i + 1] if i + 1 < len(options) else None
        if not word.startswith("-"):
            return None  # `sh script.sh`: the script's text is not in the manifest
    return None


def _find_in_script(script: str, env: dict[str, str], depth: int) -> tuple[str, str, list[str]] | None:
    for command in split_shell_commands(script):
        words = [expand_shell_refs(w, env) for w in command]
        if words[0] in ("export", "declare", "local", "readonly"):
            for word in words[1:]:
                assignment = _ASSIGNMENT.fullmatch(word)
                if assignment:
                    env[assignment.group(1)] = assignment.group(2)
            continue
        found = find_server(words, env, depth)
        if found is not None:
            return found[0], "shell-string", found[2]
    return None


def image_engine(image: str | None) -> str | None:
    """The engine an image ships, from its repository name.

    >>> image_engine("ghcr.io/huggingface/text-generation-inference:2.4.1")
    'tgi'
    """
    repo = _image_repo(image).lower()
    name = repo.rsplit("/", 1)[-1]
    if "text-generation-inference" in repo or name.startswith("tgi"):
        return "tgi"
    if "sglang" in name:
        return "sglang"
    if "vllm" in name:
        return "vllm"
    return None


def is_engine_release(image: str | None, engine: str | None) -> bool:
    """True when the image is the engine's own release (so its tag is the engine's version).

    >>> is_engine_release("vllm/vllm-openai:v0.6.4", "vllm"), is_engine_release("acme/vllm-app:1.2", "vllm")
    (True, False)
    """
    name = _image_repo(image).lower().rsplit("/", 1)[-1]
    if engine == "vllm":
        return name == "vllm" or name.startswith(("vllm-openai", "vllm-tpu", "vllm-cpu"))
    if engine == "tgi":
        return name == "text-generation-inference" or name.startswith("tgi-")
    return engine == "sglang" and name == "sglang"


def image_version(image: str | None) -> str | None:
    """The version in an image tag, when the tag reads as one.

    >>> image_version("vllm/vllm-openai:v0.6.4"), image_version("lmsysorg/sglang:latest")
    ('0.6.4', None)
    """
    if not image:
        return None
    ref = image.split("@", 1)[0]
    name = ref.rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _VERSION_TAG.fullmatch(name.split(":", 1)[1])
    return match.group(1) if match else None


def _image_repo(image: str | None) -> str:
    if not image:
        return ""
    ref = image.split("@", 1)[0]
    head, _, name = ref.rpartition("/")
    name = name.split(":", 1)[0]
    return f"{head}/{name}" if head else name


def locate_launch(command: list[str], args: list[str], image: str | None, env: dict[str, str]) -> Launch | None:
    """The server launch of one container (lists already `$(VAR)`-expanded), None when not a server."""
    from_image = image_engine(image)
    launch = Launch(engine=None, form=None, env=env)
    if command:
        tokens = list(command) + list(args)
        if any(ch.isspace() for ch in command[0].strip()):
            launch.warnings.append("command_as_single_string")
            tokens = split_words(command[0]) + list(command[1:]) + list(args)
        found = find_server(tokens, env)
        if found is not None and launch.warnings:
            found = (found[0], "single-string-command", found[2])
    elif args:
        found = _args_on_entrypoint(args, from_image, launch)
    else:
        found = {"vllm": ("vllm", "vllm-entrypoint-args", []), "tgi": ("tgi", "tgi-env", [])}.get(
            from_image or ""
        )
    if found is None:
        if from_image is None:
            return None
        launch.engine = from_image
        launch.warnings.append("launch_form_unknown")
        return launch
    launch.engine, launch.form, launch.argv = found
    return launch


def _args_on_entrypoint(args: list[str], from_image: str | None, launch: Launch) -> tuple[str, str, list[str]] | None:
    if from_image == "vllm":
        if args[0] == "serve" or args[:2] == ["vllm", "serve"]:
            # The image's entrypoint is already `vllm serve`; vLLM rejects a second `serve`.
            launch.warnings.append("serve_repeated")
            return "vllm", "vllm-entrypoint-args", args[2:] if args[0] == "vllm" else args[1:]
        if not args[0].startswith("-"):
            found = find_server(args, launch.env)
            if found is not None:
                return found
        return "vllm", "vllm-entrypoint-args", list(args)
    if from_image == "tgi" and args[0].startswith("-"):
        return "tgi", "tgi-launcher", list(args)
    # No known entrypoint: the args are the whole command line.
    return find_server(args, launch.env)
