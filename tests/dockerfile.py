"""A small Dockerfile reader for tests that check the image without a Docker
engine: instructions per stage, ENV, exec-form commands and COPY mappings."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    base: str
    name: str = ""
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        if not found:
            raise KeyError(f"no {keyword} in stage {self.name or self.base}")
        return found[-1]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                out[key] = value
        return out

    def exec_form(self, keyword: str) -> list[str]:
        """An exec-form (JSON array) ENTRYPOINT or CMD."""
        value: list[str] = json.loads(self.last(keyword))
        return value

    def healthcheck(self) -> list[str]:
        args = self.last("HEALTHCHECK")
        _, _, command = args.partition("CMD ")
        value: list[str] = json.loads(command)
        return value

    def copies(self) -> list[tuple[list[str], str, str]]:
        """(sources, destination, --from stage or "") of each COPY."""
        out = []
        for args in self.all("COPY"):
            words = shlex.split(args)
            origin = ""
            while words[0].startswith("--"):
                flag = words.pop(0)
                if flag.startswith("--from="):
                    origin = flag.split("=", 1)[1]
            out.append((words[:-1], words[-1], origin))
        return out


@dataclass
class Dockerfile:
    args: dict[str, str]  # global ARGs (before the first FROM) with defaults
    stages: list[Stage]


def parse(path: Path) -> Dockerfile:
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = " ".join(rest.split()) if keyword not in ("RUN",) else rest.strip()
        if keyword == "FROM":
            words = rest.split()
            base = words[0]
            for name, value in args.items():
                base = base.replace("${" + name + "}", value)
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else ""
            stages.append(Stage(base, name))
        elif not stages and keyword == "ARG":
            name, _, value = rest.partition("=")
            args[name] = value
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return Dockerfile(args, stages)
