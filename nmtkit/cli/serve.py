"""`nmtkit serve`: an HTTP translation server over one loaded model (library: nmtkit.serve)."""
from __future__ import annotations

from typing import Any

import click

from nmtkit.cli.common import config_options, config_values, quiet_warnings
from nmtkit.serve import Limits, ServeConfig
from nmtkit.translate.config import DecodeConfig, SearchConfig

# translate's options a server does not take: a request gives its beam and n-best (within
# Limits), decodes on one thread, and answers raw text with beam search
NOT_SERVED = frozenset({"workers", "input_format", "output_format", "unk_dict", "beam", "nbest", "ban_unk",
                        "replace_unk", "sampling", "sampling_topk", "temperature", "seed"})


@click.command("serve")
@config_options(DecodeConfig, SearchConfig, Limits, ServeConfig, exclude=NOT_SERVED)
def serve_cmd(**options: Any) -> None:
    """Serve translations over HTTP, batching sentences across concurrent requests.

    Loads the checkpoint once, then answers POST /translate (Content-Type: application/json,
    {"text": [...], "beam": 5, "nbest": 1, "alignments": false}), OpenNMT-py's
    POST /translator/translate, GET /health, GET /info, and a page at / that shows each
    translation's attention. SIGTERM, SIGHUP or Ctrl-C finishes the requests in flight, then exits 0;
    a second one stops at once.
    Example:

        nmtkit serve -m run/checkpoint_best.pt --port 8080
    """
    quiet_warnings(options["quiet"])
    from nmtkit.serve import run
    limits = Limits(**config_values(Limits, options))
    # a request's beam is at most the server's --beam, which is also its default; decodes on one thread
    config = ServeConfig(**config_values(ServeConfig, options), limits=limits,
                         decode=DecodeConfig(**config_values(DecodeConfig, options), workers=1),
                         search=SearchConfig(**config_values(SearchConfig, options), beam=limits.max_beam))
    run(config, announce=lambda msg: click.echo(f"nmtkit: {msg}", err=True))
