"""The prompt cache on disk (--prompt-cache): a long prompt's KV state outlives the process, so the
next request sharing it after a restart or a router reload loads it instead of evaluating it.
entry.py is the file, store.py the folder, warm.py the scheduler's side; `open_disk` keys a loaded
pair's contexts."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from localspec import llama, paths
from localspec.config.settings import Settings
from localspec.engine.loader import LoadedPair
from localspec.engine.prompt_disk.store import Store
from localspec.engine.prompt_disk.warm import PromptDisk
from localspec.errors import LocalspecError
from localspec.files import fingerprint

FORMAT = 1  # of the key: a change to what it names makes every older file a stranger
# a state still being written when the engine closes is worth waiting for (the next start loads
# it), a stuck disk is not; within the router's grace for an unloading model (STOP_GRACE_S, 15 s)
CLOSE_WAIT_S = 10.0


def open_disk(s: Settings, pair: LoadedPair, log: Callable[[str], None]) -> PromptDisk | None:
    """The prompt cache for this pair's contexts, or None: off, or a memory whose state is more than
    its tokens' KV (a recurrent or hybrid model's; a head's, fed by the target's decodes)."""
    if not s.prompt_cache:
        return None
    dec = pair.decision
    assert dec is not None and pair.target_ctx is not None
    roles = [("target", pair.target_ctx, s.target, dec.target_gpu_layers)]
    if pair.draft_ctx is not None:
        roles.append(("draft", pair.draft_ctx, s.draft, dec.draft_gpu_layers))
    for role, ctx, _, _ in roles:
        if not ctx.saves_state:
            # a drafter that is not a model of its own (an MTP head) is named by its source
            what = (
                f"{ctx.source} drafter"
                if role == "draft" and ctx.source != "draft"
                else f"{ctx.memory_kind} memory"
            )
            log(f"prompt cache on disk: off (the {role}'s {what} holds more than a KV cache of its tokens)")
            return None
    folder = s.prompt_cache_dir or paths.prompt_cache_dir()
    cap = int(s.prompt_cache_gib * (1 << 30))
    try:
        stores = [
            (
                ctx,
                Store(folder, key(s, ctx, Path(path), layers), cap_bytes=cap, max_tokens=ctx.n_ctx, log=log),
            )
            for _, ctx, path, layers in roles
        ]
    except (OSError, LocalspecError) as e:
        log(
            f"warning: prompt cache on disk: off, {folder} is not usable ({getattr(e, 'strerror', None) or e})"
        )
        return None
    log(f"prompt cache on disk: {folder}, {len(stores[0][1])} saved prefixes for this target")
    return PromptDisk(stores, min_tokens=s.prompt_cache_min, log=log)


def key(s: Settings, ctx: llama.Context, model: Path, gpu_layers: int) -> dict[str, Any]:
    """What one context's saved state depends on: the model file, the llama.cpp build and devices
    that computed it (another one's numbers differ in the last bits, and its state format may), and
    the settings that change the cache's contents: the KV type, the V layout flash attention picks,
    RoPE (keys are cached rotated) and the context length (LongRoPE's factors follow it)."""
    return {
        "format": FORMAT,
        "model": fingerprint(model),
        "llama_cpp": llama.llama_cpp_version(),
        "build": hashlib.sha256(llama.system_info().encode()).hexdigest()[:16],
        "devices": sorted(f"{d.name}:{d.description}" for d in llama.devices() if d.kind != "cpu"),
        "rpc": s.rpc,
        "gpu_layers": gpu_layers,
        "n_ctx": ctx.n_ctx,
        "kv_type": s.kv_type,
        "flash_attn": s.flash_attn,
        "rope": [s.rope_scaling, s.rope_scale, s.rope_freq_base, s.yarn_orig_ctx],
    }
