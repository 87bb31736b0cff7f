"""Ollama's API (/api/*): chat and generate streamed as NDJSON (chat.py), embeddings (embed.py), and
the model calls its clients make (models.py), in Ollama's wire format and error shape."""
