"""Errors of the library's torch modules that callers catch without importing torch (the command line, the
dashboard): a checkpoint that cannot be read or written. The other modules keep their errors beside them."""


class CheckpointError(ValueError):
    """A checkpoint file that is missing, corrupt or of another version."""
