"""One typed settings object. CLI options, TOML config files, pair presets and the server all derive
from the fields below (their metadata carries the help text), so a flag means the same everywhere.

Precedence, lowest first: field defaults < localspec/data/defaults.toml < --config FILE < the pair's
pair.toml [runtime] table < explicit CLI flags / request fields. Each setting has a scope: the layers
that may set it (`scope`); a pair file, downloaded from strangers, and a request, sent by a client,
may set only what shapes a model's answers (docs/settings.md).

Settings only parses and checks: the one I/O it does is reading the TOML files it is given. A pair
*name* (a preset to download, say) is turned into a folder by the front end's resolver, passed in.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import math
import re
import types
import typing
import warnings
from dataclasses import dataclass, field, fields
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Callable, Literal

from localspec import paths
from localspec.config.endpoints import parse_endpoints
from localspec.config.pair_toml import read_pair
from localspec.config.toml import read_toml
from localspec.errors import LocalspecError
from localspec.images import Limits
from localspec.text_input import require_text

# a front end's way of turning `--pair NAME` into a folder (hub.resolve_pair: presets, pulls, prompts)
PairResolver = Callable[[Path, bool], Path]


def _f(default: Any, help: str, **meta: Any) -> Any:
    return field(default=default, metadata={"help": help, **meta})


DRAFTERS = "localspec.drafters"  # the entry-point group the kinds of drafter register in (pyproject.toml)


@functools.cache
def drafter_entry_points() -> tuple[EntryPoint, ...]:
    """The registered kinds of drafter, built-in and plug-in alike, one per name in name order, as the
    installed packages' entry points: not imported here (localspec.draft_kinds loads them, and sits
    above)."""
    by_name = {ep.name: ep for ep in entry_points(group=DRAFTERS)}
    return tuple(by_name[name] for name in sorted(by_name))


def drafter_names() -> tuple[str, ...]:
    """The registered kinds of drafter by name."""
    names = tuple(ep.name for ep in drafter_entry_points())
    if not names:
        raise LocalspecError(
            f"no kind of drafter is registered (entry points {DRAFTERS!r}): localspec is not installed "
            "as a package; in a checkout, run `make setup` (pip install -e .)"
        )
    return names


# speculative sampling; llama.cpp's sample-and-match; shared position-keyed noise (same seed, same text)
LOOKUP_MODES = ("on", "off", "only")
SPEC_MODES = ("pq", "match", "coupled")
MAX_DRAFT = 64
AUTO_K_MAX = 16  # the most tokens --draft-max auto drafts in one round
MAX_TEMPERATURE = 100.0  # beyond this every distribution is uniform to float precision
# a repeat penalty multiplies a positive logit by up to 1/this: 1e-39 made one inf, and the row NaN
MIN_REPEAT_PENALTY = 0.01
INT32_MAX = 2**31 - 1  # llama.cpp keeps these counts in int32
UINT64_MAX = 2**64 - 1
GGML_MAX_THREADS = 512
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 4096  # a longer stop string would hold back all streamed text until the end
MAX_LOGIT_BIAS = 300
API_KEY_ENV = "LOCALSPEC_API_KEY"

# The layers a value can come from. Flags and --config are the person running localspec: any
# setting. A pair.toml is downloaded from strangers: only what a model can honestly recommend (its
# sampling, speculation and context settings), never where the server listens, who may call it,
# where files go or where compute is sent. A request is a server's client: only its own answer.
FLAG, CONFIG, PAIR, REQUEST = "flag", "config", "pair", "request"
LAYERS = (FLAG, CONFIG, PAIR, REQUEST)
_GROUP_SCOPE = {
    "sampling": LAYERS,
    "spec": LAYERS,
    "output": LAYERS,
    "constraint": (FLAG, CONFIG, REQUEST),  # an answer's format is its asker's, not the model file's
}
MODEL_CONTEXT = (FLAG, CONFIG, PAIR)  # what a model is built for (context size, KV type, batches)
ROPE = ("rope_scaling", "rope_scale", "rope_freq_base", "yarn_orig_ctx")  # llama.cpp's context extension


@dataclass(frozen=True, kw_only=True)
class Settings:
    # -- models --------------------------------------------------------------------------------
    target: Path | None = _f(None, "Target model GGUF (the big model whose output you get).", group="model")
    draft: Path | None = _f(
        None,
        "Draft model GGUF (small, same vocabulary), or the name of a drafter the target carries: "
        "`--draft NAME` is --draft-source NAME.",
        group="model",
    )
    draft_source: str = _f(
        "model",
        "What drafts with the lookup: model (the --draft GGUF) or a drafter the target's GGUF carries "
        "(its own draft layers, which `localspec doctor` lists; no draft GGUF is loaded).",
        group="model",
        choices=lambda: drafter_names(),  # read when checked
    )
    pair: Path | None = _f(
        None, "A pair folder, its pair.toml, or a preset name (`localspec list`).", group="model"
    )
    mmproj: Path | None = _f(
        None,
        "Vision projector GGUF (the mmproj-*.gguf beside a vision model) for the target: prompts may "
        "then hold images (--image, image parts in requests); the draft reads the text around them "
        "(or, with --draft-mmproj, sees them too). "
        "A pair.toml names it as mmproj.",
        group="model",
    )
    draft_mmproj: Path | None = _f(
        None,
        "The draft model's own vision projector (the mmproj-*.gguf beside the draft), with --mmproj: "
        "the draft then sees each image too (it cuts images as the target's does) and drafts the text "
        "about it better; without it the draft reads the text around images. A pair.toml names it as "
        "draft_mmproj.",
        group="model",
    )
    n_ctx: int = _f(
        4096,
        "Context size in tokens, allocated once at load.",
        group="model",
        scope=MODEL_CONTEXT,
        ge=8,
        le=1 << 24,
    )
    n_batch: int = _f(
        512, "Logical batch size for prompt processing.", group="model", scope=MODEL_CONTEXT, ge=1, le=1 << 24
    )
    n_ubatch: int = _f(
        512, "Physical micro-batch size.", group="model", scope=MODEL_CONTEXT, ge=1, le=1 << 24
    )
    n_threads: int | None = _f(
        None, "CPU threads (default: physical cores).", group="model", ge=1, le=GGML_MAX_THREADS
    )
    n_gpu_layers: int = _f(-1, "Layers to offload to the GPU (-1 = all).", group="model", ge=-1, le=INT32_MAX)
    flash_attn: str = _f(
        "auto",
        "Flash attention: auto, on or off.",
        group="model",
        choices=("auto", "on", "off"),
        scope=MODEL_CONTEXT,
    )
    kv_type: str = _f(
        "f16",
        "KV cache type: f16, q8_0, q4_0 or f32.",
        group="model",
        choices=("f16", "q8_0", "q4_0", "f32"),
        scope=MODEL_CONTEXT,
    )
    rope_scaling: str | None = _f(
        None,
        "RoPE scaling past the model's trained context: none, linear or yarn (default: the GGUF's own). "
        "With --rope-scale N, yarn stretches a model trained on C tokens to N*C (llama-server's "
        "--rope-scaling).",
        group="model",
        choices=("none", "linear", "yarn"),
        scope=MODEL_CONTEXT,
    )
    rope_scale: float | None = _f(
        None,
        "RoPE context scaling factor N: positions are stretched N times (default: the GGUF's).",
        group="model",
        scope=MODEL_CONTEXT,
        ge=1,
        le=1024,
    )
    rope_freq_base: float | None = _f(
        None, "RoPE base frequency (default: the GGUF's).", group="model", scope=MODEL_CONTEXT, gt=0, le=1e12
    )
    yarn_orig_ctx: int | None = _f(
        None,
        "YaRN's original context: the tokens the model was trained on (default: the GGUF's).",
        group="model",
        scope=MODEL_CONTEXT,
        ge=1,
        le=1 << 24,
    )
    backend_top_k: int = _f(
        -1,
        "Rows come back from llama_decode as their N largest logits (llama.cpp's backend top-k: no "
        "whole-vocabulary row is copied out or read) for requests that need no more of them; 0 = whole "
        "rows, -1 = auto: 64 where the output layer is on a GPU, 0 on a CPU (slower there).",
        group="model",
        ge=-1,
        le=4096,
    )
    allow_partial_offload: bool = _f(
        False, "Run even if a model does not fit fully on the GPU.", group="model"
    )
    yes: bool = _f(
        False, "Download a --pair preset that is not here yet without asking.", group="model", flag="--yes"
    )
    parallel: int = _f(
        1,
        "Sequences served at once (slots); each gets the full --n-ctx of KV cache. serve defaults to 4.",
        group="model",
        ge=1,
        le=256,
    )
    rpc: str | None = _f(
        None,
        "Split the target over rpc-servers: HOST:PORT[,HOST:PORT...] (trusted networks only; "
        "the draft stays local). See docs/rpc.md.",
        group="model",
    )
    tuner_cache: bool = _f(
        True, "Remember measured costs and acceptance per pair and machine across runs.", group="model"
    )
    cache_reuse: int = _f(
        0,
        "Reuse cached runs of at least this many tokens that moved in the new prompt, by shifting "
        "their positions (llama-server's --cache-reuse; an editor resends the file with the cursor "
        "moved and its start cut). The moved runs keep what they were computed with before. "
        "0 = off; a recurrent or hybrid model cannot shift (refused).",
        group="model",
        ge=0,
        le=1 << 24,
    )
    prompt_cache: bool = _f(
        False,
        "Keep the KV state of long prompts on disk (--prompt-cache-dir): after a restart or a "
        "router reload, a prompt sharing a saved prefix loads it instead of evaluating it again "
        "(target and draft). serve defaults to on.",
        group="model",
    )
    prompt_cache_dir: Path | None = _f(
        None,
        "Where --prompt-cache keeps its files (default: the user's cache folder, "
        "~/.cache/localspec/prompts).",
        group="model",
    )
    prompt_cache_gib: float = _f(
        4.0,
        "The most the prompt cache folder holds, in GiB; past it the least recently used prefixes go.",
        group="model",
        gt=0,
        le=1 << 20,
    )
    prompt_cache_min: int = _f(
        1024,
        "A prompt prefix is saved to disk, or loaded from it, only when that is at least this many "
        "tokens more than the disk (saving) or the memory (loading) already holds.",
        group="model",
        ge=1,
        le=1 << 24,
    )
    cost_bound: float = _f(
        2.0,
        "A request's rounds may cost at most this many plain steps per token they emit: past it its "
        "drafts are cut back, down to plain decoding (a draft_max or draft_min is an ask, not an "
        "order; the text is the same). 0 = no bound (what bench measures).",
        group="model",
        ge=0,
        le=1000,
    )
    # -- images (with --mmproj) -------------------------------------------------------------
    image_max_bytes: int = _f(
        5_000_000, "Largest image accepted, in bytes as sent (PNG, JPEG, WebP, GIF or BMP).",
        group="images", ge=1, le=1 << 32,
    )  # fmt: skip
    image_max_pixels: int = _f(
        4096 * 4096,
        "Largest image accepted, in pixels (width x height), read from its header before any pixel is "
        "decoded (a decompression bomb is refused unread).",
        group="images", ge=1, le=1 << 28,
    )  # fmt: skip
    max_images: int = _f(8, "Images one request (or one chat) may carry.", group="images", ge=0, le=256)
    # -- sampling ------------------------------------------------------------------------------
    max_tokens: int = _f(
        256,
        "Maximum tokens to generate (a request's own limit replaces it; a Responses request with none, "
        "as OpenAI's, runs until the answer or the context ends).",
        group="sampling", ge=1, le=1 << 24,
    )  # fmt: skip
    temperature: float = _f(
        0.8, "Sampling temperature; 0 = greedy.", group="sampling", ge=0, le=MAX_TEMPERATURE
    )
    top_k: int = _f(40, "Keep the k most likely tokens (0 = off).", group="sampling", ge=0, le=INT32_MAX)
    top_p: float = _f(0.95, "Nucleus sampling mass (1 = off).", group="sampling", gt=0, le=1)
    min_p: float = _f(
        0.05, "Drop tokens below min_p x the top probability (0 = off).", group="sampling", ge=0, lt=1
    )
    seed: int | None = _f(None, "Random seed (default: random).", group="sampling", ge=0, le=UINT64_MAX)
    stop: tuple[str, ...] = _f(
        (), "Stop string (repeatable); never emitted.", group="sampling", multiple=True
    )
    # code completion's stops and sampler, as llama-server's /infill has them
    n_indent: int = _f(
        0, "Stop at a line (after the first newline) indented less than N spaces or tabs; the text "
        "ends before its first character (0 = off).", group="sampling", ge=0, le=INT32_MAX,
    )  # fmt: skip
    t_max_predict_ms: int = _f(
        0, "Stop at the first newline once generating has taken this many ms (0 = off).",
        group="sampling", ge=0, le=INT32_MAX,
    )  # fmt: skip
    infill: bool = _f(
        False, "llama.cpp's infill sampler (fill-in-the-middle): tokens that are prefixes of one "
        "another share their probability, then weak text gives way to end-of-text (greedy too).",
        group="sampling",
    )  # fmt: skip
    # penalties and biases change the logits before top-k, as llama.cpp's sampler chain does
    repeat_penalty: float = _f(
        1.0, "Divide the logit of every token in the last --repeat-last-n by this (1 = off; 0.01 to 100).",
        group="sampling", ge=MIN_REPEAT_PENALTY, le=MAX_TEMPERATURE,
    )  # fmt: skip
    presence_penalty: float = _f(
        0.0, "Subtract this from the logit of every token in the last --repeat-last-n.",
        group="sampling", ge=-2, le=2,
    )  # fmt: skip
    frequency_penalty: float = _f(
        0.0, "Subtract this x its count from the logit of every token in the last --repeat-last-n.",
        group="sampling", ge=-2, le=2,
    )  # fmt: skip
    repeat_last_n: int = _f(
        64, "Tokens (prompt and output) the penalties look back over; 0 = none, -1 = all.",
        group="sampling", ge=-1, le=INT32_MAX,
    )  # fmt: skip
    logit_bias: tuple[tuple[int, float], ...] = _f(
        (), "Add BIAS to token ID's logit: ID=BIAS, repeatable (-100 all but bans it).",
        group="sampling", multiple=True, ge=-MAX_LOGIT_BIAS, le=MAX_LOGIT_BIAS,
    )  # fmt: skip
    # -- output --------------------------------------------------------------------------------
    logprobs: bool = _f(False, "Report each emitted token's log-probability.", group="output")
    top_logprobs: int = _f(
        0, "With logprobs, also the N most likely tokens at each position.", group="output", ge=0, le=20
    )
    post_sampling_probs: bool = _f(
        False,
        "With logprobs, report the distribution each token was drawn from (after penalties, top-k, "
        "top-p, min-p and temperature; llama-server's field) instead of the model's own log-softmax "
        "(after logit_bias and the constraint's mask).",
        group="output",
    )
    reasoning_format: str = _f(
        "auto",
        "Chat answers: split <think> reasoning into reasoning_content (auto, deepseek) or keep it "
        "inline (none).",
        group="output",
        choices=("auto", "deepseek", "none"),
    )
    # -- speculation ---------------------------------------------------------------------------
    spec: bool = _f(True, "Use speculative decoding when a draft is given.", group="spec")
    draft_max: int | Literal["auto"] = _f(
        "auto",
        "Tokens drafted per round: a number, or auto (tuned online).",
        group="spec",
        ge=1,
        le=MAX_DRAFT,
    )
    draft_min: int = _f(
        0, "Never draft fewer than this many tokens per round.", group="spec", ge=0, le=MAX_DRAFT
    )
    draft_p_min: float = _f(
        0.0, "Stop drafting when the draft's top probability falls below this.", group="spec", ge=0, lt=1
    )
    spec_mode: str = _f(
        "coupled",
        "Verification for sampling: pq (speculative sampling), match (llama.cpp's sample-and-match) or "
        "coupled (draft and target share position-keyed noise: lossless, and a seed mostly gives "
        "--no-spec's text; verify batches move logits across near-ties, so at K=3 texts part after "
        "9-41 tokens; docs/sampling.md).",
        group="spec",
        choices=SPEC_MODES,
    )
    lookup: str = _f(
        "on",
        "N-gram lookup drafts from the prompt and output so far (free: no draft model time): on "
        "(chained with the draft model, the tuner picks the source), off, or only (no draft model is "
        "loaded: a speedup from one GGUF).",
        group="spec",
        choices=LOOKUP_MODES,
    )
    history_tokens: int = _f(
        0,
        "Lookup drafts from this model's earlier requests too: the prompts and outputs it remembers, "
        "this many tokens of them at most (oldest out; 0: off). After a request's own lookup, a match "
        "in them is offered as far as what followed it there agrees with itself, priced by the "
        "tuner like any source (agents resend the same tools and edits). Each model served keeps "
        "its own.",
        group="spec",
        scope=(FLAG, CONFIG),  # the server's memory, as tuner_cache is its disk
        ge=0,
        le=1 << 26,
    )
    grammar_drafts: bool = _f(
        True,
        "With a JSON schema or grammar, draft under it: tokens it forces are free drafts and the draft "
        "model proposes only what it allows (off: drafts ignore it, as llama.cpp's do; for comparison).",
        group="spec",
    )
    # -- constrained output (localspec/constrain) ----------------------------------------------
    json_schema: str | None = _f(
        None,
        'Make the output JSON that follows this schema (a file; one holding {"type": "object"} '
        "gives any JSON object). Speculation stays on: what the schema fixes is drafted for free.",
        group="constraint",
        file=True,
    )
    json_strict: bool = _f(
        True, "Refuse a JSON schema keyword that cannot be enforced (off: ignore it).", group="constraint"
    )
    grammar: str | None = _f(
        None,
        "Make the output follow this grammar (a file): GBNF, as llama.cpp writes it, or Lark, as "
        "llguidance does.",
        group="constraint",
        file=True,
    )
    # -- acceptance log (localspec/acclog.py) ----------------------------------------------------
    log: Path | None = _f(
        None, "Append one JSON line per generation to this file (default: the user state dir).", group="log"
    )
    no_log: bool = _f(False, "Do not write the acceptance log.", group="log", flag="--no-log")
    trace: bool = _f(False, "Add per-round records (K, drafted, accepted, ms) to the log.", group="log")

    # -- server (`localspec serve`) -----------------------------------------------------------
    host: str = _f(
        "127.0.0.1", "Address to listen on (anything but loopback exposes the model).", group="server"
    )
    port: int = _f(8080, "TCP port to listen on.", group="server", ge=0, le=65535)
    api_key: str | None = field(  # repr=False: never printed in a log or a traceback
        default=None,
        repr=False,
        metadata={
            "help": f"Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every request (set {API_KEY_ENV} rather "
            "than the flag: a command line is visible to every user of the machine).",
            "group": "server",
            "envvar": API_KEY_ENV,
        },
    )
    allowed_hosts: tuple[str, ...] = _f(
        (),
        "A host name clients reach this server by, beyond loopback and the listening address "
        "(repeatable; '*.example.com' for a domain, '*' for any, which lets DNS rebinding through).",
        group="server",
        multiple=True,
    )
    cors_origins: tuple[str, ...] = _f(
        (),
        "A web origin (scheme://host[:port]) whose pages may call the API from a browser "
        "(repeatable; none by default, '*' for any).",
        group="server",
        multiple=True,
    )
    max_queue: int = _f(
        64, "Requests that may wait for a slot; more get 503 + Retry-After.", group="server", ge=0, le=1 << 20
    )
    max_body: int = _f(
        8_000_000, "Largest request body in bytes; larger gets 413.", group="server", ge=1, le=1 << 40
    )
    refusal_rate: float = _f(
        50, "Refusals (4xx answers) a second sent at once, after a burst of two seconds' worth; past it "
        "each waits its turn (2 s at most) before it is sent, so clients that keep being refused slow "
        "down instead of taking the CPU from decoding (0 = off).", group="server", ge=0, le=1e6,
    )  # fmt: skip
    stream_keepalive: float = _f(
        15, "Seconds a stream may stay silent (a long prompt being evaluated, a wait for a slot) before "
        "it sends its dialect's keepalive: Anthropic's ping, Responses' response.in_progress, an SSE "
        "comment, an empty Ollama line (0 = never).", group="server", ge=0, le=3600,
    )  # fmt: skip
    embed_ctx: int = _f(
        0,
        "Longest input /v1/embeddings and /api/embed take, in tokens: the served model's embeddings "
        "context, made on the first such request (0: no embeddings; serve's default is 512).",
        group="server", ge=0, le=1 << 20,
    )  # fmt: skip
    # -- router mode: `serve` with no --pair/--target serves every model of a folder (docs/serving.md)
    models_dir: Path | None = _f(
        None,
        "Serve every model in this folder by name, each loaded when first asked for (default, when "
        "no --pair or --target is given: the models folder, LOCALSPEC_MODELS).",
        group="server",
    )
    models_max: int = _f(
        4, "Router mode: models loaded at once; past it the least recently used idle one is unloaded "
        "(0 = no limit).", group="server", ge=0, le=1024,
    )  # fmt: skip
    idle_unload: float = _f(
        0, "Router mode: unload a model idle this many seconds (0 = never).", group="server", ge=0, le=1e9
    )
    default_model: str | None = _f(
        None,
        "Router mode: the model for requests that name none, and for names no model has from clients "
        "that send their own (Claude Code's claude-... names).",
        group="server",
    )

    # -- derived -------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        # every source (flags, TOML, pair presets, request fields, replace()) passes through here
        # `--draft NAME`: a kind other than the draft model loads no file, its name is enough
        if isinstance(self.draft, str) and self.draft != "model" and self.draft in drafter_names():
            object.__setattr__(self, "draft_source", self.draft)
            object.__setattr__(self, "draft", None)
        for f in fields(self):
            object.__setattr__(self, f.name, check_value(f, self._hints()[f.name], getattr(self, f.name)))
        k = self.draft_k
        if k is not None and k + 1 > self.n_batch:
            raise LocalspecError(
                f"--draft-max {k} needs a verify batch of {k + 1} tokens but --n-batch is {self.n_batch}; "
                f"lower --draft-max to {self.n_batch - 1} or raise --n-batch"
            )
        if k is None and self.draft_min > min(AUTO_K_MAX, self.n_batch - 1):
            raise LocalspecError(
                f"--draft-min {self.draft_min} is above the most --draft-max auto drafts "
                f"({min(AUTO_K_MAX, self.n_batch - 1)}); lower --draft-min or give a fixed --draft-max"
            )
        parse_endpoints(self.rpc)  # validates
        if self.json_schema is not None and self.grammar is not None:
            raise LocalspecError("give a JSON schema or a grammar, not both")
        for h in self.allowed_hosts:
            if not _host_pattern(h):
                raise LocalspecError(
                    f"--allowed-hosts takes host names such as 'box.local' or '*.example.com', "
                    f"no port or scheme (got {h!r})"
                )
        for o in self.cors_origins:
            if o != "*" and not re.fullmatch(r"https?://[^/\s]+", o):
                raise LocalspecError(
                    f"--cors-origins takes origins such as 'http://localhost:3000', with no path or "
                    f"trailing slash (got {o!r})"
                )

    @classmethod
    def _hints(cls) -> dict[str, Any]:
        if "_HINTS" not in cls.__dict__:
            cls._HINTS = typing.get_type_hints(cls)  # type: ignore[attr-defined]
        return cls._HINTS  # type: ignore[attr-defined]

    @property
    def draft_k(self) -> int | None:
        """The fixed draft length, or None for auto."""
        return None if self.draft_max == "auto" else self.draft_max

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def override(self, layer: str, **changes: Any) -> "Settings":
        """`replace` for changes from a less trusted layer (a request): a setting outside the
        layer's scope is refused by name."""
        _, refused = split_scope(changes, layer)
        if refused:
            raise LocalspecError(
                f"{refused[0]} cannot be set per {layer}: it is the server's own setting (a flag or --config)"
                if refused[0] in _NAMES
                else f"unknown setting: {refused[0]}"
            )
        return self.replace(**changes)

    def context_args(self) -> dict[str, Any]:
        """The keyword arguments of `backend.Context` that these settings decide."""
        names = ("n_ctx", "n_batch", "n_ubatch", "n_threads", "flash_attn", "kv_type", "backend_top_k", *ROPE)
        return {n: getattr(self, n) for n in names} | {"n_seq": self.parallel}

    @property
    def image_limits(self) -> Limits:
        return Limits(self.image_max_bytes, self.image_max_pixels)

    @property
    def rpc_endpoints(self) -> tuple[str, ...]:
        """The rpc-servers of --rpc, parsed."""
        return parse_endpoints(self.rpc)

    @property
    def drafter(self) -> str | None:
        """The kind of drafter that drafts (its --draft-source name; localspec/draft_kinds), or None:
        lookup drafts only (--lookup only, or a draft model's source with no --draft GGUF), or no
        speculation. A kind other than the draft model loads no --draft GGUF."""
        if not self.spec or self.lookup == "only" or (self.draft_source == "model" and self.draft is None):
            return None
        return self.draft_source

    @property
    def speculative(self) -> bool:
        """The draft model is loaded and drafts."""
        return self.drafter == "model"

    @property
    def uses_lookup(self) -> bool:
        return self.spec and self.lookup != "off"

    # -- sources -------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        *,
        config: Path | None = None,
        defaults: dict[str, Any] | None = None,
        resolve_pair: PairResolver | None = None,
        warn: Callable[[str], None] | None = None,
        **overrides: Any,
    ) -> "Settings":
        """Build settings from a command's own `defaults` (e.g. serve's parallel=4), defaults.toml, an
        optional config file, the pair and `overrides` (None values in overrides mean 'not given').
        `resolve_pair(pair, yes)` turns a pair name into a folder; without one a pair is a path.
        `warn` gets one line per pair.toml key outside a pair's scope (ignored); default: a warning."""
        values: dict[str, Any] = dict(defaults or {})
        values.update(_flat(read_toml(paths.package_data("defaults.toml"), "the shipped defaults")))
        if config is not None:
            values.update(
                _flat(read_toml(Path(config), "config file", missing=f"config file not found: {config}"))
            )
        given = {k: v for k, v in overrides.items() if v is not None and v != ()}
        pair = given.get("pair", values.get("pair"))
        if pair is not None and not (given.get("target") or given.get("draft")):
            pair = check_value(setting_field("pair"), cls._hints()["pair"], pair)
            if resolve_pair is not None:
                pair = resolve_pair(pair, bool(given.get("yes", values.get("yes", False))))
            values["pair"] = pair
            if "pair" in given:
                given["pair"] = pair
            p = read_pair(Path(pair))
            kept, refused = split_scope(p.runtime, PAIR)
            for name in refused:
                (warn or _warn)(_pair_refusal(p.path, name))
            values.update(kept)
            values["target"], values["draft"] = p.target, p.draft
            if p.mmproj is not None:
                values["mmproj"] = p.mmproj
            if p.draft_mmproj is not None:
                values["draft_mmproj"] = p.draft_mmproj
        values.update(given)
        return cls(**_coerce(values))


