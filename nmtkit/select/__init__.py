"""Data selection: n-gram LMs (`ngram`, over `lmvocab`'s ids and flat batches), reading the
corpora (`corpus`), scoring pairs in parallel (`scoring`), the cross-entropy-difference
selection command itself (`selection`) and its warnings for inputs that leave the ranking
meaningless (`checks`).

Axelrod, He & Gao (2011) bilingual cross-entropy difference, with Moore & Lewis (2010) and
in-domain cross-entropy as baselines; 4-gram interpolated modified Kneser-Ney LMs (Chen &
Goodman 1998) estimated with numpy. Torch-free. The command is `nmtkit select-data`.
"""
