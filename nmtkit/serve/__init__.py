"""`nmtkit serve`: a translation server that loads the model once and batches across requests.
`run` is the command without its option parsing; `batcher` holds the options (no torch, no aiohttp)
and the batching, `app` the HTTP side, `page.html` the page at `GET /`. The translation is a
`nmtkit.translate.Translator`'s, the object `nmtkit translate` and `nmtkit.load` use.
"""
from __future__ import annotations

import sys
from typing import Callable

from nmtkit.serve.batcher import Limits, ServeConfig

__all__ = ["Limits", "ServeConfig", "run"]


def _say(message: str) -> None:
    print(f"nmtkit: {message}", file=sys.stderr, flush=True)


def run(config: ServeConfig, announce: Callable[[str], None] = _say) -> None:
    """`nmtkit serve`: load `config.decode`'s models on the decoding thread, warm them up, and
    serve until SIGTERM, SIGHUP or SIGINT. `announce` hears the start, the stop and (unless quiet) each request."""
    if not isinstance(config, ServeConfig):
        raise TypeError(f"nmtkit.serve.run takes a ServeConfig, not {type(config).__name__}")
    import asyncio

    from nmtkit.serve.app import serve
    from nmtkit.serve.batcher import DecodeThread
    from nmtkit.translate import Translator

    if config.decode is None:
        raise ValueError("ServeConfig.decode is needed to serve")

    def load() -> Translator:
        translator = Translator(config.decode)
        # the first decoder call is slow: pay it, as requests will search, before the first client
        translator._translate_buffer([(1, "warm up .")], config.search, source="<warm-up>")
        return translator

    thread = DecodeThread()  # every torch operation on one thread (nmtkit.serve.batcher)
    try:
        translator = thread.call(load)
    except BaseException:
        thread.close()
        raise
    asyncio.run(serve(translator, config, announce=announce, log_line=announce, thread=thread))
