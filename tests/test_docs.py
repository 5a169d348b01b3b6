"""The README is documentation, and the commands in it and in docs/ are the CLI's: the README
holds its two commands first, fits in 200 lines, carries no dated timing or state of our
machines, names the bench script of every figure it keeps; every `loadgen ...` command shown in
a code block or a code span of README.md and docs/*.md is accepted by the CLI's own parser
(click: its options and their types; nothing is run)."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from loadgen.cli import main
from tests.conftest import REPO

pytestmark = pytest.mark.unit

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
DATED = re.compile(rf"\b(?:20\d\d|{MONTHS})\b|so far|\bnot (?:yet )?measured since\b|\d+ min \d+ s")
FIGURE = re.compile(r"\d(?:\.\d+)?\s*(?:%|x\b|ms\b|s\b|tok/s|chunks/s|million|GiB|MiB)")


def _blocks(text: str) -> tuple[list[str], str]:
    """The code blocks' lines, and the text outside them."""
    code: list[str] = []
    prose: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        (code if inside else prose).append(line)
    return code, "\n".join(prose)


def commands(text: str) -> tuple[list[str], list[str]]:
    """A Markdown text's `loadgen ...` commands: the code-block lines a user copies (continued
    by a trailing backslash, comments and standalone `...` dropped), and the mentions (code
    spans, and code-block synopses with [optional] or a|b parts)."""
    code, prose = _blocks(text)
    lines, current = [], None
    for line in code:
        line = re.sub(r"\s+#.*$", "", line)
        if current is not None:
            current += " " + line.strip().rstrip("\\")
        elif line.startswith("loadgen "):
            current = line.strip().rstrip("\\")
        if current is not None and not line.rstrip().endswith("\\"):
            lines.append(" ".join(t for t in current.split() if t != "..."))
            current = None
    synopses = [c for c in lines if re.search(r"\[--|\w\|\w|\[[A-Z]", c.replace("'", " ").split("'")[0])]
    spans = re.findall(r"`(loadgen [\w-]+(?: [^`]*)?)`", prose.replace("\n", " "))  # not output (`loadgen report: ...`)
    return [c for c in lines if c not in synopses], synopses + spans


def _command(args: list[str]):
    """The command `args` names (UsageError for none), its context's parent and its own args."""
    ctx = click.Context(main, info_name="loadgen")
    if not args or args[0].startswith("-"):
        main.make_context("loadgen", list(args))  # the group's own options (--version, --help)
        raise click.UsageError(f"no command in {args}")
    cmd = main.get_command(ctx, args[0])
    if cmd is None:
        raise click.UsageError(f"No such command {args[0]!r}")
    return ctx, args[0], cmd, args[1:]


def parse(command: str) -> None:
    """A command a user copies, through the CLI's parser (click.UsageError / BadParameter when
    it refuses); a path that does not exist here is not the documentation's fault."""
    ctx, name, cmd, rest = _command(shlex.split(command)[1:])
    try:
        cmd.make_context(name, rest, parent=ctx)
    except click.BadParameter as e:
        if "does not exist" not in str(e):
            raise


def mentioned(command: str) -> None:
    """A command mentioned in prose or a synopsis: its command exists and each --option it
    names is one of that command's (click.UsageError when not)."""
    words = command.replace("[", " ").replace("]", " ").split()
    if len(words) < 2 or words[1].startswith("-"):
        return parse(command)
    _, name, cmd, _ = _command(words[1:2])
    if isinstance(cmd, click.Group):  # `loadgen workloads list/show --tokenizer`: any of its commands'
        cmd = click.Command(name, params=[p for sub in cmd.commands.values() for p in sub.params])
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    for word in words[2:]:
        for option in re.findall(r"--[\w-]+", word.split("=")[0]):
            if option not in known:
                raise click.UsageError(f"No such option {option!r} for loadgen {name}")


def test_the_readme_is_documentation():
    text = (REPO / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; at most 200 (move the rest to docs/)"
    assert lines[:4] == [
        "```bash",
        "python3 -m pip install . && loadgen sweep",
        "python3 -m pip install -e '.[test]' && python3 -m pytest",
        "```",
    ]
    code, prose = _blocks(text)
    assert not DATED.search(prose), f"README.md dates something: {DATED.search(prose).group(0)!r}"
    for para in prose.split("\n\n"):
        if FIGURE.search(para):
            assert "bench" in para, f"a figure without its bench script: {para[:200]!r}"


def test_every_documented_command_parses():
    found = {(doc.name, c, kind) for doc in DOCS for kind, cs in zip("cm", commands(doc.read_text())) for c in cs}
    assert len([f for f in found if f[2] == "c"]) > 40  # the docs' commands are read at all
    broken = []
    for doc, command, kind in sorted(found):
        try:
            parse(command) if kind == "c" else mentioned(command)
        except click.exceptions.Exit:  # --help, --version: parsed
            continue
        except (click.UsageError, click.BadParameter) as e:
            broken.append(f"{doc}: {command[:120]}: {e.format_message()}")
    assert not broken, "\n".join(broken)


def test_the_check_would_see_a_wrong_command():
    with pytest.raises(click.UsageError, match="No such option"):
        parse("loadgen sweep --concurency 8")
    with pytest.raises(click.UsageError, match="No such command"):
        parse("loadgen sweeep")
    text = "```bash\nloadgen run --base-url X \\\n    --rate 2   # two a second\n```\nand `loadgen report --htm`"
    assert commands(text) == (["loadgen run --base-url X --rate 2"], ["loadgen report --htm"])
    with pytest.raises(click.UsageError, match="No such option '--htm'"):
        mentioned("loadgen report --htm")
