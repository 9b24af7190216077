"""Errors a user sees as one line (the CLI prints ``str(err)`` and exits non-zero)."""


class IrforgeError(Exception):
    """Base of every error that is the user's to fix (bad config, missing artifact, ...)."""


class ConfigError(IrforgeError):
    pass


class ArtifactError(IrforgeError):
    pass


class AccountingError(IrforgeError):
    """Rows in != rows out + rows excluded: a stage lost or invented rows."""
