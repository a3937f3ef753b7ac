"""One kind of error for bad input: printed as a single line, exit status 2."""


class UserError(Exception):
    """Bad input from the user (a file, a --set value, a recipe name).

    The CLI prints ``str(err)`` on one line and exits 2; no traceback, because the
    fix is in the input, not in our code.
    """

    exit_code = 2

    def __init__(self, message, path=None, line=None, column=None, key=None):
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.key = key
        super().__init__(self.format())

    def format(self):
        where = ""
        if self.path is not None:
            where = str(self.path)
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"
