"""`nmtkit serve`: an HTTP translation server over one loaded model (library: nmtkit.serve)."""
from __future__ import annotations

import sys

import click

from nmtkit.cli.common import fuse_option, quiet_warnings, shortlist_option
from nmtkit.devices import PRECISIONS


@click.command("serve")
@click.option("-m", "--model", "models", multiple=True, required=True, metavar="CHECKPOINT",
              help="Checkpoint to serve. Give several with --ensemble.")
@click.option("--ensemble", is_flag=True, help="Average several -m models, as `nmtkit translate --ensemble`.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. The default answers this machine only; 0.0.0.0 opens the "
                   "server to the network (it has no authentication).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Also accept requests whose Host header (or a browser's Origin) names NAME (repeatable). "
                   "Without it only IP addresses, localhost and --host are accepted, so that no web page "
                   "can reach the server through a visitor's browser (DNS rebinding, cross-site POSTs).")
@click.option("--port", type=int, default=8080, show_default=True, help="Port (0: any free port).")
@click.option("-k", "--beam", type=int, default=5, show_default=True,
              help="Beam width: the default and the most a request may ask for.")
@click.option("--lenpen", type=float, default=1.0, show_default=True, help="As `nmtkit translate --lenpen`.")
@click.option("--max-len-a", type=float, default=2.0, show_default=True,
              help="Target length limit: at most a * source_length + b tokens.")
@click.option("--max-len-b", type=float, default=10.0, show_default=True, help="See --max-len-a.")
@click.option("--batch-size", type=int, default=64, show_default=True,
              help="Most sentences, from all waiting requests, decoded in one batched beam search.")
@click.option("--max-tokens", type=int, default=None,
              help="Also cap a decoder batch at this many padded source tokens.")
@click.option("--batch-delay-ms", type=float, default=5.0, show_default=True,
              help="How long a request arriving at an idle server waits for others to share its batch.")
@click.option("--max-lines", type=int, default=100, show_default=True, help="Most lines in one request.")
@click.option("--max-line-chars", type=int, default=1000, show_default=True,
              help="Most characters in one line of a request.")
@click.option("--max-body-bytes", type=int, default=1 << 20, show_default=True,
              help="Largest request body.")
@click.option("--body-timeout", type=float, default=30.0, show_default=True, metavar="SECONDS",
              help="A client that has not sent its whole request body within this time gets a 408.")
@click.option("--max-src-len", type=int, default=None,
              help="Longer inputs (in model tokens) are truncated, as in `nmtkit translate`.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto",
              show_default=True, help="As `nmtkit translate --precision`.")
@fuse_option
@shortlist_option(" A batch's shortlist (and bf16 rounding) depends on the sentences batched together: "
                  "for answers that never depend on other requests, use --shortlist off --precision fp32.")
@click.option("--threads", type=int, default=None, metavar="N", help="torch CPU threads [torch's default].")
@click.option("-q", "--quiet", is_flag=True, help="No per-request log lines or warnings on stderr.")
def serve_cmd(models, ensemble, host, allow_hosts, port, beam, lenpen, max_len_a, max_len_b, batch_size, max_tokens,
              batch_delay_ms, max_lines, max_line_chars, max_body_bytes, body_timeout, max_src_len, device, precision,
              fuse, shortlist, threads, quiet) -> None:
    """Serve translations over HTTP, batching sentences across concurrent requests.

    Loads the checkpoint once, then answers POST /translate (Content-Type: application/json,
    {"text": [...], "beam": 5, "nbest": 1, "alignments": false}), OpenNMT-py's
    POST /translator/translate, GET /health, GET /info, and a page at / that shows each
    translation's attention. SIGTERM or Ctrl-C finishes the requests in flight, then exits 0.
    Example:

        nmtkit serve -m run/checkpoint_best.pt --port 8080
    """
    quiet_warnings(quiet)
    import asyncio

    from nmtkit.serve.app import ServeConfig, serve
    from nmtkit.serve.limits import Limits
    from nmtkit.translate import TranslateConfig, Translator

    config = ServeConfig(host=host, port=port, batch_size=batch_size, batch_delay_ms=batch_delay_ms, quiet=quiet,
                         body_timeout=body_timeout, allow_hosts=tuple(allow_hosts),
                         limits=Limits(max_lines=max_lines, max_line_chars=max_line_chars,
                                       max_body_bytes=max_body_bytes, max_beam=beam))
    config.validate()
    tcfg = TranslateConfig(models=tuple(models), beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                           max_len_b=max_len_b, batch_size=batch_size, max_tokens=max_tokens,
                           max_src_len=max_src_len, device=device, precision=precision, fuse=fuse, threads=threads,
                           ensemble=ensemble, shortlist=shortlist)
    tcfg.validate()

    def say(msg: str) -> None:
        click.echo(f"nmtkit: {msg}", err=True)

    translator = Translator(tcfg)
    translator.source_name = "<request>"
    translator.translate("warm up .")  # the first decoder call is slow; pay it before the first client
    asyncio.run(serve(translator, config, announce=say, log_line=say))
    sys.stdout.flush()
