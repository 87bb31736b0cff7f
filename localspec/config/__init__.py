"""Settings: the one source of every flag, TOML key and request field (pure: parsing and checks)."""

from localspec.config.settings import Settings

__all__ = ["Settings"]
