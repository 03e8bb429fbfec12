"""Outputs, whole or not at all: one file (`files`), outputs against inputs (`checks`), folders
as outputs and their owner (`dirs`)."""
