"""`localspec convert` (Hugging Face -> GGUF) and `localspec quantize` (GGUF -> smaller GGUF)."""

from __future__ import annotations

from pathlib import Path

import click

from localspec.cli.progress import StageBars

# literal lists keep `--help` free of numpy/llama.cpp imports; backend.QUANT_TYPES is the authority
CONVERT_TYPES = ("f16", "bf16", "f32", "q8_0", "q4_k_m", "q5_k_m", "q6_k", "q4_0")
QUANT_TYPES = (
    "q4_k_m",
    "q4_k_s",
    "q5_k_m",
    "q5_k_s",
    "q6_k",
    "q8_0",
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "q3_k_m",
    "q2_k",
    "f16",
    "bf16",
    "f32",
)


@click.command()
@click.argument("src")
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The GGUF file to write.",
)
@click.option(
    "--type",
    "out_type",
    type=click.Choice(CONVERT_TYPES, case_sensitive=False),
    default="f16",
    show_default=True,
    help="Output type; quantized types convert to f16/bf16 first.",
)
def convert(src: str, out: Path, out_type: str) -> None:
    """Convert SRC (a local Hugging Face folder or a repo id) to GGUF.

    Supported: LlamaForCausalLM (Llama 2/3.x, SmolLM2), MistralForCausalLM, Qwen2ForCausalLM,
    Qwen3ForCausalLM; safetensors weights (single or sharded; f32/f16/bf16).
    """
    from localspec.convert.hf import convert_hf  # noqa: PLC0415 - lazy: numpy/gguf only when run

    with StageBars() as bars:
        convert_hf(src, out, out_type=out_type, log=bars.write, progress=bars.update)
    click.echo(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB)")


@click.command()
@click.argument("src", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("dst", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--type",
    "qtype",
    type=click.Choice(QUANT_TYPES, case_sensitive=False),
    default="q4_k_m",
    show_default=True,
    help="Quantization type.",
)
@click.option(
    "--threads", type=click.IntRange(1, 512), default=None, help="Threads (default: physical cores)."
)
def quantize(src: Path, dst: Path, qtype: str, threads: int | None) -> None:
    """Quantize the GGUF SRC into DST with llama.cpp (requantizing is allowed)."""
    from localspec.convert.quant import quantize_file  # noqa: PLC0415

    with StageBars() as bars:
        quantize_file(
            src,
            dst,
            qtype.lower(),
            nthread=threads,
            progress=lambda i, n, _name: bars.update(f"quantize {qtype}", i, n),
        )
    click.echo(f"wrote {dst} ({dst.stat().st_size / 1e9:.2f} GB)")
