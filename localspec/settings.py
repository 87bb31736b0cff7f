"""One typed settings object. CLI options, TOML config files, pair presets and the server all derive
from the fields below (their metadata carries the help text), so a flag means the same everywhere.

Precedence, lowest first: field defaults < configs/defaults.toml < --config FILE < the pair's
pair.toml [runtime] table < explicit CLI flags / request fields.
"""

from __future__ import annotations

import dataclasses

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from . import rpc
from .errors import LocalspecError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULTS_TOML = REPO_ROOT / "configs" / "defaults.toml"
DEFAULT_PAIR = REPO_ROOT / "models" / "default"


def _f(default: Any, help: str, **meta: Any) -> Any:
    return field(default=default, metadata={"help": help, **meta})


SPEC_MODES = ("pq", "match")  # speculative sampling; llama.cpp's sample-and-match


@dataclass(frozen=True, kw_only=True)
class Settings:
    # -- models --------------------------------------------------------------------------------
    target: Path | None = _f(None, "Target model GGUF (the big model whose output you get).", group="model")
    draft: Path | None = _f(None, "Draft model GGUF (small, same vocabulary).", group="model")
    pair: Path | None = _f(None, "A pair folder or its pair.toml (from `localspec pair`).", group="model")
    n_ctx: int = _f(4096, "Context size in tokens, allocated once at load.", group="model")
    n_batch: int = _f(512, "Logical batch size for prompt processing.", group="model")
    n_ubatch: int = _f(512, "Physical micro-batch size.", group="model")
    n_threads: int | None = _f(None, "CPU threads (default: physical cores).", group="model")
    n_gpu_layers: int = _f(-1, "Layers to offload to the GPU (-1 = all).", group="model")
    flash_attn: str = _f(
        "auto", "Flash attention: auto, on or off.", group="model", choices=("auto", "on", "off")
    )
    kv_type: str = _f(
        "f16", "KV cache type: f16, q8_0, q4_0 or f32.", group="model", choices=("f16", "q8_0", "q4_0", "f32")
    )
    allow_partial_offload: bool = _f(
        False, "Run even if a model does not fit fully on the GPU.", group="model"
    )
    rpc: str | None = _f(
        None,
        "Split the target over rpc-servers: HOST:PORT[,HOST:PORT...] (trusted networks only; "
        "the draft stays local). See docs/rpc.md.",
        group="model",
    )
    # -- sampling ------------------------------------------------------------------------------
    max_tokens: int = _f(256, "Maximum tokens to generate.", group="sampling")
    temperature: float = _f(0.8, "Sampling temperature; 0 = greedy.", group="sampling")
    top_k: int = _f(40, "Keep the k most likely tokens (0 = off).", group="sampling")
    top_p: float = _f(0.95, "Nucleus sampling mass (1 = off).", group="sampling")
    min_p: float = _f(0.05, "Drop tokens below min_p x the top probability (0 = off).", group="sampling")
    seed: int | None = _f(None, "Random seed (default: random).", group="sampling")
    stop: tuple[str, ...] = _f(
        (), "Stop string (repeatable); never emitted.", group="sampling", multiple=True
    )
    # -- speculation ---------------------------------------------------------------------------
    spec: bool = _f(True, "Use speculative decoding when a draft is given.", group="spec")
    draft_max: str = _f("auto", "Tokens drafted per round: a number, or auto (tuned online).", group="spec")
    draft_min: int = _f(0, "Never draft fewer than this many tokens per round.", group="spec")
    draft_p_min: float = _f(
        0.0, "Stop drafting when the draft's top probability falls below this.", group="spec"
    )
    spec_mode: str = _f(
        "pq",
        "Verification for sampling: pq (speculative sampling) or match.",
        group="spec",
        choices=SPEC_MODES,
    )

    # -- derived -------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise LocalspecError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise LocalspecError(f"top_p must be in (0, 1] (got {self.top_p})")
        if not 0 <= self.min_p < 1:
            raise LocalspecError(f"min_p must be in [0, 1) (got {self.min_p})")
        if self.top_k < 0:
            raise LocalspecError(f"top_k must be >= 0 (got {self.top_k})")
        if self.max_tokens < 1:
            raise LocalspecError(f"max_tokens must be >= 1 (got {self.max_tokens})")
        if self.n_ctx < 8:
            raise LocalspecError(f"n_ctx must be >= 8 (got {self.n_ctx})")
        if self.draft_min < 0 or self.draft_p_min < 0 or self.draft_p_min >= 1:
            raise LocalspecError("draft_min must be >= 0 and draft_p_min in [0, 1)")
        self.draft_k  # validates
        rpc.parse_endpoints(self.rpc)  # validates

    @property
    def draft_k(self) -> int | None:
        """The fixed draft length, or None for auto."""
        if str(self.draft_max).lower() == "auto":
            return None
        try:
            k = int(self.draft_max)
        except ValueError:
            raise LocalspecError(f"--draft-max must be a number or 'auto' (got {self.draft_max!r})") from None
        if not 1 <= k <= 64:
            raise LocalspecError(f"--draft-max must be between 1 and 64 (got {k})")
        return k

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def context_args(self) -> dict[str, Any]:
        """The keyword arguments of `backend.Context` that these settings decide."""
        names = ("n_ctx", "n_batch", "n_ubatch", "n_threads", "flash_attn", "kv_type")
        return {n: getattr(self, n) for n in names}

    @property
    def speculative(self) -> bool:
        return self.spec and self.draft is not None

    # -- sources -------------------------------------------------------------------------------
    @classmethod
    def load(cls, *, config: Path | None = None, **overrides: Any) -> "Settings":
        """Build settings from defaults.toml, an optional config file, the pair and `overrides`
        (None values in overrides mean 'not given')."""
        values: dict[str, Any] = {}
        for path in (DEFAULTS_TOML, config):
            if path is not None and Path(path).exists():
                values.update(_read_toml_settings(Path(path)))
            elif path is not None:
                raise LocalspecError(f"config file not found: {path}")
        given = {k: v for k, v in overrides.items() if v is not None and v != ()}
        pair = given.get("pair", values.get("pair"))
        if pair is not None and not (given.get("target") or given.get("draft")):
            from .pair_file import read_pair  # noqa: PLC0415 - only when a pair is used

            p = read_pair(Path(pair))
            values.update(p.runtime)
            values["target"], values["draft"] = p.target, p.draft
        values.update(given)
        return cls(**_coerce(values))


def _read_toml_settings(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise LocalspecError(f"{path} is not valid TOML: {e}") from None
    flat: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):  # sections are only for readability: [model], [sampling], [spec]
            flat.update(v)
        else:
            flat[k] = v
    return flat


def _coerce(values: dict[str, Any]) -> dict[str, Any]:
    known = {f.name: f for f in fields(Settings)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise LocalspecError(f"unknown setting(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for k, v in values.items():
        if k in ("target", "draft", "pair") and v is not None:
            v = Path(v)
        elif k == "stop":
            v = (v,) if isinstance(v, str) else tuple(v)
        elif k == "draft_max":
            v = str(v)
        elif k == "rpc" and isinstance(v, (list, tuple)):  # TOML: rpc = ["host:port", ...]
            v = ",".join(v)
        out[k] = v
    return out


def setting_fields(group: str | None = None) -> list[dataclasses.Field]:
    return [f for f in fields(Settings) if group is None or f.metadata.get("group") == group]
