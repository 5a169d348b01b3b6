"""The `loadgen` command group and its error handling: every failure is one line."""

from __future__ import annotations

import sys

import click

from loadgen import __version__
from loadgen.errors import LoadgenError

EXIT_USAGE = 2
EXIT_NOTHING_SUCCEEDED = 1
EXIT_INTERRUPTED = 130


class Failure(click.ClickException):
    """A one-line error; exit status 2 unless given."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = code  # type: ignore[misc]  # click reads it per instance


class _Group(click.Group):
    def main(self, args=None, prog_name=None, **kwargs):
        try:
            return super().main(args=args, prog_name=prog_name or "loadgen", standalone_mode=False, **kwargs)
        except click.UsageError as e:
            click.echo(f"loadgen: error: {e.format_message()}", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as e:
            click.echo(f"loadgen: error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except LoadgenError as e:
            click.echo(f"loadgen: error: {e}", err=True)
            sys.exit(e.code)
        except click.exceptions.Abort:
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Load tester for LLM serving with speculative decoding."""
