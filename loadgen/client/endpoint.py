"""The server under test: its API base URL and which model to ask for, checked before any
load is sent so a wrong URL or model name fails in one line, not in a thousand records."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from servers import engines


class EndpointError(ValueError):
    pass


@dataclass(frozen=True)
class Served:
    model: str
    owned_by: str | None = None  # /v1/models' owned_by of that model: its dialect (servers/engines)

    @property
    def keep_alive(self) -> bool:
        """Whether to reuse connections with this server: not with a dialect that closes the
        connection after every streamed response although it announces keep-alive (a client
        reusing it races the close and sees "server disconnected" before any response), so
        loadgen asks it for a new connection per request (`Connection: close`), which is
        what it gives anyway (servers/engines/dialect.py: `keep_alive`)."""
        dialect = engines.by_owner(self.owned_by)
        return dialect is None or dialect.keep_alive

    @property
    def request_fields(self) -> dict:
        """What every request to this server adds to its body: its dialect's ask for
        per-request speculative-decoding details, where it needs one."""
        dialect = engines.by_owner(self.owned_by)
        return dict(dialect.request_fields) if dialect is not None else {}

    @property
    def metrics_path(self) -> str:
        """Where its Prometheus metrics are, beside /v1 (its dialect's; else /metrics)."""
        dialect = engines.by_owner(self.owned_by)
        return dialect.metrics_path if dialect is not None else "/metrics"


def api_base(url: str) -> str:
    """`http://host:port` or `http://host:port/v1` (or any prefix ending in /v1) -> the
    OpenAI-style base ending in /v1."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(
            f"--base-url {url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000 or http://127.0.0.1:8000/v1"
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def metrics_url(base: str, given: str | None = None, path: str = "/metrics") -> str | None:
    """The server's Prometheus endpoint: `given`, None for 'none', else `path` (its dialect's)
    beside /v1."""
    if given is not None:
        return None if given.strip().lower() == "none" else given.strip()
    parts = urlsplit(base)
    root = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, root + path, "", ""))


async def probe(
    session: aiohttp.ClientSession, base: str, headers: dict[str, str], model: str | None, timeout_s: float = 10.0
) -> Served:
    """The model to send (`model` if the server serves it, else the server's first) and who
    serves it."""
    url = f"{base}/models"
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, headers=headers) as resp:
                status = resp.status
                body = await resp.json(content_type=None) if status == 200 else None
    except TimeoutError:
        raise EndpointError(
            f"cannot reach {base}: no answer from {url} within {timeout_s:g} s; check --base-url"
        ) from None
    except aiohttp.ClientConnectorError as e:
        errno_ = getattr(e.os_error, "errno", None)
        reason = os.strerror(errno_) if errno_ else str(e)
        raise EndpointError(f"cannot reach {base}: {reason}; is the server running? check --base-url") from None
    except (aiohttp.ClientError, ValueError) as e:
        raise EndpointError(f"cannot read {url}: {type(e).__name__}: {e}") from None
    if status in (401, 403):
        raise EndpointError(f"{url} refused the API key (HTTP {status}); set --api-key or LOADGEN_API_KEY")
    if status != 200:
        if model:  # some servers have no model list; trust the user
            return Served(model)
        raise EndpointError(f"{url} answered HTTP {status}; pass --model NAME")
    data = [m for m in (body or {}).get("data", []) if isinstance(m, dict)]
    served = [m.get("id") for m in data]
    if model is None:
        if not served:
            raise EndpointError(f"{url} lists no models; pass --model NAME")
        model = served[0]
    elif model not in served:
        raise EndpointError(
            f"model {model!r} is not served at {base} (served: {', '.join(map(str, served)) or 'none'}); fix --model"
        )
    owner = next(m.get("owned_by") for m in data if m.get("id") == model)
    return Served(str(model), owner if isinstance(owner, str) else None)
