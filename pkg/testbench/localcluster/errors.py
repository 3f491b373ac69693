"""The one error type the local cluster raises: its message names the cause and the log to read."""


class ClusterError(RuntimeError):
    """A local cluster could not be built, started, reached or stopped.

    The message is meant for a person: it says what went wrong and which log file to read.
    """
