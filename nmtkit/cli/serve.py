"""`nmtkit serve`: an HTTP translation server over one loaded model (library: nmtkit.serve).

Its options are generated from the decode options it shares with `nmtkit translate`
(`DecodeConfig`), `ServeConfig` and the request `Limits` (whose max_beam is `--beam`).
"""
from __future__ import annotations

import sys
from typing import Any

import click

from nmtkit.cli.common import config_options, config_values, quiet_warnings
from nmtkit.serve.config import ServeConfig
from nmtkit.serve.limits import Limits
from nmtkit.translate.config import DecodeConfig


@click.command("serve")
@config_options(DecodeConfig, Limits, ServeConfig)
def serve_cmd(**options: Any) -> None:
    """Serve translations over HTTP, batching sentences across concurrent requests.

    Loads the checkpoint once, then answers POST /translate (Content-Type: application/json,
    {"text": [...], "beam": 5, "nbest": 1, "alignments": false}), OpenNMT-py's
    POST /translator/translate, GET /health, GET /info, and a page at / that shows each
    translation's attention. SIGTERM or Ctrl-C finishes the requests in flight, then exits 0;
    a second one stops at once.
    Example:

        nmtkit serve -m run/checkpoint_best.pt --port 8080
    """
    quiet_warnings(options["quiet"])
    import asyncio

    from nmtkit.serve.app import serve
    from nmtkit.serve.batcher import DecodeThread
    from nmtkit.translate import TranslateConfig, Translator

    limits = Limits(**config_values(Limits, options))
    config = ServeConfig(**config_values(ServeConfig, options), limits=limits)
    # a request's beam is at most the server's --beam, which is also its default
    tcfg = TranslateConfig(**config_values(DecodeConfig, options), beam=limits.max_beam, workers=1)  # decodes on one thread

    def say(msg: str) -> None:
        click.echo(f"nmtkit: {msg}", err=True)

    def load() -> Translator:
        translator = Translator(tcfg)
        translator.source_name = "<request>"
        translator.translate("warm up .")  # the first decoder call is slow; pay it before the first client
        return translator

    thread = DecodeThread()  # every torch operation on one thread (nmtkit.serve.batcher)
    try:
        translator = thread.call(load)
    except BaseException:
        thread.close()
        raise
    asyncio.run(serve(translator, config, announce=say, log_line=say, thread=thread))
    sys.stdout.flush()
