"""`localspec run`: one prompt, streamed to the terminal (or one JSON object with --json)."""

from __future__ import annotations

import json
import sys
import time

import click

from localspec.cli.common import image_option, read_images, resolve_settings, settings_options


@click.command()
@click.argument("prompt")
@settings_options("model", "images", "sampling", "constraint", "spec", "log")
@click.option("--chat", "chat_mode", is_flag=True, help="Apply the model's chat template to the prompt.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: text, tokens, stats.")
@click.option("--stats/--no-stats", "show_stats", default=True, help="Print a stats line on stderr.")
@image_option
def run(prompt: str, chat_mode: bool, as_json: bool, show_stats: bool, image_files, **kwargs) -> None:  # noqa: ANN001
    """Generate a completion for PROMPT ('-' reads it from stdin)."""
    from localspec.engine import Engine  # noqa: PLC0415
    from localspec.telemetry.acclog import AccLog  # noqa: PLC0415 - keep --help instant
    from localspec.text_input import decode_text, require_text  # noqa: PLC0415

    # bad text is refused here, before any model loads (argv arrives surrogate-escaped)
    prompt = decode_text(sys.stdin.buffer.read()) if prompt == "-" else require_text(prompt)
    settings = resolve_settings(kwargs)
    images = read_images(image_files, settings)  # before any model loads
    acclog = AccLog(settings, source="run", warn=lambda msg: click.echo(msg, err=True))
    with Engine(settings, log=lambda msg: click.echo(msg, err=True)) as eng:
        started = time.time()
        if as_json:
            resp = eng.generate(prompt, chat=chat_mode, images=images)
            acclog.write(resp, settings, started=started)
            click.echo(json.dumps(resp.to_dict(), ensure_ascii=False))
            return
        resp = None
        for chunk in eng.stream(prompt, chat=chat_mode, images=images):
            if chunk.text:
                click.echo(chunk.text, nl=False)
                sys.stdout.flush()
            resp = chunk.response or resp
        click.echo()
        acclog.write(resp, settings, started=started)
        if show_stats and resp is not None:
            click.echo(format_stats(resp.stats), err=True)


def format_stats(st) -> str:  # noqa: ANN001
    line = (
        f"[{st.n_generated} tokens, {st.decode_tok_s:.1f} tok/s decode, {st.e2e_tok_s:.1f} tok/s end-to-end, "
        f"prefill {st.prefill_ms:.0f} ms"
    )
    if st.speculative:
        line += (
            f", acceptance {st.acceptance_rate:.0%} ({st.n_accepted}/{st.n_drafted}), "
            f"{st.tokens_per_round:.2f} tokens/pass"
        )
        if "lookup" in st.sources:
            split = ", ".join(f"{n} {s['accepted']}/{s['drafted']}" for n, s in sorted(st.sources.items()))
            line += f" ({split})"
        if st.started_plain:
            line += ", plain decoding: measured costs say speculation cannot pay on this machine"
        if st.fell_back:
            line += f", fell back to plain decoding {st.fallbacks}x"
    return line + "]"
