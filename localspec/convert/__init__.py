"""Model conversion: Hugging Face checkpoints -> GGUF, quantization, and the embedded stand-in pair.

Every output is written to a temporary file beside its destination and renamed into place only
when complete, so an interrupted run never leaves a finished-looking file.
"""
