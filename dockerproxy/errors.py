"""The one error of the proxy: a request it will not forward, with the reason."""


class RequestRefused(Exception):
    """The request is not allowed; the message says why (it is sent back with a 403)."""


class ObjectMissing(RequestRefused):
    """The container, volume or network asked for does not exist: answered 404, as the engine
    itself would, so that the executor tells "already gone" (a removal that raced another)
    from "not yours", and makes a missing network."""
