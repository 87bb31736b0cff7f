"""localspec: lossless speculative decoding on llama.cpp for local models."""

__version__ = "0.1.0"
