"""`nmtkit translate`: raw text in, translations out (library: nmtkit.translate)."""
from __future__ import annotations

import sys

import click

from nmtkit.cli.common import fuse_option, quiet_warnings, shortlist_option, sigterm_unwinds
from nmtkit.devices import PRECISIONS

FORMATS = ["raw", "tok", "bpe"]


@click.command("translate")
@click.option("-m", "--model", "models", multiple=True, required=True, metavar="CHECKPOINT",
              help="Checkpoint to translate with (e.g. RUN/checkpoint_best.pt). Give several with --ensemble.")
@click.option("--ensemble", is_flag=True,
              help="Average several -m models (same vocabularies and preprocessing): log of the mean of "
                   "their probabilities, as Nematus and fairseq do.")
@click.option("-i", "--input", "input_path", metavar="FILE", help="Input text, one sentence a line [stdin].")
@click.option("-o", "--output", "output_path", metavar="FILE",
              help="Output file, written under a temporary name and renamed at the end [stdout].")
@click.option("--force", is_flag=True, help="Overwrite existing -o / --alignments-file files (never an input: that is refused).")
@click.option("--input-format", type=click.Choice(FORMATS), default="raw", show_default=True,
              help="raw: apply the recorded normalisation, tokenisation and BPE; tok: input is already "
                   "tokenised (BPE still applied); bpe: input is the model's tokens.")
@click.option("--output-format", type=click.Choice(FORMATS), default="raw", show_default=True,
              help="raw: join BPE and detokenise; tok: join BPE only; bpe: the model's tokens.")
@click.option("-k", "--beam", type=int, default=12, show_default=True, help="Beam width (1 = greedy).")
@click.option("--lenpen", type=float, default=1.0, show_default=True,
              help="Length normalisation alpha: hypotheses are ranked by log p / length^alpha "
                   "(length counts EOS); 1 = per-word average, 0 = raw log-probability.")
@click.option("--max-len-a", type=float, default=2.0, show_default=True,
              help="Target length limit: at most a * source_length + b tokens.")
@click.option("--max-len-b", type=float, default=10.0, show_default=True, help="See --max-len-a.")
@click.option("--nbest", type=int, default=1, show_default=True,
              help="Write the N best translations of each sentence in Moses n-best format: "
                   "'i ||| translation ||| LogProb= lp Length= n ||| score' (i counts sentences from 0, "
                   "lp is the raw log-probability, n the token count with EOS, score = lp / n^lenpen).")
@click.option("--sampling", is_flag=True,
              help="Draw one translation per line from the model's distribution instead of beam search "
                   "(back-translation, Edunov et al. 2018). Reproducible: a line's sample depends on --seed, "
                   "its line number and the model only, not on the batch or buffer it falls in. --beam is not used.")
@click.option("--sampling-topk", type=int, default=0, show_default=True, metavar="K",
              help="With --sampling: draw among the K most likely words at each step (0: all words).")
@click.option("--temperature", type=float, default=1.0, show_default=True, metavar="T",
              help="With --sampling: sample from p^(1/T); T must be > 0 (T < 1 sharper, T > 1 flatter; "
                   "for greedy decoding use --beam 1).")
@click.option("--seed", type=int, default=None, metavar="S", help="With --sampling: the seed [1].")
@click.option("--batch-size", type=int, default=64, show_default=True, help="Sentences per batch.")
@click.option("--max-tokens", type=int, default=None,
              help="Also cap a batch at this many padded source tokens (before beam expansion).")
@click.option("--buffer-size", type=int, default=2000, show_default=True,
              help="Lines read, sorted by length and translated together before being written in order.")
@click.option("--interactive", is_flag=True,
              help="Answer each line at once (implied when stdin is a terminal; same as --buffer-size 1).")
@click.option("--replace-unk", is_flag=True,
              help="Replace each <unk> in the output by the source word it attends to most "
                   "(Luong et al. 2015; Jean et al. 2015); with BPE, the whole word of that subword.")
