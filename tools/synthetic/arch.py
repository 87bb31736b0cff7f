"""Small random GGUFs of the architectures whose memory is not a plain KV cache, with SmolLM2's
vocabulary (so SmolLM2 can draft for them): test models for rollback and MTP, not for text.

- `qwen35`: Qwen3.5's hybrid layout - gated-delta-net (recurrent) layers with a full-attention layer
  every `attn_every`, llama.cpp's bounded recurrent rollback (`n_rs_seq`) applies to it - optionally
  with one MTP ("nextn") block appended, as Qwen3.5/3.6 GGUFs carry it;
- `mamba`: pure recurrent (Mamba-1), which llama.cpp can only roll back through saved state;
- `qwen2vl`: Qwen2-VL's text model, a plain KV cache but M-RoPE positions (rope sections), under
  which an image's rows take fewer positions than cache rows (tools/synthetic/mrope.py).

`mix` scales every block's output projection: 1 is a plain random model, near 0 the model becomes
a bigram (the next token a function of the current one), which an MTP head built with `mtp_exact`
predicts exactly - acceptance between 0 and 1 without training anything. `perturb` adds seeded noise
to the block matrices: a sibling of the same seed that agrees with it only partly (a draft).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, LlamaFileType

from localspec.convert.gguf_stream import KV, copy_metadata, write_gguf
from localspec.convert.seeded import F32, SeededWeights
from localspec.errors import LocalspecError
from localspec.files import atomic_output

LOGIT_STD = 6.0  # spread of the logits: peaked next-token distributions, like a trained model


@dataclass(frozen=True)
class Qwen35Shape:
    n_embd: int = 256
    n_layer: int = 4  # trunk layers (the MTP block comes on top)
    attn_every: int = 4  # every 4th layer is full attention, as in Qwen3.5
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 512
    d_state: int = 32  # gated delta net head size (keys and values)
    n_k_heads: int = 2
    n_v_heads: int = 4
    d_conv: int = 4
    nextn: int = 0  # MTP blocks (llama.cpp runs one for qwen35)


@dataclass(frozen=True)
class Qwen2VLShape:
    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 512


@dataclass(frozen=True)
class MambaShape:
    n_embd: int = 256
    n_layer: int = 4
    d_state: int = 16
    d_conv: int = 4
    dt_rank: int = 16


def _tokenizer(vocab_gguf: Path) -> tuple[list[KV], int]:
    reader = GGUFReader(vocab_gguf)
    kvs = [kv for kv in copy_metadata(reader) if kv.key.startswith("tokenizer.")]
    if "tokenizer.ggml.tokens" not in reader.fields:
        raise LocalspecError(f"{vocab_gguf} has no tokenizer to copy")
    return kvs, len(reader.fields["tokenizer.ggml.tokens"].data)


def _common(arch: str, name: str, n_embd: int, n_layer: int, tok: list[KV]) -> list[KV]:
    u32, f32, st = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING
    return [
        KV("general.name", name, st),
        KV("general.file_type", int(LlamaFileType.MOSTLY_F16), u32),
        KV(f"{arch}.context_length", 8192, u32),
        KV(f"{arch}.embedding_length", n_embd, u32),
        KV(f"{arch}.block_count", n_layer, u32),
        KV(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6, f32),
        *tok,
    ]


def _head(w: SeededWeights, n_vocab: int, d: int) -> None:
    # an LM head of its own: a tied one would score each token's own embedding highest (an echo)
    w.add("token_embd.weight", (n_vocab, d), 1.0, noisy=False)
    w.const("output_norm.weight", (d,), 1.0)
    w.add("output.weight", (n_vocab, d), LOGIT_STD / np.sqrt(d), noisy=False)


def write_qwen35(
    vocab_gguf: Path,
    dst: Path,
    *,
    shape: Qwen35Shape = Qwen35Shape(),
    seed: int = 0,
    mix: float = 1.0,
    perturb: float = 0.0,
    mtp_exact: bool = True,
) -> Path:
    """A random `qwen35` GGUF (f16) at dst; with shape.nextn = 1, one MTP block after the trunk."""
    s = shape
    if s.nextn not in (0, 1):
        raise LocalspecError("llama.cpp runs one MTP block for qwen35 (nextn 0 or 1)")
    tok, n_vocab = _tokenizer(vocab_gguf)
    d, hd = s.n_embd, s.head_dim
    key_dim, value_dim = s.d_state * s.n_k_heads, s.d_state * s.n_v_heads
    out_std = mix / np.sqrt(2 * s.n_layer)  # residual branches: the stream stays O(1)
    w = SeededWeights(seed, perturb)
    _head(w, n_vocab, d)

    def attention(b: str) -> None:
        w.add(b + "attn_q.weight", (2 * s.n_head * hd, d), 1 / np.sqrt(d))  # query and its gate
        w.add(b + "attn_k.weight", (s.n_head_kv * hd, d), 1 / np.sqrt(d))
        w.add(b + "attn_v.weight", (s.n_head_kv * hd, d), 1 / np.sqrt(d))
        w.add(b + "attn_output.weight", (d, s.n_head * hd), out_std / np.sqrt(s.n_head * hd))
        w.const(b + "attn_q_norm.weight", (hd,), 1.0)
        w.const(b + "attn_k_norm.weight", (hd,), 1.0)

    def ffn(b: str) -> None:
        w.add(b + "ffn_gate.weight", (s.n_ff, d), 1 / np.sqrt(d))
        w.add(b + "ffn_up.weight", (s.n_ff, d), 1 / np.sqrt(d))
        w.add(b + "ffn_down.weight", (d, s.n_ff), out_std / np.sqrt(s.n_ff))

    for i in range(s.n_layer):
        b = f"blk.{i}."
        w.const(b + "attn_norm.weight", (d,), 1.0)
        w.const(b + "post_attention_norm.weight", (d,), 1.0)
        if (i + 1) % s.attn_every:  # gated delta net
            w.add(b + "attn_qkv.weight", (2 * key_dim + value_dim, d), 1 / np.sqrt(d))
            w.add(b + "attn_gate.weight", (value_dim, d), 1 / np.sqrt(d))
            w.add(b + "ssm_conv1d.weight", (2 * key_dim + value_dim, s.d_conv), 0.5, F32)
            w.add(b + "ssm_dt.bias", (s.n_v_heads,), lambda r: r.uniform(-4, -2, s.n_v_heads), F32)
            w.add(b + "ssm_a", (s.n_v_heads,), lambda r: -np.exp(r.uniform(-1, 1, s.n_v_heads)), F32)
            w.add(b + "ssm_beta.weight", (s.n_v_heads, d), 1 / np.sqrt(d))
            w.add(b + "ssm_alpha.weight", (s.n_v_heads, d), 1 / np.sqrt(d))
            w.const(b + "ssm_norm.weight", (s.d_state,), 1.0)
            w.add(b + "ssm_out.weight", (d, value_dim), out_std / np.sqrt(value_dim))
        else:
            attention(b)
        ffn(b)
    for i in range(s.n_layer, s.n_layer + s.nextn):
        b = f"blk.{i}."
        w.const(b + "attn_norm.weight", (d,), 1.0)
        w.const(b + "post_attention_norm.weight", (d,), 1.0)
        attention(b)
        ffn(b)
        w.const(b + "nextn.enorm.weight", (d,), 1.0)
        w.const(b + "nextn.hnorm.weight", (d,), 1.0)
        # exact: the head reads only the token it is given (concat order: token, hidden), so on a
        # bigram-like trunk (small mix) it predicts what the trunk will say next
        eh = (lambda r: np.hstack([np.eye(d), np.zeros((d, d))])) if mtp_exact else 1 / np.sqrt(2 * d)
        w.add(b + "nextn.eh_proj.weight", (d, 2 * d), eh)

    u32, i32 = GGUFValueType.UINT32, GGUFValueType.INT32
    arch = "qwen35"
    kvs = [
        *_common(arch, f"synthetic qwen35 hybrid (mix {mix}, seed {seed})", d, s.n_layer + s.nextn, tok),
        KV(f"{arch}.feed_forward_length", s.n_ff, u32),
        KV(f"{arch}.attention.head_count", s.n_head, u32),
        KV(f"{arch}.attention.head_count_kv", s.n_head_kv, u32),
        KV(f"{arch}.attention.key_length", hd, u32),
        KV(f"{arch}.attention.value_length", hd, u32),
        KV(f"{arch}.rope.dimension_count", hd, u32),
        KV(
            f"{arch}.rope.dimension_sections",
            [hd // 6, hd // 6, hd // 2 - 2 * (hd // 6), 0],
            GGUFValueType.ARRAY,
            i32,
        ),
        KV(f"{arch}.rope.freq_base", 1e7, GGUFValueType.FLOAT32),
        KV(f"{arch}.ssm.conv_kernel", s.d_conv, u32),
        KV(f"{arch}.ssm.inner_size", value_dim, u32),
        KV(f"{arch}.ssm.state_size", s.d_state, u32),
        KV(f"{arch}.ssm.time_step_rank", s.n_v_heads, u32),
        KV(f"{arch}.ssm.group_count", s.n_k_heads, u32),
        KV(f"{arch}.full_attention_interval", s.attn_every, u32),
    ]
    if s.nextn:
        kvs.append(KV(f"{arch}.nextn_predict_layers", s.nextn, u32))
    with atomic_output(dst) as tmp:
        write_gguf(tmp, arch, kvs, w.plan)
    return Path(dst)


def write_mamba(
    vocab_gguf: Path,
    dst: Path,
    *,
    shape: MambaShape = MambaShape(),
    seed: int = 0,
    mix: float = 1.0,
    perturb: float = 0.0,
) -> Path:
    """A random Mamba-1 GGUF (f16) at dst: every layer recurrent, no attention at all."""
    s = shape
    tok, n_vocab = _tokenizer(vocab_gguf)
    d, di = s.n_embd, 2 * s.n_embd  # llama.cpp supports an expansion factor of 2 only
    w = SeededWeights(seed, perturb)
    _head(w, n_vocab, d)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        w.const(b + "attn_norm.weight", (d,), 1.0)
        w.add(b + "ssm_in.weight", (2 * di, d), 1 / np.sqrt(d))
        w.add(b + "ssm_conv1d.weight", (di, s.d_conv), 0.5, F32)
        w.const(b + "ssm_conv1d.bias", (di,), 0.0)
        w.add(b + "ssm_x.weight", (s.dt_rank + 2 * s.d_state, di), 1 / np.sqrt(di))
        w.add(b + "ssm_dt.weight", (di, s.dt_rank), 1 / np.sqrt(s.dt_rank))
        # dt = softplus(bias) in [1e-3, 1e-1], A = -(1..d_state): Mamba's own initialisation
        w.add(
            b + "ssm_dt.bias",
            (di,),
            lambda r: np.log(np.expm1(np.exp(r.uniform(np.log(1e-3), np.log(0.1), di)))),
            F32,
        )
        w.add(b + "ssm_a", (di, s.d_state), lambda r: -np.tile(np.arange(1, s.d_state + 1), (di, 1)), F32)
        w.const(b + "ssm_d", (di,), 1.0)
        w.add(b + "ssm_out.weight", (d, di), mix / np.sqrt(2 * s.n_layer) / np.sqrt(di))
    u32, arch = GGUFValueType.UINT32, "mamba"
    kvs = [
        *_common(arch, f"synthetic mamba (mix {mix}, seed {seed})", d, s.n_layer, tok),
        KV(f"{arch}.feed_forward_length", 0, u32),
        KV(f"{arch}.attention.head_count", 0, u32),
        KV(f"{arch}.ssm.conv_kernel", s.d_conv, u32),
        KV(f"{arch}.ssm.inner_size", di, u32),
        KV(f"{arch}.ssm.state_size", s.d_state, u32),
        KV(f"{arch}.ssm.time_step_rank", s.dt_rank, u32),
    ]
    with atomic_output(dst) as tmp:
        write_gguf(tmp, arch, kvs, w.plan)
    return Path(dst)


def write_qwen2vl(
    vocab_gguf: Path, dst: Path, *, shape: Qwen2VLShape = Qwen2VLShape(), seed: int = 0, perturb: float = 0.0
) -> Path:
    """A random `qwen2vl` GGUF (f16) at dst: Qwen2's blocks with M-RoPE (sections as Qwen2-VL's,
    16/24/24 of 64 rotated pairs, scaled to head_dim)."""
    s = shape
    tok, n_vocab = _tokenizer(vocab_gguf)
    d, hd = s.n_embd, s.head_dim
    out_std = 1 / np.sqrt(2 * s.n_layer)
    w = SeededWeights(seed, perturb)
    _head(w, n_vocab, d)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        w.const(b + "attn_norm.weight", (d,), 1.0)
        w.add(b + "attn_q.weight", (s.n_head * hd, d), 1 / np.sqrt(d))
        w.add(b + "attn_k.weight", (s.n_head_kv * hd, d), 1 / np.sqrt(d))
        w.add(b + "attn_v.weight", (s.n_head_kv * hd, d), 1 / np.sqrt(d))
        w.add(b + "attn_output.weight", (d, s.n_head * hd), out_std / np.sqrt(s.n_head * hd))
        w.const(b + "ffn_norm.weight", (d,), 1.0)
        w.add(b + "ffn_gate.weight", (s.n_ff, d), 1 / np.sqrt(d))
        w.add(b + "ffn_up.weight", (s.n_ff, d), 1 / np.sqrt(d))
        w.add(b + "ffn_down.weight", (d, s.n_ff), out_std / np.sqrt(s.n_ff))
    u32, i32, arch = GGUFValueType.UINT32, GGUFValueType.INT32, "qwen2vl"
    t = hd // 8  # Qwen2-VL: [16, 24, 24, 0] of head_dim 128's 64 pairs
    kvs = [
        *_common(arch, f"synthetic qwen2vl (seed {seed})", d, s.n_layer, tok),
        KV(f"{arch}.feed_forward_length", s.n_ff, u32),
        KV(f"{arch}.attention.head_count", s.n_head, u32),
        KV(f"{arch}.attention.head_count_kv", s.n_head_kv, u32),
        KV(f"{arch}.rope.dimension_count", hd, u32),
        KV(
            f"{arch}.rope.dimension_sections",
            [t, (hd // 2 - t) // 2, (hd // 2 - t) // 2, 0],
            GGUFValueType.ARRAY,
            i32,
        ),
        KV(f"{arch}.rope.freq_base", 1e6, GGUFValueType.FLOAT32),
    ]
    with atomic_output(dst) as tmp:
        write_gguf(tmp, arch, kvs, w.plan)
    return Path(dst)
