"""`nmtkit serve`: an HTTP translation server over one loaded model (library: nmtkit.serve).

Its options are generated from the decode options it shares with `nmtkit translate`
(`DecodeConfig`), `ServeConfig` and the request `Limits` (whose max_beam is `--beam`).
"""
from __future__ import annotations

import sys
from typing import Any

import click

from nmtkit.cli.common import config_options, config_values, quiet_warnings
from nmtkit.serve import Limits, ServeConfig
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
    from nmtkit.serve import run
    from nmtkit.translate import TranslateConfig

    limits = Limits(**config_values(Limits, options))
    # a request's beam is at most the server's --beam, which is also its default; decodes on one thread
    translate = TranslateConfig(**config_values(DecodeConfig, options), beam=limits.max_beam, workers=1)
    config = ServeConfig(**config_values(ServeConfig, options), limits=limits, translate=translate)

    def say(msg: str) -> None:
        click.echo(f"nmtkit: {msg}", err=True)

    run(config, announce=say)
    sys.stdout.flush()
