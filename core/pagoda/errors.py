"""Errors that Pagoda raises at its boundaries. Each message names the problem and the fix."""


class PagodaError(Exception):
    """Base class for every error Pagoda raises on purpose."""


class UnknownChoiceError(PagodaError, ValueError):
    """A one-of-N choice (backend, platform, quantization, scheduler, model) names nothing registered."""


class IncompatibleChoiceError(PagodaError, ValueError):
    """A registered choice cannot run in this setting (platform, dtype, head size, ...)."""


class PluginLoadError(PagodaError):
    """A plugin failed to import or to register; reported and skipped, never fatal to the host."""


class ModelLoadError(PagodaError):
    """A checkpoint is missing, corrupt, or does not match the model that reads it."""


class RequestError(PagodaError, ValueError):
    """A request is invalid (prompt too long, empty prompt, bad sampling values)."""


class ConfigError(PagodaError, ValueError):
    """An engine setting is invalid (a malformed ``--speculative-config``, an out-of-range value)."""
