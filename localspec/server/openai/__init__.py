"""OpenAI's dialects: chat completions, completions and the model list (one module each), over the
shared wire types (schemas.py), formatting (common.py) and error shape (errors.py)."""
