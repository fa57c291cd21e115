"""The Dockerfile builds the image the manifests run: multi-stage on one pinned base, the
packages installed in a build stage and copied, no build tools in the final stage, a non-root
user that is the one the pods run as."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field

from tests.support.deploy import ROOT, bot_deployment, one, render

DOCKERFILE = ROOT / "Dockerfile"
#: a base pinned to an exact Python release and Debian suite, optionally by digest as well
PINNED = re.compile(r"^python:(\d+)\.(\d+)\.(\d+)-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?$")
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "clang", "cmake", "-dev", "libc6-dev", "git")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]


def parse(text: str) -> list[Stage]:
    """The stages of a Dockerfile: FROM lines, and each instruction (continuations joined)."""
    stages: list[Stage] = []
    logical = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    for line in logical.splitlines():
        if not line.strip():
            continue
        op, _, arg = line.strip().partition(" ")
        op, arg = op.upper(), " ".join(arg.split())
        if op == "FROM":
            m = re.fullmatch(r"(\S+)(?: AS (\S+))?", arg, flags=re.IGNORECASE)
            assert m, arg
            stages.append(Stage(m.group(1), m.group(2)))
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append((op, arg))
    return stages


STAGES = parse(DOCKERFILE.read_text())


def test_two_stages_on_the_same_pinned_python_the_package_asks_for():
    build, final = STAGES
    assert build.name == "build" and final.name is None
    assert build.base == final.base  # the copied virtual environment points at this interpreter
    m = PINNED.match(final.base)
    assert m, final.base
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11" and (int(m.group(1)), int(m.group(2))) >= (3, 11)


def test_the_build_stage_installs_every_package_and_the_final_stage_copies_it():
    build, final = STAGES
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {arg.split()[0] for arg in build.all("COPY")}
    assert {p.rstrip("*") for p in include} <= copied and "pyproject.toml" in copied
    (install,) = [r for r in build.all("RUN") if "pip install" in r]
    # gpumem's own wheel is built here (its C scanner compiled, and checked to import); every
    # dependency comes as a wheel: nothing else is compiled
    assert "pip wheel --no-deps --wheel-dir /wheels ." in install
    # by its path: a name would let pip take PyPI's unrelated `gpumem` instead
    assert '--only-binary=:all: "$(echo /wheels/gpumem-*.whl)[charts]"' in install
    assert install.endswith("python -c 'import collectors.access_logs._access_native'")
    (apt,) = [r for r in build.all("RUN") if "apt-get" in r]
    assert "gcc libc6-dev" in apt and apt.rstrip().endswith("rm -rf /var/lib/apt/lists/*")
    assert final.all("COPY") == ["--from=build /opt/gpumem /opt/gpumem"]
    assert not any("pip install" in r for r in final.all("RUN"))
    assert final.all("ENTRYPOINT") == ['["gpumem"]']


def test_the_final_stage_has_no_build_tools_and_cleans_its_apt_lists():
    _build, final = STAGES
    (apt,) = final.all("RUN")
    packages = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", apt).group(1).split()
    assert packages == ["fonts-wqy-microhei"]
    assert not [p for p in packages for tool in BUILD_TOOLS if tool in p]
    assert apt.rstrip().endswith("rm -rf /var/lib/apt/lists/*")


def test_the_final_user_is_not_root_and_is_the_one_the_pods_run_as():
    build, final = STAGES
    assert build.all("USER") == []
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid not in ("0", "root") and gid not in ("0", "root")
    assert [op for op, _ in final.instructions][-4:] == ["USER", "EXPOSE", "ENTRYPOINT", "CMD"]  # nothing runs after it as root
    objects = render("read-only", ("nvml-agent",))
    for workload in (bot_deployment(objects), one(objects, "DaemonSet", "gpumem-agent")):
        sc = workload["spec"]["template"]["spec"]["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"]) == (int(uid), int(gid))
    exposed = {int(p) for arg in final.all("EXPOSE") for p in arg.split()}
    bot_port = bot_deployment(objects)["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert exposed == {bot_port, 9500}


def test_the_parser_sees_a_root_user_and_a_compiler():
    stages = parse("FROM python:3.11.7-slim-bookworm AS b\nRUN apt-get install -y \\\n  gcc\nUSER root\n")
    assert stages[0].all("RUN") == ["apt-get install -y gcc"] and stages[0].all("USER") == ["root"]
    assert not PINNED.match("python:3.11-slim") and not PINNED.match("python:latest")
