"""The one error type for bad input.

Anything a user can get wrong (a file, a field, a name, a parameter) raises
``UserError`` with a one-line message naming the file/field/value.  Commands
catch it at the top (``pipeline.cli.main_guard``), print ``error: <message>`` to
stderr and exit with status 2, never a traceback.
"""


class UserError(Exception):
    """Bad input: the message is one line that names what is wrong and where."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
