"""`nmtkit serve`: a translation server that loads the model once and batches across requests.

- `config`:  ServeConfig, the server's options beyond decoding (pure Python);
- `limits`:  the request limits and the checking of request bodies (pure Python);
- `batcher`: dynamic batching of concurrent requests into one batched beam search;
- `app`:     the aiohttp routes, JSON errors, request logs, graceful stop;
- `page.html`: the static page at `GET /` that draws the attention of each translation.

The translation itself is `nmtkit.translate.Translator.generate`, the path (and object) that
`nmtkit translate` uses.
"""
