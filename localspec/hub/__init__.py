"""Real pairs from the Hugging Face Hub: presets (configs/pairs/*.toml), `pull`, `list`, and the
resolution of `--pair NAME` that every command shares. Downloads go through huggingface_hub, so its
cache, token, HF_ENDPOINT and HF_HUB_OFFLINE conventions apply unchanged."""
