"""What every command shares: options generated from Settings fields, settings resolution, and
the error policy (one clear line on stderr and a non-zero exit, never a traceback)."""

from __future__ import annotations

import os
import sys
import typing
from pathlib import Path
from typing import Any, Callable

import click

from localspec.config.settings import Settings, field_choices, setting_fields
from localspec.errors import LocalspecError
from localspec.files import read_capped


def _click_type(f: Any) -> Any:
    hint = typing.get_type_hints(Settings)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    base = args[0]
    if "choices" in f.metadata:
        return click.Choice(field_choices(f.metadata))
    if any(typing.get_origin(a) is typing.Literal for a in args):  # a number or a word: Settings parses it
        return str
    if base is Path:  # as typed: Settings makes the Path, and reads `--draft mtp` as the word
        return click.Path()
    if typing.get_origin(base) is tuple:
        return str
    return base


def settings_options(*groups: str, exclude: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> Callable:
    """Add one --flag per Settings field of the given groups (and the fields named in `also`).
    Defaults are None ('not given') so config files and pair presets can fill them; Settings.load
    applies the real defaults."""

    def deco(fn: Callable) -> Callable:
        chosen = [f for g in groups for f in setting_fields(g) if f.name not in exclude]
        for f in reversed(chosen + [f for f in setting_fields() if f.name in also]):
            flag = "--" + f.name.replace("_", "-")
            help_text = f.metadata["help"]
            if "flag" in f.metadata:  # a one-way switch such as --no-log
                fn = click.option(f.metadata["flag"], f.name, is_flag=True, default=None, help=help_text)(fn)
            elif f.metadata.get("file"):  # the setting is the text of the file named (--json-schema FILE)
                fn = click.option(
                    flag,
                    f.name,
                    type=click.Path(dir_okay=False, path_type=Path),
                    default=None,
                    callback=_read_file,
                    metavar="FILE",
                    help=help_text,
                )(fn)
            elif f.type in ("bool", bool) or str(f.type) == "bool":
                fn = click.option(
                    f"{flag}/--no-{f.name.replace('_', '-')}", f.name, default=None, help=help_text
                )(fn)
            else:
                fn = click.option(
                    flag,
                    f.name,
                    type=_click_type(f),
                    default=None,
                    multiple=bool(f.metadata.get("multiple")),
                    envvar=f.metadata.get("envvar"),
                    show_envvar=bool(f.metadata.get("envvar")),
                    help=help_text,
                )(fn)
        return click.option(
            "--config",
            type=click.Path(path_type=Path),
            default=None,
            help="A TOML file of settings (keys as in localspec/data/defaults.toml).",
        )(fn)

    return deco


MAX_SETTING_FILE = 1 << 20  # a schema or grammar is refused past 64 KB anyway (constrain/compile.py)


def _read_file(ctx: click.Context, param: click.Parameter, path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        missing = f"cannot read {param.opts[0]} {{path}}: no such file"
        return read_capped(path, param.opts[0], MAX_SETTING_FILE, missing=missing).decode("utf-8")
    except UnicodeDecodeError as e:
        raise LocalspecError(f"cannot read {param.opts[0]} {path}: {e}") from None


def image_option(fn: Callable) -> Callable:
    return click.option(
        "--image",
        "image_files",
        type=click.Path(path_type=Path),
        multiple=True,
        metavar="FILE",
        help="An image for the model to see (PNG, JPEG, WebP, GIF, BMP; repeatable); needs --mmproj or "
        "a pair with a projector.",
    )(fn)


def read_images(files: tuple[Path, ...], settings: Settings) -> list[Any]:
    """`--image` files as decoded images, each checked against the image limits before it is read
    whole (a file is untrusted input like any request's image)."""
    from localspec.images import BadImage, decode_image  # noqa: PLC0415

    if files and settings.mmproj is None:
        from localspec.chat.media import NO_PROJECTOR  # noqa: PLC0415

        raise LocalspecError(NO_PROJECTOR)
    if len(files) > settings.max_images:
        raise LocalspecError(f"{len(files)} images; at most {settings.max_images} (--max-images)")
    out = []
    for path in files:
        what = f"--image {path}"
        try:
            size = path.stat().st_size
            if size > settings.image_max_bytes:
                raise BadImage(
                    f"{what} is {size:,} bytes, over the limit of {settings.image_max_bytes:,} (--image-max-bytes)"
                )
            data = path.read_bytes()
        except OSError as e:
            raise LocalspecError(f"cannot read {what}: {e.strerror or e}") from None
        out.append(decode_image(data, settings.image_limits, what))
    return out


def resolve_settings(kwargs: dict[str, Any], defaults: dict[str, Any] | None = None) -> Settings:
    """Settings from the options added by `settings_options` (pops them from kwargs); `defaults` are
    the command's own defaults, below config files and flags."""
    names = {f.name for f in setting_fields()}
    given = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    config = kwargs.pop("config", None)
    return Settings.load(
        config=config,
        defaults=defaults,
        resolve_pair=_resolve_pair,
        warn=lambda msg: click.echo(f"warning: {msg}", err=True),
        **given,
    )


def _resolve_pair(pair: Path, yes: bool) -> Path:
    """`--pair NAME`: presets and pulls (hub), with the CLI's progress bars for a conversion."""
    from localspec.cli.progress import StageBars  # noqa: PLC0415
    from localspec.hub.resolve import resolve_pair  # noqa: PLC0415 - only when a pair is used

    with StageBars() as bars:
        return resolve_pair(pair, yes, log=lambda line: bars.write(line, err=True), progress=bars.update)


def run_cli(group: click.Group) -> None:
    try:
        rv = group.main(standalone_mode=False)  # ctx.exit(n) comes back as the return value here
        sys.exit(rv if isinstance(rv, int) else 0)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except LocalspecError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("\ninterrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except MemoryError:
        click.echo("error: out of memory (try a smaller --n-ctx or a smaller model)", err=True)
        sys.exit(1)
    except Exception as e:  # a bug of ours: still one line, with a way to get the traceback
        if os.environ.get("LOCALSPEC_DEBUG"):
            raise
        click.echo(
            f"internal error: {type(e).__name__}: {e} (set LOCALSPEC_DEBUG=1 for a traceback)", err=True
        )
        sys.exit(2)
