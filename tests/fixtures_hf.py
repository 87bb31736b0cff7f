"""Export a llama-architecture GGUF (SmolLM2) as a Hugging Face folder, so the converter can be tested
on a real model without a hub: config.json, sharded safetensors + index, tokenizer.json and
tokenizer_config.json (with the chat template). Weights are the GGUF's dequantized values in f16.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file

_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def _field(r: GGUFReader, key: str, default=None):  # noqa: ANN001, ANN202
    f = r.fields.get(key)
    return default if f is None else f.contents()


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF's interleaved rope rows back to HF's half-split layout (inverse of the converter's permute)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def export_hf(gguf_path: Path, out: Path, *, n_shards: int = 2) -> Path:
    r = GGUFReader(gguf_path)
    arch = _field(r, "general.architecture")
    assert arch == "llama", "this exporter only knows the llama layout"
    a = lambda k, d=None: _field(r, f"{arch}.{k}", d)  # noqa: E731
    n_head, n_head_kv = int(a("attention.head_count")), int(a("attention.head_count_kv"))
    tokens = _field(r, "tokenizer.ggml.tokens")
    out.mkdir(parents=True, exist_ok=True)

    tensors: dict[str, np.ndarray] = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        if t.name in _GLOBAL:
            name = _GLOBAL[t.name]
        else:
            _, layer, kind, suffix = t.name.split(".")
            name = f"model.layers.{layer}.{_LAYER[kind]}.{suffix}"
            if kind in ("attn_q", "attn_k"):
                w = _unpermute(w, n_head if kind == "attn_q" else n_head_kv)
        tensors[name] = w.astype(np.float16) if w.ndim > 1 else w  # norms stay f32, like real checkpoints
    names = sorted(tensors)
    weight_map = {}
    for i in range(n_shards):
        shard = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::n_shards]}
        save_file(part, str(out / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    bos, eos = int(_field(r, "tokenizer.ggml.bos_token_id")), int(_field(r, "tokenizer.ggml.eos_token_id"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": int(a("embedding_length")),
        "intermediate_size": int(a("feed_forward_length")),
        "num_hidden_layers": int(a("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(a("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(a("context_length")),
        "vocab_size": len(tokens),
        "tie_word_embeddings": "output.weight" not in {t.name for t in r.tensors},
        "bos_token_id": bos,
        "eos_token_id": eos,
        "hidden_act": "silu",
        "torch_dtype": "float16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    _export_tokenizer(r, tokens, out)
    return out


def _export_tokenizer(r: GGUFReader, tokens: list[str], out: Path) -> None:
    types = _field(r, "tokenizer.ggml.token_type")
    merges = [m.split(" ", 1) for m in _field(r, "tokenizer.ggml.merges")]
    control = [i for i, t in enumerate(types) if t == 3]
    added = [
        {
            "id": i,
            "content": tokens[i],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i in control
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # SmolLM2's pre-tokenizer: digits one by one, then GPT-2 byte-level splitting
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": merges,
        },
    }
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    name = lambda k: tokens[int(_field(r, f"tokenizer.ggml.{k}_token_id"))]  # noqa: E731
    cfg = {
        "bos_token": name("bos"),
        "eos_token": name("eos"),
        "unk_token": name("unknown"),
        "pad_token": name("padding"),
        "chat_template": _field(r, "tokenizer.chat_template"),
        "model_max_length": 8192,
        "tokenizer_class": "GPT2Tokenizer",
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2))


# -- synthetic checkpoints -------------------------------------------------------------------------
def byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 maps to itself, the rest to 256+."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


def write_byte_tokenizer(folder: Path, *, regex: str | None = None, specials=("<|begin|>", "<|end|>")) -> int:  # noqa: ANN001
    """A small byte-level BPE tokenizer.json (256 bytes, a few merges, special tokens); returns its size."""
    vocab = {c: i for i, c in enumerate(byte_chars())}
    merges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["i", "n"], ["Ġ", "a"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    added = [
        {
            "id": len(vocab) + i,
            "content": t,
            "special": True,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
        }
        for i, t in enumerate(specials)
    ]
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": regex is None,
    }
    pre = byte_level
    if regex is not None:
        split = {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
        pre = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    tok = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": specials[0], "eos_token": specials[1]})
    )
    return len(vocab) + len(added)


def write_spm_tokenizer(folder: Path) -> int:
    """A Llama-2/Mistral style tokenizer.json (BPE with byte fallback, converted from SentencePiece):
    merged pieces get ids in merge order, as SentencePiece BPE vocabularies do."""
    chars = ["▁", "t", "h", "e", "a", "i", "n", "c"]
    merges = [
        ("▁", "t"),
        ("h", "e"),
        ("▁t", "he"),
        ("a", "t"),
        ("▁", "h"),
        ("▁h", "at"),
        ("i", "n"),
        ("▁", "c"),
    ]
    pieces = [
        "<unk>",
        "<s>",
        "</s>",
        *(f"<0x{b:02X}>" for b in range(256)),
        *chars,
        *(a + b for a, b in merges),
    ]
    vocab = {p: i for i, p in enumerate(pieces)}
    added = [
        {
            "id": i,
            "content": t,
            "special": True,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
        }
        for i, t in enumerate(pieces[:3])
    ]
    tok = {
        "version": "1.0",
        "added_tokens": added,
        "pre_tokenizer": None,
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "byte_fallback": True,
            "fuse_unk": True,
            "unk_token": "<unk>",
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True})
    )
    return len(pieces)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], *, bf16: bool = False) -> None:
    """safetensors by hand: the package's numpy API has no bf16. 2-D float tensors become bf16 if
    asked; uint16 arrays are taken as bf16 bits already."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        if bf16 and a.ndim > 1 and a.dtype != np.uint16:
            u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
            data = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        else:
            data = np.ascontiguousarray(a)
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.uint16): "BF16"}[
            data.dtype
        ]
        header[name] = {
            "dtype": dtype,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + data.nbytes],
        }
        blobs.append(data)
        offset += data.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for b in blobs:
            b.tofile(f)


