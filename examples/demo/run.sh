#!/usr/bin/env bash
# nmtkit demo: the whole pipeline on real, human-translated text already on this machine,
# the French message catalogs of installed programs (/usr/share/locale/fr/LC_MESSAGES/*.mo).
#
#   make demo                      # extract catalogs, preprocess, train ~4 min, translate, score
#   make demo DATA=path/to/corpus  # use DIR/{train,valid|dev,test}.{en,fr} instead
#   DEMO_MINUTES=10 make demo      # train longer
#   PROTECT= make demo             # without protecting printf placeholders (default PROTECT=printf)
#
# Everything is written under $WORK (default: work/demo). Stdout of the commands is data;
# the banners below go to stderr.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${WORK:-work/demo}"
MINUTES="${DEMO_MINUTES:-4}"
PROTECT="${PROTECT-printf}"  # --protect sets (or files) for the tokeniser; empty: none
PROTECT_ARGS=()
for p in $PROTECT; do PROTECT_ARGS+=(--protect "$p"); done
mkdir -p "$WORK"
say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

if [ -n "${DATA:-}" ]; then
  CORPUS="$DATA"
  VALID=valid; [ -f "$CORPUS/valid.en" ] || VALID=dev
  for f in train.en train.fr $VALID.en $VALID.fr test.en test.fr; do
    [ -f "$CORPUS/$f" ] || { echo "demo: DATA=$DATA has no $f (expected train/valid|dev/test .en/.fr files)" >&2; exit 1; }
  done
  say "using corpus $CORPUS"
else
  CORPUS="$WORK/corpus"; VALID=valid
  say "1. extracting English-French pairs from the installed message catalogs"
  [ -f "$CORPUS/train.en" ] || python "$HERE/extract_mo.py" --out "$CORPUS"
fi
wc -l "$CORPUS"/train.en "$CORPUS"/$VALID.en "$CORPUS"/test.en >&2

say "2. nmtkit preprocess: Moses tokenisation (protecting: ${PROTECT:-nothing}), cleaning, joint BPE (8000 merges), binarisation"
nmtkit preprocess --src-lang en --tgt-lang fr --train "$CORPUS/train" --valid "$CORPUS/$VALID" \
  --test "$CORPUS/test" --bpe 8000 --max-len 50 --dest "$WORK/data" --force ${PROTECT_ARGS[@]+"${PROTECT_ARGS[@]}"}

say "3. nmtkit train: a small RNNsearch for $MINUTES minutes on CPU"
nmtkit train --data "$WORK/data" --save-dir "$WORK/run" --preset small --optimizer adam --lr 0.001 \
  --batch-size 64 --max-time "${MINUTES}m" --valid-every 500 --force

say "4. nmtkit translate: a few held-out sentences (beam 5)"
head -n 8 "$CORPUS/test.en" | tee "$WORK/sample.en" >&2
echo "--" >&2
nmtkit translate -m "$WORK/run/checkpoint_best.pt" --beam 5 -i "$WORK/sample.en" \
  --plot-attention "$WORK/attention" --plot-limit 3

say "5. nmtkit translate + score: the held-out test split"
nmtkit translate -m "$WORK/run/checkpoint_best.pt" --beam 5 -i "$CORPUS/test.en" -o "$WORK/test.hyp.fr" --quiet --force
nmtkit score --hyp "$WORK/test.hyp.fr" --ref "$CORPUS/test.fr"

say "6. printf placeholders of the test split kept intact (%s, %d, ...)"
python "$HERE/count_placeholders.py" --src "$CORPUS/test.en" --hyp "$WORK/test.hyp.fr" --ref "$CORPUS/test.fr" \
  --data "$WORK/data" --json "$WORK/placeholders.json" >&2

say "done: data in $WORK/data, model in $WORK/run (curves.png, metrics.jsonl), attention pictures in $WORK/attention"
