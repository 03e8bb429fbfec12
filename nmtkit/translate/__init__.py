"""Text in, text out: `nmtkit translate` without the command line (`translate_files`).

The checkpoint alone is enough (docs/design.md): it records the text pipeline (normalisation,
tokenisation, casing, BPE codes) and the vocabularies. A `Translator` applies that pipeline to
raw lines, decodes them with batched beam search (`nmtkit.decode.search`) or draws one sample
per line (`nmtkit.decode.sampling`), maps ids back to
tokens, optionally replaces UNKs from the attention (Luong et al. 2015; Jean et al. 2015),
joins BPE and detokenises.

Streaming (`translate_stream`): lines are read into a buffer, sorted by length into batches
(so that padding is small), decoded, put back in input order and written out before the next
buffer is read. With a buffer of one line (interactive use) each line is answered at once.

Token positions in alignments refer to the model's tokens (BPE subwords when the model uses
BPE: what `--input-format bpe` / `--output-format bpe` show), counted from 0, EOS excluded.

The `Translator` is also the Python API (`nmtkit.load`): `translate(lines)` gives strings,
`generate(lines, nbest=, alignments=)` gives `Result`s with typed `Translation`s.

Modules: `config` (DecodeConfig, TranslateConfig), `translator` (Translator: checkpoint(s),
pipeline, decoding, lines -> Results), `results` (Result, Translation: what the translator hands
on), `alignment` (UNK replacement, alignments), `writers` (every output: translations, n-best,
alignments, plots), `files` (streams and files, `translate_files`). The translator and the
writers do not import each other: both take `results`.
"""
from nmtkit.translate.alignment import (
    attention_table,
    hard_alignment,
    read_unk_dict,
    replace_unks,
    soft_alignment,
    subword_words,
)
from nmtkit.translate.config import DEFAULT_MAX_SRC_LEN, DecodeConfig, TranslateConfig
from nmtkit.translate.files import check_files, read_lines, translate_files, translate_stream
from nmtkit.translate.results import Result, Translation
from nmtkit.translate.translator import Translator
from nmtkit.translate.writers import Writers, nbest_line, plot_attention

__all__ = [
    "DEFAULT_MAX_SRC_LEN", "DecodeConfig", "Result", "TranslateConfig", "Translation", "Translator", "Writers", "attention_table",
    "check_files", "hard_alignment", "nbest_line", "plot_attention", "read_lines",
    "read_unk_dict", "replace_unks", "soft_alignment", "subword_words", "translate_files", "translate_stream",
]
