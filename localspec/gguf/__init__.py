"""GGUF files without llama.cpp: header validation, pair compatibility, the memory plan."""
