"""The one error of the proxy: a request it will not forward, with the reason."""


class RequestRefused(Exception):
    """The request is not allowed; the message says why (it is sent back with a 403)."""


class NetworkMissing(RequestRefused):
    """The sandbox network asked for does not exist (answered 404, so that the executor
    makes it, as it would with the engine itself)."""
