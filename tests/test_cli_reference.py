"""docs/reference/cli.md keeps up with the parser: every command has a section and every option of
it appears there (a new option without its line fails here)."""
import argparse
import re
from pathlib import Path

from sim.cli import build_parser

DOC = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md").read_text()


def _commands(p, prefix=""):
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and prefix:
        yield prefix, p
    for a in subs:
        for name, sp in a.choices.items():
            yield from _commands(sp, f"{prefix} {name}".strip())


def _section(name: str) -> str | None:
    m = re.search(r"^### " + re.escape(name) + r"\n(.*?)(?=^### |^## |\Z)", DOC, re.S | re.M)
    return m.group(1) if m else None


def test_every_command_and_option_is_in_the_cli_reference():
    missing = []
    commands = list(_commands(build_parser()))
    assert len(commands) > 15
    for name, p in commands:
        sec = _section(name)
        if sec is None:
            missing.append(f"no section '### {name}'")
            continue
        missing += [f"{name}: {o}" for a in p._actions for o in a.option_strings
                    if o.startswith("--") and o != "--help" and f"`{o}" not in sec]
    assert not missing, missing

