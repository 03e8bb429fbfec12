"""Text in, text out: `nmtkit translate` without the command line (`translate_files`).

The checkpoint alone is enough: it records the text pipeline and the vocabularies. A
`Translator` (also the Python API, `nmtkit.load`) applies the pipeline to raw lines, decodes
them with batched beam search or sampling, replaces UNKs from the attention if asked (Luong et
al. 2015), joins BPE and detokenises. Streaming: lines are read into a buffer, sorted by length
into batches, decoded, put back in input order and written before the next buffer is read.
Alignment positions count the model's tokens (BPE subwords) from 0, EOS excluded. Modules:
`config`, `translator`, `results` (Result, Translation), `alignment`, `writers` (every output),
`files` (streams and files); the translator and the writers do not import each other."""
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
