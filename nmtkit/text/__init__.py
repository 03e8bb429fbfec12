"""Text processing, free of torch: Moses normalisation/tokenisation (sacremoses), cleaning,
BPE (subword-nmt), vocabularies, and parallel streaming maps over files."""
