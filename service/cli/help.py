"""Help texts as the terminal should wrap them: our docstrings are wrapped at 100 columns in
the source, and Typer keeps those line breaks in a command list, so ``vmledger --help`` showed
sentences broken in the middle at every width. Each paragraph becomes one line here."""

from __future__ import annotations

import inspect
import re

import click


def unwrapped(command: click.Command) -> click.Command:
    """``command`` with the help of it, its parameters and its subcommands (recursively) made
    one line per paragraph (paragraphs are separated by a blank line)."""
    command.help = _unwrap(command.help)
    command.short_help = _unwrap(command.short_help)
    for param in command.params:
        if isinstance(param, click.Option | click.Argument) and getattr(param, "help", None):
            param.help = _unwrap(param.help)  # type: ignore[union-attr]
    for sub in getattr(command, "commands", {}).values():
        unwrapped(sub)
    return command


def _unwrap(text: str | None) -> str | None:
    if not text:
        return text
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text))
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)
