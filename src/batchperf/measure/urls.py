"""The one check of an http(s) URL a user gives (a server, a Pushgateway): a clear problem, or None.

``urllib`` accepts ``http://127.0.0.1:abc`` and fails only when the port is read (ValueError deep in a
request), and ``http://[::1`` raises ValueError wherever it is split; both must be usage errors at the
start of a command, before anything is measured, written or pushed.
"""

from __future__ import annotations

import urllib.parse


def url_problem(url: str, bare_host_ok: bool = False) -> str | None:
    """Why ``url`` is not an ``http://`` or ``https://`` URL naming a host (and a port 1..65535 when it names
    one); None when it is. ``bare_host_ok``: ``HOST:PORT`` counts as ``http://HOST:PORT`` (prometheus_client's
    rule for a Pushgateway)."""
    text = url.strip()
    if bare_host_ok and "://" not in text:
        text = f"http://{text}"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "not an http:// or https:// URL"
    if not parts.hostname:
        return "names no host"
    if port == 0:
        return "port 0 is no server's port"
    return None
