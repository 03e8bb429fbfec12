"""Binarised corpora (numpy memmaps), length-bucketed batching and distributed sharding."""
