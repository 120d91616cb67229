"""Each command's parameters synthesised from the options table: the flags, env vars, value names
and help of the rows of config.options that name the command, as typer reads a signature."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from sweeperd.config.options import OPTIONS

Command = TypeVar("Command", bound=Callable[..., None])
KEYWORD = inspect.Parameter.KEYWORD_ONLY
# Options given once per value, or as one list.
LISTED = ("queues", "redis_url", "sentinels")


def typer_option(key: str) -> Any:
    """Return the typer option of OPTIONS[key]: its flag, env var, value name, help and default."""
    o = OPTIONS[key]
    decls = [o.flag_name, *([o.short] if o.short else [])]
    if o.is_switch:
        return typer.Option(*decls, envvar=o.env_name, help=o.help, show_default=False)
    return typer.Option(
        *decls,
        envvar=o.env_name,
        metavar=o.metavar,
        help=f"{o.help}  [default: {o.default_text}]" if o.default_text else o.help,
        show_default=False,
    )


def with_options(command: str) -> Callable[[Command], Command]:
    """Give a command the options OPTIONS lists for it, as parameters typer reads."""

    def give(function: Command) -> Command:
        params = [inspect.Parameter("ctx", KEYWORD, annotation=typer.Context)]
        for o in OPTIONS.values():
            if command in o.commands:
                kind: Any = bool if o.is_switch else list[str] if o.key in LISTED else str
                params.append(
                    inspect.Parameter(
                        o.key,
                        KEYWORD,
                        annotation=Annotated[
                            kind if o.is_switch else kind | None, typer_option(o.key)
                        ],
                        default=False if o.is_switch else None,
                    )
                )
        function.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return function

    return give
