"""What a GGUF's architecture means for speculation, from its header alone (no weights loaded):
its memory kind - a KV cache `seq_rm` cuts anywhere, recurrent state, or both - how llama.cpp can
roll that state back (the blocks a file carries to draft with are its kind of drafter's to read:
localspec/draft_kinds).

The lists mirror the pinned llama.cpp (src/llama-arch.cpp: llm_arch_is_recurrent, llm_arch_is_hybrid,
llm_arch_supports_rs_rollback); once a model is loaded, llama.h's own answer is the authority
(llama/recurrent.py), and `doctor` reports that one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localspec.gguf.file import GGUFHeader, read_header

RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID = frozenset(
    {
        "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
        "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe",
        "qwen4exp", "deepseek4", "minimax-01",
    }
)  # fmt: skip
# archs whose graphs keep the last n_rs_seq states, so seq_rm can roll back within a verify
RS_ROLLBACK = frozenset(
    {"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
     "lfm2", "lfm2moe", "bailingmoe3"}
)  # fmt: skip


@dataclass(frozen=True)
class MemoryFacts:
    arch: str
    kind: str  # attention | recurrent | hybrid
    rollback: str  # truncate (seq_rm) | rs (n_rs_seq, within a verify) | snapshot (save, restore, replay)

    def describe(self) -> str:
        """One line for doctor / check-pair / list."""
        how = {
            "truncate": "rollback by cutting the KV cache (free)",
            "rs": "rollback through llama.cpp's per-token state snapshots (n_rs_seq: no copies)",
            "snapshot": "rollback by saving and restoring the state (a copy per round, a replay per rejection)",
        }[self.rollback]
        return f"{self.kind} memory ({self.arch}): {how}"


def facts_from_header(h: GGUFHeader) -> MemoryFacts:
    arch = h.arch
    kind = "hybrid" if arch in HYBRID else "recurrent" if arch in RECURRENT else "attention"
    rollback = "truncate" if kind == "attention" else "rs" if arch in RS_ROLLBACK else "snapshot"
    return MemoryFacts(arch, kind, rollback)


def memory_facts(path: str | Path) -> MemoryFacts:
    return facts_from_header(read_header(path))
