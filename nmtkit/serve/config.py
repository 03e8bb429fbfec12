"""`ServeConfig`: the options of `nmtkit serve` beyond decoding (no torch, no aiohttp).

Each field declares its option (`nmtkit.options.option`); `nmtkit serve`'s click options are
generated from these fields, `nmtkit.serve.limits.Limits` and the decode options it shares with
`nmtkit translate` (`nmtkit.translate.config.DecodeConfig`), and `__post_init__` validates once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nmtkit.options import check_fields, option
from nmtkit.serve.limits import Limits

# --batch-delay-ms beyond this holds every request (and a shutdown) for longer than a client waits
MAX_BATCH_DELAY_MS = 10_000.0


@dataclass(frozen=True)
class ServeConfig:
    """Every option of `nmtkit serve` beyond the translator's own (TranslateConfig) and the
    request limits (Limits)."""

    host: str = option("127.0.0.1", help="Address to listen on. The default answers this machine only; 0.0.0.0 "
                                         "opens the server to the network (it has no authentication).")
    allow_hosts: tuple[str, ...] = option(
        (), names=("--allow-host",), multiple=True, metavar="NAME",
        help="Also accept requests whose Host header (or a browser's Origin) names NAME (repeatable). Without it "
             "only IP addresses, localhost and --host are accepted, so that no web page can reach the server "
             "through a visitor's browser (DNS rebinding, cross-site POSTs).")
    port: int = option(8080, min=0, max=65535, help="Port (0: any free port).")
    batch_delay_ms: float = option(
        5.0, min=0, max=MAX_BATCH_DELAY_MS,
        help="How long a request arriving at an idle server waits for others to share its batch (at most "
             f"{MAX_BATCH_DELAY_MS:,.0f} ms: every request in the batch waits this long).")
    body_timeout: float = option(
        30.0, min=0, min_open=True, metavar="SECONDS", message="must be > 0 seconds",
        help="A client that has not sent its whole request body within this time gets a 408.")
    quiet: bool = option(False, names=("--quiet", "-q"), help="No per-request log lines or warnings on stderr (errors are still shown).")
    limits: Limits = field(default_factory=Limits)  # its fields are options of their own
    batch_size: int | None = option(None, min=1, cli=False,
                                    help="Most sentences gathered into one decoder call (None: the translator's).")
    shutdown_timeout: float = option(60.0, min=0, cli=False,
                                     help="Seconds in-flight requests get to finish on SIGTERM or SIGINT.")

    def __post_init__(self) -> None:
        check_fields(self)