TINY = {  # architecture -> config overrides for a 2-layer random model
    "LlamaForCausalLM": {
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
    },
    "MistralForCausalLM": {"tie_word_embeddings": False},
    "Qwen2ForCausalLM": {"tie_word_embeddings": True},
    "Qwen3ForCausalLM": {"tie_word_embeddings": True, "head_dim": 32},
}


def tiny_hf(folder: Path, arch: str, *, bf16: bool = False, seed: int = 0) -> Path:
    """A random 2-layer model of `arch` with a byte-level tokenizer, in Hugging Face layout."""
    folder.mkdir(parents=True, exist_ok=True)
    if arch == "MistralForCausalLM":  # Mistral 7B ships a SentencePiece-style vocabulary
        n_tok = write_spm_tokenizer(folder)
    else:
        regex = {"Qwen2ForCausalLM": QWEN2_REGEX, "Qwen3ForCausalLM": QWEN2_REGEX}.get(arch, LLAMA3_REGEX)
        n_tok = write_byte_tokenizer(folder, regex=regex)
    cfg = {
        "architectures": [arch],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": n_tok + 5,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
        **TINY[arch],
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(seed)
    h, hd = cfg["hidden_size"], cfg.get("head_dim", 16)
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    w = lambda *s: rng.normal(0, 0.5 / np.sqrt(s[-1]), s).astype(np.float32)  # noqa: E731
    norm = lambda n: (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    t = {
        "model.embed_tokens.weight": rng.normal(0, 1, (cfg["vocab_size"], h)).astype(np.float32),
        "model.norm.weight": norm(h),
    }
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = w(cfg["vocab_size"], h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t |= {
            p + "input_layernorm.weight": norm(h),
            p + "post_attention_layernorm.weight": norm(h),
            p + "self_attn.q_proj.weight": w(nq, h),
            p + "self_attn.k_proj.weight": w(nkv, h),
            p + "self_attn.v_proj.weight": w(nkv, h),
            p + "self_attn.o_proj.weight": w(h, nq),
            p + "mlp.gate_proj.weight": w(128, h),
            p + "mlp.up_proj.weight": w(128, h),
            p + "mlp.down_proj.weight": w(h, 128),
        }
        if arch == "Qwen2ForCausalLM":
            t |= {
                p + f"self_attn.{k}_proj.bias": rng.normal(0, 0.3, n).astype(np.float32)
                for k, n in (("q", nq), ("k", nkv), ("v", nkv))
            }
        if arch == "Qwen3ForCausalLM":
            t |= {p + "self_attn.q_norm.weight": norm(hd), p + "self_attn.k_norm.weight": norm(hd)}
    if not bf16:
        t = {k: v.astype(np.float16) if v.ndim > 1 else v for k, v in t.items()}
    write_safetensors(folder / "model.safetensors", t, bf16=bf16)
    return folder


# -- a numpy forward pass with Hugging Face semantics ----------------------------------------------
def hf_reference_logits(folder: Path, tokens: list[int]) -> np.ndarray:
    """Logits of a Llama/Mistral/Qwen2/Qwen3 checkpoint computed the way transformers does
    (half-split rotary embedding, GQA, SwiGLU, q/k norms, qkv biases), for checking the converter."""
    from localspec.convert.safetensors_io import Checkpoint

    cfg = json.loads((folder / "config.json").read_text())
    ck = Checkpoint(folder)
    W = lambda n: ck.load_f32(n).astype(np.float64)  # noqa: E731, N806
    has = lambda n: n in ck  # noqa: E731
    eps, n_head = cfg["rms_norm_eps"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_head
    hd = cfg.get("head_dim") or cfg["hidden_size"] // n_head

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    inv = 1.0 / cfg.get("rope_theta", 10000.0) ** (np.arange(0, hd, 2) / hd)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "llama3":  # transformers' _compute_llama3_parameters
        old, lo, hi, f = (
            rs["original_max_position_embeddings"],
            rs["low_freq_factor"],
            rs["high_freq_factor"],
            rs["factor"],
        )
        wavelen = 2 * np.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = np.where(wavelen > old / lo, inv / f, inv)
        mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = np.where(mid, (1 - smooth) * inv / f + smooth * inv, scaled)
    ang = np.arange(len(tokens))[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x: np.ndarray) -> np.ndarray:  # x: (T, heads, hd)
        rot = np.concatenate([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    x = W("model.embed_tokens.weight")[tokens]
    T = len(tokens)  # noqa: N806
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(x, W(p + "input_layernorm.weight"))
        proj = {}
        for k in "qkv":
            y = a @ W(p + f"self_attn.{k}_proj.weight").T
            if has(p + f"self_attn.{k}_proj.bias"):
                y = y + W(p + f"self_attn.{k}_proj.bias")
            proj[k] = y.reshape(T, -1, hd)
        q, k, v = proj["q"], proj["k"], proj["v"]
        if has(p + "self_attn.q_norm.weight"):
            q, k = rms(q, W(p + "self_attn.q_norm.weight")), rms(k, W(p + "self_attn.k_norm.weight"))
        q, k = rope(q), rope(k)
        rep = n_head // n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, -1)
        x = x + o @ W(p + "self_attn.o_proj.weight").T
        m = rms(x, W(p + "post_attention_layernorm.weight"))
        g, u = m @ W(p + "mlp.gate_proj.weight").T, m @ W(p + "mlp.up_proj.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "mlp.down_proj.weight").T
    x = rms(x, W("model.norm.weight"))
    head = W("lm_head.weight") if has("lm_head.weight") else W("model.embed_tokens.weight")
    return (x @ head.T).astype(np.float32)
