"""The `localspec` command: a click group whose commands are imported only when run,
so `localspec --help` answers without loading numpy or llama.cpp."""

from __future__ import annotations

import importlib
import importlib.util

import click

# command name -> "module:function"; each command lives in its own module.
COMMANDS = {
    "run": "localspec.cli.run:run",
    "serve": "localspec.cli.serve:serve",
    "chat": "localspec.cli.chat:chat",
    "bench": "localspec.cli.bench:bench",
    "convert": "localspec.cli.convert:convert",
    "quantize": "localspec.cli.convert:quantize",
    "pair": "localspec.cli.pair:pair",
    "check-pair": "localspec.cli.pair:check_pair",
    "doctor": "localspec.cli.doctor:doctor",
    "models": "localspec.cli.models:models",
    "pull": "localspec.cli.pull:pull",
    "list": "localspec.cli.listing:list_pairs",
    "stats": "localspec.cli.stats:stats",
}

HELP = {
    "run": "Generate text for one prompt (speculative when a draft is given).",
    "serve": "Serve the model over an OpenAI-compatible HTTP API.",
    "chat": "Chat in the terminal (the default pair when no model is given).",
    "bench": "Benchmark plain vs speculative decoding over draft lengths.",
    "convert": "Convert a Hugging Face checkpoint to GGUF.",
    "quantize": "Quantize a GGUF file (q4_k_m, q8_0, ...).",
    "pair": "Build a matched INT4-target / INT8-draft pair.",
    "check-pair": "Check that two GGUF models can draft for each other.",
    "doctor": "Devices, memory plan and verified placement of a pair.",
    "models": "Fetch the embedded models and build the default pair.",
    "pull": "Download a pair preset or Hub repos, check them, write pair.toml.",
    "list": "Pair presets and local pairs, with sizes and last acceptance.",
    "stats": "Summarize the acceptance log (--plot for a chart).",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(name):
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, HELP[name]) for name in self.list_commands(ctx)]
        if not rows:
            return
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _available(name: str) -> bool:
    module = COMMANDS[name].split(":")[0]
    return importlib.util.find_spec(module) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="localspec")
def cli() -> None:
    """localspec: a big local model, answering several times faster, token for token the same.

    A small draft model guesses tokens; the big target model checks them in one batched pass.
    """


def main() -> None:
    from localspec.cli.common import run_cli  # noqa: PLC0415

    run_cli(cli)
