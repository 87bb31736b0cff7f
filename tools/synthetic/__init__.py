"""Synthetic GGUF models, generated from a seed and SmolLM2's vocabulary - for tests, research and the
GPU check, not part of the package (issue #47): `pair.py` builds a llama pair at any scale (the GPU
check's stand-in for a real one), `arch.py` small random models of the architectures whose memory is
not a plain KV cache (Qwen3.5's hybrid with its MTP block, Mamba). Tests import `tools.synthetic`
(pytest puts the checkout on the path); tools and research scripts put the checkout on sys.path
first."""