def scope(f: dataclasses.Field) -> tuple[str, ...]:
    """The layers that may set field `f` (flags and --config may set every one)."""
    return f.metadata.get("scope") or _GROUP_SCOPE.get(f.metadata.get("group", ""), (FLAG, CONFIG))


def split_scope(values: dict[str, Any], layer: str) -> tuple[dict[str, Any], list[str]]:
    """(the values `layer` may set, the names of the others: out of its scope, or not settings)."""
    ok = {f.name for f in fields(Settings) if layer in scope(f)}
    return {k: v for k, v in values.items() if k in ok}, [k for k in values if k not in ok]


def _pair_refusal(path: Path, name: str) -> str:
    why = (
        "a pair may set only sampling, speculation and context settings (docs/settings.md)"
        if name in _NAMES
        else "not a setting"
    )
    return f"{path}: [runtime] {name} ignored: {why}"


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):  # sections are only for readability: [model], [sampling], [spec]
            flat.update(v)
        else:
            flat[k] = v
    return flat


def _coerce(values: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise LocalspecError(f"unknown setting(s): {', '.join(unknown)}")
    if isinstance(values.get("rpc"), (list, tuple)):  # TOML: rpc = ["host:port", ...]
        values = values | {"rpc": ",".join(map(str, values["rpc"]))}
    return values  # types and ranges are checked by Settings itself


def check_value(f: dataclasses.Field, hint: Any, v: Any) -> Any:
    """`v` checked against field `f`'s type and range, normalised (str -> Path, 256.0 -> 256).

    Whole-number floats are accepted for integer settings (`max_tokens = 256.0` in TOML, 256.0 in
    JSON); anything else of the wrong type is refused with the setting's name."""
    name, meta = f.name, f.metadata
    words = [w for a in typing.get_args(hint) if typing.get_origin(a) is Literal for w in typing.get_args(a)]
    if words:  # a number or a word: draft_max = 4, "4" or "auto"
        return _number_or_word(name, meta, v, words)
    base = hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        if v is None:
            return None
        base = next(a for a in typing.get_args(hint) if a is not type(None))
    if base is bool:
        if not isinstance(v, bool):
            raise LocalspecError(f"{name} must be true or false (got {v!r})")
        return v
    if base is int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise LocalspecError(f"{name} must be a whole number (got {v!r})")
        return _in_range(name, meta, v)
    if base is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise LocalspecError(f"{name} must be a number (got {v!r})")
        if not math.isfinite(v):
            raise LocalspecError(f"{name} must be a finite number (got {v})")
        return _in_range(name, meta, float(v))
    if base is Path:
        if not isinstance(v, (str, Path)) or not str(v) or "\0" in str(v):
            raise LocalspecError(f"{name} must be a file path (got {v!r})")
        return Path(v)  # not checked for UTF-8: file names on Linux may be any bytes
    if name == "logit_bias":
        return _logit_bias(v)
    if typing.get_origin(base) is tuple:  # stop strings
        items = (v,) if isinstance(v, str) else v
        if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
            raise LocalspecError(f"{name} must be a string or a list of strings (got {v!r})")
        if len(items) > MAX_STOP_STRINGS:
            raise LocalspecError(f"at most {MAX_STOP_STRINGS} {name} strings (got {len(items)})")
        for s in items:
            if not s or len(s) > MAX_STOP_CHARS:
                raise LocalspecError(
                    f"{name} strings must have 1 to {MAX_STOP_CHARS} characters (got {len(s)})"
                )
            require_text(s, f"the {name} string {s[:40]!r}")
        return tuple(items)
    if not isinstance(v, str):
        raise LocalspecError(f"{name} must be a string (got {v!r})")
    choices = field_choices(meta)
    if choices and v not in choices:
        raise LocalspecError(f"{name} must be one of {', '.join(choices)} (got {v!r})")
    return v


def field_choices(meta: Any) -> tuple[str, ...] | None:
    """A field's choices (a tuple, or a callable giving one: the drafter kinds' names)."""
    choices = meta.get("choices")
    return choices() if callable(choices) else choices


def _number_or_word(name: str, meta: Any, v: Any, words: list[str]) -> Any:
    """A whole number in the field's range (given as one, as a whole float or as digits) or one of
    `words` (any case)."""
    flag = "--" + name.replace("_", "-")
    if isinstance(v, str) and v.strip().lower() in words:
        return v.strip().lower()
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise LocalspecError(f"{flag} must be a number or {' or '.join(map(repr, words))} (got {v!r})")
    if not meta["ge"] <= v <= meta["le"]:
        raise LocalspecError(f"{flag} must be between {meta['ge']} and {meta['le']} (got {v})")
    return v


def _logit_bias(v: Any) -> tuple[tuple[int, float], ...]:
    """{id: bias} (a request, TOML), [(id, bias)], or ["ID=BIAS"] (flags) -> sorted (id, bias) pairs."""
    if isinstance(v, dict):
        items = list(v.items())
    elif isinstance(v, (list, tuple)):
        items = [tuple(x.split("=", 1)) if isinstance(x, str) and "=" in x else x for x in v]
    else:
        items = None
    out: dict[int, float] = {}
    for item in items if items is not None else [None]:
        try:
            tok, bias = item  # type: ignore[misc]
            tok = int(tok) if not isinstance(tok, bool) else None
            bias = float(bias) if not isinstance(bias, bool) else None
        except (TypeError, ValueError):
            tok = bias = None
        if tok is None or bias is None or tok < 0 or not math.isfinite(bias) or abs(bias) > MAX_LOGIT_BIAS:
            raise LocalspecError(
                f"logit_bias maps token ids to biases within +-{MAX_LOGIT_BIAS} (ID=BIAS on the command "
                f'line, {{"15043": -100}} in a request); got {item if items is not None else v!r}'
            )
        out[tok] = bias
    return tuple(sorted(out.items()))


def _host_pattern(h: str) -> bool:
    """'*', an IP address, a host name, or '*.' and a domain (what a Host allowlist can match)."""
    try:
        ipaddress.ip_address(h.strip("[]"))
        return True
    except ValueError:
        return h == "*" or not ("*" in h.removeprefix("*.") or "/" in h or ":" in h or not h.strip("*."))


def _in_range(name: str, meta: Any, v: float) -> Any:
    for key, ok, word in (
        ("ge", lambda a, b: a >= b, ">="),
        ("gt", lambda a, b: a > b, ">"),
        ("le", lambda a, b: a <= b, "<="),
        ("lt", lambda a, b: a < b, "<"),
    ):
        if key in meta and not ok(v, meta[key]):
            raise LocalspecError(f"{name} must be {word} {meta[key]} (got {v})")
    return v


def setting_field(name: str) -> dataclasses.Field:
    return next(f for f in fields(Settings) if f.name == name)


def setting_fields(group: str | None = None) -> list[dataclasses.Field]:
    return [f for f in fields(Settings) if group is None or f.metadata.get("group") == group]


_NAMES = frozenset(f.name for f in fields(Settings))
