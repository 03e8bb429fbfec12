"""Data selection: n-gram LMs (`ngram`) and cross-entropy-difference selection (`selection`).

Axelrod, He & Gao (2011) bilingual cross-entropy difference, with Moore & Lewis (2010) and
in-domain cross-entropy as baselines; 4-gram interpolated modified Kneser-Ney LMs (Chen &
Goodman 1998) estimated with numpy. Torch-free. The command is `nmtkit select-data`.
"""