@click.option("--ban-unk", is_flag=True,
              help="Never emit the unknown word: its probability is 0 at every step (the decoding of the "
                   "paper's no-UNK column, Bahdanau et al. 2015, Table 1).")
@click.option("--unk-dict", metavar="FILE",
              help="With --replace-unk: a 'source<TAB>target' dictionary the source word goes through.")
@click.option("--alignments", type=click.Choice(["hard", "soft"]), default=None,
              help="Write alignments to --alignments-file, one line per output line: hard = Pharaoh "
                   "'i-j' pairs (source i, target j, model tokens counted from 0); soft = JSON lines "
                   "{\"src\": [...], \"tgt\": [...], \"attention\": [[...]]} (rows = target tokens + </s>).")
@click.option("--alignments-file", metavar="FILE", help="Where --alignments go.")
@click.option("--plot-attention", metavar="DIR",
              help="Draw each sentence's attention (the paper's Figure 3) as DIR/NNNNNN.png (line number).")
@click.option("--plot-limit", type=int, default=100, show_default=True, help="Plot at most this many sentences.")
@click.option("--max-src-len", type=int, default=None,
              help="Longer inputs (in model tokens) are truncated with a warning naming the line "
                   "[4 x the training length limit when recorded, at least 250].")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="auto = bf16 autocast on GPUs and on CPUs with native BF16 (AVX512-BF16, AMX), as in "
                   "training; fp32 on other CPUs, where bf16 is emulated and slower. fp16 is meant for GPUs "
                   "(it runs on a CPU, slowly). int8 (CPU only): the projections and the output layer "
                   "run as int8 products (dynamic quantisation, README's 'int8 decoding').")
@fuse_option
@shortlist_option()
@click.option("--threads", type=int, default=None, metavar="N", help="torch CPU threads [torch's default].")
@click.option("-q", "--quiet", is_flag=True, help="No warnings or summary on stderr.")
def translate_cmd(models, ensemble, input_path, output_path, force, input_format, output_format, beam, lenpen,
                  max_len_a, max_len_b, nbest, sampling, sampling_topk, temperature, seed, batch_size, max_tokens,
                  buffer_size, interactive, replace_unk, ban_unk, unk_dict, alignments, alignments_file,
                  plot_attention, plot_limit, max_src_len, device, precision, fuse, shortlist, threads, quiet) -> None:
    """Translate raw text with batched beam search (or sampling: --sampling).

    Reads one sentence a line (stdin or -i), applies exactly the preprocessing recorded in the
    checkpoint, decodes, joins BPE, detokenises and writes one line per input line, in order
    (empty lines stay empty). Example:

        nmtkit translate -m run/checkpoint_best.pt < test.en > test.hyp.fr
    """
    quiet_warnings(quiet)
    from nmtkit.translate import TranslateConfig, translate_files

    stdin_tty = input_path is None and sys.stdin.isatty()
    if interactive or stdin_tty:
        buffer_size = 1
    cfg = TranslateConfig(
        models=tuple(models), beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, nbest=nbest,
        batch_size=batch_size, max_tokens=max_tokens, buffer_size=buffer_size, input_format=input_format,
        output_format=output_format, replace_unk=replace_unk, ban_unk=ban_unk, unk_dict=unk_dict,
        alignments=alignments, plot_attention=plot_attention, plot_limit=plot_limit, max_src_len=max_src_len,
        device=device, precision=precision, fuse=fuse, shortlist=shortlist, threads=threads, ensemble=ensemble,
        sampling=sampling, sampling_topk=sampling_topk, temperature=temperature, seed=seed,
    )

    with sigterm_unwinds():  # a killed run leaves no OUT.*.tmp behind, as Ctrl-C does not
        n = translate_files(cfg, input_path, output_path, alignments_file, force)
    if not quiet and not stdin_tty:
        click.echo(f"nmtkit: translated {n} lines", err=True)
