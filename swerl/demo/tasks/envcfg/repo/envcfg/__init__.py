"""envcfg: typed settings read from environment variables."""

from envcfg.errors import ConfigError, MissingSetting
from envcfg.settings import Settings

__all__ = ["ConfigError", "MissingSetting", "Settings"]
