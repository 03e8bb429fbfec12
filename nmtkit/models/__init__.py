"""Model architectures, one file each, behind the `Seq2Seq` interface of `base.py`."""
