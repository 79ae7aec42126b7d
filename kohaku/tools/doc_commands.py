"""The commands and code snippets of the documentation, collected for tests/test_docs_commands.py.

Sources: ``README.md`` and every ``docs/**/*.md``. A fenced block in ``bash``/``sh``/``shell``/
``console`` holds commands: one a line, ``\\`` continues a line, ``#`` starts a comment (quotes
respected). A ``python`` block is a snippet. The line right before a fence may mark the block
with an HTML comment (invisible on the site):

- ``<!-- docs-test: run -->``: the block is cheap and runs end to end in the test, in order
  with the other run blocks of its page: every ``scripts/run.py`` line of it uses the fake LLM
  (``llm=fake``) or only prints the config (``--cfg``), and it reads only ``data/sample``;
- ``<!-- docs-test: skip -->``: an illustration, not run and not composed (say why beside it).

Every other ``scripts/run.py`` line is composed (``--cfg job``'s check: the overrides exist and
have their types), never run; every other ``python`` snippet is executed.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_MARK = re.compile(r"<!--\s*docs-test:\s*(?P<mark>run|skip)\b")


@dataclass
class Block:
    path: str        # relative to the repository root
    line: int        # of the opening fence, 1-based
    lang: str
    text: str        # dedented to the fence's indent
    mark: str | None  # run | skip | None


@dataclass
class Command:
    path: str
    line: int        # of the command's first line
    text: str        # as written, continuations joined, comment dropped
    argv: list[str]  # shell words
    mark: str | None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def run_args(self) -> list[str] | None:
        """The arguments after ``scripts/run.py``, or None when the command runs something else."""
        for i, word in enumerate(self.argv):
            if word.endswith("scripts/run.py"):
                rest = self.argv[i + 1:]
                ends = [j for j, w in enumerate(rest) if w in ("&&", "||", ";", "|")]
                return rest[: ends[0]] if ends else rest
        return None


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m["indent"]), m["fence"], m["lang"].lower()
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.search(prev)
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        out.append(Block(path.relative_to(root).as_posix(), i + 1, lang, "\n".join(body),
                         mark["mark"] if mark else None))
        i = j + 1
    return out


def _strip_comment(text: str) -> str:
    """``text`` up to its ``#`` comment (a ``#`` at a word's start, outside quotes)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def commands(block: Block) -> list[Command]:
    """The shell commands of a block (none unless its language is a shell's)."""
    if block.lang not in SHELL:
        return []
    out: list[Command] = []
    pending, start = "", 0
    for n, raw in enumerate(block.text.splitlines()):
        line = raw.rstrip()
        if block.lang == "console":
            if not line.startswith("$ ") and not pending:
                continue
            line = line[2:] if line.startswith("$ ") else line
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        pending = ""
        try:
            argv = shlex.split(text, comments=True)
        except ValueError:
            argv = text.split()
        if argv:
            shown = " ".join(_strip_comment(text).split())
            out.append(Command(block.path, block.line + 1 + start, shown, argv, block.mark))
    return out


def collect(root: Path = ROOT) -> tuple[list[Command], list[Block]]:
    """Every command (shell blocks) and every Python snippet of the docs, in file order."""
    cmds: list[Command] = []
    snippets: list[Block] = []
    for path in doc_files(root):
        for block in blocks(path, root):
            cmds += commands(block)
            if block.lang == "python":
                snippets.append(block)
    return cmds, snippets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="List the documentation's commands and snippets "
                                     "as tests/test_docs_commands.py collects them, with counts.")
    parser.add_argument("--list", action="store_true", help="print every command with its place")
    args = parser.parse_args(argv)
    cmds, snippets = collect()
    run_py = [c for c in cmds if c.run_args is not None and c.mark != "skip"]
    if args.list:
        for c in cmds:
            print(f"{c.where}\t{c.mark or '-'}\t{c.text}")
    print(f"commands: {len(cmds)}  scripts/run.py lines composed: {len(run_py)}  "
          f"run end to end: {sum(c.mark == 'run' for c in cmds)}  "
          f"python snippets: {sum(b.mark != 'skip' for b in snippets)} of {len(snippets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
