"""The llama.cpp boundary: the only package that imports `llama_cpp`. Every C handle has one owner
and is freed deterministically through `close()` / context managers."""

from localspec.llama.backends import CpuVariant, cpu_variant
from localspec.llama.context import FLASH_ATTN, KV_TYPES, Context, decode_busy_s
from localspec.llama.devices import DEVICE_KINDS, Device, device_array, devices, supports_gpu_offload
from localspec.llama.embed import EMBED_SEQS, Embedder
from localspec.llama.interrupt import Interrupt
from localspec.llama.log import (
    default_threads,
    llama_cpp_version,
    log_lines,
    log_mark,
    log_since,
    system_info,
)
from localspec.llama.model import Model, VocabFacts
from localspec.llama.quantize import QUANT_TYPES, quantize
from localspec.llama.rpc import add_rpc_servers, on_rpc_lost, rpc_supported
from localspec.llama.vision import ImageRun, Projector

__all__ = [
    "DEVICE_KINDS", "EMBED_SEQS", "Embedder", "FLASH_ATTN", "KV_TYPES", "QUANT_TYPES", "Context", "CpuVariant", "Device",
    "ImageRun", "Interrupt", "Model", "Projector", "VocabFacts", "cpu_variant",
    "add_rpc_servers", "decode_busy_s", "default_threads", "device_array", "devices", "llama_cpp_version",
    "log_lines", "log_mark", "log_since", "on_rpc_lost", "quantize", "rpc_supported", "supports_gpu_offload",
    "system_info",
]  # fmt: skip
