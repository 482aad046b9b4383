"""The one error of the service stack."""


class ServicesError(RuntimeError):
    """A service could not be started or is not what its pid file says."""
