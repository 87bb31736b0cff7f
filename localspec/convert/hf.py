"""Hugging Face checkpoint (safetensors + config.json + tokenizer.json) -> GGUF, without torch.

Tensors stream from the safetensors files to the GGUF in row blocks (see gguf_stream), so peak
memory is about one block plus the largest tensor that needs reshaping (attention q/k), not the model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import MODEL_ARCH, GGMLQuantizationType, GGUFValueType, Keys, LlamaFileType, get_tensor_name_map

from localspec.convert.gguf_stream import KV, PlannedTensor, write_gguf
from localspec.convert.hf_vocab import tokenizer_kvs
from localspec.convert.quant import quantize_file
from localspec.convert.safetensors_io import Checkpoint, f32_to_bf16
from localspec.errors import LocalspecError
from localspec.files import atomic_output, path_kind, scratch_output

Progress = Callable[[str, int, int], None]  # (stage, done, total)
FLOAT_TYPES = {
    "f32": LlamaFileType.ALL_F32,
    "f16": LlamaFileType.MOSTLY_F16,
    "bf16": LlamaFileType.MOSTLY_BF16,
}
OUT_TYPES = ("f16", "bf16", "f32", "q8_0", "q4_k_m", "q5_k_m", "q6_k", "q4_0")
_U32, _F32, _STR = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING


@dataclass(frozen=True)
class Arch:
    gguf_arch: MODEL_ARCH
    permute_qk: bool  # llama.cpp's LLAMA rope pairs dims (2i, 2i+1); HF pairs (i, i + d/2)


ARCHS = {
    "LlamaForCausalLM": Arch(MODEL_ARCH.LLAMA, permute_qk=True),  # Llama 2/3.x, SmolLM2
    "MistralForCausalLM": Arch(MODEL_ARCH.LLAMA, permute_qk=True),
    "Qwen2ForCausalLM": Arch(MODEL_ARCH.QWEN2, permute_qk=False),  # NEOX rope: no permute
    "Qwen3ForCausalLM": Arch(MODEL_ARCH.QWEN3, permute_qk=False),
}
_SKIP = re.compile(r"(rotary_emb\.inv_freq|\.masked_bias|\.attn\.bias)$")


# -- sources -------------------------------------------------------------------------------------
def resolve_source(src: str | Path) -> Path:
    """A local Hugging Face folder, or a repo id fetched with huggingface_hub into its cache."""
    p = Path(src).expanduser()
    if p.is_dir():
        return p
    what = path_kind(p)
    if what is not None:
        raise LocalspecError(f"{src} is {what}; give the Hugging Face model folder (with config.json)")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", str(src)):
        raise LocalspecError(f"{src}: no such folder, and not a Hugging Face repo id (owner/name)")
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - only for repo ids

    try:
        got = snapshot_download(
            repo_id=str(src), allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.txt"]
        )
    except Exception as e:  # offline, unknown repo, gated model, ...: all one actionable message
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise LocalspecError(
            f"could not download {src} from the Hugging Face Hub ({type(e).__name__}: {why}). "
            "If you are offline, download the model elsewhere and pass its local folder."
        ) from None
    return Path(got)


def read_config(folder: Path) -> tuple[dict[str, Any], Arch]:
    path = folder / "config.json"
    if not path.exists():
        raise LocalspecError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LocalspecError(f"{path} is not valid JSON: {e}") from None
    names = cfg.get("architectures") or []
    arch = next((ARCHS[n] for n in names if n in ARCHS), None)
    if arch is None:
        raise LocalspecError(
            f"unsupported architecture {', '.join(names) or '(none given)'} in {path}; "
            f"supported: {', '.join(ARCHS)}"
        )
    return cfg, arch


# -- hyper-parameters ----------------------------------------------------------------------------
def _head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def hparam_kvs(cfg: dict[str, Any], arch: str, name: str, file_type: int) -> list[KV]:
    try:
        n_head = int(cfg["num_attention_heads"])
        kvs = [
            KV(Keys.General.NAME, name, _STR),
            KV(Keys.General.FILE_TYPE, int(file_type), _U32),
            KV(
                Keys.LLM.CONTEXT_LENGTH.format(arch=arch), int(cfg.get("max_position_embeddings", 4096)), _U32
            ),
            KV(Keys.LLM.EMBEDDING_LENGTH.format(arch=arch), int(cfg["hidden_size"]), _U32),
            KV(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=arch), int(cfg["intermediate_size"]), _U32),
            KV(Keys.LLM.BLOCK_COUNT.format(arch=arch), int(cfg["num_hidden_layers"]), _U32),
            KV(Keys.Attention.HEAD_COUNT.format(arch=arch), n_head, _U32),
            KV(
                Keys.Attention.HEAD_COUNT_KV.format(arch=arch),
                int(cfg.get("num_key_value_heads") or n_head),
                _U32,
            ),
            KV(
                Keys.Attention.LAYERNORM_RMS_EPS.format(arch=arch), float(cfg.get("rms_norm_eps", 1e-5)), _F32
            ),
            KV(Keys.Rope.FREQ_BASE.format(arch=arch), float(cfg.get("rope_theta", 10000.0)), _F32),
            KV(Keys.Rope.DIMENSION_COUNT.format(arch=arch), _head_dim(cfg), _U32),
            KV(Keys.LLM.VOCAB_SIZE.format(arch=arch), int(cfg["vocab_size"]), _U32),
        ]
    except KeyError as e:
        raise LocalspecError(f"config.json lacks {e.args[0]!r}") from None
    if _head_dim(cfg) != cfg["hidden_size"] // n_head:  # e.g. Qwen3, Mistral Nemo
        kvs.append(KV(Keys.Attention.KEY_LENGTH.format(arch=arch), _head_dim(cfg), _U32))
        kvs.append(KV(Keys.Attention.VALUE_LENGTH.format(arch=arch), _head_dim(cfg), _U32))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type") or rs.get("type")
    if kind in ("linear", "yarn"):
        kvs.append(KV(Keys.Rope.SCALING_TYPE.format(arch=arch), kind, _STR))
        kvs.append(KV(Keys.Rope.SCALING_FACTOR.format(arch=arch), float(rs["factor"]), _F32))
        if "original_max_position_embeddings" in rs:
            kvs.append(
                KV(
                    Keys.Rope.SCALING_ORIG_CTX_LEN.format(arch=arch),
                    int(rs["original_max_position_embeddings"]),
                    _U32,
                )
            )
    elif kind not in (None, "default", "llama3"):
        raise LocalspecError(f"unsupported rope scaling {kind!r} in config.json")
    return kvs


def llama3_rope_factors(cfg: dict[str, Any]) -> np.ndarray | None:
    """Llama 3.1+ stretches low rope frequencies; llama.cpp reads the per-frequency divisors from a
    rope_freqs tensor. Wavelengths shorter than ctx/high_freq_factor keep 1, longer than
    ctx/low_freq_factor get `factor`, and the band between is interpolated smoothly."""
    rs = cfg.get("rope_scaling") or {}
    if (rs.get("rope_type") or rs.get("type")) != "llama3":
        return None
    dim, base = _head_dim(cfg), float(cfg.get("rope_theta", 10000.0))
    factor, lo, hi = (
        float(rs["factor"]),
        float(rs.get("low_freq_factor", 1.0)),
        float(rs.get("high_freq_factor", 4.0)),
    )
    old_ctx = float(rs.get("original_max_position_embeddings", 8192))
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * base ** (i / dim)
        if wavelen < old_ctx / hi:
            out.append(1.0)
        elif wavelen > old_ctx / lo:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# -- tensors -------------------------------------------------------------------------------------
def rope_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder each head's rows from HF's half-split rope layout to llama.cpp's interleaved one."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def plan_tensors(ckpt: Checkpoint, cfg: dict[str, Any], arch: Arch, out_type: str) -> list[PlannedTensor]:
    n_layer = int(cfg["num_hidden_layers"])
    names = get_tensor_name_map(arch.gguf_arch, n_layer)
    tied = bool(cfg.get("tie_word_embeddings", False))
    n_head = int(cfg["num_attention_heads"])
    n_head_kv = int(cfg.get("num_key_value_heads") or n_head)
    plan = []
    for hf_name, ref in ckpt.tensors.items():
        if _SKIP.search(hf_name) or (tied and hf_name == "lm_head.weight"):
            continue
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise LocalspecError(f"unexpected tensor {hf_name} for {cfg['architectures'][0]}")
        heads = None
        if arch.permute_qk and name.endswith(("attn_q.weight", "attn_q.bias")):
            heads = n_head
        elif arch.permute_qk and name.endswith(("attn_k.weight", "attn_k.bias")):
            heads = n_head_kv
        plan.append(_plan_one(ckpt, hf_name, name, out_type if len(ref.shape) > 1 else "f32", heads))
    factors = llama3_rope_factors(cfg)
    if factors is not None:
        plan.append(PlannedTensor("rope_freqs.weight", factors.shape, np.dtype(np.float32), lambda: factors))
    plan.sort(key=_gguf_order)
    return plan


def _gguf_order(t: PlannedTensor) -> tuple:
    # llama.cpp does not care, but a stable order (embeddings, blocks by number, output) reads better
    m = re.match(r"blk\.(\d+)\.", t.name)
    return (
        (1, int(m.group(1)), t.name)
        if m
        else (0 if t.name.startswith(("token_embd", "rope")) else 2, 0, t.name)
    )


def _plan_one(ckpt: Checkpoint, hf_name: str, name: str, out_type: str, heads: int | None) -> PlannedTensor:
    ref = ckpt.tensors[hf_name]
    shape = ref.shape or (1,)
    dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[out_type]
    ggml = GGMLQuantizationType.BF16 if out_type == "bf16" else None

    def cast(block: np.ndarray) -> np.ndarray:
        return f32_to_bf16(block) if out_type == "bf16" else block.astype(dtype)

    def produce() -> Iterator[np.ndarray]:
        if heads is not None:  # the permute needs whole heads: q/k are small, load them whole
            yield cast(rope_permute(ckpt.load_f32(hf_name), heads))
        elif out_type == "bf16" and ref.dtype == "BF16":
            yield from ckpt.raw_blocks(hf_name)  # same bits: a straight copy
        else:
            for block in ckpt.f32_blocks(hf_name):
                yield cast(block)

    return PlannedTensor(name, shape, np.dtype(dtype), produce, ggml)


# -- the conversion ------------------------------------------------------------------------------
def convert_hf(
    src: str | Path,
    out: Path,
    *,
    out_type: str = "f16",
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> Path:
    """Convert a Hugging Face folder or repo id into the GGUF `out` (written atomically)."""
    out_type = out_type.lower()
    if out_type not in OUT_TYPES:
        raise LocalspecError(f"unknown --type {out_type!r}; choose one of {', '.join(OUT_TYPES)}")
    folder = resolve_source(src)
    cfg, arch = read_config(folder)
    ckpt = Checkpoint(folder)
    float_type = out_type if out_type in FLOAT_TYPES else ("bf16" if ckpt.source_dtype == "BF16" else "f16")
    arch_name = arch.gguf_arch.name.lower()
    name = str(cfg.get("_name_or_path") or folder.name)
    kvs = hparam_kvs(cfg, arch_name, name, FLOAT_TYPES[float_type])
    kvs += tokenizer_kvs(folder, cfg["architectures"][0], int(cfg["vocab_size"]))
    plan = plan_tensors(ckpt, cfg, arch, float_type)
    log(
        f"convert  {folder} ({cfg['architectures'][0]}, {len(plan)} tensors, {ckpt.nbytes / 1e9:.2f} GB "
        f"{ckpt.source_dtype}) -> {out} [{out_type}]"
    )
    stage = None if progress is None else (lambda i, n, _name: progress(f"write {float_type}", i, n))
    out = Path(out)
    if out_type == float_type:
        with atomic_output(out) as tmp:
            write_gguf(tmp, arch_name, kvs, plan, stage)
        return out
    with scratch_output(out.with_name(out.name + f".{float_type}")) as mid:
        write_gguf(mid, arch_name, kvs, plan, stage)
        qstage = None if progress is None else (lambda i, n, _name: progress(f"quantize {out_type}", i, n))
        quantize_file(mid, out, out_type, progress=qstage)
    return out
