"""The fast paths of the models: hand-written recurrences, fused and graphed loops, int8, chunked loss."""
