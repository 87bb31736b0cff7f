"""Chat: the model's own template (from the GGUF), and a conversation kept as token ids."""
